/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for sched/pool.c: fairness, shutdown, queue lifecycle, stats, parking and wake-up. */
#include "sched/sched.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "sched/pool_internal.h"

#include "pool_fixture.h"
#include "tests/unit/task_state.h"

/* ---- asleep: what the kernel says of a thread ---- */

/*
 * Whether thread tid sleeps in a futex() wait on word with no timeout (sl_task_in_futex): until
 * a wake comes it uses no CPU. Where the word cannot be known, the state alone is trusted.
 */
static bool asleep_on(pid_t tid, const void *word)
{
	uintptr_t addr, timeout;

	return sl_task_in_futex(tid, &addr, &timeout) &&
	       (addr == 0 || (addr == (uintptr_t)word && timeout == 0));
}

/*
 * The thread ids of pool's workers, by index, from the CPU clock each worker records for the
 * stats: a thread's CPU clock id encodes its id (the kernel's CPUCLOCK_PID: ~(clock >> 3)).
 * Checked against the name each gives itself, sluice-w<index>.
 */
static void worker_tids(const struct sched_pool *pool, pid_t *tids)
{
	for (unsigned i = 0; i < pool->n_workers; i++) {
		const struct sched_worker *w = &pool->workers[i];
		char comm[32], want[32];

		assert_true(atomic_load(&w->cpu_clock_ok)); /* acquire: w->cpu_clock is set */
		tids[i] = (pid_t) ~((int)w->cpu_clock >> 3);
		snprintf(want, sizeof(want), "sluice-w%u\n", i);
		assert_true(sl_task_file(tids[i], "comm", comm, sizeof(comm)));
		assert_string_equal(comm, want);
	}
}

/*
 * Until every worker of pool is parked for certain: asleep on the pool's epoch with no timeout
 * (asleep_on). Polled every millisecond; fails the test after 10 s.
 */
static void until_all_asleep(struct sched_pool *pool, const pid_t *tids)
{
	unsigned k = 0;

	for (int i = 0; i < 10000; i++) {
		for (k = 0; k < pool->n_workers; k++)
			if (!asleep_on(tids[k], &pool->epoch))
				break;
		if (k == pool->n_workers)
			return;
		sleep_ms(1); /* polls the condition itself */
	}
	fail_msg("worker %u was not seen parked within 10 s", k);
}

/* Until *n reaches want, polled every millisecond; fails the test after 10 s (a lost wake-up). */
static void until_count(atomic_uint *n, unsigned want)
{
	for (int i = 0; i < 10000; i++) {
		if (atomic_load(n) >= want)
			return;
		sleep_ms(1); /* polls the condition itself */
	}
	fail_msg("%u of %u tasks ran within 10 s", atomic_load(n), want);
}

/* ---- gates: tasks that hold every worker until released ---- */

struct gate {
	struct sched_pool *pool;
	atomic_uint entered;
	atomic_bool open;
	bool open_on_shutdown; /* open when the pool leaves RUNNING */
	atomic_int spawn_ret;  /* what a spawn from inside returned after the shutdown began */
	struct sched_group *spawn_into;
};

static atomic_uint gate_children;

static void gate_task(void *arg)
{
	struct gate *gt = arg;

	atomic_fetch_add(&gt->entered, 1);
	for (;;) {
		if (atomic_load(&gt->open))
			break;
		if (gt->open_on_shutdown && atomic_load(&gt->pool->state) != SCHED_POOL_RUNNING)
			break;
		sched_yield();
	}
	if (gt->spawn_into)
		atomic_store(&gt->spawn_ret, sched_spawn(gt->spawn_into, noop, &gate_children));
}

static void gates_hold(struct gate *gt, struct sched_group *gg, struct sched_queue *q)
{
	unsigned n = gt->pool->n_workers;

	sched_group_init(gg, q);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(sched_spawn(gg, gate_task, gt), 0);
	while (atomic_load(&gt->entered) < n)
		sched_yield();
}

/* ---- fairness: weights 1 and 3, both backlogged ---- */

struct fair {
	atomic_uint ran[2];
	atomic_uint total;
	atomic_uint first[2]; /* of the first `at` tasks to finish, those of each queue */
	unsigned at;
};

struct fair_arg {
	struct fair *f;
	int which;
};

static void fair_task(void *arg)
{
	struct fair_arg *a = arg;

	atomic_fetch_add(&a->f->ran[a->which], 1);
	if (atomic_fetch_add(&a->f->total, 1) < a->f->at)
		atomic_fetch_add(&a->f->first[a->which], 1);
}

