/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for daemon/pipeline/ops.c: casts and float16 against numpy, slicing, copies, values. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/pipeline/ops.h"
#include "tests/unit/pipeline/ops_vectors.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* The expected results of one source into every dtype, indexed by dtype. */
struct expect_row {
	const void *data;
	size_t size;
	bool is_float; /* compare NaN by NaN-ness */
};

static const struct expect_row i64_expect[MANIFEST_DTYPE_COUNT_] = {
	[MANIFEST_DTYPE_INT8] = { ov_i64_to_i8, 1, false },
	[MANIFEST_DTYPE_INT16] = { ov_i64_to_i16, 2, false },
	[MANIFEST_DTYPE_INT32] = { ov_i64_to_i32, 4, false },
	[MANIFEST_DTYPE_INT64] = { ov_i64_to_i64, 8, false },
	[MANIFEST_DTYPE_UINT8] = { ov_i64_to_u8, 1, false },
	[MANIFEST_DTYPE_UINT16] = { ov_i64_to_u16, 2, false },
	[MANIFEST_DTYPE_UINT32] = { ov_i64_to_u32, 4, false },
	[MANIFEST_DTYPE_UINT64] = { ov_i64_to_u64, 8, false },
	[MANIFEST_DTYPE_FLOAT16] = { ov_i64_to_f16, 2, true },
	[MANIFEST_DTYPE_FLOAT32] = { ov_i64_to_f32, 4, true },
	[MANIFEST_DTYPE_FLOAT64] = { ov_i64_to_f64, 8, true },
	[MANIFEST_DTYPE_BOOL] = { ov_i64_to_bool, 1, false },
};

static const struct expect_row f32_expect[MANIFEST_DTYPE_COUNT_] = {
	[MANIFEST_DTYPE_INT8] = { ov_f32_to_i8, 1, false },
	[MANIFEST_DTYPE_INT16] = { ov_f32_to_i16, 2, false },
	[MANIFEST_DTYPE_INT32] = { ov_f32_to_i32, 4, false },
	[MANIFEST_DTYPE_INT64] = { ov_f32_to_i64, 8, false },
	[MANIFEST_DTYPE_UINT8] = { ov_f32_to_u8, 1, false },
	[MANIFEST_DTYPE_UINT16] = { ov_f32_to_u16, 2, false },
	[MANIFEST_DTYPE_UINT32] = { ov_f32_to_u32, 4, false },
	[MANIFEST_DTYPE_UINT64] = { ov_f32_to_u64, 8, false },
	[MANIFEST_DTYPE_FLOAT16] = { ov_f32_to_f16, 2, true },
	[MANIFEST_DTYPE_FLOAT32] = { ov_f32_to_f32, 4, true },
	[MANIFEST_DTYPE_FLOAT64] = { ov_f32_to_f64, 8, true },
	[MANIFEST_DTYPE_BOOL] = { ov_f32_to_bool, 1, false },
};

static bool f16_is_nan(uint16_t h)
{
	return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
}

static bool elem_is_nan(const uint8_t *p, size_t size)
{
	if (size == 2) {
		uint16_t h;

		memcpy(&h, p, 2);
		return f16_is_nan(h);
	}
	if (size == 4) {
		float f;

		memcpy(&f, p, 4);
		return isnan(f);
	}
	double d;

	memcpy(&d, p, 8);
	return isnan(d);
}

/* Convert n elements of src through unaligned buffers and compare with want. */
static void check_cast(const void *src, enum pl_src st, size_t src_size, size_t n,
		       enum manifest_dtype dt, const struct expect_row *want, const char *what)
{
	size_t dsz = manifest_dtype_size(dt);
	uint8_t *sbuf = malloc(n * src_size + 1);
	uint8_t *dbuf = malloc(n * dsz + 3);

	assert_non_null(sbuf);
	assert_non_null(dbuf);
	assert_int_equal(dsz, want->size);
	memcpy(sbuf + 1, src, n * src_size);
	memset(dbuf, 0xa5, n * dsz + 3);
	pl_convert(dbuf + 1, dt, sbuf + 1, st, n);
	assert_int_equal(dbuf[0], 0xa5);
	assert_int_equal(dbuf[1 + n * dsz], 0xa5);
	for (size_t i = 0; i < n; i++) {
		const uint8_t *got = dbuf + 1 + i * dsz;
		const uint8_t *exp = (const uint8_t *)want->data + i * dsz;

		if (want->is_float && elem_is_nan(exp, dsz)) {
			if (!elem_is_nan(got, dsz))
				fail_msg("%s -> %s [%zu]: expected NaN", what,
					 manifest_dtype_name(dt), i);
			continue;
		}
		if (memcmp(got, exp, dsz) != 0) {
			uint64_t g = 0, e = 0;

			memcpy(&g, got, dsz);
			memcpy(&e, exp, dsz);
			fail_msg("%s -> %s [%zu]: got 0x%llx, expected 0x%llx", what,
				 manifest_dtype_name(dt), i, (unsigned long long)g,
				 (unsigned long long)e);
		}
	}
	free(sbuf);
	free(dbuf);
}

