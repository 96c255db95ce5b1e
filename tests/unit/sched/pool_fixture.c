/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the sched/pool.c tests: a pool and its queues, parking, trivial tasks. */
#include "pool_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "sched/pool_internal.h"

struct sched_pool *pool_new(unsigned workers)
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

struct sched_queue *queue_new(struct sched_pool *pool, unsigned weight)
{
	struct sched_queue *q = NULL;

	assert_int_equal(sched_queue_create(pool, weight, -1, &q), 0);
	return q;
}

/* For the poll loops of the tests (each checks its condition around it) and their workloads. */
void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL); /* for polls and workloads (see above) */
}

/* Wait (bounded) until every worker is parked; false if they never all were. */
bool wait_all_parked(struct sched_pool *pool)
{
	for (int i = 0; i < 5000; i++) {
		if (atomic_load(&pool->sleepers) == pool->n_workers)
			return true;
		sleep_ms(1); /* polls the condition itself */
	}
	return false;
}

void noop(void *arg)
{
	atomic_fetch_add((atomic_uint *)arg, 1);
}

void spin_task(void *arg)
{
	volatile unsigned x = 0;

	for (unsigned i = 0; i < 2000; i++)
		x += i;
	atomic_fetch_add((atomic_uint *)arg, 1);
}
