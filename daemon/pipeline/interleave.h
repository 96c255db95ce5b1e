/* SPDX-License-Identifier: Apache-2.0 */
/* Stage "interleave": elements taken in turn from a cycle of slots, each reading one file. */
#ifndef SLUICE_PIPELINE_INTERLEAVE_H
#define SLUICE_PIPELINE_INTERLEAVE_H

#include <stdbool.h>

#include "io/ioerr.h"
#include "record.h"
#include "stage.h"

/*
 * The slots are the driver's (a slot is a reader, a framer and, for the sequence loaders, a
 * window generator over one file at a time); the interleave only decides whose turn it is
 * (docs/pipeline-semantics.md): round robin over the open slots, or with `sloppy` the first
 * one from the turn on that has input ready.
 */
struct pl_interleave_opts {
	unsigned cycle; /* slots */
	bool sloppy;
	/* slot k's next element: 1, 0 when its file ended, -EAGAIN (wait false), -errno */
	int (*next)(void *ctx, unsigned k, bool wait, struct pl_rec *ret, struct io_error *err);
	/* open the epoch's next file in slot k: 1, 0 when there is none, -errno */
	int (*open)(void *ctx, unsigned k, struct io_error *err);
	void *ctx;
	struct pl_stage_stats *st;
	struct pl_prof *prof;
};

struct pl_interleave;

int pl_interleave_create(const struct pl_interleave_opts *opts, struct pl_interleave **ret);
void pl_interleave_destroy(struct pl_interleave *il);
/* A new epoch: fill the slots with its first files (opts.open). 0 or -errno. */
int pl_interleave_begin_epoch(struct pl_interleave *il, struct io_error *err);
/* The next element: 1 and *ret (the caller's reference), 0 at the end of the epoch, -errno. */
int pl_interleave_next(struct pl_interleave *il, struct pl_rec *ret, struct io_error *err);

#endif
