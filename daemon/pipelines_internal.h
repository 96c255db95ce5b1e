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
#define DMN_MAX_SPEC_BYTES (64u << 20) /* a spec in the config dir */

/*
 * Publish code and text as the stream's last batch, then set the ring's error (readers get the
 * batch, with text, after those before it). Waits for room up to tries times (1: not at all).
 * 0, or -EAGAIN when there was no room (nothing set: call again). Under pl->lock.
 */
int dmn_publish_error(struct dmn_pipeline *pl, int code, const char *text, int tries);
/* Take pl off the registry and destroy it (why: for the log). Server thread. */
void dmn_pipeline_drop(struct dmn_registry *d, struct dmn_pipeline *pl, const char *why);

#endif
