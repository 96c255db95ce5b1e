/* SPDX-License-Identifier: Apache-2.0 */
/* Stress tests for sched/pool.c with exact results: fib, tiny tasks, sums, churn, helpers. */
#include "sched/sched.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <cmocka.h>

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif

/* Sizes shrink under ThreadSanitizer or when SLUICE_STRESS_SCALE is set (to anything). */
static bool small(void)
{
	return UNDER_TSAN || getenv("SLUICE_STRESS_SCALE") != NULL;
}

static struct sched_pool *pool_new(unsigned workers)
{
	struct sched_pool_opts o;
	struct sched_pool *pool = NULL;

	sched_pool_opts_init(&o);
	o.workers = workers;
	o.spin_iters = 512;
	assert_int_equal(sched_pool_create(&o, &pool), 0);
	return pool;
}

static struct sched_queue *queue_new(struct sched_pool *pool)
{
	struct sched_queue *q = NULL;

	assert_int_equal(sched_queue_create(pool, 1, -1, &q), 0);
	return q;
}

/* ---- fib with spawn/join ---- */

struct fib {
	struct sched_queue *q;
	unsigned n;
	uint64_t result;
	int err;
};

static void fib_task(void *arg)
{
	struct fib *f = arg;
	struct fib a, b;
	struct sched_group g;

	if (f->n < 2) {
		f->result = f->n;
		return;
	}
	a = (struct fib){ .q = f->q, .n = f->n - 1 };
	b = (struct fib){ .q = f->q, .n = f->n - 2 };
	sched_group_init(&g, f->q);
	f->err = sched_spawn(&g, fib_task, &a);
	if (f->err)
		return;
	fib_task(&b);
	f->err = sched_group_wait(&g);
	if (!f->err)
		f->err = a.err ? a.err : b.err;
	f->result = a.result + b.result;
}

static uint64_t fib_ref(unsigned n)
{
	uint64_t a = 0, b = 1;

	for (unsigned i = 0; i < n; i++) {
		uint64_t t = a + b;

		a = b;
		b = t;
	}
	return a;
}

static void test_fib(void **state)
{
	unsigned lo = small() ? 18 : 25, hi = small() ? 20 : 27;
	struct sched_pool *pool = pool_new(4);
	struct sched_queue *q = queue_new(pool);

	assert_int_equal(fib_ref(25), 75025);
	assert_int_equal(fib_ref(27), 196418);
	for (unsigned n = lo; n <= hi; n++) {
		struct fib f = { .q = q, .n = n };
		struct sched_group g;

		sched_group_init(&g, q);
		assert_int_equal(sched_spawn(&g, fib_task, &f), 0);
		assert_int_equal(sched_group_wait(&g), 0);
		assert_int_equal(f.err, 0);
		assert_int_equal(f.result, fib_ref(n));
	}
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
}

/* ---- millions of tiny tasks, each bumping its own slot exactly once ---- */

struct tiny {
	struct sched_queue *q;
	uint8_t *slots;
	size_t first;
	size_t n;
	int err;
};

static void tiny_slot(void *arg)
{
	uint8_t *slot = arg;

	(*slot)++;
}

/* A batch: spawns n one-slot tasks from inside the pool, then joins them. */
static void tiny_batch(void *arg)
{
	struct tiny *t = arg;
	struct sched_group g;

	sched_group_init(&g, t->q);
	for (size_t i = 0; i < t->n; i++) {
		t->err = sched_spawn(&g, tiny_slot, &t->slots[t->first + i]);
		if (t->err)
			break;
	}
	if (sched_group_wait(&g) != 0 && !t->err)
		t->err = -ECANCELED;
}

