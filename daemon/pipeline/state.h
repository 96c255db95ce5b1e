/* SPDX-License-Identifier: Apache-2.0 */
/* Checkpoints: a position in the stream as a small blob (docs/pipeline.md, "Checkpoints"). */
#ifndef SLUICE_PIPELINE_STATE_H
#define SLUICE_PIPELINE_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "io/ioerr.h"
#include "pipeline.h"

/*
 * Every stage's state is a function of the position: the epoch (file order, shuffle and window
 * streams are drawn from (seed, epoch)) and the batches done in it (the driver replays the
 * epoch's elements up to there without parsing them). So a checkpoint is the position, the
 * seed, and the plan's fingerprint that says it belongs to this pipeline.
 */
struct pl_pos {
	uint64_t epoch, index, seq;
};

/* The position right after batch b. */
struct pl_pos pl_state_pos_after(const struct pl_batch_pos *b);
/* The blob for pos: its length, or -ENOSPC. */
int pl_state_write(uint64_t fingerprint, uint64_t seed, const struct pl_pos *pos, void *buf,
		   size_t cap);
/* A blob back into a position: 0, or -EBADMSG (not a state, or another pipeline's; err). */
int pl_state_load(uint64_t fingerprint, uint64_t seed, const void *buf, size_t len,
		  struct pl_pos *ret_pos, struct io_error *err);

#endif