/*
 * set: the queues are made with the weights the other way round and set before the gate opens
 * (the tuner's sched_queue_set_weight), with the gates' tasks already running.
 */
static void weights_run(bool set)
{
	enum { N = 4000 };
	struct sched_pool *pool = pool_new(2);
	struct sched_queue *q1 = queue_new(pool, set ? 3 : 1), *q3 = queue_new(pool, set ? 1 : 3);
	struct sched_queue *qg = queue_new(pool, 1);
	struct gate gt = { .pool = pool };
	struct sched_group gg, g1, g3;
	struct fair f = { .at = N };
	struct fair_arg a1 = { &f, 0 }, a3 = { &f, 1 };

	gates_hold(&gt, &gg, qg);
	sched_group_init(&g1, q1);
	sched_group_init(&g3, q3);
	for (unsigned i = 0; i < N; i++) {
		assert_int_equal(sched_spawn(&g1, fair_task, &a1), 0);
		assert_int_equal(sched_spawn(&g3, fair_task, &a3), 0);
	}
	if (set) {
		assert_int_equal(sched_queue_set_weight(q1, 0), -EINVAL);
		assert_int_equal(sched_queue_set_weight(q1, 1), 0);
		assert_int_equal(sched_queue_set_weight(q3, 3), 0);
		assert_int_equal(sched_queue_weight(q1), 1);
		assert_int_equal(sched_queue_weight(q3), 3);
	}
	atomic_store(&gt.open, true);
	assert_int_equal(sched_group_wait(&g1), 0);
	assert_int_equal(sched_group_wait(&g3), 0);
	assert_int_equal(sched_group_wait(&gg), 0);
	assert_int_equal(atomic_load(&f.ran[0]), N);
	assert_int_equal(atomic_load(&f.ran[1]), N);
	/*
	 * The workers take injected tasks under one lock in weighted round-robin order, a turn of 1
	 * from q1, then 3 from q3, while both are backlogged (N each: neither runs dry within the
	 * first N). A worker finishes a task before it takes the next, so the first N to finish are
	 * among the first N + 1 taken (the other worker may hold one taken earlier): N/4 of them
	 * from q1, give or take that one and a first turn that may start mid-way (3). A ratio other
	 * than 1:3 (1:1 is N/2, 1:2 N/3, the weights not set 3N/4) is hundreds off.
	 */
	print_message("weights 1:3, the first %u tasks to finish: %u : %u\n", N,
		      atomic_load(&f.first[0]), atomic_load(&f.first[1]));
	assert_int_equal(atomic_load(&f.first[0]) + atomic_load(&f.first[1]), N);
	assert_in_range(atomic_load(&f.first[0]), N / 4 - 8, N / 4 + 8);
	sched_queue_destroy(q1);
	sched_queue_destroy(q3);
	sched_queue_destroy(qg);
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
}

static void test_weights(void **state)
{
	weights_run(false);
}

static void test_set_weight(void **state)
{
	weights_run(true);
}

/* ---- shutdown ---- */

struct spawner {
	struct sched_group *g;
	atomic_uint *ran;
	atomic_uint *child_ran;
	atomic_int *child_ret;
};

static void spawner_task(void *arg)
{
	struct spawner *s = arg;
	int ret;

	atomic_fetch_add(s->ran, 1);
	ret = sched_spawn(s->g, noop, s->child_ran);
	if (ret != 0)
		atomic_store(s->child_ret, ret);
}

static void test_drain(void **state)
{
	enum { N = 2000 };
	struct sched_pool *pool = pool_new(2);
	struct sched_queue *q = queue_new(pool, 1);
	struct gate gt = { .pool = pool, .open_on_shutdown = true };
	atomic_uint ran = 0, child_ran = 0;
	atomic_int child_ret = 0;
	struct sched_group gg, g;
	struct spawner s = { &g, &ran, &child_ran, &child_ret };

	atomic_store(&gate_children, 0);
	gt.spawn_into = &g;
	atomic_store(&gt.spawn_ret, 1);
	sched_group_init(&g, q);
	gates_hold(&gt, &gg, q);
	for (unsigned i = 0; i < N; i++)
		assert_int_equal(sched_spawn(&g, spawner_task, &s), 0);
	/* Everything queued runs, and so do the tasks it spawns while the pool drains. */
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
	assert_int_equal(atomic_load(&ran), N);
	assert_int_equal(atomic_load(&child_ran), N);
	assert_int_equal(atomic_load(&child_ret), 0);
	assert_int_equal(atomic_load(&gt.spawn_ret), 0);
	assert_int_equal(atomic_load(&gate_children), 2); /* one per gate */
	assert_int_equal(atomic_load(&g.pending), 0);
	assert_int_equal(atomic_load(&gg.pending), 0);
	assert_false(atomic_load(&g.cancelled));
}

