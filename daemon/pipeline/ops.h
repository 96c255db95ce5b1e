/* SPDX-License-Identifier: Apache-2.0 */
/* Element kernels of the pipeline: casts, float16, numpy slicing of views, strided copies, fills. */
#ifndef SLUICE_PIPELINE_OPS_H
#define SLUICE_PIPELINE_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/manifest.h"
#include "spec.h"

/*
 * Where elements come from: the two numeric wire types of tf.Example, or elements that are
 * already of the destination dtype (raw bytes, in host or swapped byte order). Unaligned
 * sources are fine (raw bytes inside a record have any alignment).
 */
enum pl_src {
	PL_SRC_INT64,	/* int64_t values (decoded int64_list) */
	PL_SRC_FLOAT32, /* float values (decoded float_list) */
	PL_SRC_SAME,	/* elements of the destination dtype, host byte order */
	PL_SRC_SWAP,	/* elements of the destination dtype, other byte order */
};

/*
 * Convert n contiguous elements into dt (not string). Casts as docs/pipeline-semantics.md:
 * integer narrowing wraps, float -> integer truncates toward zero with NaN -> 0 and saturation,
 * -> bool is != 0, -> float16 rounds to nearest even. PL_SRC_SAME/SWAP copy (and swap) bytes;
 * for bool they normalise to 0/1.
 */
void pl_convert(void *dst, enum manifest_dtype dt, const void *src, enum pl_src st, size_t n);

/* IEEE binary16 conversions, round to nearest even (NaN stays NaN, overflow gives inf). */
uint16_t pl_f32_to_f16(float f);
/* float32 -> bfloat16 (its top half), rounded to nearest even; a NaN stays a quiet NaN. */
uint16_t pl_f32_to_bf16(float f);
uint16_t pl_f64_to_f16(double d);
float pl_f16_to_f32(uint16_t h);

/*
 * A view of an n-d array of elements stored flat: element (i0, .., ik) is at
 * offset + sum(i_j * stride[j]) (in elements). rank 0 is one element.
 */
struct pl_view {
	unsigned rank;
	int64_t shape[PL_MAX_RANK];
	int64_t stride[PL_MAX_RANK];
	int64_t offset;
};

/* The contiguous row-major view of shape. */
void pl_view_init(struct pl_view *v, unsigned rank, const int64_t *shape);
int64_t pl_view_count(const struct pl_view *v); /* product of shape (1 for rank 0) */

/*
 * Apply a numpy basic slice (dims[0 .. n), n <= v->rank; missing trailing axes are whole) to v:
 * an index drops its axis (negative counts from the end), ranges clamp as Python's
 * slice.indices(). Returns 0, or -ERANGE when an index is out of range (*ret_axis = that
 * axis of v) or -EINVAL when n > rank or a step is 0.
 */
int pl_view_slice(struct pl_view *v, const struct pl_slice_dim *dims, unsigned n,
		  unsigned *ret_axis);
/*
 * The static shape after a slice, for planning: in_shape may hold -1 (unknown); the result
 * has -1 where it depends on an unknown size. Returns the new rank, -ERANGE (an index out of
 * range of a known dimension; *ret_axis), or -EINVAL (too many dims, step 0).
 */
int pl_shape_slice(const int64_t *in_shape, unsigned in_rank, const struct pl_slice_dim *dims,
		   unsigned n, int64_t *ret_shape, unsigned *ret_axis);

/*
 * Copy the elements of view v of src (element type st) into dst, converting to dt, placing
 * element (i0, .., ik) at dst + (sum i_j * dst_stride[j]) * size(dt). v->rank dims.
 */
void pl_copy_view(void *dst, const int64_t *dst_stride, enum manifest_dtype dt, const void *src,
		  enum pl_src st, const struct pl_view *v);
/* The flat source index of every element of v, in row-major order (pl_view_count() entries). */
void pl_view_indices(const struct pl_view *v, int64_t *out);

/*
 * A JSON scalar (const value, padding value) as one element of dt, in host byte order, into
 * out (8 bytes; strings are not handled here). -EINVAL when the kind does not fit dt: a string
 * for a numeric dtype, a number for string, a real with a fractional part for an integer
 * dtype, an integer out of the dtype's range (bool takes true/false and 0/1).
 */
int pl_value_to_elem(const struct pl_value *val, enum manifest_dtype dt, uint8_t out[8]);
/* Fill n elements of size elem_size with the element at elem. */
void pl_fill(void *dst, const void *elem, size_t elem_size, size_t n);

#endif