static void test_cast_from_int64(void **state)
{
	(void)state;
	for (int dt = 0; dt < MANIFEST_DTYPE_STRING; dt++)
		check_cast(ov_i64_in, PL_SRC_INT64, 8, OV_N_I64, dt, &i64_expect[dt], "int64");
}

static void test_cast_from_float32(void **state)
{
	(void)state;
	for (int dt = 0; dt < MANIFEST_DTYPE_STRING; dt++)
		check_cast(ov_f32_in, PL_SRC_FLOAT32, 4, OV_N_F32, dt, &f32_expect[dt], "float32");
}

/* Long runs exercise the vectorised loop bodies and their tails. */
static void test_cast_long_runs(void **state)
{
	enum { N = 1031 };
	int64_t *src = malloc(N * sizeof(*src));
	int32_t *d32 = malloc(N * sizeof(*d32));
	float *fsrc = malloc(N * sizeof(*fsrc));
	int16_t *d16 = malloc(N * sizeof(*d16));

	(void)state;
	assert_non_null(src);
	assert_non_null(d32);
	assert_non_null(fsrc);
	assert_non_null(d16);
	for (int i = 0; i < N; i++) {
		src[i] = (int64_t)i * 0x100000001ll - 7;
		fsrc[i] = (float)(i - 500) * 77.25f;
	}
	pl_convert(d32, MANIFEST_DTYPE_INT32, src, PL_SRC_INT64, N);
	pl_convert(d16, MANIFEST_DTYPE_INT16, fsrc, PL_SRC_FLOAT32, N);
	for (int i = 0; i < N; i++) {
		assert_int_equal(d32[i], (int32_t)(uint32_t)(uint64_t)src[i]);
		float t = truncf(fsrc[i]);
		int32_t want = t > 32767 ? 32767 : t < -32768 ? -32768 : (int32_t)t;

		assert_int_equal(d16[i], want);
	}
	free(src);
	free(d32);
	free(fsrc);
	free(d16);
}

static void test_cast_same_and_swap(void **state)
{
	uint8_t src[64], dst[64 + 1], back[64];

	(void)state;
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)(i * 37 + 11);
	for (int dt = 0; dt < MANIFEST_DTYPE_BOOL; dt++) {
		size_t sz = manifest_dtype_size(dt), n = sizeof(src) / sz;

		pl_convert(dst + 1, dt, src, PL_SRC_SAME, n);
		assert_memory_equal(dst + 1, src, n * sz);
		pl_convert(dst + 1, dt, src, PL_SRC_SWAP, n);
		for (size_t i = 0; i < n; i++)
			for (size_t b = 0; b < sz; b++)
				assert_int_equal(dst[1 + i * sz + b], src[i * sz + sz - 1 - b]);
		pl_convert(back, dt, dst + 1, PL_SRC_SWAP, n);
		assert_memory_equal(back, src, n * sz);
	}
	/* bool normalises to 0/1 from either byte order. */
	const uint8_t b[6] = { 0, 1, 2, 255, 0, 128 };
	const uint8_t want[6] = { 0, 1, 1, 1, 0, 1 };

	pl_convert(dst, MANIFEST_DTYPE_BOOL, b, PL_SRC_SAME, 6);
	assert_memory_equal(dst, want, 6);
	memset(dst, 9, 6);
	pl_convert(dst, MANIFEST_DTYPE_BOOL, b, PL_SRC_SWAP, 6);
	assert_memory_equal(dst, want, 6);
	/* n = 0 touches nothing. */
	memset(dst, 9, sizeof(dst));
	pl_convert(dst, MANIFEST_DTYPE_INT64, src, PL_SRC_INT64, 0);
	assert_int_equal(dst[0], 9);
}

static uint32_t f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static float bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static double bits_f64(uint64_t u)
{
	double d;

	memcpy(&d, &u, 8);
	return d;
}

