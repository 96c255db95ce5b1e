/* SPDX-License-Identifier: Apache-2.0 */
/* The plan compiler: a spec checked against its dataset's manifest, compiled into outputs. */
#ifndef SLUICE_PIPELINE_PLAN_H
#define SLUICE_PIPELINE_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/creds.h"
#include "io/dataset.h"
#include "io/ioerr.h"
#include "io/pbex.h"
#include "decode.h"
#include "ops.h"
#include "spec.h"

/*
 * The plan is read, never written, once compiled: by the driver (which takes each stage's
 * options from it) and by the parse stage (the output tensors, the decode schemas). The input
 * stages never see it: their options carry what they need.
 */

/* Where an output tensor's values come from. */
enum pl_out_src {
	PL_OUT_FEATURE, /* a manifest feature (a primary) */
	PL_OUT_CONST,	/* a const secondary */
};

struct pl_out_step {
	unsigned n_dims;
	struct pl_slice_dim dims[PL_MAX_RANK];
	char *text; /* for messages */
};

/* One output tensor. */
struct pl_out {
	char *name;
	enum manifest_dtype dtype;
	size_t elem_size; /* 0 for strings */
	enum pl_out_src src;

	/* PL_OUT_FEATURE */
	const struct manifest_feature *feat;
	bool in_lists;	   /* decoded from the SequenceExample's feature lists */
	unsigned slot;	   /* index in the decode schema (context or lists) */
	unsigned rec_rank; /* the record shape: [-1 if var_len] + [raw_len > 1] + shape */
	int64_t rec_shape[PL_MAX_RANK];
	int64_t step_elems; /* var_len: elements per step (-1: a raw -1 inside); var_count:
			     * elements per row of the ragged axis */
	bool var_count;	    /* a variable-length Example/context feature (shape [-1, ...]) */

	/* PL_OUT_CONST */
	int shape_from; /* index of the primary output whose record shape is copied, or -1 */
	unsigned c_rank;
	int64_t c_shape[PL_MAX_RANK];
	uint8_t c_elem[8];
	char *c_str;
	size_t c_str_len;

	size_t n_steps;
	struct pl_out_step *steps;

	/* the row shape after the steps: -1 where it varies by record */
	unsigned row_rank;
	int64_t row_shape[PL_MAX_RANK];
	bool ragged; /* var_len step axis is still axis 0, without padding: row_splits */

	bool pad;
	int64_t pad_shape[PL_MAX_RANK]; /* -1: the batch maximum */
	uint8_t pad_elem[8];
	char *pad_str;
	size_t pad_str_len;

	/*
	 * Image steps (decode.h): the feature's string (after the slices in steps) is decoded
	 * and transformed per row; dtype, row_rank and row_shape are the chain's output.
	 */
	struct pl_imgchain *img;
	/*
	 * A boxes step: the output (+ 1; 0 for none) of the image whose geometry these boxes
	 * follow, their format and unit (spec.h, struct pl_image_args). The values are copied
	 * as a feature's, then moved in place.
	 */
	size_t box_of;
	bool box_xyxy, box_pixels;

	bool measure;	 /* the batch layout needs each row's shape (or string bytes) first */
	bool direct;	 /* a fixed-shape numeric feature without steps or padding: decoded straight
			  * into its row, no view; ws->rec_dims is not kept for it */
	bool str_direct; /* a fixed-shape string feature of the context without steps or
			  * padding: its bytes values in order are the row's elements */
	bool list_direct;  /* a ragged numeric feature list without steps, in its native dtype
			    * (int64, float32): each step's values straight into the row's values */
	int64_t rec_elems; /* elements of the record shape (when it has no -1) */
	bool native;	   /* direct, in the dtype it is decoded in (int64, float32) */
};

struct pl_plan {
	struct pl_spec cfg; /* the spec's scalars; its pointer members are NULL */
	struct dataset *ds;
	uint32_t *files; /* indices into ds->files after the shard */
	size_t n_files;
	bool sequence_example;
	/* an epoch's records and batches counted before it (plan.c, count_ahead), when known */
	bool ahead_known;
	uint64_t ahead_records, ahead_batches;

	size_t n_out;
	struct pl_out *out;
	size_t n_primary;

	/* decode schemas: Examples use ctx only; SequenceExamples ctx (context) and lists */
	struct pbex_schema *ctx;
	struct pbex_schema *lists;
	size_t n_ctx, n_lists;
	uint64_t proj_fp; /* of the names in ctx and lists: the record cache keys projections by it */
	/*
	 * Per ctx slot: the manifest feature's default as a decoded feature (present), taken
	 * when the record's is missing or holds no values; present = false when it has none.
	 * dflt_rec[k] owns the bytes it views (an Example holding only that feature).
	 */
	struct pbex_feature *dflt;
	uint8_t **dflt_rec;
	size_t *dflt_len;
	bool any_dflt;
	/*
	 * Every output native (an Example loader): a decoded row from the record cache goes
	 * straight into the batch (pl_asm_fill_row).
	 */
	bool all_native;

	bool measure;	       /* some output needs the measuring pass */
	uint64_t steps_fp;     /* of the image steps' arguments (a part of the fingerprint) */
	uint64_t fingerprint;  /* checked by saved states */
	uint64_t fingerprint2; /* with it, the 128-bit identity of pl_pipeline_fingerprint() */

	/* resolved knobs */
	unsigned cycle;	   /* interleave cycle length (pl_spec_cycle) */
	size_t read_chunk; /* iox chunk length */
	unsigned prefetch; /* batches ahead, >= 1 */
	unsigned parses;   /* workers for a pool of the pipeline's own */
	/* reads in flight per slot of the cycle (pl_read_opts.queue_depth; plan.c, read_depth) */
	unsigned read_depth;

	/* whose rights read the dataset (its manifest, list file, directories and files):
	   &own_creds, or NULL (the process's) */
	const struct io_creds *creds;
	struct io_creds own_creds;
	/* the pipeline's memory account (pl_pipeline_opts.mem), or NULL: nothing is counted */
	struct pl_mem *mem;
};

/*
 * Check spec against its dataset and compile it. Every file of the dataset is opened with
 * creds' rights (a copy is kept; NULL: the process's own): -EPERM when this process cannot
 * take them (io_creds_usable). The caller owns *ret_plan.
 */
int pl_plan_create(const struct pl_spec *spec, const struct io_creds *creds,
		   struct pl_plan **ret_plan, struct io_error *err);
void pl_plan_destroy(struct pl_plan *plan);

#endif
