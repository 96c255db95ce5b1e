/* SPDX-License-Identifier: Apache-2.0 */
/* The registry's internals: what pipelines.c and groups.c (its consumer groups) share. */
#ifndef SLUICE_DAEMON_PIPELINES_INTERNAL_H
#define SLUICE_DAEMON_PIPELINES_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "registry.h"

/*
 * Close the groups of pl that have had no member for DMN_GROUP_GRACE_NS (the producer waits for
 * room); whether one was closed. Under pl->lock.
 */
bool dmn_groups_expire(struct dmn_pipeline *pl);

/* The state of a reader at ring seq cursor (the next it would take): its length or -errno.
   Under pl->lock. */
int dmn_pipeline_state_at(struct dmn_pipeline *pl, uint64_t cursor, void *buf, size_t cap);

/*
 * Write pl's kept record (positions.c): where its readers are, and the bounds (every batch
 * published until the next write has seq < bound, epoch < bound_epochs). Under pl->lock.
 */
void dmn_pipeline_keep(struct dmn_pipeline *pl, uint64_t bound, uint64_t bound_epochs);
/* Write it again when the oldest batch moved and DMN_KEEP_TICK_NS passed. Under pl->lock. */
void dmn_pipeline_keep_tick(struct dmn_pipeline *pl);

#endif