/* Every half: to float (exact, matching numpy by hash) and back (identity, NaN stays NaN). */
static void test_f16_all_patterns(void **state)
{
	uint64_t hash = 0xcbf29ce484222325ull;

	(void)state;
	for (uint32_t h = 0; h < 65536; h++) {
		float f = pl_f16_to_f32((uint16_t)h);
		uint32_t bits = f32_bits(f);
		unsigned e = (h >> 10) & 0x1f, m = h & 0x3ff;

		if (e == 0x1f && m) {
			assert_true(isnan(f));
			assert_true(f16_is_nan(pl_f32_to_f16(f)));
			assert_true(f16_is_nan(pl_f64_to_f16(f)));
			assert_int_equal(signbit(f) != 0, (h & 0x8000) != 0);
			bits = 0x7fc00000u;
		} else {
			/* An independent value: m * 2^(e - 25) with the implicit bit. */
			double ref = e == 0x1f ? INFINITY
				     : e == 0  ? ldexp(m, -24)
					       : ldexp(1024 + m, (int)e - 25);

			if (h & 0x8000)
				ref = -ref;
			assert_true((double)f == ref);
			assert_int_equal(signbit(f) != 0, (h & 0x8000) != 0);
			assert_int_equal(pl_f32_to_f16(f), h);
			assert_int_equal(pl_f64_to_f16((double)f), h);
		}
		for (int k = 0; k < 4; k++)
			hash = (hash ^ ((bits >> (8 * k)) & 0xff)) * 0x100000001b3ull;
	}
	assert_true(hash == OV_H2F_FNV);
}

static void test_f32_to_f16_numpy(void **state)
{
	(void)state;
	for (size_t i = 0; i < OV_N_F2H; i++) {
		float f = bits_f32(ov_f2h_in[i]);
		uint16_t got = pl_f32_to_f16(f);

		if (isnan(f)) {
			assert_true(f16_is_nan(got));
			continue;
		}
		if (got != ov_f2h_out[i])
			fail_msg("f32 0x%08x (%.9g): got 0x%04x, numpy 0x%04x", ov_f2h_in[i], f,
				 got, ov_f2h_out[i]);
	}
}

static void test_f64_to_f16_numpy(void **state)
{
	(void)state;
	for (size_t i = 0; i < OV_N_D2H; i++) {
		double d = bits_f64(ov_d2h_in[i]);
		uint16_t got = pl_f64_to_f16(d);

		if (got != ov_d2h_out[i])
			fail_msg("f64 0x%016llx (%.17g): got 0x%04x, numpy 0x%04x",
				 (unsigned long long)ov_d2h_in[i], d, got, ov_d2h_out[i]);
	}
}

/*
 * Every tie between two neighbouring halves goes to the even one; one float (or double) ulp
 * either side goes to the nearer one. A double a hair above a tie must round up even though
 * the same value rounded to float first would sit on the tie.
 */
static void test_f16_every_tie(void **state)
{
	(void)state;
	for (uint32_t sign = 0; sign <= 0x8000; sign += 0x8000) {
		for (uint32_t h = 0; h < 0x7c00; h++) {
			uint16_t lo = (uint16_t)(sign | h), hi = (uint16_t)(sign | (h + 1));
			/* Above 65504 the next "half" is 65536: the tie 65520 rounds to inf. */
			double a = fabs((double)pl_f16_to_f32(lo));
			double b = h + 1 == 0x7c00 ? 65536.0 : fabs((double)pl_f16_to_f32(hi));
			double mid = (a + b) / 2;
			uint16_t even = (h & 1) ? hi : lo;
			float fm = (float)mid;

			if (sign)
				mid = -mid, fm = -fm;
			assert_true((double)fm == mid); /* halves' midpoints are exact in float */
			assert_int_equal(pl_f32_to_f16(fm), even);
			assert_int_equal(pl_f64_to_f16(mid), even);
			float up = nextafterf(fm, sign ? -INFINITY : INFINITY);
			float down = nextafterf(fm, 0.0f);

			assert_int_equal(pl_f32_to_f16(up), hi);
			assert_int_equal(pl_f32_to_f16(down), lo);
			double dup = nextafter(mid, sign ? -INFINITY : INFINITY);
			double ddown = nextafter(mid, 0.0);

			assert_int_equal(pl_f64_to_f16(dup), hi);
			assert_int_equal(pl_f64_to_f16(ddown), lo);
			/* Through float these would be ties: the direct conversion must not be. */
			assert_true((float)dup == fm);
			assert_true((float)ddown == fm);
		}
	}
	/* Signed zeros, infinities, and NaN from both widths. */
	assert_int_equal(pl_f32_to_f16(0.0f), 0x0000);
	assert_int_equal(pl_f32_to_f16(-0.0f), 0x8000);
	assert_int_equal(pl_f32_to_f16(INFINITY), 0x7c00);
	assert_int_equal(pl_f32_to_f16(-INFINITY), 0xfc00);
	assert_int_equal(pl_f64_to_f16(-INFINITY), 0xfc00);
	assert_int_equal(pl_f64_to_f16(1e300), 0x7c00);
	assert_int_equal(pl_f64_to_f16(-1e-300), 0x8000);
	assert_true(f16_is_nan(pl_f32_to_f16(NAN)));
	assert_true(f16_is_nan(pl_f64_to_f16(-NAN)));
	assert_true(f16_is_nan(pl_f32_to_f16(bits_f32(0x7f800001u)))); /* signalling: stays NaN */
	assert_true(f16_is_nan(pl_f64_to_f16(bits_f64(0x7ff0000000000001ull))));
	/* NaNs come out quiet, with the sign and the top payload bits. */
	assert_int_equal(pl_f32_to_f16(bits_f32(0x7f800001u)), 0x7e00);
	assert_int_equal(pl_f32_to_f16(bits_f32(0xffa02000u)), 0xff01);
	assert_int_equal(f32_bits(pl_f16_to_f32(0x7c01)), 0x7fc02000u);
	assert_int_equal(f32_bits(pl_f16_to_f32(0xfe00)), 0xffc00000u);
}

