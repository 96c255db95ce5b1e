/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for sched/pool.c: spawn, groups, helping, parallel_for, fairness, shutdown, stats. */
#include "sched/sched.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <setjmp.h>
#include <cmocka.h>

#include "sched/pool_internal.h"

static struct sched_pool *pool_new(unsigned workers)
{
	struct sched_pool_opts o;
	struct sched_pool *pool = NULL;

	sched_pool_opts_init(&o);
	o.workers = workers;
	o.spin_iters = 256;
	assert_int_equal(sched_pool_create(&o, &pool), 0);
	assert_non_null(pool);
	assert_int_equal(sched_pool_workers(pool), workers);
	return pool;
}

static struct sched_queue *queue_new(struct sched_pool *pool, unsigned weight)
{
	struct sched_queue *q = NULL;

	assert_int_equal(sched_queue_create(pool, weight, -1, &q), 0);
	return q;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* Wait (bounded) until every worker is parked; false if they never all were. */
static bool wait_all_parked(struct sched_pool *pool)
{
	for (int i = 0; i < 5000; i++) {
		if (atomic_load(&pool->sleepers) == pool->n_workers)
			return true;
		sleep_ms(1);
	}
	return false;
}

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

/* ---- gates: tasks that hold every worker until released ---- */

struct gate {
	struct sched_pool *pool;
	atomic_uint entered;
	atomic_bool open;
	bool open_on_shutdown; /* open when the pool leaves RUNNING */
	atomic_int spawn_ret;  /* what a spawn from inside returned after the shutdown began */
	struct sched_group *spawn_into;
};

static void noop(void *arg)
{
	atomic_fetch_add((atomic_uint *)arg, 1);
}

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

static void test_weights(void **state)
{
	enum { N = 4000 };
	struct sched_pool *pool = pool_new(2);
	struct sched_queue *q1 = queue_new(pool, 1), *q3 = queue_new(pool, 3);
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

static void spin_task(void *arg)
{
	volatile unsigned x = 0;

	for (unsigned i = 0; i < 2000; i++)
		x += i;
	atomic_fetch_add((atomic_uint *)arg, 1);
}

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
	atomic_bool go;      /* the destroyer may start */
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
		cmocka_unit_test(test_weights),
		cmocka_unit_test(test_drain),
		cmocka_unit_test(test_cancel),
		cmocka_unit_test(test_destroy_idle_and_null),
		cmocka_unit_test(test_queue_create_args),
		cmocka_unit_test(test_stats),
		cmocka_unit_test(test_parked_pool_uses_no_cpu),
		cmocka_unit_test(test_queue_destroy_waits),
		cmocka_unit_test(test_wake_from_parked),
		cmocka_unit_test(test_help_runs_on_caller),
		cmocka_unit_test(test_help_shares_with_workers),
		cmocka_unit_test(test_help_inside),
		cmocka_unit_test(test_help_cancelled),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
