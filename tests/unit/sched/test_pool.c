/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for sched/pool.c: spawn, groups, parallel_for, worker index, helping from outside. */
#include "sched/sched.h"

#include <errno.h>
#include <limits.h>
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

#include <cmocka.h>

#include "sched/pool_internal.h"

#include "pool_fixture.h"

/* ---- spawn from outside and inside ---- */

struct slot_arg {
	atomic_uint *slots;
	unsigned i;
};

static void inc_slot(void *arg)
{
	struct slot_arg *a = arg;

	atomic_fetch_add(&a->slots[a->i], 1);
}

static void test_spawn_outside(void **state)
{
	enum { N = 5000 };
	struct sched_pool *pool = pool_new(2);
	struct sched_queue *q = queue_new(pool, 1);
	atomic_uint *slots = calloc(N, sizeof(*slots));
	struct slot_arg *args = calloc(N, sizeof(*args));
	struct sched_group g;

	sched_group_init(&g, q);
	assert_int_equal(sched_group_wait(&g), 0); /* an empty group is done */
	for (unsigned i = 0; i < N; i++) {
		args[i] = (struct slot_arg){ slots, i };
		assert_int_equal(sched_spawn(&g, inc_slot, &args[i]), 0);
	}
	assert_int_equal(sched_group_wait(&g), 0);
	assert_int_equal(atomic_load(&g.pending), 0);
	for (unsigned i = 0; i < N; i++)
		assert_int_equal(atomic_load(&slots[i]), 1);
	/* The group can be used again. */
	for (unsigned i = 0; i < N; i++)
		assert_int_equal(sched_spawn(&g, inc_slot, &args[i]), 0);
	assert_int_equal(sched_group_wait(&g), 0);
	for (unsigned i = 0; i < N; i++)
		assert_int_equal(atomic_load(&slots[i]), 2);
	assert_int_equal(sched_spawn(NULL, inc_slot, NULL), -EINVAL);
	assert_int_equal(sched_spawn(&g, NULL, NULL), -EINVAL);
	sched_queue_destroy(q);
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
	free(slots);
	free(args);
}

struct parent_arg {
	struct sched_pool *pool;
	struct sched_queue *q;
	atomic_uint *slots; /* CHILDREN per parent */
	struct slot_arg child[100];
	int child_wait;
	int worker_index;
	unsigned sum;
};

static void parent_task(void *arg)
{
	struct parent_arg *p = arg;
	struct sched_group g;

	p->worker_index = sched_worker_index(p->pool);
	sched_group_init(&g, p->q);
	for (unsigned i = 0; i < 100; i++) {
		p->child[i] = (struct slot_arg){ p->slots, i };
		if (sched_spawn(&g, inc_slot, &p->child[i]) != 0)
			return;
	}
	p->child_wait = sched_group_wait(&g);
	p->sum = 0;
	for (unsigned i = 0; i < 100; i++)
		p->sum += atomic_load(&p->slots[i]);
}

static void test_spawn_inside(void **state)
{
	enum { P = 50 };
	struct sched_pool *pool = pool_new(3);
	struct sched_queue *q = queue_new(pool, 1);
	struct parent_arg *ps = calloc(P, sizeof(*ps));
	atomic_uint *slots = calloc(P * 100, sizeof(*slots));
	struct sched_group g;

	sched_group_init(&g, q);
	for (unsigned i = 0; i < P; i++) {
		ps[i] = (struct parent_arg){ .pool = pool,
					     .q = q,
					     .slots = slots + i * 100,
					     .child_wait = 1,
					     .worker_index = -2 };
		assert_int_equal(sched_spawn(&g, parent_task, &ps[i]), 0);
	}
	assert_int_equal(sched_group_wait(&g), 0);
	for (unsigned i = 0; i < P; i++) {
		assert_int_equal(ps[i].child_wait, 0);
		assert_int_equal(ps[i].sum, 100);
		assert_true(ps[i].worker_index >= 0 && ps[i].worker_index < 3);
	}
	assert_int_equal(sched_worker_index(pool), -1);
	sched_queue_destroy(q);
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
	free(ps);
	free(slots);
}

/* ---- nested groups: a ternary tree of depth D counts its leaves ---- */