static void check_slice_case(const struct ov_slice_case *c)
{
	struct pl_view v;
	unsigned axis = 99;
	int64_t shape[PL_MAX_RANK];
	int64_t *idx;
	int r;

	pl_view_init(&v, c->rank, c->shape);
	r = pl_view_slice(&v, c->dims, c->n, &axis);
	if (r != 0)
		fail_msg("%s: pl_view_slice returned %d", c->text, r);
	assert_int_equal(axis, 99);
	assert_int_equal(v.rank, c->out_rank);
	for (unsigned i = 0; i < v.rank; i++)
		if (v.shape[i] != c->out_shape[i])
			fail_msg("%s: axis %u has %lld, expected %lld", c->text, i,
				 (long long)v.shape[i], (long long)c->out_shape[i]);
	assert_int_equal(pl_view_count(&v), c->count);
	idx = malloc((size_t)(c->count + 1) * sizeof(*idx));
	assert_non_null(idx);
	idx[c->count] = -12345;
	pl_view_indices(&v, idx);
	for (int64_t i = 0; i < c->count; i++)
		if (idx[i] != c->idx[i])
			fail_msg("%s: element %lld is %lld, expected %lld", c->text, (long long)i,
				 (long long)idx[i], (long long)c->idx[i]);
	assert_int_equal(idx[c->count], -12345);
	free(idx);

	/* The static shape agrees with the view. */
	r = pl_shape_slice(c->shape, c->rank, c->dims, c->n, shape, &axis);
	assert_int_equal(r, (int)c->out_rank);
	for (unsigned i = 0; i < c->out_rank; i++)
		assert_int_equal(shape[i], c->out_shape[i]);

	/* All sizes unknown: ranges and kept axes are unknown, indices are checked later. */
	int64_t unknown[PL_MAX_RANK];

	for (unsigned i = 0; i < c->rank; i++)
		unknown[i] = -1;
	r = pl_shape_slice(unknown, c->rank, c->dims, c->n, shape, &axis);
	assert_int_equal(r, (int)c->out_rank);
	for (unsigned i = 0; i < c->out_rank; i++)
		assert_int_equal(shape[i], -1);
}

static void test_slice_numpy_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(ov_slices); i++)
		check_slice_case(&ov_slices[i]);
}

static struct pl_slice_dim sl_index(int64_t i)
{
	return (struct pl_slice_dim){ .kind = PL_SLICE_INDEX, .index = i };
}

static struct pl_slice_dim sl_range(int64_t start, int64_t stop, int64_t step)
{
	return (struct pl_slice_dim){ .kind = PL_SLICE_RANGE,
				      .has_start = true,
				      .start = start,
				      .has_stop = true,
				      .stop = stop,
				      .has_step = true,
				      .step = step };
}