struct waiter {
	struct sched_group *g;
	atomic_int tid; /* its thread id, once it runs */
	int ret;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;

	atomic_store(&w->tid, (int)syscall(SYS_gettid));
	w->ret = sched_group_wait(w->g);
	return NULL;
}

static void test_cancel(void **state)
{
	enum { N = 2000 };
	struct sched_pool *pool = pool_new(2);
	struct sched_queue *q = queue_new(pool, 1);
	struct gate gt = { .pool = pool, .open_on_shutdown = true };
	atomic_uint ran = 0, child_ran = 0;
	atomic_int child_ret = 0;
	struct sched_group gg, g;
	struct spawner s = { &g, &ran, &child_ran, &child_ret };
	struct waiter wt = { .g = &g, .tid = 0, .ret = 1 };
	pthread_t th;

	atomic_store(&gate_children, 0);
	gt.spawn_into = &g;
	atomic_store(&gt.spawn_ret, 1);
	sched_group_init(&g, q);
	gates_hold(&gt, &gg, q);
	for (unsigned i = 0; i < N; i++)
		assert_int_equal(sched_spawn(&g, spawner_task, &s), 0);
	/*
	 * An outside waiter on g, asleep before the cancel: registered with the pool, and in the
	 * kernel, in its futex wait on the pool's notify word. Nothing of g can run before the
	 * cancel (the gates hold both workers), so only the cancel can wake it.
	 */
	assert_int_equal(pthread_create(&th, NULL, waiter_main, &wt), 0);
	for (int i = 0;; i++) {
		int tid = atomic_load(&wt.tid);

		if (tid && atomic_load(&pool->outside_waiters) == 1 &&
		    asleep_on(tid, &pool->notify))
			break;
		if (i == 10000)
			fail_msg("the waiter was not seen asleep on the pool within 10 s");
		sleep_ms(1); /* polls the condition itself */
	}
	sched_pool_destroy(pool, SCHED_SHUTDOWN_CANCEL);
	assert_int_equal(pthread_join(th, NULL), 0);
	/* Nothing queued ran; the running gates finished; their spawns were refused. */
	assert_int_equal(atomic_load(&ran), 0);
	assert_int_equal(atomic_load(&child_ran), 0);
	assert_int_equal(atomic_load(&gate_children), 0);
	assert_int_equal(atomic_load(&gt.spawn_ret), -ESHUTDOWN);
	assert_int_equal(atomic_load(&g.pending), 0);
	assert_true(atomic_load(&g.cancelled));
	assert_int_equal(wt.ret, -ECANCELED);
	assert_int_equal(atomic_load(&gg.pending), 0);
	assert_false(atomic_load(&gg.cancelled)); /* the gates ran */
}

static void test_destroy_idle_and_null(void **state)
{
	struct sched_pool *pool = pool_new(2);

	sched_pool_destroy(NULL, SCHED_SHUTDOWN_DRAIN);
	sched_queue_destroy(NULL);
	sched_pool_destroy(pool, SCHED_SHUTDOWN_CANCEL);
	pool = pool_new(1);
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
}

static void test_queue_create_args(void **state)
{
	struct sched_pool *pool = pool_new(1);
	struct sched_queue *q = (struct sched_queue *)&q;

	assert_int_equal(sched_queue_create(pool, 0, -1, &q), -EINVAL);
	assert_int_equal(sched_queue_create(pool, 1, -2, &q), -EINVAL);
	assert_int_equal(sched_queue_create(pool, 1, 1 << 20, &q), -EINVAL);
	assert_ptr_equal(q, (struct sched_queue *)&q); /* untouched on failure */
	assert_int_equal(sched_queue_create(pool, 1, 0, &q), 0);
	sched_queue_destroy(q);
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
}

/* ---- stats and parking ---- */