struct tree_arg {
	struct sched_queue *q;
	unsigned depth;
	atomic_uint *leaves;
};

static void tree_task(void *arg)
{
	struct tree_arg *t = arg;
	struct tree_arg kids[3];
	struct sched_group g;

	if (t->depth == 0) {
		atomic_fetch_add(t->leaves, 1);
		return;
	}
	sched_group_init(&g, t->q);
	for (int i = 0; i < 3; i++) {
		kids[i] = (struct tree_arg){ t->q, t->depth - 1, t->leaves };
		assert_int_equal(sched_spawn(&g, tree_task, &kids[i]), 0);
	}
	assert_int_equal(sched_group_wait(&g), 0);
}

static void test_nested_groups(void **state)
{
	struct sched_pool *pool = pool_new(2);
	struct sched_queue *q = queue_new(pool, 1);
	atomic_uint leaves = 0;
	struct tree_arg top = { q, 7, &leaves };
	struct sched_group g;

	sched_group_init(&g, q);
	assert_int_equal(sched_spawn(&g, tree_task, &top), 0);
	assert_int_equal(sched_group_wait(&g), 0);
	assert_int_equal(atomic_load(&leaves), 2187);	/* 3^7 */
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN); /* frees q too */
}

/* ---- parallel_for ---- */

struct pf_check {
	atomic_uint_fast64_t sum;
	atomic_uint chunks;
	unsigned char *seen; /* indexed from base */
	size_t base;
	size_t grain;
	atomic_uint bad_chunk;
	atomic_uint overlap;
};

static void pf_body(void *arg, size_t lo, size_t hi)
{
	struct pf_check *c = arg;
	uint64_t s = 0;

	if (hi <= lo)
		atomic_fetch_add(&c->bad_chunk, 1);
	for (size_t i = lo; i < hi; i++) {
		s += i;
		if (c->seen[i - c->base]++)
			atomic_fetch_add(&c->overlap, 1);
	}
	atomic_fetch_add(&c->sum, s);
	atomic_fetch_add(&c->chunks, 1);
}

static void pf_run_check(struct sched_queue *q, size_t begin, size_t end, size_t grain)
{
	struct pf_check c;
	uint64_t want = 0;

	memset(&c, 0, sizeof(c));
	c.base = begin;
	c.seen = calloc(end > begin ? end - begin : 1, 1);
	for (size_t i = begin; i < end; i++)
		want += i;
	assert_int_equal(sched_parallel_for(q, begin, end, grain, pf_body, &c), 0);
	assert_int_equal(atomic_load(&c.sum), want);
	assert_int_equal(atomic_load(&c.bad_chunk), 0);
	assert_int_equal(atomic_load(&c.overlap), 0);
	for (size_t i = begin; i < end; i++)
		assert_int_equal(c.seen[i - begin], 1);
	if (end <= begin)
		assert_int_equal(atomic_load(&c.chunks), 0);
	else if (grain >= end - begin)
		assert_int_equal(atomic_load(&c.chunks), 1);
	else if (grain)
		assert_true(atomic_load(&c.chunks) <= (end - begin) / grain);
	free(c.seen);
}

static void test_parallel_for(void **state)
{
	static const size_t grains[] = { 0, 1, 2, 7, 64, 1000, 99999, 100000, 1u << 20 };
	struct sched_pool *pool = pool_new(2);
	struct sched_queue *q = queue_new(pool, 1);

	for (size_t i = 0; i < sizeof(grains) / sizeof(grains[0]); i++) {
		pf_run_check(q, 0, 100000, grains[i]);
		pf_run_check(q, 3, 100003, grains[i]);
		pf_run_check(q, 17, 18, grains[i]);
		pf_run_check(q, 5, 5, grains[i]);  /* empty */
		pf_run_check(q, 10, 9, grains[i]); /* empty (end < begin) */
	}
	assert_int_equal(sched_parallel_for(NULL, 0, 1, 1, pf_body, NULL), -EINVAL);
	sched_queue_destroy(q);
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
}

struct pf_inside {
	struct sched_queue *q;
	int ret;
	struct pf_check c;
};

static void pf_inside_task(void *arg)
{
	struct pf_inside *p = arg;

	p->ret = sched_parallel_for(p->q, 0, 50000, 100, pf_body, &p->c);
}