static void test_slice_errors(void **state)
{
	const int64_t shape[3] = { 4, 5, 6 };
	struct pl_view v, before;
	struct pl_slice_dim d[4];
	unsigned axis = 99;
	int64_t out[PL_MAX_RANK] = { 77 };

	(void)state;
	pl_view_init(&v, 3, shape);
	before = v;
	/* An index out of range, positive or negative, names its axis and changes nothing. */
	d[0] = sl_range(0, 4, 1);
	d[1] = sl_index(5);
	assert_int_equal(pl_view_slice(&v, d, 2, &axis), -ERANGE);
	assert_int_equal(axis, 1);
	assert_memory_equal(&v, &before, sizeof(v));
	d[0] = sl_index(1);
	d[1] = sl_index(0);
	d[2] = sl_index(-7);
	axis = 99;
	assert_int_equal(pl_view_slice(&v, d, 3, &axis), -ERANGE);
	assert_int_equal(axis, 2);
	assert_memory_equal(&v, &before, sizeof(v));
	d[0] = sl_index(-5);
	assert_int_equal(pl_view_slice(&v, d, 1, &axis), -ERANGE);
	assert_int_equal(axis, 0);
	/* Too many dims, step 0: -EINVAL, axis untouched. */
	axis = 99;
	d[0] = sl_index(0);
	d[1] = sl_index(0);
	d[2] = sl_index(0);
	d[3] = sl_index(0);
	assert_int_equal(pl_view_slice(&v, d, 4, &axis), -EINVAL);
	d[0] = sl_range(0, 4, 0);
	assert_int_equal(pl_view_slice(&v, d, 1, &axis), -EINVAL);
	d[0] = sl_index(0);
	d[2] = sl_range(0, 4, 0); /* a step 0 after an index that is fine */
	assert_int_equal(pl_view_slice(&v, d, 3, &axis), -EINVAL);
	assert_int_equal(axis, 99);
	assert_memory_equal(&v, &before, sizeof(v));

	/* The static form: known sizes are checked, unknown ones are not. */
	const int64_t partial[3] = { 4, -1, 6 };

	d[0] = sl_index(-4);
	d[1] = sl_index(1000);
	d[2] = sl_range(-2, 100, 1);
	assert_int_equal(pl_shape_slice(partial, 3, d, 3, out, &axis), 1);
	assert_int_equal(out[0], 2);
	d[2] = sl_index(6);
	assert_int_equal(pl_shape_slice(partial, 3, d, 3, out, &axis), -ERANGE);
	assert_int_equal(axis, 2);
	d[0] = sl_index(4);
	assert_int_equal(pl_shape_slice(partial, 3, d, 1, out, &axis), -ERANGE);
	assert_int_equal(axis, 0);
	axis = 99;
	assert_int_equal(pl_shape_slice(partial, 3, d, 4, out, &axis), -EINVAL);
	d[0] = sl_range(0, 1, 0);
	assert_int_equal(pl_shape_slice(partial, 3, d, 1, out, &axis), -EINVAL);
	assert_int_equal(axis, 99);
	assert_int_equal(out[0], 2); /* untouched by failures */
	d[0] = sl_range(1, 3, 1);
	assert_int_equal(pl_shape_slice(partial, 3, d, 1, out, &axis), 3);
	assert_int_equal(out[0], 2);
	assert_int_equal(out[1], -1);
	assert_int_equal(out[2], 6);
}

/* A slice of a slice: [::-1] then [1:6:2] of 0..6 is 5, 3, 1. */
static void test_slice_twice(void **state)
{
	const int64_t shape[1] = { 7 };
	struct pl_slice_dim d;
	struct pl_view v;
	unsigned axis;
	int64_t idx[3];

	(void)state;
	pl_view_init(&v, 1, shape);
	d = (struct pl_slice_dim){ .kind = PL_SLICE_RANGE, .has_step = true, .step = -1 };
	assert_int_equal(pl_view_slice(&v, &d, 1, &axis), 0);
	d = sl_range(1, 6, 2);
	assert_int_equal(pl_view_slice(&v, &d, 1, &axis), 0);
	assert_int_equal(pl_view_count(&v), 3);
	pl_view_indices(&v, idx);
	assert_int_equal(idx[0], 5);
	assert_int_equal(idx[1], 3);
	assert_int_equal(idx[2], 1);
	d = sl_index(-1);
	assert_int_equal(pl_view_slice(&v, &d, 1, &axis), 0);
	assert_int_equal(v.rank, 0);
	assert_int_equal(pl_view_count(&v), 1);
	pl_view_indices(&v, idx);
	assert_int_equal(idx[0], 1);
}

/*
 * Copy each table view into a destination padded by one element on every axis (row-major, or
 * column-major so that the innermost destination stride is not 1), through several
 * conversions, and check every element and that the padding is untouched.
 */
