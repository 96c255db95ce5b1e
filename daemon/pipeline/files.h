/* SPDX-License-Identifier: Apache-2.0 */
/* Stage "files": the order in which an epoch reads the shard's files. */
#ifndef SLUICE_PIPELINE_FILES_H
#define SLUICE_PIPELINE_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stage.h"

/*
 * The shard's files (chosen by the plan compiler: the fingerprint covers them) in the epoch's
 * order: as listed, or through a shuffle buffer of `buffer` file names drawn from stream
 * (seed, epoch, PL_STREAM_FILES) (docs/pipeline-semantics.md). Elements out: files.
 */
struct pl_files_opts {
	const uint32_t *files; /* indices into the dataset's files; the caller keeps them */
	size_t n_files;
	bool shuffle;
	uint64_t buffer; /* num_filenames_shuffle_buffer */
	uint64_t seed;
	struct pl_stage_stats *st;
	struct pl_prof *prof;
};

struct pl_files;

int pl_files_create(const struct pl_files_opts *opts, struct pl_files **ret);
void pl_files_destroy(struct pl_files *f);
/* Compute epoch e's order and start at its first file. */
void pl_files_begin_epoch(struct pl_files *f, uint64_t epoch);
/* The epoch's next file: 1 and *ret_file, or 0 when every file was given. */
int pl_files_next(struct pl_files *f, uint32_t *ret_file);

#endif
