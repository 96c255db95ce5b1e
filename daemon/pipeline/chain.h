/* SPDX-License-Identifier: Apache-2.0 */
/* The driver's input chain: files → slots (read → frame → [window]) → interleave → shuffle. */
#ifndef SLUICE_PIPELINE_CHAIN_H
#define SLUICE_PIPELINE_CHAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "io/ioerr.h"
#include "io/iox.h"
#include "plan.h"
#include "read.h"
#include "record.h"
#include "stage.h"

/*
 * Part of the driver: it creates the input stages from the plan, gives each its upstream as
 * callbacks (the stages never call each other), and keeps what they share: the record store,
 * the stop flag, a scratch for the records it decodes on the driver (on_corrupt skip_file,
 * continuous_sequence lengths). Everything runs on the driver thread but stop and stats.
 */
struct pl_cache;  /* cache.h */
struct pl_cepoch; /* cepoch.h */

struct pl_chain_opts {
	const struct pl_plan *plan;
	enum iox_engine engine;
	bool direct;
	struct pl_cache *cache;	 /* struct pl_frame_opts.cache */
	bool cache_uncompressed; /* else only compressed files use the cache */
	int (*idle)(void *ctx);	 /* while waiting for reads (struct pl_read_opts.idle) */
	void *idle_ctx;
	struct pl_prof *prof;
};

/* The chain's totals beyond its stages' common counters. */
struct pl_chain_totals {
	struct pl_read_totals read;
	uint64_t skipped_files;
	uint64_t copied_bytes;
	/* struct pl_frame_totals' */
	uint64_t cache_files, cache_bytes, cache_filled, cache_followed, cache_fallbacks;
	uint64_t cache_need;	/* pl_frame_cache_need of its dataset */
	bool cache_fits;	/* cache_need within the budget (or not known yet) */
	unsigned cache_level;	/* struct pl_stats' */
	uint64_t cached_epochs; /* epochs run on compact rows (cepoch.h) */
};

struct pl_chain;

int pl_chain_create(const struct pl_chain_opts *opts, struct pl_chain **ret, struct io_error *err);
void pl_chain_destroy(struct pl_chain *c);
/*
 * Before pl_chain_begin_epoch: the epoch begun next starts at its element n without reading
 * what comes before, where the chain can (a global shuffle): returns n; else 0, and nothing
 * changes (the driver replays the elements it skips).
 */
uint64_t pl_chain_skip(struct pl_chain *c, uint64_t n);
/* Start epoch e: files left half read are given up, the file order drawn, the slots filled. */
int pl_chain_begin_epoch(struct pl_chain *c, uint64_t epoch, struct io_error *err);
/*
 * The epoch's next element: 1 and *ret (the caller owns one reference), 0 at the end of the
 * epoch, or -errno (a framing or I/O error under on_corrupt "fail", -ECANCELED when stopped).
 */
int pl_chain_next(struct pl_chain *c, struct pl_rec *ret, struct io_error *err);
/*
 * The epoch begun last is a cached epoch (cepoch.h): its struct pl_cepoch (the chain's
 * reference: take one for each batch), whose rows come from pl_chain_next_row; else NULL, and
 * its records from pl_chain_next.
 */
struct pl_cepoch *pl_chain_cached_epoch(const struct pl_chain *c);
/* A cached epoch's next row: as pl_chain_next. */
int pl_chain_next_row(struct pl_chain *c, struct pl_crow *ret, struct io_error *err);
/* Any thread: makes a blocked next() return -ECANCELED. */
void pl_chain_stop(struct pl_chain *c);
/* The driver thread: the input stages' counters (files .. shuffle of st) and totals. */
void pl_chain_get_stats(const struct pl_chain *c, struct pl_stage_stats st[PL_STAGE_COUNT_],
			struct pl_chain_totals *ret_totals);
/*
 * The read size (bytes, rounded up to 4 KiB; 0: leave it) and the reads in flight (0: leave it)
 * of the next file each slot opens: a slot reading a file goes on as it opened it. Any thread.
 */
void pl_chain_set_reads(struct pl_chain *c, size_t chunk, unsigned depth);
void pl_chain_reads(struct pl_chain *c, size_t *ret_chunk, unsigned *ret_depth);
/* The driver thread: time blocked waiting for reads so far. */
uint64_t pl_chain_read_wait_ns(const struct pl_chain *c);

#endif