static void check_copy_case(const struct ov_slice_case *c, bool col_major)
{
	int64_t n_src = 1, dst_shape[PL_MAX_RANK], dst_stride[PL_MAX_RANK], n_dst = 1;
	struct pl_view v;
	unsigned axis;

	for (unsigned i = 0; i < c->rank; i++)
		n_src *= c->shape[i];
	pl_view_init(&v, c->rank, c->shape);
	assert_int_equal(pl_view_slice(&v, c->dims, c->n, &axis), 0);
	for (unsigned k = 0; k < v.rank; k++) {
		unsigned i = col_major ? k : v.rank - 1 - k;

		dst_shape[i] = v.shape[i] + 1;
		dst_stride[i] = n_dst;
		n_dst *= dst_shape[i];
	}

	int64_t *s64 = malloc((size_t)n_src * 8 + 8);
	float *sf = malloc((size_t)n_src * 4 + 4);
	uint8_t *s16 = malloc((size_t)n_src * 2 + 1); /* int16, swapped, at an odd address */
	int32_t *d32 = malloc((size_t)n_dst * 4);
	double *df = malloc((size_t)n_dst * 8);
	int16_t *d16 = malloc((size_t)n_dst * 2);
	uint8_t *is_elem = calloc((size_t)n_dst, 1);

	assert_true(s64 && sf && s16 && d32 && df && d16 && is_elem);
	for (int64_t i = 0; i < n_src; i++) {
		int16_t x = (int16_t)(i * 3 - 50);
		uint16_t sw = __builtin_bswap16((uint16_t)x);

		s64[i] = i * 1000 + 7;
		sf[i] = (float)i + 0.75f;
		memcpy(s16 + 1 + i * 2, &sw, 2);
	}
	for (int64_t i = 0; i < n_dst; i++) {
		d32[i] = -999;
		df[i] = -999.0;
		d16[i] = -999;
	}
	pl_copy_view(d32, dst_stride, MANIFEST_DTYPE_INT32, s64, PL_SRC_INT64, &v);
	pl_copy_view(df, dst_stride, MANIFEST_DTYPE_FLOAT64, sf, PL_SRC_FLOAT32, &v);
	pl_copy_view(d16, dst_stride, MANIFEST_DTYPE_INT16, s16 + 1, PL_SRC_SWAP, &v);

	/* Walk the view's elements in row-major order and find each one's destination. */
	int64_t pos[PL_MAX_RANK] = { 0 };

	for (int64_t k = 0; k < c->count; k++) {
		int64_t off = 0, src = c->idx[k];

		for (unsigned i = 0; i < v.rank; i++)
			off += pos[i] * dst_stride[i];
		is_elem[off] = 1;
		if (d32[off] != (int32_t)(src * 1000 + 7))
			fail_msg("%s: element %lld: got %d, expected source %lld", c->text,
				 (long long)k, d32[off], (long long)src);
		assert_true(df[off] == (double)((float)src + 0.75f));
		assert_int_equal(d16[off], (int16_t)(src * 3 - 50));
		for (unsigned i = v.rank; i-- > 0;) {
			if (++pos[i] < v.shape[i])
				break;
			pos[i] = 0;
		}
	}
	for (int64_t i = 0; i < n_dst; i++) {
		if (is_elem[i])
			continue;
		assert_int_equal(d32[i], -999);
		assert_true(df[i] == -999.0);
		assert_int_equal(d16[i], -999);
	}
	free(s64);
	free(sf);
	free(s16);
	free(d32);
	free(df);
	free(d16);
	free(is_elem);
}

static void test_copy_view_padded(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(ov_slices); i++) {
		check_copy_case(&ov_slices[i], false);
		check_copy_case(&ov_slices[i], true);
	}
}

/* A contiguous view into a contiguous destination, and float32 -> float16 through a view. */
static void test_copy_view_contiguous(void **state)
{
	const int64_t shape[2] = { 3, 5 };
	const int64_t dstride[2] = { 5, 1 };
	float src[15];
	uint16_t dst[15];
	struct pl_view v;

	(void)state;
	for (int i = 0; i < 15; i++)
		src[i] = (float)i * 0.5f + 1e-4f;
	pl_view_init(&v, 2, shape);
	pl_copy_view(dst, dstride, MANIFEST_DTYPE_FLOAT16, src, PL_SRC_FLOAT32, &v);
	for (int i = 0; i < 15; i++)
		assert_int_equal(dst[i], pl_f32_to_f16(src[i]));
	/* An empty view writes nothing. */
	const int64_t zero[2] = { 0, 5 };

	pl_view_init(&v, 2, zero);
	dst[0] = 0x1234;
	pl_copy_view(dst, dstride, MANIFEST_DTYPE_FLOAT16, src, PL_SRC_FLOAT32, &v);
	assert_int_equal(dst[0], 0x1234);
}

/* Strided runs longer than one gather chunk, both directions. */
static void test_copy_view_long_strided(void **state)
{
	enum { N = 4001 };
	const int64_t shape[1] = { N };
	const int64_t dstride[1] = { 1 };
	int64_t *src = malloc(N * sizeof(*src));
	float *dst = malloc(N * sizeof(*dst));
	struct pl_slice_dim d;
	struct pl_view v;
	unsigned axis;

	(void)state;
	assert_non_null(src);
	assert_non_null(dst);
	for (int i = 0; i < N; i++)
		src[i] = i * 3 - 1000;
	for (int step = -3; step <= 3; step += 6) {
		pl_view_init(&v, 1, shape);
		d = (struct pl_slice_dim){ .kind = PL_SLICE_RANGE, .has_step = true, .step = step };
		assert_int_equal(pl_view_slice(&v, &d, 1, &axis), 0);
		assert_int_equal(v.shape[0], (N + 2) / 3);
		pl_copy_view(dst, dstride, MANIFEST_DTYPE_FLOAT32, src, PL_SRC_INT64, &v);
		for (int64_t k = 0; k < v.shape[0]; k++) {
			int64_t i = step > 0 ? k * 3 : N - 1 - k * 3;

			assert_true(dst[k] == (float)src[i]);
		}
	}
	free(src);
	free(dst);
}

