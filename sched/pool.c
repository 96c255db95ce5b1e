/* SPDX-License-Identifier: Apache-2.0 */
/* sched pool: pinned workers, Chase-Lev deques, weighted injection queues, futex parking. */
#include "sched/sched.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sched/deque.h"
#include "sched/pool_internal.h"
#include "sched/topo.h"

/*
 * The design (task records, deques, injection and its fairness rule, stealing order, the parking
 * protocol, shutdown, statistics) is described in docs/sched.md; the comments here name the
 * pairings of the atomic operations.
 */

enum {
	DEQUE_CAPACITY = 256,
	STEAL_ROUNDS = 2, /* sweeps over the victims, repeated only after a lost race */
	HELP_YIELD = 64,  /* idle polls between sched_yield() while a worker waits on a group */
	SPIN_DEFAULT = 4096,
	SPIN_US_DEFAULT = 5,
	SPIN_CLOCK_POLLS = 16,	   /* idle polls between two looks at the clock */
	DESTROY_POLL_NS = 1000000, /* the destroyer re-checks termination at least this often */
};

static _Thread_local struct sched_worker *tls_worker;

/*
 * ThreadSanitizer does not model standalone fences (gcc warns, -Wtsan). Under it the parking
 * handshake uses an RMW on sleepers instead of the producer's fence (see pool_publish_fence);
 * same guarantee, but a shared-line write per spawn, so it is not the default.
 */
#if defined(__SANITIZE_THREAD__)
#define POOL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define POOL_TSAN 1
#endif
#endif
#ifndef POOL_TSAN
#define POOL_TSAN 0
#endif

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

