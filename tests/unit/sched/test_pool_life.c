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
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <cmocka.h>

#include "sched/pool_internal.h"

#include "pool_fixture.h"

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
	unsigned snap[2];
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
	if (atomic_fetch_add(&a->f->total, 1) + 1 == a->f->at) {
		a->f->snap[0] = atomic_load(&a->f->ran[0]);
		a->f->snap[1] = atomic_load(&a->f->ran[1]);
	}
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
	/* After N tasks with both queues backlogged: about N/4 from q1 and 3N/4 from q3. */
	print_message("weights 1:3 after %u tasks: %u : %u\n", N, f.snap[0], f.snap[1]);
	assert_true(f.snap[0] > N / 8);		/* not starved */
	assert_true(f.snap[0] < N / 2);		/* not served as an equal */
	assert_true(f.snap[1] > 2 * f.snap[0]); /* ratio near 3 */
	assert_true(f.snap[1] < 5 * f.snap[0]);
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
	atomic_bool started;
	int ret;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;

	atomic_store(&w->started, true);
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
	struct waiter wt = { .g = &g, .ret = 1 };
	pthread_t th;

	atomic_store(&gate_children, 0);
	gt.spawn_into = &g;
	atomic_store(&gt.spawn_ret, 1);
	sched_group_init(&g, q);
	gates_hold(&gt, &gg, q);
	for (unsigned i = 0; i < N; i++)
		assert_int_equal(sched_spawn(&g, spawner_task, &s), 0);
	/* An outside waiter on g, asleep before the cancel. */
	assert_int_equal(pthread_create(&th, NULL, waiter_main, &wt), 0);
	while (!atomic_load(&wt.started))
		sched_yield();
	sleep_ms(20);
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

	memset(st, 0xff, sizeof(st));
	sched_group_init(&g, q);
	for (unsigned i = 0; i < N; i++)
		assert_int_equal(sched_spawn(&g, spin_task, &ran), 0);
	assert_int_equal(sched_group_wait(&g), 0);
	assert_true(wait_all_parked(pool));
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

static uint64_t rusage_ns(void)
{
	struct rusage ru;

	assert_int_equal(getrusage(RUSAGE_SELF, &ru), 0);
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000u +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000u;
}

static void test_parked_pool_uses_no_cpu(void **state)
{
	struct sched_pool *pool = pool_new(4);
	struct sched_queue *q = queue_new(pool, 1);
	atomic_uint ran = 0;
	struct sched_group g;
	uint64_t before, after;

	sched_group_init(&g, q);
	for (unsigned i = 0; i < 100; i++)
		assert_int_equal(sched_spawn(&g, spin_task, &ran), 0);
	assert_int_equal(sched_group_wait(&g), 0);
	assert_true(wait_all_parked(pool));
	before = rusage_ns();
	sleep_ms(300);
	after = rusage_ns();
	print_message("process CPU over 300 ms with the pool parked: %llu us\n",
		      (unsigned long long)(after - before) / 1000);
	assert_true(after - before < 20000000u);
	assert_int_equal(atomic_load(&pool->sleepers), 4);
	/* And it wakes up again. */
	for (unsigned i = 0; i < 100; i++)
		assert_int_equal(sched_spawn(&g, spin_task, &ran), 0);
	assert_int_equal(sched_group_wait(&g), 0);
	assert_int_equal(atomic_load(&ran), 200);
	/* The workers that woke for them accounted their time parked. */
	{
		struct sched_worker_stats st[4];
		uint64_t parked = 0;

		assert_int_equal(sched_pool_stats(pool, st, 4), 4);
		for (int i = 0; i < 4; i++)
			parked += st[i].parked_ns;
		assert_true(parked >= 100000000u); /* at least one slept through the 300 ms */
	}
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
}

/* ---- queue_destroy waits for groups started from tasks ---- */

struct hop {
	struct sched_group *g2;
	atomic_uint *done;
};

static void hop_leaf(void *arg)
{
	struct hop *h = arg;

	sleep_ms(1);
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
	struct hop h = { .g2 = &g2, .done = &done };

	(void)state;
	for (unsigned round = 0; round < 20; round++) {
		sched_group_init(&g1, q);
		sched_group_init(&g2, q);
		assert_int_equal(sched_spawn(&g1, hop_spawn, &h), 0);
		assert_int_equal(sched_group_wait(&g1), 0);
		/* g1 is over, g2's task may still sleep: that must keep q alive. */
		assert_int_equal(sched_group_wait(&g2), 0);
	}
	assert_int_equal(atomic_load(&done), 20);
	sched_group_init(&g1, q);
	sched_group_init(&g2, q);
	assert_int_equal(sched_spawn(&g1, hop_spawn, &h), 0);
	assert_int_equal(sched_group_wait(&g1), 0);
	sched_queue_destroy(q); /* waits for g2's task, which nobody waits for */
	assert_int_equal(atomic_load(&done), 21);
	assert_int_equal(atomic_load(&g2.pending), 0);
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
}

/* ---- wake-up latency of a parked pool (printed, not asserted) ---- */

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void stamp_task(void *arg)
{
	atomic_store((_Atomic uint64_t *)arg, mono_ns());
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void test_wake_from_parked(void **state)
{
	enum { ROUNDS = 64 };
	struct sched_pool_opts o;
	struct sched_pool *pool = NULL;
	struct sched_queue *q;
	uint64_t lat[ROUNDS];

	(void)state;
	sched_pool_opts_init(&o); /* the default spin */
	o.workers = 2;
	assert_int_equal(sched_pool_create(&o, &pool), 0);
	q = queue_new(pool, 1);
	for (unsigned r = 0; r < ROUNDS; r++) {
		struct sched_group g;
		_Atomic uint64_t ran = 0;
		uint64_t t0;

		assert_true(wait_all_parked(pool));
		sched_group_init(&g, q);
		t0 = mono_ns();
		assert_int_equal(sched_spawn(&g, stamp_task, &ran), 0);
		assert_int_equal(sched_group_wait(&g), 0);
		assert_true(atomic_load(&ran) >= t0);
		lat[r] = atomic_load(&ran) - t0;
	}
	qsort(lat, ROUNDS, sizeof(lat[0]), cmp_u64);
	print_message("spawn into a parked pool until the task runs: p50 %llu us, p90 %llu us\n",
		      (unsigned long long)lat[ROUNDS / 2] / 1000,
		      (unsigned long long)lat[ROUNDS * 9 / 10] / 1000);
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