struct value_case {
	struct pl_value val;
	enum manifest_dtype dt;
	int ret;
	uint64_t want; /* the element's bytes, little-endian host assumed by the test table */
};

#define V_NONE                        \
	{                             \
		.kind = PL_VALUE_NONE \
	}
#define V_BOOL(x)                               \
	{                                       \
		.kind = PL_VALUE_BOOL, .b = (x) \
	}
#define V_INT(x)                               \
	{                                      \
		.kind = PL_VALUE_INT, .i = (x) \
	}
#define V_REAL(x)                               \
	{                                       \
		.kind = PL_VALUE_REAL, .r = (x) \
	}
#define V_STR(x)                                                                  \
	{                                                                         \
		.kind = PL_VALUE_STRING, .s = (char *)(x), .s_len = sizeof(x) - 1 \
	}

static const struct value_case value_cases[] = {
	{ V_NONE, MANIFEST_DTYPE_INT32, 0, 0 },
	{ V_NONE, MANIFEST_DTYPE_FLOAT64, 0, 0 },
	{ V_NONE, MANIFEST_DTYPE_BOOL, 0, 0 },
	{ V_INT(-128), MANIFEST_DTYPE_INT8, 0, 0x80 },
	{ V_INT(127), MANIFEST_DTYPE_INT8, 0, 0x7f },
	{ V_INT(128), MANIFEST_DTYPE_INT8, -EINVAL, 0 },
	{ V_INT(-129), MANIFEST_DTYPE_INT8, -EINVAL, 0 },
	{ V_INT(-32768), MANIFEST_DTYPE_INT16, 0, 0x8000 },
	{ V_INT(32768), MANIFEST_DTYPE_INT16, -EINVAL, 0 },
	{ V_INT(INT32_MIN), MANIFEST_DTYPE_INT32, 0, 0x80000000u },
	{ V_INT((int64_t)INT32_MAX + 1), MANIFEST_DTYPE_INT32, -EINVAL, 0 },
	{ V_INT(INT64_MIN), MANIFEST_DTYPE_INT64, 0, 0x8000000000000000ull },
	{ V_INT(255), MANIFEST_DTYPE_UINT8, 0, 0xff },
	{ V_INT(256), MANIFEST_DTYPE_UINT8, -EINVAL, 0 },
	{ V_INT(-1), MANIFEST_DTYPE_UINT8, -EINVAL, 0 },
	{ V_INT(65535), MANIFEST_DTYPE_UINT16, 0, 0xffff },
	{ V_INT(65536), MANIFEST_DTYPE_UINT16, -EINVAL, 0 },
	{ V_INT(4294967295ll), MANIFEST_DTYPE_UINT32, 0, 0xffffffffu },
	{ V_INT(4294967296ll), MANIFEST_DTYPE_UINT32, -EINVAL, 0 },
	{ V_INT(INT64_MAX), MANIFEST_DTYPE_UINT64, 0, 0x7fffffffffffffffull },
	{ V_INT(-1), MANIFEST_DTYPE_UINT64, -EINVAL, 0 },
	{ V_REAL(3.0), MANIFEST_DTYPE_INT8, 0, 3 },
	{ V_REAL(-0.0), MANIFEST_DTYPE_INT8, 0, 0 },
	{ V_REAL(3.5), MANIFEST_DTYPE_INT32, -EINVAL, 0 },
	{ V_REAL(128.0), MANIFEST_DTYPE_INT8, -EINVAL, 0 },
	{ V_REAL(1e300), MANIFEST_DTYPE_INT64, -EINVAL, 0 },
	{ V_REAL(9223372036854775808.0), MANIFEST_DTYPE_INT64, -EINVAL, 0 },
	{ V_REAL(-9223372036854775808.0), MANIFEST_DTYPE_INT64, 0, 0x8000000000000000ull },
	{ V_REAL(18446744073709549568.0), MANIFEST_DTYPE_UINT64, 0, 0xfffffffffffff800ull },
	{ V_REAL(18446744073709551616.0), MANIFEST_DTYPE_UINT64, -EINVAL, 0 },
	{ V_REAL(-1.0), MANIFEST_DTYPE_UINT64, -EINVAL, 0 },
	{ V_REAL(NAN), MANIFEST_DTYPE_INT32, -EINVAL, 0 },
	{ V_REAL(INFINITY), MANIFEST_DTYPE_INT64, -EINVAL, 0 },
	{ V_BOOL(true), MANIFEST_DTYPE_BOOL, 0, 1 },
	{ V_BOOL(false), MANIFEST_DTYPE_BOOL, 0, 0 },
	{ V_INT(1), MANIFEST_DTYPE_BOOL, 0, 1 },
	{ V_INT(0), MANIFEST_DTYPE_BOOL, 0, 0 },
	{ V_INT(2), MANIFEST_DTYPE_BOOL, -EINVAL, 0 },
	{ V_INT(-1), MANIFEST_DTYPE_BOOL, -EINVAL, 0 },
	{ V_REAL(1.0), MANIFEST_DTYPE_BOOL, -EINVAL, 0 },
	{ V_BOOL(true), MANIFEST_DTYPE_INT32, -EINVAL, 0 },
	{ V_BOOL(true), MANIFEST_DTYPE_FLOAT32, -EINVAL, 0 },
	{ V_INT(3), MANIFEST_DTYPE_FLOAT32, 0, 0x40400000u },
	{ V_INT(16777217), MANIFEST_DTYPE_FLOAT32, 0, 0x4b800000u },
	{ V_REAL(0.1), MANIFEST_DTYPE_FLOAT32, 0, 0x3dcccccdu },
	{ V_REAL(0.1), MANIFEST_DTYPE_FLOAT64, 0, 0x3fb999999999999aull },
	{ V_INT(-2), MANIFEST_DTYPE_FLOAT64, 0, 0xc000000000000000ull },
	{ V_REAL(1.0), MANIFEST_DTYPE_FLOAT16, 0, 0x3c00 },
	{ V_REAL(-2.5), MANIFEST_DTYPE_FLOAT16, 0, 0xc100 },
	{ V_REAL(65520.0), MANIFEST_DTYPE_FLOAT16, 0, 0x7c00 },
	{ V_INT(65504), MANIFEST_DTYPE_FLOAT16, 0, 0x7bff },
	{ V_INT(2049), MANIFEST_DTYPE_FLOAT16, 0, 0x6800 },
	{ V_STR("1"), MANIFEST_DTYPE_INT32, -EINVAL, 0 },
	{ V_STR("x"), MANIFEST_DTYPE_FLOAT32, -EINVAL, 0 },
	{ V_STR("x"), MANIFEST_DTYPE_BOOL, -EINVAL, 0 },
	{ V_INT(1), MANIFEST_DTYPE_STRING, -EINVAL, 0 },
};

