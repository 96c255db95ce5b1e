/* SPDX-License-Identifier: Apache-2.0 */
/* The registry's internals: what its files share (daemon/README.md lists them). */
#ifndef SLUICE_DAEMON_PIPELINES_INTERNAL_H
#define SLUICE_DAEMON_PIPELINES_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "registry.h"

/* Names belong to their owner: root's and the config dir's are the host's, one namespace. */
static inline uid_t dmn_name_space(uid_t owner)
{
	return owner == 0 ? (uid_t)-1 : owner;
}

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

/* publish.c: the engine's batches go straight into pl's ring. */
/*
 * Set po's allocator (extents of pl's ring: reuse, reclaim or grow; hold while nobody reads)
 * and its deliver and end callbacks (publish in place, on the driver thread). pl->ring must be
 * set before the engine starts.
 */
void dmn_pipeline_engine_opts(struct dmn_pipeline *pl, struct pl_pipeline_opts *po);

/* reaper.c: dropped pipelines destroyed on threads of their own. */
#define DMN_REAP_WAIT_MS   1000u /* a drop waits this long for it (the common case: ms) */
#define DMN_REAP_REPORT_MS 2000u /* one still not stopped after this is logged */
#define DMN_STOP_WAIT_MS   5000u /* sluiced's stop waits this long for them all */
/*
 * Destroy pl (off the registry already) on a thread of its own, then forget its kept record in
 * keep (NULL: none), or keep it for a reader that may come back (resumable). Waits up to
 * DMN_REAP_WAIT_MS for it: a driver that does not stop (a read that never returns) is left to
 * its thread, and the caller goes on. Server thread.
 */
void dmn_reap(struct dmn_registry *d, struct dmn_pipeline *pl, struct dmn_keep *keep,
	      bool resumable);
/* Wait up to timeout_ms for every drop to be done: false (each left one logged) if not. */
bool dmn_reap_wait(uint64_t timeout_ms);

/* budget.c: what pipelines may cost, and what they hold. Server thread. */
/*
 * May owner ((uid_t)-1: the config dir) start one more pipeline of --pipeline-memory bytes?
 * --max-pipelines, the per-uid quotas (root and the config dir not counted) and --memory, for
 * which ended pipelines without readers are dropped, least recently used first. 0, or -EUSERS,
 * -EDQUOT, -ENOSPC with msg saying which limit and by how much.
 */
int dmn_budget_admit(struct dmn_registry *d, uid_t owner, char *msg, size_t msg_cap);
/* The data bytes of pl's ring (its engine made, its ring not yet): see budget.c. */
uint64_t dmn_budget_ring_bytes(struct dmn_registry *d, const struct dmn_pipeline *pl);
/* The accounts' root (--memory: cfg.total_bytes), at the start; and at the end. */
void dmn_budget_init(struct dmn_registry *d);
void dmn_budget_fini(struct dmn_registry *d);
/*
 * Make the shared record cache of cfg.cache_bytes under --memory (after dmn_budget_init): charged
 * to no user, the first thing a charge that --memory refuses evicts. 0 (also with no cache) or
 * -ENOMEM.
 */
int dmn_budget_cache(struct dmn_registry *d);
/* What --memory holds now: every pipeline's reservation or use, the record cache's. */
uint64_t dmn_budget_used(struct dmn_registry *d);
/* Open pl's account under its owner's (before its engine is made): 0 or -ENOMEM. */
int dmn_budget_attach(struct dmn_registry *d, struct dmn_pipeline *pl);
/*
 * Reserve what pl needs from its start: its ring of *data_bytes (charged; less when its
 * engine's needs come out of --pipeline-memory: the ring's size is put back) and, with an engine,
 * what its stages are known to need (pl_pipeline_mem_need). 0, or -ENOSPC (--memory) or -EDQUOT
 * (--user-memory) with msg naming the parts, the figures and the knobs.
 */
int dmn_budget_reserve(struct dmn_registry *d, struct dmn_pipeline *pl, uint64_t *data_bytes,
		       char *msg, size_t msg_cap);
/*
 * Give back all pl holds (its engine destroyed: nothing more is charged). Bytes that were
 * charged and not given back are logged. Any thread that destroys pipelines.
 */
void dmn_budget_close(struct dmn_pipeline *pl);

#endif