static void test_tiny_tasks(void **state)
{
	size_t total = small() ? 200000 : 2000000, per = 1000, batches = total / per;
	size_t outside = small() ? 20000 : 100000; /* and some straight from outside */
	struct sched_pool *pool = pool_new(4);
	struct sched_queue *q = queue_new(pool);
	uint8_t *slots = calloc(total + outside, 1);
	struct tiny *b = calloc(batches, sizeof(*b));
	struct sched_group g;

	sched_group_init(&g, q);
	for (size_t i = 0; i < batches; i++) {
		b[i] = (struct tiny){ .q = q, .slots = slots, .first = i * per, .n = per };
		assert_int_equal(sched_spawn(&g, tiny_batch, &b[i]), 0);
	}
	for (size_t i = 0; i < outside; i++)
		assert_int_equal(sched_spawn(&g, tiny_slot, &slots[total + i]), 0);
	assert_int_equal(sched_group_wait(&g), 0);
	for (size_t i = 0; i < batches; i++)
		assert_int_equal(b[i].err, 0);
	for (size_t i = 0; i < total + outside; i++)
		if (slots[i] != 1)
			fail_msg("slot %zu ran %u times", i, slots[i]);
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
	free(slots);
	free(b);
}

/* ---- parallel_for sums of a known series ---- */

struct series {
	atomic_uint_fast64_t sum;   /* sum of i */
	atomic_uint_fast64_t sumsq; /* sum of i * i, modulo 2^64 */
	atomic_uint_fast64_t items;
};

static void series_body(void *arg, size_t lo, size_t hi)
{
	struct series *s = arg;
	uint64_t a = 0, b = 0;

	for (size_t i = lo; i < hi; i++) {
		a += i;
		b += (uint64_t)i * i;
	}
	atomic_fetch_add_explicit(&s->sum, a, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->sumsq, b, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->items, hi - lo, memory_order_relaxed);
}

static void test_parallel_for_sums(void **state)
{
	uint64_t n = small() ? 1000000 : 100000000;
	const size_t grains[] = { 0, 1000, 65536, n / 3, n + 1 };
	struct sched_pool *pool = pool_new(2);
	struct sched_queue *q = queue_new(pool);
	/* closed forms, the square sum in 128 bits then reduced modulo 2^64 */
	uint64_t want = n * (n - 1) / 2;
	uint64_t wantsq = (uint64_t)((unsigned __int128)n * (n - 1) * (2 * n - 1) / 6);

	for (size_t i = 0; i < sizeof(grains) / sizeof(grains[0]); i++) {
		struct series s;

		memset(&s, 0, sizeof(s));
		assert_int_equal(sched_parallel_for(q, 0, n, grains[i], series_body, &s), 0);
		assert_int_equal(atomic_load(&s.items), n);
		assert_int_equal(atomic_load(&s.sum), want);
		assert_int_equal(atomic_load(&s.sumsq), wantsq);
	}
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
}

/* ---- create/destroy with work in flight ---- */

struct churn {
	struct sched_queue *q;
	atomic_uint *ran;
	atomic_uint *spawned;	      /* spawns that succeeded from inside */
	atomic_uint *inner_cancelled; /* inner groups whose wait said -ECANCELED */
	unsigned depth;
};

static void churn_task(void *arg)
{
	struct churn *c = arg;
	struct churn kids[2];
	struct sched_group g;

	atomic_fetch_add(c->ran, 1);
	if (c->depth == 0)
		return;
	sched_group_init(&g, c->q);
	for (int i = 0; i < 2; i++) {
		kids[i] = (struct churn){ c->q, c->ran, c->spawned, c->inner_cancelled,
					  c->depth - 1 };
		if (sched_spawn(&g, churn_task, &kids[i]) != 0)
			break; /* refused: the pool is being cancelled */
		atomic_fetch_add(c->spawned, 1);
	}
	if (sched_group_wait(&g) == -ECANCELED)
		atomic_fetch_add(c->inner_cancelled, 1);
}