static uint64_t clock_ns(clockid_t clk)
{
	struct timespec ts;

	if (clock_gettime(clk, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void futex_wait(atomic_uint *word, unsigned val, const struct timespec *timeout)
{
	/*
	 * EAGAIN (the word moved on), EINTR, ETIMEDOUT, spurious returns: the caller re-checks
	 * anyway.
	 */
	syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT_PRIVATE, val, timeout, NULL, 0);
}

/*
 * Safe on memory that may since have been freed: a private FUTEX_WAKE hashes the address and
 * never touches the word. (All our futex words live in the pool anyway.)
 */
static void futex_wake(atomic_uint *word, int n)
{
	syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* Counters on the worker's own line: one writer, so a plain load + store suffices. */
static inline void ctr_add(atomic_uint_fast64_t *c, uint64_t n)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

/*
 * The done counter of the termination count: a release store (a plain store on x86), pairs with
 * the acquire load in pool_quiescent.
 */
static inline void ctr_inc_release(atomic_uint_fast64_t *c)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
			      memory_order_release);
}

static inline uint64_t rng_next(uint64_t *s)
{
	/* xorshift64 */
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x;
}

static inline int pool_state(const struct sched_pool *pool)
{
	return atomic_load_explicit(&pool->state, memory_order_relaxed);
}

/* ---- Parking ---------------------------------------------------------------------------- */

/*
 * Called by every producer after it made work visible (a deque push, an injection). Pairs with
 * worker_park: the parker increments sleepers and then fences; we publish and then fence. With
 * the two seq_cst fences, either the parker's re-check sees our work, or our load below sees its
 * registration (store-buffering cannot hit both), so no wake-up is lost.
 */
static unsigned pool_sleepers_after_publish(struct sched_pool *pool)
{
#if POOL_TSAN
	/*
	 * acq_rel RMW: if it comes before the parker's increment in sleepers' modification order,
	 * that increment (acquire) reads from it and the parker's re-check sees our work;
	 * otherwise we read the parker's registration.
	 */
	return atomic_fetch_add_explicit(&pool->sleepers, 0, memory_order_acq_rel);
#else
	atomic_thread_fence(memory_order_seq_cst); /* pairs with the fence in worker_park */
	return atomic_load_explicit(&pool->sleepers, memory_order_relaxed);
#endif
}

static void pool_wake_one(struct sched_pool *pool)
{
	if (pool_sleepers_after_publish(pool) == 0)
		return;
	/* release: pairs with the acquire load of epoch in worker_park */
	atomic_fetch_add_explicit(&pool->epoch, 1, memory_order_release);
	futex_wake(&pool->epoch, 1);
}

/* After a change of state (shutdown): every parked worker must re-check. */
static void pool_wake_all(struct sched_pool *pool)
{
	pool_sleepers_after_publish(pool);
	/* release: pairs with the acquire load of epoch in worker_park */
	atomic_fetch_add_explicit(&pool->epoch, 1, memory_order_release);
	futex_wake(&pool->epoch, INT_MAX);
}

/* Every source of work a parker must re-check; relaxed loads ordered by worker_park's fence. */
static bool pool_has_work(const struct sched_pool *pool)
{
	if (atomic_load_explicit(&pool->inj_count, memory_order_relaxed) != 0)
		return true;
	for (unsigned i = 0; i < pool->n_workers; i++)
		if (sched_deque_size(&pool->workers[i].deque) != 0)
			return true;
	return pool_state(pool) == SCHED_POOL_STOPPED; /* not work, but no reason to sleep either */
}

/*
 * The eventcount: register as a sleeper, fence, read the epoch, re-check every source of work,
 * and sleep only if the epoch still has the value read before the re-check. A producer that
 * published work after our re-check has seen us registered (see pool_wake_one) and bumps the
 * epoch, so the futex wait either finds the epoch moved or is woken.
 */
static void worker_park(struct sched_worker *w)
{
	struct sched_pool *pool = w->pool;
	unsigned e;

	atomic_store_explicit(&w->ctr.cpu_ns, clock_ns(CLOCK_THREAD_CPUTIME_ID),
			      memory_order_relaxed);
	/* acq_rel: pairs with the RMW in pool_sleepers_after_publish (the TSan variant) */
	atomic_fetch_add_explicit(&pool->sleepers, 1, memory_order_acq_rel);
#if !POOL_TSAN
	/* pairs with the fence in pool_sleepers_after_publish */
	atomic_thread_fence(memory_order_seq_cst);
#endif
	/* acquire: pairs with the release fetch_add of epoch in pool_wake_one/_all */
	e = atomic_load_explicit(&pool->epoch, memory_order_acquire);
	if (!pool_has_work(pool)) {
		uint64_t t0 = clock_ns(CLOCK_MONOTONIC);

		ctr_add(&w->ctr.parks, 1);
		futex_wait(&pool->epoch, e, NULL);
		ctr_add(&w->ctr.parked_ns, clock_ns(CLOCK_MONOTONIC) - t0);
	}
	atomic_fetch_sub_explicit(&pool->sleepers, 1, memory_order_relaxed);
}

/* ---- Outside waiters -------------------------------------------------------------------- */

/*
 * Called right after the seq_cst decrements that ended a group (its pending, its queue's active)
 * or after a refused outside spawn counted itself done. Pairs with outside_wait: it registers
 * (seq_cst), reads notify, then re-reads the count; we decremented (seq_cst) and then read the
 * registration, so either it saw our decrement or we see it registered and bump notify after its
 * read.
 */
static void notify_outside(struct sched_pool *pool)
{
	if (atomic_load(&pool->outside_waiters) == 0)
		return;
	atomic_fetch_add(&pool->notify, 1);
	futex_wake(&pool->notify, INT_MAX);
}

typedef bool (*outside_done_fn)(const void *what);

/*
 * Sleep (not a worker's thread) until done(what); see notify_outside for the pairing. With
 * timeout, re-check at least that often (for a condition no finisher announces by itself).
 */
static void outside_wait(struct sched_pool *pool, outside_done_fn done, const void *what,
			 const struct timespec *timeout)
{
	if (done(what))
		return;
	atomic_fetch_add(&pool->outside_waiters, 1);
	for (;;) {
		unsigned e = atomic_load(&pool->notify);

		if (done(what))
			break;
		futex_wait(&pool->notify, e, timeout);
	}
	atomic_fetch_sub(&pool->outside_waiters, 1);
}

static bool group_done(const void *what)
{
	const struct sched_group *g = what;

	/* seq_cst (so acquire): pairs with the decrement in task_retire */
	return atomic_load(&g->pending) == 0;
}

static bool queue_idle(const void *what)
{
	const struct sched_queue *q = what;

	/* seq_cst (so acquire): pairs with the decrement in task_retire */
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
		/* acquire: pairs with the release store in ctr_inc_release (task_retire) */
		done += atomic_load_explicit(&pool->workers[i].ctr.done, memory_order_acquire);
	for (unsigned i = 0; i < pool->n_workers; i++)
		spawned +=
			atomic_load_explicit(&pool->workers[i].ctr.spawned, memory_order_relaxed);
	spawned += atomic_load(&pool->out_spawned);
	return done == spawned;
}

/* ---- Task records ----------------------------------------------------------------------- */

static struct sched_task *slab_new(struct sched_slab **list, int owner)
{
	struct sched_slab *s = malloc(sizeof(*s));

	if (!s)
		return NULL;
	for (unsigned i = 0; i < SCHED_SLAB_TASKS; i++) {
		s->tasks[i].owner = owner;
		s->tasks[i].next = i + 1 < SCHED_SLAB_TASKS ? &s->tasks[i + 1] : NULL;
	}
	s->next = *list;
	*list = s;
	return &s->tasks[0];
}

static void slabs_free(struct sched_slab *s)
{
	while (s) {
		struct sched_slab *next = s->next;

		free(s);
		s = next;
	}
}

static struct sched_task *task_alloc_worker(struct sched_worker *w)
{
	struct sched_task *t = w->free_list;

	if (!t) {
		/* acquire: pairs with the release CAS in task_free */
		t = atomic_exchange_explicit(&w->remote_free, NULL, memory_order_acquire);
		if (!t)
			t = slab_new(&w->slabs, (int)w->index);
		if (!t)
			return NULL;
	}
	w->free_list = t->next;
	return t;
}

static struct sched_task *task_alloc_outside(struct sched_pool *pool)
{
	struct sched_task *t;

	pthread_mutex_lock(&pool->out_mu);
	t = pool->out_free;
	if (!t) {
		/* acquire: pairs with the release CAS in task_free */
		t = atomic_exchange_explicit(&pool->out_remote, NULL, memory_order_acquire);
		if (!t)
			t = slab_new(&pool->out_slabs, -1);
	}
	if (t)
		pool->out_free = t->next;
	pthread_mutex_unlock(&pool->out_mu);
	return t;
}

/* Give t back to its owner: w's own list, or the owner's remote-free stack. w may be NULL. */
static void task_free(struct sched_pool *pool, struct sched_worker *w, struct sched_task *t)
{
	_Atomic(struct sched_task *) *stack;
	struct sched_task *old;

	if (w && t->owner == (int)w->index) {
		t->next = w->free_list;
		w->free_list = t;
		return;
	}
	stack = t->owner >= 0 ? &pool->workers[t->owner].remote_free : &pool->out_remote;
	old = atomic_load_explicit(stack, memory_order_relaxed);
	do {
		t->next = old;
		/* release: pairs with the acquire exchange in task_alloc_worker/_outside */
	} while (!atomic_compare_exchange_weak_explicit(stack, &old, t, memory_order_release,
							memory_order_relaxed));
}

/*
 * n tasks of g are over: subtract them from its pending. If that ends the group, it no longer
 * counts in its queue's active; after each decrement that object may be gone, so g->q is read
 * first and only the pool is touched at the end.
 */
static void group_finish(struct sched_pool *pool, struct sched_group *g, uint64_t n)
{
	struct sched_queue *q = g->q;

	/* seq_cst, so release: pairs with the acquire load in group_done / sched_group_wait */
	if (atomic_fetch_sub(&g->pending, n) != n)
		return;
	/* seq_cst, so release: pairs with the load in queue_idle */
	atomic_fetch_sub(&q->active, 1);
	notify_outside(pool);
}

/*
 * Apply the worker's owed finishes. Called before the worker runs a task of another group,
 * whenever it finds no work (before spinning, parking or yielding), when a task waits for a
 * group, and before the worker exits: so a debt is only ever held while the worker keeps running
 * tasks of that same group, which cannot complete before those tasks do anyway.
 */
static inline void worker_settle(struct sched_worker *w)
{
	struct sched_group *g = w->owe_group;

	if (!g)
		return;
	w->owe_group = NULL;
	group_finish(w->pool, g, w->owe_n);
}

/*
 * A task is over (run or dropped): free the record, count it done, and owe the decrement of its
 * group's pending (worker_settle applies it, or the next spawn into that group cancels it).
 */
static void task_retire(struct sched_worker *w, struct sched_task *t, bool dropped)
{
	struct sched_group *g = t->group;

	task_free(w->pool, w, t);
	if (dropped)
		atomic_store_explicit(&g->cancelled, true, memory_order_relaxed);
	ctr_inc_release(&w->ctr.done);
	if (w->owe_group != g) {
		worker_settle(w);
		w->owe_group = g;
		w->owe_n = 0;
	}
	w->owe_n++;
}

static void task_exec(struct sched_worker *w, struct sched_task *t)
{
	bool drop = pool_state(w->pool) >= SCHED_POOL_CANCELLING;

	if (w->owe_group && w->owe_group != t->group)
		worker_settle(w);
	if (drop) {
		ctr_add(&w->ctr.dropped, 1);
	} else {
		t->fn(t->arg);
		ctr_add(&w->ctr.tasks, 1);
	}
	task_retire(w, t, drop);
}

/* ---- Injection queues --------------------------------------------------------------------- */

static void inject(struct sched_pool *pool, struct sched_queue *q, struct sched_task *t)
{
	t->next = NULL;
	pthread_mutex_lock(&pool->inj_mu);
	if (q->tail)
		q->tail->next = t;
	else
		q->head = t;
	q->tail = t;
	q->len++;
	atomic_fetch_add_explicit(&pool->inj_count, 1, memory_order_relaxed);
	pthread_mutex_unlock(&pool->inj_mu);
}

/*
 * Weighted round-robin: the queue at the cursor gets a turn of up to weight takes; the cursor
 * moves on when the turn is used up or the queue is empty. Empty queues are skipped and earn
 * nothing. With node >= 0 only queues with no node or that node are considered.
 */
static struct sched_task *inj_take_locked(struct sched_pool *pool, int node)
{
	unsigned n = pool->n_queues;

	for (unsigned i = 0; i < n; i++) {
		unsigned k = (pool->cursor + i) % n;
		struct sched_queue *q = pool->queues[k];
		struct sched_task *t;

		if (!q->head || (node >= 0 && q->node >= 0 && q->node != node))
			continue;
		if (k != pool->cursor || q->credit == 0) {
			pool->cursor = k;
			q->credit = q->weight;
		}
		t = q->head;
		q->head = t->next;
		if (!q->head)
			q->tail = NULL;
		q->len--;
		atomic_fetch_sub_explicit(&pool->inj_count, 1, memory_order_relaxed);
		if (--q->credit == 0 || !q->head) {
			q->credit = 0;
			pool->cursor = (k + 1) % n;
		}
		return t;
	}
	return NULL;
}

static struct sched_task *inj_take(struct sched_worker *w)
{
	struct sched_pool *pool = w->pool;
	struct sched_task *t;

	if (atomic_load_explicit(&pool->inj_count, memory_order_relaxed) == 0)
		return NULL;
	pthread_mutex_lock(&pool->inj_mu);
	t = pool->multi_node ? inj_take_locked(pool, (int)w->node) : NULL;
	if (!t)
		t = inj_take_locked(pool, -1);
	pthread_mutex_unlock(&pool->inj_mu);
	return t;
}

/* ---- Finding work ------------------------------------------------------------------------- */

static struct sched_task *steal_from(struct sched_worker *w, const unsigned *victims, unsigned n,
				     bool *aborted)
{
	unsigned start;

	if (n == 0)
		return NULL;
	start = (unsigned)(rng_next(&w->rng) % n);
	for (unsigned i = 0; i < n; i++) {
		struct sched_worker *v = &w->pool->workers[victims[(start + i) % n]];
		struct sched_task *t;
		int st = SCHED_DEQUE_EMPTY;

		/* A cheap look first: an empty deque costs no fence and no CAS. */
		t = sched_deque_size(&v->deque) ? sched_deque_steal(&v->deque, &st) : NULL;
		if (t) {
			ctr_add(&w->ctr.steals, 1);
			return t;
		}
		ctr_add(&w->ctr.steal_fails, 1);
		if (st == SCHED_DEQUE_ABORT)
			*aborted = true;
	}
	return NULL;
}

static struct sched_task *worker_steal(struct sched_worker *w)
{
	for (unsigned round = 0; round < STEAL_ROUNDS; round++) {
		bool aborted = false;
		struct sched_task *t = steal_from(w, w->near, w->n_near, &aborted);

		if (!t)
			t = steal_from(w, w->far, w->n_far, &aborted);
		if (t || !aborted)
			return t;
	}
	return NULL;
}

/* Own deque, then steals (same node first), then the injection queues. */
static struct sched_task *find_work(struct sched_worker *w)
{
	struct sched_task *t;

	/*
	 * Our own bottom is exact and top only grows, so a size of 0 means empty: skip the pop's
	 * fence then (an idle poll should cost loads only).
	 */
	if (sched_deque_size(&w->deque) != 0) {
		t = sched_deque_pop(&w->deque);
		if (t)
			return t;
	}
	t = worker_steal(w);
	if (t)
		return t;
	t = inj_take(w);
	if (t)
		ctr_add(&w->ctr.injected, 1);
	return t;
}

static void *worker_main(void *arg)
{
	struct sched_worker *w = arg;
	struct sched_pool *pool = w->pool;
	char name[16];
	unsigned idle = 0;
	uint64_t spin_t0 = 0;

	tls_worker = w;
	snprintf(name, sizeof(name), "sluice-w%u", w->index);
	pthread_setname_np(pthread_self(), name);
	/* A binding failure is not fatal: the worker runs unpinned and says so in its stats. */
	if (atomic_load_explicit(&w->pu, memory_order_relaxed) >= 0 &&
	    topo_bind_thread(pool->topo, w->place_pu) != 0)
		atomic_store_explicit(&w->pu, -1, memory_order_relaxed);
	for (;;) {
		struct sched_task *t = find_work(w);

		if (t) {
			task_exec(w, t);
			idle = 0;
			continue;
		}
		worker_settle(w);
		if (pool_state(pool) == SCHED_POOL_STOPPED)
			break;
		/* A bounded spin: spin_iters polls at most, and spin_ns (read every few polls). */
		if (idle == 0)
			spin_t0 = clock_ns(CLOCK_MONOTONIC);
		if (idle < pool->spin_iters &&
		    (idle % SPIN_CLOCK_POLLS != 0 ||
		     clock_ns(CLOCK_MONOTONIC) - spin_t0 < pool->spin_ns)) {
			idle++;
			cpu_relax();
			continue;
		}
		worker_park(w);
		idle = 0;
	}
	worker_settle(w);
	atomic_store_explicit(&w->ctr.cpu_ns, clock_ns(CLOCK_THREAD_CPUTIME_ID),
			      memory_order_relaxed);
	tls_worker = NULL;
	return NULL;
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
		if (w->node != pool->workers[0].node)
			pool->multi_node = true;
	}
	free(place);
	return 0;
}