static void test_value_to_elem(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(value_cases); i++) {
		const struct value_case *c = &value_cases[i];
		uint8_t out[8], want[8];
		int r;

		memset(out, 0xcc, sizeof(out));
		r = pl_value_to_elem(&c->val, c->dt, out);
		if (r != c->ret)
			fail_msg("case %zu (%s): returned %d, expected %d", i,
				 manifest_dtype_name(c->dt), r, c->ret);
		if (r != 0) {
			for (int b = 0; b < 8; b++)
				assert_int_equal(out[b], 0xcc); /* untouched on failure */
			continue;
		}
		for (int b = 0; b < 8; b++) /* little-endian: x86, arm64 */
			want[b] = (uint8_t)(c->want >> (8 * b));
		if (memcmp(out, want, 8) != 0)
			fail_msg("case %zu (%s): wrong bytes", i, manifest_dtype_name(c->dt));
	}
}

static void test_fill(void **state)
{
	static const size_t sizes[] = { 1, 2, 4, 8, 3, 12 };
	static const size_t counts[] = { 0, 1, 2, 7, 33, 1000 };
	uint8_t elem[16];
	uint8_t *buf = malloc(12 * 1000 + 2);

	(void)state;
	assert_non_null(buf);
	for (int i = 0; i < 16; i++)
		elem[i] = (uint8_t)(0x31 + i * 7);
	for (size_t s = 0; s < ARRAY_SIZE(sizes); s++) {
		for (size_t c = 0; c < ARRAY_SIZE(counts); c++) {
			size_t sz = sizes[s], n = counts[c];

			memset(buf, 0xee, sz * n + 2);
			pl_fill(buf + 1, elem, sz, n); /* an odd address */
			assert_int_equal(buf[0], 0xee);
			assert_int_equal(buf[1 + sz * n], 0xee);
			for (size_t k = 0; k < n; k++)
				assert_memory_equal(buf + 1 + k * sz, elem, sz);
		}
	}
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cast_from_int64),
		cmocka_unit_test(test_cast_from_float32),
		cmocka_unit_test(test_cast_long_runs),
		cmocka_unit_test(test_cast_same_and_swap),
		cmocka_unit_test(test_f16_all_patterns),
		cmocka_unit_test(test_f32_to_f16_numpy),
		cmocka_unit_test(test_f64_to_f16_numpy),
		cmocka_unit_test(test_f16_every_tie),
		cmocka_unit_test(test_slice_numpy_table),
		cmocka_unit_test(test_slice_errors),
		cmocka_unit_test(test_slice_twice),
		cmocka_unit_test(test_copy_view_padded),
		cmocka_unit_test(test_copy_view_contiguous),
		cmocka_unit_test(test_copy_view_long_strided),
		cmocka_unit_test(test_value_to_elem),
		cmocka_unit_test(test_fill),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