static void test_parallel_for_inside(void **state)
{
	struct sched_pool *pool = pool_new(2);
	struct sched_queue *q = queue_new(pool, 1);
	struct pf_inside p[4];
	struct sched_group g;

	memset(p, 0, sizeof(p));
	sched_group_init(&g, q);
	for (int i = 0; i < 4; i++) {
		p[i].q = q;
		p[i].ret = 1;
		p[i].c.seen = calloc(50000, 1);
		assert_int_equal(sched_spawn(&g, pf_inside_task, &p[i]), 0);
	}
	assert_int_equal(sched_group_wait(&g), 0);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(p[i].ret, 0);
		assert_int_equal(atomic_load(&p[i].c.sum), 50000ull * 49999 / 2);
		assert_int_equal(atomic_load(&p[i].c.overlap), 0);
		free(p[i].c.seen);
	}
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
}

/* ---- sched_worker_index ---- */

struct index_arg {
	struct sched_pool *mine;
	struct sched_pool *other;
	int in_mine;
	int in_other;
};

static void index_task(void *arg)
{
	struct index_arg *a = arg;

	a->in_mine = sched_worker_index(a->mine);
	a->in_other = sched_worker_index(a->other);
}

static void test_worker_index(void **state)
{
	struct sched_pool *a = pool_new(2), *b = pool_new(1);
	struct sched_queue *q = queue_new(a, 1);
	struct index_arg args[64];
	struct sched_group g;
	bool seen[2] = { false, false };

	assert_int_equal(sched_worker_index(a), -1);
	assert_int_equal(sched_worker_index(b), -1);
	sched_group_init(&g, q);
	for (int i = 0; i < 64; i++) {
		args[i] = (struct index_arg){ a, b, -2, -2 };
		assert_int_equal(sched_spawn(&g, index_task, &args[i]), 0);
	}
	assert_int_equal(sched_group_wait(&g), 0);
	for (int i = 0; i < 64; i++) {
		assert_true(args[i].in_mine == 0 || args[i].in_mine == 1);
		seen[args[i].in_mine] = true;
		assert_int_equal(args[i].in_other, -1);
	}
	assert_true(seen[0] || seen[1]);
	sched_pool_destroy(a, SCHED_SHUTDOWN_DRAIN);
	sched_pool_destroy(b, SCHED_SHUTDOWN_DRAIN);
}

/* ---- helping from outside: sched_group_help and SCHED_SPAWN_NO_WAKE ---- */

struct where_arg {
	struct sched_pool *pool;
	atomic_uint *ran;
	int index; /* sched_worker_index where it ran */
};

static void where_task(void *arg)
{
	struct where_arg *a = arg;

	a->index = sched_worker_index(a->pool);
	atomic_fetch_add(a->ran, 1);
}

/* NO_WAKE into a parked pool: the helper runs the tasks itself, nobody is woken. */
static void test_help_runs_on_caller(void **state)
{
	enum { N = 100 };
	struct sched_pool *pool = pool_new(2);
	struct sched_queue *q = queue_new(pool, 1);
	struct where_arg args[N];
	struct sched_worker_stats st[2];
	atomic_uint ran = 0;
	struct sched_group g;
	unsigned outside = 0;
	uint64_t worker_tasks = 0;

	(void)state;
	sched_group_init(&g, q);
	assert_int_equal(sched_group_help(&g), 0); /* an empty group is done */
	assert_int_equal(sched_group_help(NULL), -EINVAL);
	assert_true(wait_all_parked(pool));
	for (unsigned i = 0; i < N; i++) {
		args[i] = (struct where_arg){ pool, &ran, -2 };
		assert_int_equal(sched_spawn_flags(&g, where_task, &args[i], SCHED_SPAWN_NO_WAKE),
				 0);
	}
	assert_int_equal(sched_group_help(&g), 0);
	assert_int_equal(atomic_load(&ran), N);
	assert_int_equal(atomic_load(&g.pending), 0);
	for (unsigned i = 0; i < N; i++) {
		assert_true(args[i].index >= -1 && args[i].index < 2);
		outside += args[i].index == -1;
	}
	assert_int_equal(sched_pool_stats(pool, st, 2), 2);
	worker_tasks = st[0].tasks + st[1].tasks;
	/* Every task ran once, on the caller or on a worker (only a spurious wake-up gets one). */
	assert_int_equal(outside + worker_tasks, N);
	assert_true(outside >= N / 2);
	sched_queue_destroy(q);
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
}