static void pool_stop_started(struct sched_pool *pool, unsigned started)
{
	atomic_store(&pool->state, SCHED_POOL_STOPPED);
	pool_wake_all(pool);
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
		err = -pthread_create(&pool->workers[started].thread, NULL, worker_main,
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
	pool_wake_all(pool);
	outside_wait(pool, pool_quiescent, pool, &poll);
	atomic_store(&pool->state, SCHED_POOL_STOPPED);
	pool_wake_all(pool);
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

int sched_worker_index(const struct sched_pool *pool)
{
	struct sched_worker *w = tls_worker;

	return w && w->pool == pool ? (int)w->index : -1;
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
			.cpu_ns = atomic_load_explicit(&c->cpu_ns, memory_order_relaxed),
			.pu = atomic_load_explicit(&w->pu, memory_order_relaxed),
			.node = (int)w->node,
		};
	}
	return n;
}

/* ---- Queues ------------------------------------------------------------------------------- */

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

/* ---- Groups ------------------------------------------------------------------------------- */

void sched_group_init(struct sched_group *g, struct sched_queue *q)
{
	g->q = q;
	atomic_init(&g->pending, 0);
	atomic_init(&g->cancelled, false);
}

static struct sched_worker *pool_worker(const struct sched_pool *pool)
{
	struct sched_worker *w = tls_worker;

