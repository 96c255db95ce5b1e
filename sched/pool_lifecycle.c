/* SPDX-License-Identifier: Apache-2.0 */
/* sched pool lifecycle: create/destroy, worker placement, shutdown, statistics, queues. */
#include "sched/sched.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sched/deque.h"
#include "sched/pool_internal.h"
#include "sched/topo.h"

/* The design is described in docs/sched.md; the task path is in pool.c. */

enum {
	DEQUE_CAPACITY = 256,
	SPIN_DEFAULT = 4096,
	SPIN_US_DEFAULT = 5,
	DESTROY_POLL_NS = 1000000, /* the destroyer re-checks termination at least this often */
};

/* ---- Termination -------------------------------------------------------------------------- */

static bool queue_idle(const void *what)
{
	const struct sched_queue *q = what;

	/* seq_cst (so acquire): pairs with the decrement in task_retire (pool.c) */
	return atomic_load(&q->active) == 0;
}

/*
 * Termination: no task exists. A worker counts a task in its spawned counter (relaxed) before the
 * push that makes it visible, and in its done counter (release) after it finished; outside spawns
 * count in out_spawned (seq_cst RMW) before they look at the state, and tasks that an outside
 * thread ran in sched_group_help count in out_done (seq_cst RMW) after they finished. We read every
 * done counter (acquire; out_done first) and every spawned counter after. Each done increment we
 * read carries with it (acquire/release, and the push/steal or injection edge from spawn to run)
 * the spawn increment of the same task, so the spawned sum read covers every task whose done we
 * read: spawned >= done. Equality means the spawns we counted are exactly the tasks we saw done; a
 * task spawned by one of those was spawned before its parent's done increment, so it is counted
 * too; and an outside spawn we did not count comes after our seq_cst read of out_spawned, hence
 * after the state change, and is refused. So no task exists and none can appear. The argument is
 * written out in docs/sched.md.
 */
static bool pool_quiescent(const void *what)
{
	const struct sched_pool *pool = what;
	uint64_t done = atomic_load(&pool->out_done);
	uint64_t spawned = 0;

	for (unsigned i = 0; i < pool->n_workers; i++)
		/* acquire: pairs with the release store in ctr_inc_release (task_retire, pool.c) */
		done += atomic_load_explicit(&pool->workers[i].ctr.done, memory_order_acquire);
	for (unsigned i = 0; i < pool->n_workers; i++)
		spawned +=
			atomic_load_explicit(&pool->workers[i].ctr.spawned, memory_order_relaxed);
	spawned += atomic_load(&pool->out_spawned);
	return done == spawned;
}

/* Task record slabs (taken in pool.c) are freed only with the pool. */
static void slabs_free(struct sched_slab *s)
{
	while (s) {
		struct sched_slab *next = s->next;

		free(s);
		s = next;
	}
}

/* ---- Pool --------------------------------------------------------------------------------- */

void sched_pool_opts_init(struct sched_pool_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->size = sizeof(*opts);
	opts->pin = true;
	opts->spin_iters = SPIN_DEFAULT;
	opts->spin_us = SPIN_US_DEFAULT;
}

static void pool_free(struct sched_pool *pool)
{
	for (unsigned i = 0; i < pool->n_workers; i++) {
		struct sched_worker *w = &pool->workers[i];

		sched_deque_fini(&w->deque);
		slabs_free(w->slabs);
		free(w->near);
		free(w->far);
	}
	for (unsigned i = 0; i < pool->n_queues; i++)
		free(pool->queues[i]);
	free(pool->queues);
	slabs_free(pool->out_slabs);
	pthread_mutex_destroy(&pool->inj_mu);
	pthread_mutex_destroy(&pool->out_mu);
	free(pool->workers);
	if (pool->own_topo)
		topo_destroy(pool->topo);
	free(pool);
}

/* Victim lists: the workers on w's node, then the others. */
static int worker_victims(struct sched_pool *pool, struct sched_worker *w)
{
	unsigned n = pool->n_workers;

	w->near = calloc(n, sizeof(unsigned));
	w->far = calloc(n, sizeof(unsigned));
	if (!w->near || !w->far)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		if (i == w->index)
			continue;
		if (pool->workers[i].node == w->node)
			w->near[w->n_near++] = i;
		else
			w->far[w->n_far++] = i;
	}
	return 0;
}

/* Where each worker goes: topo_place_workers, or round-robin over the PUs if it declines. */
static int pool_place(struct sched_pool *pool, bool pin)
{
	unsigned n = pool->n_workers, pus = topo_pus(pool->topo);
	unsigned *place;
	int err;

	if (pus == 0)
		return -EINVAL;
	place = calloc(n, sizeof(unsigned));
	if (!place)
		return -ENOMEM;
	err = topo_place_workers(pool->topo, n, place);
	for (unsigned i = 0; i < n; i++) {
		struct sched_worker *w = &pool->workers[i];
		const struct topo_pu *pu;

		w->place_pu = err == 0 && place[i] < pus ? place[i] : i % pus;
		pu = topo_pu(pool->topo, w->place_pu);
		w->node = pu ? pu->node : 0;
		atomic_init(&w->pu, pin && topo_is_real(pool->topo) ? (int)w->place_pu : -1);
		atomic_init(&w->cpu_clock_ok, false);
		if (w->node != pool->workers[0].node)
			pool->multi_node = true;
	}
	free(place);
	return 0;
}