static void test_stats(void **state)
{
	enum { N = 3000 };
	struct sched_pool *pool = pool_new(2);
	struct sched_queue *q = queue_new(pool, 1);
	struct sched_worker_stats st[4];
	atomic_uint ran = 0;
	struct sched_group g;
	uint64_t tasks = 0, injected = 0, parks = 0, cpu = 0;
	pid_t tids[2];

	memset(st, 0xff, sizeof(st));
	sched_group_init(&g, q);
	for (unsigned i = 0; i < N; i++)
		assert_int_equal(sched_spawn(&g, spin_task, &ran), 0);
	assert_int_equal(sched_group_wait(&g), 0);
	assert_true(wait_all_parked(pool));
	/* sleepers counts a worker before it counts its park: wait for the futex wait itself */
	worker_tids(pool, tids);
	until_all_asleep(pool, tids);
	assert_int_equal(sched_pool_stats(pool, st, 4), 2);
	assert_int_equal(st[2].tasks, UINT64_MAX); /* untouched past the workers */
	for (int i = 0; i < 2; i++) {
		tasks += st[i].tasks;
		injected += st[i].injected;
		parks += st[i].parks;
		cpu += st[i].cpu_ns;
		assert_true(st[i].steals <= st[i].tasks);
		assert_true(st[i].pu >= -1);
		assert_int_equal(st[i].node, 0);
		assert_true(st[i].parks >= 1); /* every worker is parked now */
	}
	assert_int_equal(tasks, N);
	assert_int_equal(injected, N);
	assert_true(parks >= 1);
	assert_true(cpu > 0);
	assert_int_equal(sched_pool_stats(pool, st, 1), 1);
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
}

/*
 * Parked means asleep in the kernel, in a futex wait with no timeout: no CPU at all until a
 * spawn wakes a worker. Seen so twice, with the pool's counters and each worker's CPU clock read
 * in between: nothing moved (a worker that polled, or woke and parked again, moves its
 * steal_fails or parks; one that ran moves its clock).
 */
static void test_parked_pool_uses_no_cpu(void **state)
{
	enum { W = 4 };
	struct sched_pool *pool = pool_new(W);
	struct sched_queue *q = queue_new(pool, 1);
	struct sched_worker_stats st0[W], st1[W], st2[W];
	atomic_uint ran = 0;
	struct sched_group g;
	pid_t tids[W];
	uint64_t tasks = 0;

	sched_group_init(&g, q);
	for (unsigned i = 0; i < 100; i++)
		assert_int_equal(sched_spawn(&g, spin_task, &ran), 0);
	assert_int_equal(sched_group_wait(&g), 0);
	assert_true(wait_all_parked(pool));
	worker_tids(pool, tids);
	until_all_asleep(pool, tids);
	assert_int_equal(sched_pool_stats(pool, st0, W), W);
	until_all_asleep(pool, tids);
	assert_int_equal(sched_pool_stats(pool, st1, W), W);
	assert_int_equal(atomic_load(&pool->sleepers), W);
	for (int i = 0; i < W; i++) {
		assert_true(st0[i].parks >= 1);
		assert_int_equal(st1[i].parks, st0[i].parks); /* the same sleep */
		assert_int_equal(st1[i].steal_fails, st0[i].steal_fails);
		assert_int_equal(st1[i].tasks, st0[i].tasks);
		assert_int_equal(st1[i].parked_ns, st0[i].parked_ns);
		assert_true(st0[i].cpu_ns > 0);
		assert_int_equal(st1[i].cpu_ns, st0[i].cpu_ns); /* not a nanosecond of CPU */
	}
	/* And it wakes up again. */
	for (unsigned i = 0; i < 100; i++)
		assert_int_equal(sched_spawn(&g, spin_task, &ran), 0);
	assert_int_equal(sched_group_wait(&g), 0);
	assert_int_equal(atomic_load(&ran), 200);
	/* Every worker that ran one of them first left its sleep, and accounted its time parked. */
	assert_int_equal(sched_pool_stats(pool, st2, W), W);
	for (int i = 0; i < W; i++) {
		tasks += st2[i].tasks - st1[i].tasks;
		if (st2[i].tasks != st1[i].tasks)
			assert_true(st2[i].parked_ns > st1[i].parked_ns);
	}
	assert_int_equal(tasks, 100);
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
}

/* ---- queue_destroy waits for groups started from tasks ---- */

struct hop {
	struct sched_pool *pool;
	struct sched_group *g2;
	atomic_uint *done;
	atomic_bool armed; /* the test thread is about to wait on g2 (or q) */
};

/*
 * g2's task: it ends only once the test thread waits for it (armed, then registered as the
 * pool's one outside waiter), so that wait always finds it still running.
 */
static void hop_leaf(void *arg)
{
	struct hop *h = arg;

	while (!atomic_load(&h->armed) || atomic_load(&h->pool->outside_waiters) == 0)
		sched_yield();
	atomic_fetch_add(h->done, 1);
}

/* A task of g1 starts g2 (pending 0 -> 1): g2 now keeps the queue active by itself. */
static void hop_spawn(void *arg)
{
	struct hop *h = arg;

	if (sched_spawn(h->g2, hop_leaf, h) != 0)
		abort(); /* not a cmocka assert: this runs on a worker thread */
}

