/* SPDX-License-Identifier: Apache-2.0 */
/* Stage "global shuffle": every record of the epoch in a permutation, each read by its offset. */
#ifndef SLUICE_PIPELINE_GSHUFFLE_H
#define SLUICE_PIPELINE_GSHUFFLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "io/ioerr.h"
#include "io/iox.h"
#include "plan.h"
#include "read.h"
#include "record.h"
#include "stage.h"

/*
 * shuffle "global" (docs/pipeline-semantics.md, 4g) in place of files → read → frame →
 * interleave → shuffle: at its first epoch it scans every file of the plan header to header
 * (tfr_index_build_fd, no payload read) into a table of every record's offset; each epoch's
 * element k is then record perm(k) of a keyed Feistel permutation, read by offset through an
 * iox (iox_read_at: up to depth reads in flight, delivered in the permutation's order), its
 * header checked and its payload copied into the store. The data CRC is left to the parse task
 * (crc_checked false), so on_corrupt skip_record drops the row as for any record. Runs on the
 * driver thread.
 */
struct pl_gshuffle_opts {
	const struct pl_plan *plan;
	enum iox_engine engine;
	unsigned depth;	     /* reads in flight (>= 1) */
	uint64_t read_bytes; /* the most their buffers take (at least one record's) */
	struct pl_store *store;
	const atomic_bool *stop;
	/* its counters: read (reads, bytes), frame (records), shuffle (elements out) */
	struct pl_stage_stats *st_read, *st_frame, *st_shuffle;
	struct pl_read_totals *read_tot;
	uint64_t *skipped_files; /* files left out under skip_record (their framing is broken) */
	struct pl_prof *prof;
};

struct pl_gshuffle;

int pl_gshuffle_create(const struct pl_gshuffle_opts *opts, struct pl_gshuffle **ret,
		       struct io_error *err);
void pl_gshuffle_destroy(struct pl_gshuffle *g);
/*
 * Start epoch e at its element skip (a restored position: nothing before it is read). The first
 * call scans the files; later ones check that no file changed since (-ESTALE naming it).
 */
int pl_gshuffle_begin_epoch(struct pl_gshuffle *g, uint64_t epoch, uint64_t skip,
			    struct io_error *err);
/* The epoch's next record: 1 and *ret (one reference, the caller's), 0 at its end, -errno. */
int pl_gshuffle_next(struct pl_gshuffle *g, struct pl_rec *ret, struct io_error *err);

/* The permutation of [0, n) of (seed, epoch) (semantics doc, 4g), for the engine and its tests. */
struct pl_gperm {
	uint64_t n, mask, k[6];
	unsigned h;
};
void pl_gperm_init(struct pl_gperm *p, uint64_t n, uint64_t seed, uint64_t epoch);
/* perm(k), k < n. */
uint64_t pl_gperm_at(const struct pl_gperm *p, uint64_t k);

#endif