static void pool_stop_started(struct sched_pool *pool, unsigned started)
{
	atomic_store(&pool->state, SCHED_POOL_STOPPED);
	sched_pool_wake_all(pool);
	for (unsigned i = 0; i < started; i++)
		pthread_join(pool->workers[i].thread, NULL);
}

int sched_pool_create(const struct sched_pool_opts *opts, struct sched_pool **ret_pool)
{
	struct sched_pool_opts o;
	struct sched_pool *pool;
	unsigned started = 0;
	int err;

	sched_pool_opts_init(&o);
	if (opts) {
		if (opts->size < offsetof(struct sched_pool_opts, spin_iters) + sizeof(unsigned))
			return -EINVAL;
		o.workers = opts->workers;
		o.pin = opts->pin;
		o.topo = opts->topo;
		o.spin_iters = opts->spin_iters;
		if (opts->size >= offsetof(struct sched_pool_opts, spin_us) + sizeof(unsigned))
			o.spin_us = opts->spin_us;
	}
	pool = aligned_alloc(64, sizeof(*pool));
	if (!pool)
		return -ENOMEM;
	memset(pool, 0, sizeof(*pool));
	pthread_mutex_init(&pool->inj_mu, NULL);
	pthread_mutex_init(&pool->out_mu, NULL);
	pool->spin_iters = o.spin_iters;
	pool->spin_ns = (uint64_t)o.spin_us * 1000u;
	if (o.topo) {
		pool->topo = (struct topo *)o.topo;
	} else {
		err = topo_load(&pool->topo);
		if (err) {
			pool->topo = NULL;
			goto fail_pool;
		}
		pool->own_topo = true;
	}
	pool->n_workers = o.workers ? o.workers : topo_pus(pool->topo);
	err = -EINVAL;
	if (pool->n_workers == 0)
		goto fail_pool;
	err = -ENOMEM;
	pool->workers = aligned_alloc(64, sizeof(struct sched_worker) * pool->n_workers);
	if (!pool->workers)
		goto fail_pool;
	memset(pool->workers, 0, sizeof(struct sched_worker) * pool->n_workers);
	for (unsigned i = 0; i < pool->n_workers; i++) {
		struct sched_worker *w = &pool->workers[i];

		w->pool = pool;
		w->index = i;
		w->rng = 0x9e3779b97f4a7c15ull * (i + 1);
		err = sched_deque_init(&w->deque, DEQUE_CAPACITY);
		if (err) {
			pool->n_workers = i; /* pool_free finalises only the initialised deques */
			goto fail_pool;
		}
	}
	err = pool_place(pool, o.pin);
	if (err)
		goto fail_pool;
	for (unsigned i = 0; i < pool->n_workers; i++) {
		err = worker_victims(pool, &pool->workers[i]);
		if (err)
			goto fail_pool;
	}
	for (; started < pool->n_workers; started++) {
		err = -pthread_create(&pool->workers[started].thread, NULL, sched_worker_main,
				      &pool->workers[started]);
		if (err)
			goto fail_threads;
	}
	*ret_pool = pool;
	return 0;

fail_threads:
	pool_stop_started(pool, started);
fail_pool:
	if (pool->workers)
		pool_free(pool);
	else {
		if (pool->own_topo)
			topo_destroy(pool->topo);
		pthread_mutex_destroy(&pool->inj_mu);
		pthread_mutex_destroy(&pool->out_mu);
		free(pool);
	}
	return err;
}

void sched_pool_destroy(struct sched_pool *pool, enum sched_shutdown how)
{
	/* The last done increment wakes no-one by itself: poll as well (destroy is rare). */
	const struct timespec poll = { .tv_sec = 0, .tv_nsec = DESTROY_POLL_NS };

	if (!pool)
		return;
	atomic_store(&pool->state,
		     how == SCHED_SHUTDOWN_CANCEL ? SCHED_POOL_CANCELLING : SCHED_POOL_DRAINING);
	sched_pool_wake_all(pool);
	outside_wait(pool, pool_quiescent, pool, &poll);
	atomic_store(&pool->state, SCHED_POOL_STOPPED);
	sched_pool_wake_all(pool);
	for (unsigned i = 0; i < pool->n_workers; i++)
		pthread_join(pool->workers[i].thread, NULL);
	/*
	 * Threads still in outside_wait (a group's waiter woken by the last task) touch the pool
	 * until their final decrement of outside_waiters, and helpers until their decrement of
	 * helpers; everything is done, so that is brief.
	 */
	while (atomic_load(&pool->outside_waiters) != 0 || atomic_load(&pool->helpers) != 0)
		sched_yield();
	pool_free(pool);
}

