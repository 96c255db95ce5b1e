/* SPDX-License-Identifier: Apache-2.0 */
/* Batch assembly's job records, shared by assemble.c (the tasks) and its assemble_*.c. */
#ifndef SLUICE_PIPELINE_ASSEMBLE_INTERNAL_H
#define SLUICE_PIPELINE_ASSEMBLE_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "assemble.h"
#include "cepoch.h"
#include "ipc/batch.h"
#include "rowparse.h"

/*
 * A batch job (struct pl_bjob) goes through:
 *   1. measure (only when some tensor's row shape or string bytes vary by record): parse tasks
 *      decode each row and note its shapes and string bytes; rows that fail are marked bad;
 *   2. layout (driver): batch shapes (ragged splits, padded maxima), offsets, the extent;
 *   3. fill: parse tasks decode each row again and write it into the extent;
 *   4. finish (driver): header and tensor table, rows dropped.
 * Without a measuring pass the layout is static: rows that fail in the fill pass are then
 * squeezed out afterwards (rare: only with on_corrupt skip_*).
 */

struct pl_tlay {
	unsigned rank; /* with the batch axis */
	int64_t shape[PL_MAX_RANK];
	enum ipc_tensor_kind kind;
	uint64_t data_off, data_len, splits_off, offsets_off;
	int64_t row_elems;		 /* dense: elements per row */
	int64_t inner;			 /* ragged: elements per step */
	int64_t dst_stride[PL_MAX_RANK]; /* dense: row-major strides of one (padded) row */
	uint64_t *byte_start;		 /* strings: per output row, the first byte */
};

struct pl_task {
	struct pl_bjob *job;
	size_t lo, hi;
	bool measure;
};

struct pl_bjob {
	uint64_t rows_charged; /* its rows' arrays' bytes, charged to the plan's account */
	struct pl_asm_ctx *ax;
	uint64_t seq, epoch, index_in_epoch;
	uint32_t flags;
	struct pl_rec *rows;   /* its records, or NULL: */
	struct pl_crow *crows; /* a cached epoch's compact rows (pl_bjob_rec) */
	struct pl_cepoch *cx;  /* and a reference to that epoch */
	size_t n_rows;

	/* measure results: per row, per measured output */
	struct pbex_feature *feats;	 /* per row: the decoded context features (n_ctx) */
	struct pbex_feature_list *lists; /* per row: the decoded feature lists (n_lists) */
	int64_t (*rdims)[PL_MAX_RANK];	 /* per row: ws->rec_dims (n_out), checked */
	int64_t *dims;			 /* n_rows * n_out * PL_MAX_RANK */
	uint64_t *sbytes;		 /* n_rows * n_out */
	uint8_t *bad;			 /* per row */
	size_t *outpos;			 /* per row: its output row, or SIZE_MAX */
	size_t n_good;

	pthread_mutex_t err_lock;
	size_t err_row; /* lowest failing row, SIZE_MAX if none */
	int err_code;
	struct io_error err;

	struct pl_tlay *lay;
	size_t (*gaps)[2]; /* alignment gaps of the layout, zeroed in the extent */
	size_t n_gaps, cap_gaps;
	uint8_t *mem;
	size_t len;
	bool failed; /* layout or memory failed: err_code/err say why */
	bool lazy;   /* its fill pass woke no worker: the driver runs it (note_slack) */
	bool small;  /* so cheap that the driver runs it, in one task (pl_asm_ctx's fill_ns_row) */
	atomic_uint_fast64_t fill_ns; /* its fill tasks' time, summed (for fill_ns_row) */

	struct sched_group group;
	struct pl_task *tasks;
	size_t n_tasks;
};

/*
 * Row `row` as a record: the job's own, or the one a compact row stands for, made in *tmp (a
 * row of values put back together in ws's scratch; ws NULL: for a message only). NULL: out of
 * memory.
 */
static inline const struct pl_rec *pl_bjob_rec(const struct pl_bjob *job, size_t row,
					       struct pl_rec *tmp, struct pl_worker_scratch *ws)
{
	if (job->rows)
		return &job->rows[row];
	if (pl_cepoch_rec(job->cx, &job->crows[row], tmp, ws ? &ws->whole : NULL,
			  ws ? &ws->whole_cap : NULL) < 0)
		return NULL;
	return tmp;
}

/* Where row `row`'s bytes are, and how many: what the tasks prefetch. */
static inline const uint8_t *pl_bjob_data(const struct pl_bjob *job, size_t row)
{
	return job->rows ? job->rows[row].data : job->crows[row].data;
}

static inline uint32_t pl_bjob_len(const struct pl_bjob *job, size_t row)
{
	return job->rows ? job->rows[row].len : job->crows[row].len;
}

static inline size_t pl_asm_align_up(size_t v, size_t a)
{
	return (v + a - 1) & ~(a - 1);
}

/*
 * Number the good rows, lay every tensor out, allocate the extent (every gap and the tail
 * zeroed) and write the splits. 0, -ENOMEM, or an error for a batch that cannot be laid out
 * (err says why).
 */
int pl_asm_layout(struct pl_bjob *job, struct io_error *err);
/* Rows that failed in a static layout's fill pass: move the good rows together. */
void pl_asm_squeeze(struct pl_bjob *job);
/* The batch header and tensor table, last. */
void pl_asm_write_header(struct pl_bjob *job);

/* ---- a parse task's work on one row (assemble_row.c) ---- */

/*
 * The measuring pass: decode row and note its shapes and string bytes in job (a record's decoded
 * views too, so that the fill pass does not decode it again). 0, or an error (err names the row).
 */
int pl_asm_measure_row(struct pl_bjob *job, struct pl_worker_scratch *ws, size_t row,
		       struct io_error *err);
/*
 * The fill pass: write row into its place in the extent (job->outpos[row]), checking a record's
 * data CRC on the way. 0, or an error (err names the row; a wrong CRC comes first).
 */
int pl_asm_fill_row(struct pl_bjob *job, struct pl_worker_scratch *ws, size_t row,
		    struct io_error *err);

/* ---- an output's image steps (assemble_image.c) ---- */

/* Output i's row shape (3 dims) for row: its image's header and the steps' draws. */
int pl_asm_image_shape(struct pl_bjob *job, struct pl_worker_scratch *ws, size_t row, size_t i,
		       int64_t *dims, struct io_error *err);
/* Decode and transform output i's image of row into its place pos in the batch (layout t). */
int pl_asm_fill_image(struct pl_bjob *job, struct pl_worker_scratch *ws, size_t row, size_t i,
		      const struct pl_tlay *t, size_t pos, struct io_error *err);
/*
 * Boxes of output i (n of them, 4 floats each, at dst in the batch) moved through the crops,
 * resizes and flips of the image output they follow (struct pl_out's box_of), in place.
 */
int pl_asm_fill_boxes(struct pl_bjob *job, struct pl_worker_scratch *ws, size_t row, size_t i,
		      float *dst, size_t n, struct io_error *err);

#endif