static void test_create_destroy_churn(void **state)
{
	unsigned rounds = small() ? 12 : 60;

	for (unsigned r = 0; r < rounds; r++) {
		enum { FLAT = 500, TREES = 8, DEPTH = 6 };
		bool cancel = r % 2;
		struct sched_pool *pool = pool_new(1 + r % 4);
		struct sched_queue *q = queue_new(pool);
		atomic_uint ran = 0, spawned = 0, inner_cancelled = 0;
		struct churn trees[TREES], leaf = { q, &ran, &spawned, &inner_cancelled, 0 };
		struct sched_group g;
		unsigned total = FLAT + TREES * ((1u << (DEPTH + 1)) - 1), made;

		sched_group_init(&g, q);
		for (unsigned i = 0; i < TREES; i++) {
			trees[i] = (struct churn){ q, &ran, &spawned, &inner_cancelled, DEPTH };
			assert_int_equal(sched_spawn(&g, churn_task, &trees[i]), 0);
		}
		for (unsigned i = 0; i < FLAT; i++)
			assert_int_equal(sched_spawn(&g, churn_task, &leaf), 0);
		sched_pool_destroy(pool, cancel ? SCHED_SHUTDOWN_CANCEL : SCHED_SHUTDOWN_DRAIN);
		assert_int_equal(atomic_load(&g.pending), 0);
		made = TREES + FLAT + atomic_load(&spawned);
		if (cancel) {
			/*
			 * Whatever ran, ran once; the groups know whether anything was dropped (a
			 * dropped kid marks its parent's inner group, not g).
			 */
			assert_true(atomic_load(&ran) <= made);
			assert_true(made <= total);
			assert_int_equal(atomic_load(&g.cancelled) || atomic_load(&inner_cancelled),
					 atomic_load(&ran) < made);
		} else {
			assert_int_equal(made, total);
			assert_int_equal(atomic_load(&ran), total);
			assert_false(atomic_load(&g.cancelled));
			assert_int_equal(atomic_load(&inner_cancelled), 0);
		}
	}
}

/* ---- drivers that help: outside threads spawning batches and running them themselves ---- */

enum { HELP_DRIVERS = 3, HELP_TASKS = 16 };

struct help_task {
	uint32_t *slot;
	uint32_t value;
};

static void help_fill(void *arg)
{
	struct help_task *t = arg;

	*t->slot = t->value; /* read by the driver after its help: the group's happens-before */
}

struct help_driver {
	struct sched_pool *pool;
	unsigned id, rounds;
	uint32_t slots[HELP_TASKS];
	struct help_task tasks[HELP_TASKS];
	unsigned bad;
};

/*
 * Like a pipeline's driver: each round a batch of tasks into a group of its own queue, some
 * with NO_WAKE, then sched_group_help; every slot must hold this round's pattern.
 */
static void *help_driver_main(void *arg)
{
	struct help_driver *d = arg;
	struct sched_queue *q = NULL;

	if (sched_queue_create(d->pool, 1, -1, &q) != 0) {
		d->bad = 1;
		return NULL;
	}
	for (unsigned r = 0; r < d->rounds; r++) {
		struct sched_group g;
		unsigned n = 1 + (r * 7 + d->id) % HELP_TASKS;

		sched_group_init(&g, q);
		for (unsigned i = 0; i < n; i++) {
			unsigned fl = (r + i) % 3 ? SCHED_SPAWN_NO_WAKE : 0;

			d->tasks[i] =
				(struct help_task){ &d->slots[i], (d->id << 24) ^ (r << 8) ^ i };
			if (sched_spawn_flags(&g, help_fill, &d->tasks[i], fl) != 0)
				d->bad++;
		}
		if (sched_group_help(&g) != 0)
			d->bad++;
		for (unsigned i = 0; i < n; i++)
			if (d->slots[i] != ((d->id << 24) ^ (r << 8) ^ i))
				d->bad++;
	}
	sched_queue_destroy(q);
	return NULL;
}

static void test_help_drivers(void **state)
{
	unsigned rounds = small() ? 3000 : 30000;
	struct sched_pool *pool = pool_new(2);
	struct help_driver d[HELP_DRIVERS];
	pthread_t th[HELP_DRIVERS];

	(void)state;
	for (unsigned i = 0; i < HELP_DRIVERS; i++) {
		memset(&d[i], 0, sizeof(d[i]));
		d[i].pool = pool;
		d[i].id = i;
		d[i].rounds = rounds;
		assert_int_equal(pthread_create(&th[i], NULL, help_driver_main, &d[i]), 0);
	}
	for (unsigned i = 0; i < HELP_DRIVERS; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(d[i].bad, 0);
	}
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fib),
		cmocka_unit_test(test_tiny_tasks),
		cmocka_unit_test(test_parallel_for_sums),
		cmocka_unit_test(test_create_destroy_churn),
		cmocka_unit_test(test_help_drivers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