unsigned sched_pool_workers(const struct sched_pool *pool)
{
	return pool->n_workers;
}

/*
 * A running worker's CPU time from its clock; once it has exited (or if its clock failed), the
 * value it stored on the way out. The clock of a thread that exits between the check and the read
 * fails (EINVAL); the acquire load then orders the stored value before our read of it.
 */
static uint64_t worker_cpu_ns(const struct sched_worker *w)
{
	struct timespec ts;

	if (atomic_load_explicit(&w->cpu_clock_ok, memory_order_acquire) &&
	    clock_gettime(w->cpu_clock, &ts) == 0)
		return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	(void)atomic_load_explicit(&w->cpu_clock_ok, memory_order_acquire);
	return atomic_load_explicit(&w->ctr.cpu_ns, memory_order_relaxed);
}

unsigned sched_pool_stats(const struct sched_pool *pool, struct sched_worker_stats *stats,
			  unsigned n)
{
	if (n > pool->n_workers)
		n = pool->n_workers;
	for (unsigned i = 0; i < n; i++) {
		const struct sched_worker *w = &pool->workers[i];
		const struct sched_worker_ctr *c = &w->ctr;

		stats[i] = (struct sched_worker_stats){
			.tasks = atomic_load_explicit(&c->tasks, memory_order_relaxed),
			.steals = atomic_load_explicit(&c->steals, memory_order_relaxed),
			.steal_fails = atomic_load_explicit(&c->steal_fails, memory_order_relaxed),
			.injected = atomic_load_explicit(&c->injected, memory_order_relaxed),
			.parks = atomic_load_explicit(&c->parks, memory_order_relaxed),
			.parked_ns = atomic_load_explicit(&c->parked_ns, memory_order_relaxed),
			.cpu_ns = worker_cpu_ns(w),
			.pu = atomic_load_explicit(&w->pu, memory_order_relaxed),
			.node = (int)w->node,
		};
	}
	return n;
}

/* ---- Queues ------------------------------------------------------------------------------- */

int sched_queue_set_weight(struct sched_queue *q, unsigned weight)
{
	if (!q || weight == 0)
		return -EINVAL;
	pthread_mutex_lock(&q->pool->inj_mu); /* the weighted round-robin reads it under it */
	q->weight = weight;
	if (q->credit > weight)
		q->credit = weight;
	pthread_mutex_unlock(&q->pool->inj_mu);
	return 0;
}

unsigned sched_queue_weight(const struct sched_queue *q)
{
	pthread_mutex_lock(&q->pool->inj_mu);
	unsigned w = q->weight;
	pthread_mutex_unlock(&q->pool->inj_mu);
	return w;
}

int sched_queue_create(struct sched_pool *pool, unsigned weight, int node,
		       struct sched_queue **ret_q)
{
	struct sched_queue *q;

	if (!pool || weight == 0 || node < -1 ||
	    (node >= 0 && (unsigned)node >= topo_nodes(pool->topo)))
		return -EINVAL;
	q = aligned_alloc(64, sizeof(*q));
	if (!q)
		return -ENOMEM;
	memset(q, 0, sizeof(*q));
	q->pool = pool;
	q->weight = weight;
	q->node = node;
	pthread_mutex_lock(&pool->inj_mu);
	if (pool->n_queues == pool->cap_queues) {
		unsigned cap = pool->cap_queues ? 2 * pool->cap_queues : 8;
		struct sched_queue **qs = realloc(pool->queues, cap * sizeof(*qs));

		if (!qs) {
			pthread_mutex_unlock(&pool->inj_mu);
			free(q);
			return -ENOMEM;
		}
		pool->queues = qs;
		pool->cap_queues = cap;
	}
	pool->queues[pool->n_queues++] = q;
	pthread_mutex_unlock(&pool->inj_mu);
	*ret_q = q;
	return 0;
}

void sched_queue_destroy(struct sched_queue *q)
{
	struct sched_pool *pool;

	if (!q)
		return;
	pool = q->pool;
	outside_wait(pool, queue_idle, q, NULL);
	pthread_mutex_lock(&pool->inj_mu);
	for (unsigned i = 0; i < pool->n_queues; i++) {
		if (pool->queues[i] != q)
			continue;
		memmove(&pool->queues[i], &pool->queues[i + 1],
			(pool->n_queues - i - 1) * sizeof(pool->queues[0]));
		pool->n_queues--;
		if (pool->cursor > i)
			pool->cursor--;
		if (pool->cursor >= pool->n_queues)
			pool->cursor = 0;
		break;
	}
	pthread_mutex_unlock(&pool->inj_mu);
	free(q);
}