	return w && w->pool == pool ? w : NULL;
}

int sched_spawn(struct sched_group *g, sched_fn fn, void *arg)
{
	return sched_spawn_flags(g, fn, arg, 0);
}

int sched_spawn_flags(struct sched_group *g, sched_fn fn, void *arg, unsigned flags)
{
	struct sched_queue *q;
	struct sched_pool *pool;
	struct sched_worker *w;
	struct sched_task *t;

	if (!g || !g->q || !fn)
		return -EINVAL;
	q = g->q;
	pool = q->pool;
	w = pool_worker(pool);
	if (w) {
		if (pool_state(pool) >= SCHED_POOL_CANCELLING)
			return -ESHUTDOWN;
		t = task_alloc_worker(w);
		if (!t)
			return -ENOMEM;
	} else {
		/*
		 * Count first, then look at the state (both seq_cst): either sched_pool_destroy's
		 * termination count sees this spawn, or we see its state and back out.
		 */
		int err = -ESHUTDOWN;

		atomic_fetch_add(&pool->out_spawned, 1);
		t = NULL;
		if (atomic_load(&pool->state) == SCHED_POOL_RUNNING) {
			err = -ENOMEM;
			t = task_alloc_outside(pool);
		}
		if (!t) {
			/* Counted as done too; a destroy waiting on the count hears of it. */
			atomic_fetch_add(&pool->out_done, 1);
			notify_outside(pool);
			return err;
		}
	}
	t->fn = fn;
	t->arg = arg;
	t->group = g;
	/*
	 * Counted in pending before the task is visible (task_retire and worker_settle take it
	 * off). A finish of g that this worker still owes already stands in pending for one task:
	 * let the new task have it instead of an RMW on the group's shared line.
	 */
	if (w && w->owe_group == g) {
		if (--w->owe_n == 0)
			w->owe_group = NULL;
	} else if (atomic_fetch_add_explicit(&g->pending, 1, memory_order_relaxed) == 0) {
		/*
		 * The group starts (again): it counts once in its queue's active until it ends. A
		 * spawner from a task keeps its own group, and so q, active meanwhile; one from
		 * outside must not race sched_queue_destroy(q) anyway.
		 */
		atomic_fetch_add_explicit(&q->active, 1, memory_order_relaxed);
	}
	if (w) {
		ctr_add(&w->ctr.spawned, 1); /* before the push; see pool_quiescent */
		if (sched_deque_push(&w->deque, t) != 0) {
			task_retire(w, t, false);
			return -ENOMEM;
		}
		/*
		 * A task on a worker's own deque cannot be stranded: its owner is awake and pops
		 * it before it may park (a worker parks only when its deque is empty). Waking a
		 * sleeper is then only for parallelism, so the fence of pool_wake_one is paid only
		 * when a sleeper is seen at all (a relaxed, possibly stale read: at worst a wake
		 * comes with the next spawn). This keeps a fence off the hot spawn path.
		 */
		if (!(flags & SCHED_SPAWN_NO_WAKE) &&
		    atomic_load_explicit(&pool->sleepers, memory_order_relaxed) != 0)
			pool_wake_one(pool);
	} else {
		inject(pool, q, t);
		/*
		 * An injected task has no owner: the full protocol, unless the caller runs what is
		 * left of it itself (NO_WAKE: sched_group_help follows).
		 */
		if (!(flags & SCHED_SPAWN_NO_WAKE))
			pool_wake_one(pool);
	}
	return 0;
}

