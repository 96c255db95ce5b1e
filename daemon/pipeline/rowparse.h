/* SPDX-License-Identifier: Apache-2.0 */
/* One row: check and decode a record, give each output tensor's shape and source elements. */
#ifndef SLUICE_PIPELINE_ROWPARSE_H
#define SLUICE_PIPELINE_ROWPARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/ioerr.h"
#include "io/pbex.h"
#include "ops.h"
#include "plan.h"
#include "record.h"

/*
 * Used by the parse tasks (assemble_row.c), each with the scratch of the worker it runs on. The
 * order per row: pl_row_decode, pl_row_shapes, then per tensor pl_row_view and pl_row_source.
 * What they return points into the record or into the scratch, valid until the next row.
 */

struct pl_strref {
	const uint8_t *p;
	size_t len;
};

struct pl_worker_scratch {
	struct pbex_feature *ctx;	  /* plan->n_ctx */
	struct pbex_feature_list *lists;  /* plan->n_lists */
	int64_t (*rec_dims)[PL_MAX_RANK]; /* per output: the row's record shape, before steps */
	uint8_t *buf;			  /* decoded numbers, joined raw values */
	size_t buf_cap;
	struct pl_strref *strs;
	size_t strs_cap;
	int64_t *idx;
	size_t idx_cap;
	struct pl_wout *wout; /* per output: a window's tensor, joined (sequence loaders) */
	size_t n_wout;
	struct pl_img_work *img; /* the decode stage's scratch, when some output has images */
	uint8_t *whole;		 /* a cached epoch's row of values as its whole flat form */
	size_t whole_cap;
	/*
	 * A cached epoch's rows of values share their heads: where each output's values are in
	 * such a row (per output, its offset and bytes), worked out for batch vplan_seq - 1 (0:
	 * none); vplan_ok when every output takes them straight, for rows of vplan_len bytes.
	 */
	struct pl_vcopy *vplan;
	uint64_t vplan_seq;
	uint32_t vplan_len;
	bool vplan_ok;
};

struct pl_vcopy {
	uint32_t src, n;
};

/* One output tensor of a window: its records' rows joined along axis 0. */
struct pl_wout {
	uint8_t *buf; /* elements of the output dtype */
	size_t cap;
	struct pl_strref *strs;
	size_t strs_cap;
	unsigned rank;
	int64_t dims[PL_MAX_RANK];
	int64_t count; /* elements so far */
};

struct pl_worker_scratch *pl_scratch_create(const struct pl_plan *plan);
void pl_scratch_destroy(struct pl_worker_scratch *ws);

/*
 * The heads of a decoded record from the cache kept as its values only (rec->values: its
 * entry's, PL_CACHE_REC_VALUES), or NULL: data is its whole flat form, or it is not flat.
 */
const uint8_t *pl_row_flat_heads(const struct pl_rec *rec, uint32_t *ret_len);
/*
 * Decode the record's features; with check_crc, verify its data CRC first (unless already
 * done). The parse tasks pass false and check the CRC in the fill pass with a pl_crcur, fused
 * with the copies out of the record.
 */
int pl_row_decode(const struct pl_plan *plan, struct pl_worker_scratch *ws,
		  const struct pl_rec *rec, bool check_crc, struct io_error *err);

/* Whether the record's data CRC is right (0), or -EBADMSG; no message. */
int pl_row_check_crc(const struct pl_plan *plan, const struct pl_rec *rec);

/*
 * The data CRC of a record, computed while its bytes are copied out: copies must come in
 * increasing order of source address to be fused (others are plain copies, still covered).
 */
struct pl_crcur {
	const uint8_t *rec;
	size_t len, pos;
	uint32_t crc;
	bool active;
};
void pl_crcur_begin(struct pl_crcur *c, const struct pl_rec *rec);
void pl_crcur_copy(struct pl_crcur *c, void *dst, const void *src, size_t len);
/* 0, or -EBADMSG with the record's data-CRC message. */
int pl_crcur_end(struct pl_crcur *c, const struct pl_plan *plan, const struct pl_rec *rec,
		 struct io_error *err);
/* Check every feature against the manifest and fill ws->rec_dims (errors name the feature). */
int pl_row_shapes(const struct pl_plan *plan, struct pl_worker_scratch *ws, struct io_error *err);
/* Output i's view after its processing steps (its shape is the row's shape). */
int pl_row_view(const struct pl_plan *plan, struct pl_worker_scratch *ws, size_t i,
		struct pl_view *ret_view, struct io_error *err);

/* Where output i's elements are (the view indexes them). */
struct pl_row_src {
	enum pl_src st;
	const void *base;	      /* numeric elements (for a const: its one element) */
	const struct pl_strref *strs; /* strings */
	bool const_str;		      /* a const string: o->c_str everywhere */
};
int pl_row_source(const struct pl_plan *plan, struct pl_worker_scratch *ws, size_t i,
		  struct pl_row_src *ret);
/* Bytes of the string elements a view selects. */
int pl_row_string_bytes(const struct pl_out *o, const struct pl_row_src *s, const struct pl_view *v,
			struct pl_worker_scratch *ws, uint64_t *ret_bytes);

/*
 * A window (rec->win): decode each of its records and join every output tensor's rows along
 * axis 0 into ws->wout[i] (for continuous_sequence only the window's steps). Inner dimensions
 * must agree between the records. After it, pl_window_view/pl_window_source give each tensor.
 */
int pl_window_assemble(const struct pl_plan *plan, struct pl_worker_scratch *ws,
		       const struct pl_rec *win, struct io_error *err);
void pl_window_view(const struct pl_worker_scratch *ws, size_t i, struct pl_view *ret_view);
void pl_window_source(const struct pl_plan *plan, const struct pl_worker_scratch *ws, size_t i,
		      struct pl_row_src *ret);

/*
 * Output i's encoded image (an output with image steps): the one string its slices select.
 * -EBADMSG naming the tensor when they select none or several (a record of another shape).
 */
int pl_row_image_bytes(const struct pl_plan *plan, struct pl_worker_scratch *ws, size_t i,
		       const uint8_t **ret_p, size_t *ret_len, struct io_error *err);

void pl_row_error_prefix(const struct pl_plan *plan, const struct pl_rec *rec,
			 struct io_error *err);
/* pbex_list_iter_init that also takes an absent list (zero steps). */
void pl_list_iter_begin(struct pbex_list_iter *it, const struct pbex_feature_list *l);

#endif