/*
 * sched_queue_help_one: one queued task per call, oldest first, on the caller; 0 once the queue
 * is empty (or from a worker); the group then finishes as usual.
 */
struct one_arg {
	struct sched_pool *pool;
	atomic_uint *order; /* a ticket: the order tasks ran in */
	unsigned ran_at;
	int index;
	int from_worker; /* sched_queue_help_one called on a worker */
	struct sched_queue *q;
};

static void one_task(void *arg)
{
	struct one_arg *a = arg;

	a->ran_at = atomic_fetch_add(a->order, 1);
	a->index = sched_worker_index(a->pool);
	a->from_worker = sched_queue_help_one(a->q);
}

static void test_help_one(void **state)
{
	enum { N = 50 };
	struct sched_pool *pool = pool_new(2);
	struct sched_queue *q = queue_new(pool, 1), *other = queue_new(pool, 1);
	struct one_arg args[N];
	atomic_uint order = 0;
	struct sched_group g;
	unsigned mine = 0, calls = 0;
	int r;

	(void)state;
	assert_int_equal(sched_queue_help_one(NULL), -EINVAL);
	assert_int_equal(sched_queue_help_one(q), 0); /* nothing queued */
	sched_group_init(&g, q);
	assert_true(wait_all_parked(pool));
	for (unsigned i = 0; i < N; i++) {
		args[i] = (struct one_arg){ pool, &order, UINT_MAX, -2, -2, q };
		assert_int_equal(sched_spawn_flags(&g, one_task, &args[i], SCHED_SPAWN_NO_WAKE), 0);
	}
	assert_int_equal(sched_queue_help_one(other), 0); /* another queue's tasks are not its */
	while ((r = sched_queue_help_one(q)) == 1)
		calls++;
	assert_int_equal(r, 0);
	assert_int_equal(sched_group_help(&g), 0);
	assert_int_equal(atomic_load(&order), N);
	for (unsigned i = 0; i < N; i++) {
		assert_true(args[i].ran_at < N);
		if (args[i].index == -1) {
			mine++;
			/* on the caller, in the order they were queued: the same call ran it */
			if (i > 0 && args[i - 1].index == -1)
				assert_true(args[i - 1].ran_at < args[i].ran_at);
		} else {
			assert_int_equal(args[i].from_worker, 0); /* a worker is not helped so */
		}
	}
	/* every call ran one task (a task's own nested call may have run one more) */
	assert_true(calls <= mine);
	assert_true(mine >= N / 2); /* the workers were parked, none woken */
	sched_queue_destroy(other);
	sched_queue_destroy(q);
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
}

/* Plain spawns, workers awake: the caller and the workers share the tasks, each runs once. */
static void test_help_shares_with_workers(void **state)
{
	enum { N = 20000 };
	struct sched_pool *pool = pool_new(2);
	struct sched_queue *q = queue_new(pool, 1);
	struct where_arg *args = calloc(N, sizeof(*args));
	atomic_uint ran = 0, other_ran = 0;
	struct sched_group g, other;
	unsigned other_n = 1000;

	(void)state;
	sched_group_init(&g, q);
	sched_group_init(&other, q);
	/* Another group of the same queue, queued first: the helper may run its tasks too. */
	for (unsigned i = 0; i < other_n; i++)
		assert_int_equal(sched_spawn_flags(&other, spin_task, &other_ran,
						   i % 2 ? SCHED_SPAWN_NO_WAKE : 0),
				 0);
	for (unsigned i = 0; i < N; i++) {
		args[i] = (struct where_arg){ pool, &ran, -2 };
		assert_int_equal(sched_spawn(&g, where_task, &args[i]), 0);
	}
	assert_int_equal(sched_group_help(&g), 0);
	assert_int_equal(atomic_load(&ran), N);
	for (unsigned i = 0; i < N; i++)
		assert_true(args[i].index >= -1 && args[i].index < 2);
	assert_int_equal(sched_group_help(&other), 0);
	assert_int_equal(atomic_load(&other_ran), other_n);
	sched_queue_destroy(q);
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
	free(args);
}

