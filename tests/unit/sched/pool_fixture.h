/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the sched/pool.c tests: a pool and its queues, parking, trivial tasks. */
#ifndef SLUICE_TESTS_UNIT_SCHED_POOL_FIXTURE_H
#define SLUICE_TESTS_UNIT_SCHED_POOL_FIXTURE_H

#include <stdbool.h>

#include "sched/sched.h"

/* A pool of `workers` workers (spin_iters 256); fails the test if refused. */
struct sched_pool *pool_new(unsigned workers);
/* A queue of pool with that weight, on any node; fails the test if refused. */
struct sched_queue *queue_new(struct sched_pool *pool, unsigned weight);
/* Sleep ms milliseconds. */
void sleep_ms(unsigned ms);
/* Wait (bounded) until every worker is parked; false if they never all were. */
bool wait_all_parked(struct sched_pool *pool);
/* A task that adds one to the atomic_uint at arg. */
void noop(void *arg);
/* A task that spins a little, then adds one to the atomic_uint at arg. */
void spin_task(void *arg);

#endif /* SLUICE_TESTS_UNIT_SCHED_POOL_FIXTURE_H */
