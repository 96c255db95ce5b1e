/* SPDX-License-Identifier: Apache-2.0 */
/* The registry's internals: what pipelines.c and groups.c (its consumer groups) share. */
#ifndef SLUICE_DAEMON_PIPELINES_INTERNAL_H
#define SLUICE_DAEMON_PIPELINES_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "registry.h"

/* CLOCK_MONOTONIC in ns: the allocator's waits, when a group was left empty. */
static inline uint64_t dmn_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * Close the groups of pl that have had no member for DMN_GROUP_GRACE_NS (the producer waits for
 * room); whether one was closed. Under pl->lock.
 */
bool dmn_groups_expire(struct dmn_pipeline *pl);

#endif