struct help_parent {
	struct sched_queue *q;
	atomic_uint ran;
	int ret;
};

/* On a worker, sched_group_help is sched_group_wait: it runs tasks, never blocks. */
static void help_parent_task(void *arg)
{
	struct help_parent *p = arg;
	struct sched_group g;

	sched_group_init(&g, p->q);
	for (unsigned i = 0; i < 50; i++)
		if (sched_spawn_flags(&g, noop, &p->ran, i % 2 ? SCHED_SPAWN_NO_WAKE : 0) != 0)
			break;
	p->ret = sched_group_help(&g);
}

static void test_help_inside(void **state)
{
	struct sched_pool *pool = pool_new(1); /* one worker: a blocking wait would deadlock */
	struct sched_queue *q = queue_new(pool, 1);
	struct help_parent p = { .q = q, .ret = 1 };
	struct sched_group g;

	(void)state;
	atomic_init(&p.ran, 0);
	sched_group_init(&g, q);
	assert_int_equal(sched_spawn(&g, help_parent_task, &p), 0);
	assert_int_equal(sched_group_wait(&g), 0);
	assert_int_equal(p.ret, 0);
	assert_int_equal(atomic_load(&p.ran), 50);
	sched_queue_destroy(q);
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
}

struct cancel_help {
	struct sched_pool *pool;
	atomic_bool go; /* the destroyer may start */
	atomic_uint ran;
};

static void *cancel_destroyer(void *arg)
{
	struct cancel_help *c = arg;

	while (!atomic_load(&c->go))
		sched_yield();
	sched_pool_destroy(c->pool, SCHED_SHUTDOWN_CANCEL);
	return NULL;
}

/* The first task (on the helper) lets the pool be cancelled and returns once it is. */
static void cancel_first_task(void *arg)
{
	struct cancel_help *c = arg;

	atomic_fetch_add(&c->ran, 1);
	atomic_store(&c->go, true);
	while (atomic_load(&c->pool->state) == SCHED_POOL_RUNNING)
		sched_yield();
}

static void cancel_rest_task(void *arg)
{
	atomic_fetch_add(&((struct cancel_help *)arg)->ran, 1);
}

/* A cancel while the caller helps: what it had not started is dropped; the destroy waits. */
static void test_help_cancelled(void **state)
{
	enum { N = 200 };
	struct sched_pool *pool = pool_new(1);
	struct sched_queue *q = queue_new(pool, 1);
	struct cancel_help c = { .pool = pool };
	struct sched_group g;
	pthread_t th;

	(void)state;
	atomic_init(&c.ran, 0);
	assert_true(wait_all_parked(pool));
	sched_group_init(&g, q);
	assert_int_equal(sched_spawn_flags(&g, cancel_first_task, &c, SCHED_SPAWN_NO_WAKE), 0);
	for (unsigned i = 1; i < N; i++)
		assert_int_equal(sched_spawn_flags(&g, cancel_rest_task, &c, SCHED_SPAWN_NO_WAKE),
				 0);
	assert_int_equal(pthread_create(&th, NULL, cancel_destroyer, &c), 0);
	/* The worker is parked and not woken: the helper takes the first task. */
	assert_int_equal(sched_group_help(&g), -ECANCELED);
	assert_int_equal(atomic_load(&g.pending), 0);
	assert_true(atomic_load(&g.cancelled));
	assert_int_equal(pthread_join(th, NULL), 0); /* the pool (and q) are gone now */
	assert_true(atomic_load(&c.ran) >= 1);
	assert_true(atomic_load(&c.ran) < N);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spawn_outside),
		cmocka_unit_test(test_spawn_inside),
		cmocka_unit_test(test_nested_groups),
		cmocka_unit_test(test_parallel_for),
		cmocka_unit_test(test_parallel_for_inside),
		cmocka_unit_test(test_worker_index),
		cmocka_unit_test(test_help_runs_on_caller),
		cmocka_unit_test(test_help_one),
		cmocka_unit_test(test_help_shares_with_workers),
		cmocka_unit_test(test_help_inside),
		cmocka_unit_test(test_help_cancelled),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
