/* SPDX-License-Identifier: Apache-2.0 */
/* The driver: the thread that pulls elements through the input chain and runs batch jobs. */
#ifndef SLUICE_PIPELINE_DRIVER_H
#define SLUICE_PIPELINE_DRIVER_H

#include <stdbool.h>
#include <stddef.h>

#include "deliver.h"
#include "io/ioerr.h"
#include "io/iox.h"
#include "pipeline.h"
#include "plan.h"
#include "state.h"

struct sched_pool;

struct pl_driver_opts {
	const struct pl_plan *plan;
	enum iox_engine engine;
	bool direct;
	struct pl_cache *cache;	 /* the shared record cache, or NULL */
	bool cache_uncompressed; /* struct pl_pipeline_opts' */
	struct sched_pool *pool; /* the parse tasks' */
	void *(*alloc)(void *ctx, size_t len);
	void (*free)(void *ctx, void *mem, size_t len);
	void *alloc_ctx;
	struct pl_deliver *dl; /* where finished batches go */
	struct pl_pos start;   /* where the stream begins */
	/* the most batch jobs in flight a tuner may allow (pl_deliver_set_prefetch); 0: the
	   plan's prefetch, fixed */
	unsigned prefetch_max;
};

struct pl_driver;

/* Build the stages (nothing runs yet). The caller keeps plan, pool and dl alive past destroy. */
int pl_driver_create(const struct pl_driver_opts *opts, struct pl_driver **ret,
		     struct io_error *err);
/* Start the driver thread (once: -EALREADY after). */
int pl_driver_start(struct pl_driver *d, struct io_error *err);
/* Stop and join the thread (if started), free the stages. NULL ok. */
void pl_driver_destroy(struct pl_driver *d);
/* The weight of its tasks' queue in the pool (sched_queue_set_weight; >= 1), any thread. */
void pl_driver_set_weight(struct pl_driver *d, unsigned weight);
/* How the next file its readers open is read (pl_chain_set_reads; 0: leave it), any thread. */
void pl_driver_set_reads(struct pl_driver *d, size_t chunk, unsigned depth);
/* Every stage's counters and the totals (any thread). */
void pl_driver_get_stats(struct pl_driver *d, struct pl_stats *ret);

#endif