int sched_group_wait(struct sched_group *g)
{
	struct sched_pool *pool;
	struct sched_worker *w;

	if (!g || !g->q)
		return -EINVAL;
	pool = g->q->pool;
	w = pool_worker(pool);
	if (w) {
		/* Help: run whatever there is until the group is done; never block. */
		unsigned idle = 0;

		worker_settle(w);
		/* acquire: pairs with the decrement in group_finish */
		while (atomic_load_explicit(&g->pending, memory_order_acquire) != 0) {
			struct sched_task *t = find_work(w);

			if (t) {
				task_exec(w, t);
				if (w->owe_group == g)
					worker_settle(w);
				idle = 0;
				continue;
			}
			worker_settle(w);
			if (++idle % HELP_YIELD == 0) {
				sched_yield();
			} else {
				cpu_relax();
			}
		}
	} else {
		outside_wait(pool, group_done, g, NULL);
	}
	return atomic_load_explicit(&g->cancelled, memory_order_relaxed) ? -ECANCELED : 0;
}

/* ---- Helping from outside the pool ------------------------------------------------------- */

/* The oldest task in q's injection FIFO, or NULL. */
static struct sched_task *inj_take_queue(struct sched_pool *pool, struct sched_queue *q)
{
	struct sched_task *t;

	/*
	 * A hint: the caller injected its own tasks before (sequenced), so it sees them counted;
	 * a task it misses here is run by a worker anyway.
	 */
	if (atomic_load_explicit(&pool->inj_count, memory_order_relaxed) == 0)
		return NULL;
	pthread_mutex_lock(&pool->inj_mu);
	t = q->head;
	if (t) {
		q->head = t->next;
		if (!q->head)
			q->tail = NULL;
		q->len--;
		atomic_fetch_sub_explicit(&pool->inj_count, 1, memory_order_relaxed);
	}
	pthread_mutex_unlock(&pool->inj_mu);
	return t;
}

