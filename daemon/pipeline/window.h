/* SPDX-License-Identifier: Apache-2.0 */
/* Stage "window": a sequence loader's windows over one file's records. */
#ifndef SLUICE_PIPELINE_WINDOW_H
#define SLUICE_PIPELINE_WINDOW_H

#include <stdbool.h>
#include <stdint.h>

#include "io/ioerr.h"
#include "record.h"
#include "spec.h"
#include "stage.h"

struct pl_window_opts {
	bool continuous; /* continuous_sequence (else discrete_sequence) */
	int64_t min_window, max_window;
	int64_t stride; /* PL_NULL: the window's length */
	uint64_t seed;
	enum pl_on_corrupt on_corrupt;
	/* the upstream (a framer): its next record (pl_frame_next's contract) */
	int (*next)(void *ctx, bool wait, struct pl_rec *ret, struct io_error *err);
	void *next_ctx;
	/*
	 * continuous_sequence: a record's length along axis 0 (it decodes the record: errors name
	 * it). 0 or -errno.
	 */
	int (*steps)(void *ctx, struct pl_rec *rec, int64_t *ret_steps, struct io_error *err);
	void *steps_ctx;
	struct pl_stage_stats *st;
	struct pl_prof *prof;
};

struct pl_window;

int pl_window_create(const struct pl_window_opts *opts, struct pl_window **ret);
void pl_window_destroy(struct pl_window *w);
/* A new file starts: the windows are drawn from stream (seed, epoch, PL_STREAM_WINDOWS, file). */
void pl_window_reset(struct pl_window *w, uint64_t epoch, uint32_t file);
/*
 * The file's next window (docs/pipeline-semantics.md, "Sequence loaders"): 1 and *ret (it owns
 * its records), 0 when the file has no more, -EAGAIN (wait false, no input ready), -errno.
 */
int pl_window_next(struct pl_window *w, bool wait, struct pl_rec *ret, struct io_error *err);

#endif