static void test_queue_destroy_waits(void **state)
{
	struct sched_pool *pool = pool_new(2);
	struct sched_queue *q = queue_new(pool, 1);
	struct sched_group g1, g2;
	atomic_uint done = 0;
	struct hop h = { .pool = pool, .g2 = &g2, .done = &done, .armed = false };

	(void)state;
	for (unsigned round = 0; round < 20; round++) {
		sched_group_init(&g1, q);
		sched_group_init(&g2, q);
		assert_int_equal(sched_spawn(&g1, hop_spawn, &h), 0);
		assert_int_equal(sched_group_wait(&g1), 0);
		/* g1 is over, g2's task still runs: that must keep q alive. */
		assert_int_equal(atomic_load(&done), round);
		atomic_store(&h.armed, true);
		assert_int_equal(sched_group_wait(&g2), 0);
		atomic_store(&h.armed, false);
		assert_int_equal(atomic_load(&done), round + 1);
	}
	sched_group_init(&g1, q);
	sched_group_init(&g2, q);
	assert_int_equal(sched_spawn(&g1, hop_spawn, &h), 0);
	assert_int_equal(sched_group_wait(&g1), 0);
	assert_int_equal(atomic_load(&done), 20);
	atomic_store(&h.armed, true);
	sched_queue_destroy(q); /* waits for g2's task, which nobody waits for */
	assert_int_equal(atomic_load(&done), 21);
	assert_int_equal(atomic_load(&g2.pending), 0);
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
}

/* ---- a spawn into a parked pool wakes it ---- */

struct where {
	struct sched_pool *pool;
	atomic_uint runs;
	atomic_int worker; /* the index of the worker that ran it */
};

static void where_task(void *arg)
{
	struct where *w = arg;

	atomic_store(&w->worker, sched_worker_index(w->pool));
	atomic_fetch_add(&w->runs, 1);
}

/*
 * Round after round, with every worker parked for certain (asleep in the kernel), one task from
 * outside: only the spawn's wake-up can get it run, once, on a worker that left its sleep.
 * (A lost wake-up fails until_count instead of hanging the test.)
 */
static void test_wake_from_parked(void **state)
{
	enum { ROUNDS = 64, W = 2 };
	struct sched_pool_opts o;
	struct sched_pool *pool = NULL;
	struct sched_queue *q;
	pid_t tids[W];

	(void)state;
	sched_pool_opts_init(&o); /* the default spin */
	o.workers = W;
	assert_int_equal(sched_pool_create(&o, &pool), 0);
	q = queue_new(pool, 1);
	assert_true(wait_all_parked(pool));
	worker_tids(pool, tids);
	for (unsigned r = 0; r < ROUNDS; r++) {
		struct sched_worker_stats st0[W], st1[W];
		struct where wh = { .pool = pool, .runs = 0, .worker = -2 };
		struct sched_group g;
		uint64_t tasks = 0;
		int k;

		until_all_asleep(pool, tids);
		assert_int_equal(sched_pool_stats(pool, st0, W), W);
		sched_group_init(&g, q);
		assert_int_equal(sched_spawn(&g, where_task, &wh), 0);
		until_count(&wh.runs, 1);
		assert_int_equal(sched_group_wait(&g), 0);
		assert_int_equal(atomic_load(&wh.runs), 1);
		k = atomic_load(&wh.worker);
		assert_in_range(k, 0, W - 1); /* on a worker, not on this thread */
		assert_int_equal(sched_pool_stats(pool, st1, W), W);
		for (int i = 0; i < W; i++)
			tasks += st1[i].tasks - st0[i].tasks;
		assert_int_equal(tasks, 1);
		assert_int_equal(st1[k].tasks, st0[k].tasks + 1);
		assert_int_equal(st1[k].injected, st0[k].injected + 1);
		assert_true(st1[k].parked_ns > st0[k].parked_ns); /* it was woken from its park */
	}
	sched_queue_destroy(q);
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_weights),
		cmocka_unit_test(test_set_weight),
		cmocka_unit_test(test_drain),
		cmocka_unit_test(test_cancel),
		cmocka_unit_test(test_destroy_idle_and_null),
		cmocka_unit_test(test_queue_create_args),
		cmocka_unit_test(test_stats),
		cmocka_unit_test(test_parked_pool_uses_no_cpu),
		cmocka_unit_test(test_queue_destroy_waits),
		cmocka_unit_test(test_wake_from_parked),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
