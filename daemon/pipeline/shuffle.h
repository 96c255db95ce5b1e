/* SPDX-License-Identifier: Apache-2.0 */
/* Stage "shuffle": a buffer of elements, each output drawn at random from it. */
#ifndef SLUICE_PIPELINE_SHUFFLE_H
#define SLUICE_PIPELINE_SHUFFLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/ioerr.h"
#include "record.h"
#include "stage.h"

/*
 * tf.data's shuffle(buffer_size): fill the buffer, then each output is a uniform draw from
 * stream (seed, epoch, PL_STREAM_SHUFFLE) and its place is refilled from the upstream
 * (docs/pipeline-semantics.md). Not enabled, elements pass straight through.
 *
 * The elements are struct pl_rec, or (compact) struct pl_crow: the draws depend only on how
 * many elements came, so both kinds of a stream come out in the same order.
 */
struct pl_shuffle_opts {
	bool enabled;
	bool compact;	 /* the elements are struct pl_crow (they hold no reference) */
	uint64_t buffer; /* num_shuffle_buffer_elements */
	uint64_t seed;
	/* the upstream's next element (a struct pl_rec or pl_crow): 1, 0 at the end of the epoch,
	   -errno */
	int (*next)(void *ctx, void *ret, struct io_error *err);
	void *next_ctx;
	/*
	 * Records: once the buffer's bytes (buffer elements x the mean record length so far)
	 * would exceed own_over_bytes, each record that shares its block is moved into one of its
	 * own as it enters (pl_store_own, counted in store): a big buffer drained at random would
	 * otherwise pin read buffers until their last record is drawn, or have them evacuated cold.
	 */
	struct pl_store *store;
	uint64_t own_over_bytes;
	struct pl_mem *mem; /* the slots are charged to it (mem.h), or NULL */
	struct pl_stage_stats *st;
	struct pl_prof *prof;
};

struct pl_shuffle;

int pl_shuffle_create(const struct pl_shuffle_opts *opts, struct pl_shuffle **ret);
void pl_shuffle_destroy(struct pl_shuffle *sh);
/* A new epoch: the buffer is emptied (its elements dropped) and the stream reseeded. */
void pl_shuffle_begin_epoch(struct pl_shuffle *sh, uint64_t epoch);
/*
 * The next element (a struct pl_rec, or a struct pl_crow when compact): 1 and *ret (the caller's
 * reference), 0 at the end of the epoch, -errno.
 */
int pl_shuffle_next(struct pl_shuffle *sh, void *ret, struct io_error *err);
/*
 * Records: call fn on every element in the buffer (it may replace the element's bytes:
 * pl_store_own) until it returns < 0, which is returned. Elements that own no bytes (windows: their
 * records do) and the element being taken out are not visited.
 */
int pl_shuffle_visit(struct pl_shuffle *sh, int (*fn)(void *ctx, struct pl_rec *r), void *ctx);

#endif
