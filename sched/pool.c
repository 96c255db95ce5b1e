/* SPDX-License-Identifier: Apache-2.0 */
/* sched pool, the task path: workers, task records, stealing, injection, parking, groups. */
#include "sched/sched.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "sched/deque.h"
#include "sched/pool_internal.h"
#include "sched/topo.h"

/*
 * The design (task records, deques, injection and its fairness rule, stealing order, the parking
 * protocol, shutdown, statistics) is described in docs/sched.md; the comments here name the
 * pairings of the atomic operations. Creation, placement, shutdown, statistics and the queue API
 * are in pool_lifecycle.c.
 */

enum {
	STEAL_ROUNDS = 2, /* sweeps over the victims, repeated only after a lost race */
	HELP_YIELD = 64,  /* idle polls between sched_yield() while a worker waits on a group */
	SPIN_CLOCK_POLLS = 16, /* idle polls between two looks at the clock */
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
void sched_pool_wake_all(struct sched_pool *pool)
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

static bool group_done(const void *what)
{
	const struct sched_group *g = what;

	/* seq_cst (so acquire): pairs with the decrement in task_retire */
	return atomic_load(&g->pending) == 0;
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

void *sched_worker_main(void *arg)
{
	struct sched_worker *w = arg;
	struct sched_pool *pool = w->pool;
	char name[16];
	unsigned idle = 0;
	uint64_t spin_t0 = 0;

	tls_worker = w;
	/* Its CPU time is read from its clock when asked (sched_pool_stats), not sampled here:
	 * CLOCK_THREAD_CPUTIME_ID is a system call, not a vDSO read. */
	if (pthread_getcpuclockid(pthread_self(), &w->cpu_clock) == 0)
		atomic_store_explicit(&w->cpu_clock_ok, true, memory_order_release);
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
	/* release: a reader that sees the clock gone reads the value stored above */
	atomic_store_explicit(&w->cpu_clock_ok, false, memory_order_release);
	tls_worker = NULL;
	return NULL;
}

int sched_worker_index(const struct sched_pool *pool)
{
	struct sched_worker *w = tls_worker;

	return w && w->pool == pool ? (int)w->index : -1;
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

int sched_queue_help_one(struct sched_queue *q)
{
	struct sched_pool *pool;
	struct sched_task *t;

	if (!q)
		return -EINVAL;
	pool = q->pool;
	if (pool_worker(pool))
		return 0;
	/* registered while it touches the pool, as in sched_group_help */
	atomic_fetch_add(&pool->helpers, 1);
	t = inj_take_queue(pool, q);
	if (t)
		outside_exec(pool, t);
	atomic_fetch_sub(&pool->helpers, 1);
	return t != NULL;
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