/*
 * Run (or, while cancelling, drop) an injected task on a thread outside the pool, then retire
 * it as a worker would: the record back to its owner, its group's pending decremented (the
 * group may be gone after that), and last counted done, so that a destroyer's termination
 * count cannot pass before the task's end has touched its group and queue.
 */
static void outside_exec(struct sched_pool *pool, struct sched_task *t)
{
	struct sched_group *g = t->group;
	bool drop = pool_state(pool) >= SCHED_POOL_CANCELLING;

	if (!drop)
		t->fn(t->arg);
	task_free(pool, NULL, t);
	if (drop)
		atomic_store_explicit(&g->cancelled, true, memory_order_relaxed);
	group_finish(pool, g, 1);
	/* seq_cst: after the task and every spawn it made; see pool_quiescent */
	atomic_fetch_add(&pool->out_done, 1);
}

int sched_group_help(struct sched_group *g)
{
	struct sched_pool *pool;

	if (!g || !g->q)
		return -EINVAL;
	pool = g->q->pool;
	if (pool_worker(pool))
		return sched_group_wait(g);
	/*
	 * Registered (seq_cst) for as long as this touches the pool: a destroy that finds every
	 * task done waits for helpers to leave before it frees the pool, as for outside_waiters.
	 */
	atomic_fetch_add(&pool->helpers, 1);
	/* acquire: pairs with the decrement in group_finish */
	while (atomic_load_explicit(&g->pending, memory_order_acquire) != 0) {
		struct sched_task *t = inj_take_queue(pool, g->q);

		if (!t)
			break;
		outside_exec(pool, t);
	}
	/* What is left of g runs on workers (taken from the queue, or spawned by tasks). */
	outside_wait(pool, group_done, g, NULL);
	atomic_fetch_sub(&pool->helpers, 1); /* the last touch of the pool */
	return atomic_load_explicit(&g->cancelled, memory_order_relaxed) ? -ECANCELED : 0;
}
