/* SPDX-License-Identifier: Apache-2.0 */
/* Image kernels of the decode stage (imgops.h): crop draws, Pillow's resampling, normalization. */
#include "imgops.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "ops.h"

double pl_rng_uniform(struct pl_rng *rng)
{
	return (double)(pl_rng_next(rng) >> 11) * 0x1.0p-53;
}

/* Python's round(): half to even, as torchvision's get_params uses it. */
static int64_t round_even(double x)
{
	double r = nearbyint(x); /* the default rounding mode is to nearest, ties to even */
	return (int64_t)r;
}

struct pl_rect pl_img_random_resized_crop(struct pl_rng *rng, uint32_t h, uint32_t w,
					  double scale_lo, double scale_hi, double ratio_lo,
					  double ratio_hi)
{
	double area = (double)h * (double)w;
	double log_lo = log(ratio_lo), log_hi = log(ratio_hi);
	for (int t = 0; t < 10; t++) {
		double target = area * (scale_lo + (scale_hi - scale_lo) * pl_rng_uniform(rng));
		double aspect = exp(log_lo + (log_hi - log_lo) * pl_rng_uniform(rng));
		int64_t cw = round_even(sqrt(target * aspect));
		int64_t ch = round_even(sqrt(target / aspect));
		if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
			uint32_t y = (uint32_t)pl_rng_below(rng, h - (uint64_t)ch + 1);
			uint32_t x = (uint32_t)pl_rng_below(rng, w - (uint64_t)cw + 1);
			return (struct pl_rect){ x, y, (uint32_t)cw, (uint32_t)ch };
		}
	}
	/* the fallback: the central crop of the ratio clamped to [ratio_lo, ratio_hi] */
	double in_ratio = (double)w / (double)h;
	int64_t cw = w, ch = h;
	if (in_ratio < ratio_lo) {
		cw = w;
		ch = round_even((double)cw / ratio_lo);
	} else if (in_ratio > ratio_hi) {
		ch = h;
		cw = round_even((double)ch * ratio_hi);
	}
	if (cw < 1)
		cw = 1;
	if (ch < 1)
		ch = 1;
	return (struct pl_rect){ (uint32_t)((w - cw) / 2), (uint32_t)((h - ch) / 2), (uint32_t)cw,
				 (uint32_t)ch };
}

struct pl_rect pl_img_center_crop(uint32_t img_h, uint32_t img_w, uint32_t h, uint32_t w)
{
	/* torchvision: top = int(round((H - h) / 2.0)), left likewise */
	return (struct pl_rect){ (uint32_t)round_even((img_w - w) / 2.0),
				 (uint32_t)round_even((img_h - h) / 2.0), w, h };
}

/* ---- resampling ---- */

/*
 * Weights in fixed point: int16 with WBITS fractional bits (a weight is at most 1.0 = 16384),
 * so that two taps multiply and add in one instruction (SSE2's pmaddwd) into int32 sums
 * (at most 255 x 16384 per tap). Pillow keeps 22 bits in int32; the 14 bits here move a sum
 * by less than 255 x taps / 32768 (0.04 for bilinear at ImageNet's scales) before rounding.
 */
#define WBITS  14
#define WROUND (1 << (WBITS - 1))

/* One axis: for each output index, the first input index, how many, and their weights. */
struct axis {
	uint32_t in, out;
	enum pl_interp interp;
	uint32_t ksize;	 /* weights per output index (the widest support, even) */
	uint32_t *first; /* out */
	uint32_t *count; /* out */
	int16_t *w;	 /* out × ksize; zero beyond count */
	size_t cap;	 /* of first/count (out) */
	size_t wcap;	 /* of w */
};

struct pl_resampler {
	struct axis x, y;
	void *tmp; /* the first pass's output (int16) */
	size_t tmp_cap;
	int32_t *acc; /* one output row's sums (pass_y without SIMD) */
	size_t acc_cap;
};

struct pl_resampler *pl_resampler_create(void)
{
	return calloc(1, sizeof(struct pl_resampler));
}

static void axis_fini(struct axis *a)
{
	free(a->first);
	free(a->count);
	free(a->w);
}

void pl_resampler_destroy(struct pl_resampler *rs)
{
	if (!rs)
		return;
	axis_fini(&rs->x);
	axis_fini(&rs->y);
	free(rs->tmp);
	free(rs->acc);
	free(rs);
}

static double filter(enum pl_interp i, double x)
{
	if (i == PL_INTERP_AREA) /* Pillow's box filter */
		return x > -0.5 && x <= 0.5 ? 1.0 : 0.0;
	if (x < 0) /* the triangle */
		x = -x;
	return x < 1.0 ? 1.0 - x : 0.0;
}

static int16_t fixed(double k)
{
	/* as Pillow rounds its coefficients: half away from zero */
	return (int16_t)(k < 0 ? -0.5 + k * (1 << WBITS) : 0.5 + k * (1 << WBITS));
}

/* Pillow's precompute_coeffs for one axis (or the nearest pixel's index). */
static int axis_plan(struct axis *a, uint32_t in, uint32_t out, enum pl_interp interp)
{
	if (a->in == in && a->out == out && a->interp == interp && a->first)
		return 0;
	double scale = (double)in / (double)out;
	double fscale = scale < 1.0 ? 1.0 : scale;
	double support = (interp == PL_INTERP_AREA ? 0.5 : 1.0) * fscale;
	uint32_t ksize = interp == PL_INTERP_NEAREST ? 1 : (uint32_t)ceil(support) * 2 + 1;
	ksize += ksize & 1; /* taps go in pairs; the odd one out has weight 0 */
	if (out > a->cap) {
		uint32_t *f = realloc(a->first, out * sizeof(*f));
		if (!f)
			return -ENOMEM;
		a->first = f;
		uint32_t *c = realloc(a->count, out * sizeof(*c));
		if (!c)
			return -ENOMEM;
		a->count = c;
		a->cap = out;
	}
	if ((size_t)out * ksize > a->wcap) {
		int16_t *w = realloc(a->w, (size_t)out * ksize * sizeof(*w));
		if (!w)
			return -ENOMEM;
		a->w = w;
		a->wcap = (size_t)out * ksize;
	}
	a->in = in;
	a->out = out;
	a->interp = interp;
	a->ksize = ksize;
	memset(a->w, 0, (size_t)out * ksize * sizeof(*a->w));
	for (uint32_t o = 0; o < out; o++) {
		double center = (o + 0.5) * scale;
		if (interp == PL_INTERP_NEAREST) {
			uint32_t s = (uint32_t)floor(center);
			a->first[o] = s < in ? s : in - 1;
			a->count[o] = 1;
			a->w[(size_t)o * ksize] = 1 << WBITS;
			continue;
		}
		double ss = 1.0 / fscale;
		int64_t lo = (int64_t)(center - support + 0.5); /* C truncation, as Pillow */
		int64_t hi = (int64_t)(center + support + 0.5);
		if (lo < 0)
			lo = 0;
		if (hi > in)
			hi = in;
		uint32_t n = (uint32_t)(hi - lo);
		if (n > ksize)
			n = ksize;
		double sum = 0;
		for (uint32_t i = 0; i < n; i++)
			sum += filter(interp, ((double)i + (double)lo - center + 0.5) * ss);
		a->first[o] = (uint32_t)lo;
		a->count[o] = n;
		for (uint32_t i = 0; i < n; i++) {
			double k = filter(interp, ((double)i + (double)lo - center + 0.5) * ss);
			a->w[(size_t)o * ksize + i] = fixed(sum != 0 ? k / sum : 0.0);
		}
	}
	return 0;
}

/*
 * A pass's sums are int32 in WBITS fixed point. The first of two passes keeps MBITS of
 * fraction in int16 (255 << 7 = 32640 fits; a sum of such values times 14-bit weights still
 * fits int32), so that only the last pass rounds: the two passes then commute (the vertical
 * one goes first when it shrinks) and the result is within 1 of Pillow's, whose first pass
 * rounds to uint8.
 */
#define MBITS 7

struct fin {
	int32_t round; /* added before the shift */
	int shift;
	int32_t max; /* 255, or 32767 for the int16 intermediate */
};

static const struct fin FIN_U8 = { 1 << (WBITS - 1), WBITS, 255 };		      /* u8 -> u8 */
static const struct fin FIN_MID = { 1 << (WBITS - MBITS - 1), WBITS - MBITS, 32767 }; /* -> i16 */
static const struct fin FIN_I16 = { 1 << (WBITS + MBITS - 1), WBITS + MBITS, 255 }; /* i16 -> u8 */

static inline int32_t finish(int32_t acc, const struct fin *f)
{
	int32_t v = (acc + f->round) >> f->shift; /* rounding half up, as Pillow's fixed point */
	return v <= 0 ? 0 : v >= f->max ? f->max : v;
}

/* Store one value of a pass's output (uint8, or int16 when out16). */
static inline void put(void *q, size_t i, int32_t v, bool out16)
{
	if (out16)
		((int16_t *)q)[i] = (int16_t)v;
	else
		((uint8_t *)q)[i] = (uint8_t)v;
}

static inline int32_t get(const void *p, size_t i, bool in16)
{
	return in16 ? ((const int16_t *)p)[i] : ((const uint8_t *)p)[i];
}

/* One output pixel of c channels from count taps of p (plain C). */
static inline void tap_px(const void *p, bool in16, const int16_t *w, uint32_t count, uint32_t c,
			  void *q, bool out16, const struct fin *f)
{
	for (uint32_t ch = 0; ch < c; ch++) {
		int32_t acc = 0;
		for (uint32_t i = 0; i < count; i++)
			acc += w[i] * get(p, (size_t)i * c + ch, in16);
		put(q, ch, finish(acc, f), out16);
	}
}

#ifdef __SSE2__
/* int32 lanes shifted, saturated and stored: 3 (an RGB pixel) or 4n values as out16 says. */
static inline __m128i fin_sse2(__m128i acc, const struct fin *f)
{
	return _mm_sra_epi32(acc, _mm_cvtsi32_si128(f->shift));
}

/*
 * An RGB pixel's taps i and i + 1 (the second only when two): the two pixels' samples
 * interleaved and widened (r0 r1 g0 g1 b0 b1 . .), so that times (w0 w1 w0 w1 ...) in
 * pmaddwd they are the three sums' next terms. Loads 4 samples per pixel: the caller makes
 * sure that a pixel follows the last tap.
 */
static inline __m128i pair_sse2(const void *p, bool in16, uint32_t i, bool two)
{
	__m128i z = _mm_setzero_si128();
	if (in16) {
		const int16_t *s = (const int16_t *)p + 3 * i;
		__m128i a = _mm_loadl_epi64((const __m128i *)(const void *)s);
		__m128i b = two ? _mm_loadl_epi64((const __m128i *)(const void *)(s + 3)) : z;
		return _mm_unpacklo_epi16(a, b);
	}
	const uint8_t *s = (const uint8_t *)p + 3 * i;
	uint32_t a, b = 0;
	memcpy(&a, s, 4);
	if (two)
		memcpy(&b, s + 3, 4);
	__m128i m = _mm_unpacklo_epi8(_mm_cvtsi32_si128((int)a), _mm_cvtsi32_si128((int)b));
	return _mm_unpacklo_epi8(m, z);
}

/* The sums (r, g, b, .) of an RGB pixel rounded into q (3 uint8, or 3 int16 when out16). */
static inline void put_rgb_sse2(__m128i acc, void *q, bool out16, const struct fin *f)
{
	acc = _mm_packs_epi32(fin_sse2(acc, f), _mm_setzero_si128());
	if (out16) {
		int16_t v[8];
		_mm_storeu_si128((__m128i *)(void *)v, acc);
		memcpy(q, v, 6);
		return;
	}
	uint32_t v = (uint32_t)_mm_cvtsi128_si32(_mm_packus_epi16(acc, acc));
	memcpy(q, &v, 3);
}

static inline __m128i wpair(const int16_t *w, uint32_t i)
{
	uint32_t k;
	memcpy(&k, w + i, 4); /* w[i], w[i + 1] (0 past count) */
	return _mm_set1_epi32((int)k);
}

/* An RGB pixel from its taps, two at a time. */
static inline void tap_rgb_sse2(const void *p, bool in16, const int16_t *w, uint32_t count, void *q,
				bool out16, const struct fin *f)
{
	__m128i acc = _mm_set1_epi32(f->round);
	for (uint32_t i = 0; i < count; i += 2)
		acc = _mm_add_epi32(acc, _mm_madd_epi16(pair_sse2(p, in16, i, i + 1 < count),
							wpair(w, i)));
	put_rgb_sse2(acc, q, out16, f);
}

/*
 * The same output pixel of four rows (ps bytes apart in, qs out): the weights and the
 * addresses computed once, four independent sums in flight instead of one chain.
 */
static inline void tap_rgb4_sse2(const char *p, size_t ps, bool in16, const int16_t *w,
				 uint32_t count, char *q, size_t qs, bool out16,
				 const struct fin *f)
{
	__m128i a0 = _mm_set1_epi32(f->round), a1 = a0, a2 = a0, a3 = a0;
	for (uint32_t i = 0; i < count; i += 2) {
		__m128i k = wpair(w, i);
		bool two = i + 1 < count;
		a0 = _mm_add_epi32(a0, _mm_madd_epi16(pair_sse2(p, in16, i, two), k));
		a1 = _mm_add_epi32(a1, _mm_madd_epi16(pair_sse2(p + ps, in16, i, two), k));
		a2 = _mm_add_epi32(a2, _mm_madd_epi16(pair_sse2(p + 2 * ps, in16, i, two), k));
		a3 = _mm_add_epi32(a3, _mm_madd_epi16(pair_sse2(p + 3 * ps, in16, i, two), k));
	}
	put_rgb_sse2(a0, q, out16, f);
	put_rgb_sse2(a1, q + qs, out16, f);
	put_rgb_sse2(a2, q + 2 * qs, out16, f);
	put_rgb_sse2(a3, q + 3 * qs, out16, f);
}
#endif

/*
 * Rows [y0, y1) of src (uint8, or int16 when in16; stride in samples), resampled horizontally
 * into dst (x->out columns; stride in samples).
 */
static void pass_x(const struct axis *x, const void *src, bool in16, size_t src_stride, uint32_t c,
		   uint32_t y0, uint32_t y1, void *dst, bool out16, size_t dst_stride, bool flip,
		   const struct fin *f)
{
	size_t isz = in16 ? 2 : 1, osz = out16 ? 2 : 1;
	uint32_t y = y0;
#ifdef __SSE2__
	for (; c == 3 && y + 4 <= y1; y += 4) {
		const char *row = (const char *)src + (size_t)y * src_stride * isz;
		char *out = (char *)dst + (size_t)(y - y0) * dst_stride * osz;
		for (uint32_t o = 0; o < x->out; o++) {
			const int16_t *w = x->w + (size_t)o * x->ksize;
			const char *p = row + (size_t)x->first[o] * 3 * isz;
			char *q = out + (size_t)(flip ? x->out - 1 - o : o) * 3 * osz;
			if (x->first[o] + x->count[o] < x->in) {
				tap_rgb4_sse2(p, src_stride * isz, in16, w, x->count[o], q,
					      dst_stride * osz, out16, f);
				continue;
			}
			for (int r = 0; r < 4; r++)
				tap_px(p + r * src_stride * isz, in16, w, x->count[o], 3,
				       q + r * dst_stride * osz, out16, f);
		}
	}
#endif
	for (; y < y1; y++) {
		const char *row = (const char *)src + (size_t)y * src_stride * isz;
		char *out = (char *)dst + (size_t)(y - y0) * dst_stride * osz;
		for (uint32_t o = 0; o < x->out; o++) {
			const int16_t *w = x->w + (size_t)o * x->ksize;
			const void *p = row + (size_t)x->first[o] * c * isz;
			void *q = out + (size_t)(flip ? x->out - 1 - o : o) * c * osz;
#ifdef __SSE2__
			/* a pixel after the last tap: the 4-sample loads stay in the row */
			if (c == 3 && x->first[o] + x->count[o] < x->in) {
				tap_rgb_sse2(p, in16, w, x->count[o], q, out16, f);
				continue;
			}
#endif
			tap_px(p, in16, w, x->count[o], c, q, out16, f);
		}
	}
}

#ifdef __SSE2__
/* 16 uint8 columns of one output row: the taps' rows two at a time through pmaddwd. */
static inline void col16_sse2(const uint8_t *p, size_t stride, const int16_t *wt, uint32_t n,
			      void *q, bool out16, const struct fin *f)
{
	__m128i z = _mm_setzero_si128();
	__m128i a0 = _mm_set1_epi32(f->round), a1 = a0, a2 = a0, a3 = a0;
	for (uint32_t i = 0; i < n; i += 2) {
		const uint8_t *s = p + i * stride;
		__m128i r0 = _mm_loadu_si128((const __m128i *)(const void *)s);
		__m128i r1 = i + 1 < n
				     ? _mm_loadu_si128((const __m128i *)(const void *)(s + stride))
				     : z;
		uint32_t k;
		memcpy(&k, wt + i, 4);
		__m128i kk = _mm_set1_epi32((int)k);
		__m128i lo = _mm_unpacklo_epi8(r0, r1), hi = _mm_unpackhi_epi8(r0, r1);
		a0 = _mm_add_epi32(a0, _mm_madd_epi16(_mm_unpacklo_epi8(lo, z), kk));
		a1 = _mm_add_epi32(a1, _mm_madd_epi16(_mm_unpackhi_epi8(lo, z), kk));
		a2 = _mm_add_epi32(a2, _mm_madd_epi16(_mm_unpacklo_epi8(hi, z), kk));
		a3 = _mm_add_epi32(a3, _mm_madd_epi16(_mm_unpackhi_epi8(hi, z), kk));
	}
	__m128i l = _mm_packs_epi32(fin_sse2(a0, f), fin_sse2(a1, f));
	__m128i h = _mm_packs_epi32(fin_sse2(a2, f), fin_sse2(a3, f));
	if (out16) {
		_mm_storeu_si128((__m128i *)q, l);
		_mm_storeu_si128((__m128i *)q + 1, h);
	} else {
		_mm_storeu_si128((__m128i *)q, _mm_packus_epi16(l, h));
	}
}

/* 8 int16 columns of one output row into uint8. */
static inline void col8_sse2(const int16_t *p, size_t stride, const int16_t *wt, uint32_t n,
			     uint8_t *q, const struct fin *f)
{
	__m128i z = _mm_setzero_si128();
	__m128i a0 = _mm_set1_epi32(f->round), a1 = a0;
	for (uint32_t i = 0; i < n; i += 2) {
		const int16_t *s = p + i * stride;
		__m128i r0 = _mm_loadu_si128((const __m128i *)(const void *)s);
		__m128i r1 = i + 1 < n
				     ? _mm_loadu_si128((const __m128i *)(const void *)(s + stride))
				     : z;
		uint32_t k;
		memcpy(&k, wt + i, 4);
		__m128i kk = _mm_set1_epi32((int)k);
		a0 = _mm_add_epi32(a0, _mm_madd_epi16(_mm_unpacklo_epi16(r0, r1), kk));
		a1 = _mm_add_epi32(a1, _mm_madd_epi16(_mm_unpackhi_epi16(r0, r1), kk));
	}
	__m128i l = _mm_packs_epi32(fin_sse2(a0, f), fin_sse2(a1, f));
	_mm_storel_epi64((__m128i *)(void *)q, _mm_packus_epi16(l, l));
}
#endif

/*
 * src (uint8, or int16 when in16; rows offset so that its row 0 is input row base; strides in
 * samples) resampled vertically: per output row, the weighted input rows summed element by
 * element. Never int16 in and out.
 */
static void pass_y(const struct axis *y, const void *src, bool in16, size_t src_stride,
		   uint32_t base, size_t n, void *dst, bool out16, size_t dst_stride, bool flip,
		   int32_t *acc, const struct fin *f)
{
	size_t isz = in16 ? 2 : 1, osz = out16 ? 2 : 1;
	for (uint32_t o = 0; o < y->out; o++) {
		const int16_t *wt = y->w + (size_t)o * y->ksize;
		const char *p = (const char *)src + (size_t)(y->first[o] - base) * src_stride * isz;
		char *q = (char *)dst + (size_t)(flip ? y->out - 1 - o : o) * dst_stride * osz;
		size_t j = 0;
#ifdef __SSE2__
		if (in16)
			for (; j + 8 <= n; j += 8)
				col8_sse2((const int16_t *)(const void *)p + j, src_stride, wt,
					  y->count[o], (uint8_t *)q + j, f);
		else
			for (; j + 16 <= n; j += 16)
				col16_sse2((const uint8_t *)p + j, src_stride, wt, y->count[o],
					   q + j * osz, out16, f);
#endif
		if (j == n)
			continue;
		for (size_t k = j; k < n; k++)
			acc[k] = 0;
		for (uint32_t i = 0; i < y->count[o]; i++) {
			const char *row = p + (size_t)i * src_stride * isz;
			int32_t k = wt[i];
			for (size_t m = j; m < n; m++)
				acc[m] += k * get(row, m, in16);
		}
		for (size_t m = j; m < n; m++)
			put(q, m, finish(acc[m], f), out16);
	}
}

void pl_img_copy(const struct pl_img *src, uint8_t *dst, size_t dst_stride, bool flip_x,
		 bool flip_y)
{
	size_t n = (size_t)src->w * src->c;
	for (uint32_t y = 0; y < src->h; y++) {
		const uint8_t *p = src->p + (size_t)y * src->stride;
		uint8_t *q = dst + (size_t)(flip_y ? src->h - 1 - y : y) * dst_stride;
		if (!flip_x) {
			memcpy(q, p, n);
			continue;
		}
		for (uint32_t x = 0; x < src->w; x++)
			memcpy(q + (size_t)(src->w - 1 - x) * src->c, p + (size_t)x * src->c,
			       src->c);
	}
}

static int grow(void **p, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	void *n = realloc(*p, need);
	if (!n)
		return -ENOMEM;
	*p = n;
	*cap = need;
	return 0;
}

int pl_img_resize(struct pl_resampler *rs, const struct pl_img *src, uint8_t *dst,
		  size_t dst_stride, uint32_t out_h, uint32_t out_w, enum pl_interp interp,
		  bool flip_x, bool flip_y)
{
	if (!src->h || !src->w || !out_h || !out_w || (unsigned)interp >= PL_INTERP_COUNT_)
		return -EINVAL;
	bool need_x = out_w != src->w, need_y = out_h != src->h;
	if (!need_x && !need_y) {
		pl_img_copy(src, dst, dst_stride, flip_x, flip_y);
		return 0;
	}
	int r = axis_plan(&rs->x, src->w, out_w, interp);
	if (r == 0)
		r = axis_plan(&rs->y, src->h, out_h, interp);
	if (r < 0)
		return r;
	uint32_t c = src->c;
	/* the input rows the vertical pass needs */
	uint32_t y0 = rs->y.first[0], y1 = 0;
	for (uint32_t o = 0; o < out_h; o++) {
		if (rs->y.first[o] < y0)
			y0 = rs->y.first[o];
		if (rs->y.first[o] + rs->y.count[o] > y1)
			y1 = rs->y.first[o] + rs->y.count[o];
	}
	size_t acc_n = (size_t)(out_w > src->w ? out_w : src->w) * c;
	if (grow((void **)&rs->acc, &rs->acc_cap, acc_n * sizeof(*rs->acc)) < 0)
		return -ENOMEM;
	if (!need_y) { /* one pass, straight into dst */
		pass_x(&rs->x, src->p, false, src->stride, c, 0, src->h, dst, false, dst_stride,
		       flip_x, &FIN_U8);
		if (flip_y) /* rows swapped in place */
			for (uint32_t a = 0, b = out_h - 1; a < b; a++, b--) {
				uint8_t *pa = dst + (size_t)a * dst_stride;
				uint8_t *pb = dst + (size_t)b * dst_stride;
				for (size_t i = 0; i < (size_t)out_w * c; i++) {
					uint8_t t = pa[i];
					pa[i] = pb[i];
					pb[i] = t;
				}
			}
		return 0;
	}
	if (!need_x) {
		pass_y(&rs->y, src->p + (size_t)y0 * src->stride, false, src->stride, y0,
		       (size_t)src->w * c, dst, false, dst_stride, flip_y, rs->acc, &FIN_U8);
		if (flip_x)
			for (uint32_t y = 0; y < out_h; y++) {
				uint8_t *row = dst + (size_t)y * dst_stride;
				for (uint32_t a = 0, b = out_w - 1; a < b; a++, b--)
					for (uint32_t ch = 0; ch < c; ch++) {
						uint8_t t = row[(size_t)a * c + ch];
						row[(size_t)a * c + ch] = row[(size_t)b * c + ch];
						row[(size_t)b * c + ch] = t;
					}
			}
		return 0;
	}
	/*
	 * Shrinking rows, the vertical pass (whole rows, 16 columns at a time) goes first, so
	 * that the horizontal one (per pixel) runs on out_h rows instead of in_h: 2.4x faster
	 * on ImageNet's crops. The int16 intermediate (MBITS) makes the order immaterial.
	 */
	bool y_first = out_h < src->h;
	size_t tstride = (size_t)(y_first ? src->w : out_w) * c; /* samples */
	size_t need = tstride * (y_first ? out_h : y1 - y0) * sizeof(int16_t);
	if (grow((void **)&rs->tmp, &rs->tmp_cap, need) < 0)
		return -ENOMEM;
	if (y_first) {
		pass_y(&rs->y, src->p + (size_t)y0 * src->stride, false, src->stride, y0,
		       (size_t)src->w * c, rs->tmp, true, tstride, flip_y, rs->acc, &FIN_MID);
		pass_x(&rs->x, rs->tmp, true, tstride, c, 0, out_h, dst, false, dst_stride, flip_x,
		       &FIN_I16);
		return 0;
	}
	pass_x(&rs->x, src->p, false, src->stride, c, y0, y1, rs->tmp, true, tstride, flip_x,
	       &FIN_MID);
	pass_y(&rs->y, rs->tmp, true, tstride, y0, (size_t)out_w * c, dst, false, dst_stride,
	       flip_y, rs->acc, &FIN_I16);
	return 0;
}

/* ---- colour ---- */

void pl_jitter_draw(struct pl_rng *rng, const double range[4][2], const bool on[4],
		    struct pl_jitter *j)
{
	for (unsigned i = 0; i < 4; i++)
		j->order[i] = i;
	for (unsigned i = 3; i > 0; i--) {
		unsigned k = (unsigned)(pl_rng_uniform(rng) * (i + 1));
		unsigned t = j->order[i];
		j->order[i] = j->order[k];
		j->order[k] = t;
	}
	for (unsigned i = 0; i < 4; i++) {
		j->on[i] = on[i];
		j->factor[i] = on[i] ? (float)(range[i][0] +
					       pl_rng_uniform(rng) * (range[i][1] - range[i][0]))
				     : 0.0f;
	}
}

/* Pillow's ImagingBlend of a degenerate value d and v: d + f * (v - d) in float, truncated. */
static inline uint8_t blend8(int d, int v, float f)
{
	float t = (float)d + f * (float)(v - d);
	return t <= 0.0f ? 0 : t >= 255.0f ? 255 : (uint8_t)t;
}

/* Pillow's RGB to L: ITU-R 601-2 luma in 16-bit fixed point, rounded. */
static inline int luma(const uint8_t *px)
{
	return (px[0] * 19595 + px[1] * 38470 + px[2] * 7471 + 0x8000) >> 16;
}

/* Pillow's 8-bit HSV (colorsys's formulas, each component truncated to 0..255) and back. */
static void rgb_to_hsv8(const uint8_t *px, uint8_t *hsv)
{
	int r = px[0], g = px[1], b = px[2];
	int mx = r > g ? (r > b ? r : b) : (g > b ? g : b);
	int mn = r < g ? (r < b ? r : b) : (g < b ? g : b);
	hsv[2] = (uint8_t)mx;
	if (mx == mn) {
		hsv[0] = hsv[1] = 0;
		return;
	}
	float cr = (float)(mx - mn);
	float s = cr / (float)mx;
	float rc = (float)(mx - r) / cr, gc = (float)(mx - g) / cr, bc = (float)(mx - b) / cr;
	/* in double where Pillow's literals are (2.0 + rc - bc), then kept in a float */
	float hh = r == mx ? bc - gc : (float)(g == mx ? 2.0 + rc - bc : 4.0 + gc - rc);
	float hf = (float)fmod(hh / 6.0 + 1.0, 1.0); /* kept in a float, as Pillow's */
	int ih = (int)(hf * 255.0), is = (int)(s * 255.0);
	hsv[0] = (uint8_t)(ih < 0 ? 0 : ih > 255 ? 255 : ih);
	hsv[1] = (uint8_t)(is < 0 ? 0 : is > 255 ? 255 : is);
}

static inline uint8_t clamp8i(double v)
{
	long x = lround(v);
	return (uint8_t)(x < 0 ? 0 : x > 255 ? 255 : x);
}

static void hsv8_to_rgb(const uint8_t *hsv, uint8_t *px)
{
	int hh = hsv[0], s = hsv[1], v = hsv[2];
	if (s == 0) {
		px[0] = px[1] = px[2] = (uint8_t)v;
		return;
	}
	int i = (int)floorf((float)hh * 6.0f / 255.0f);
	float f = (float)hh * 6.0f / 255.0f - (float)i;
	float fs = (float)s / 255.0f;
	uint8_t p = clamp8i((float)v * (1.0f - fs));
	uint8_t q = clamp8i((float)v * (1.0f - fs * f));
	uint8_t t = clamp8i((float)v * (1.0f - fs * (1.0f - f)));
	uint8_t vv = (uint8_t)v;
	uint8_t out[6][3] = { { vv, t, p }, { q, vv, p }, { p, vv, t },
			      { p, q, vv }, { t, p, vv }, { vv, p, q } };
	memcpy(px, out[i % 6], 3);
}

void pl_img_color_jitter(uint8_t *p, uint32_t h, uint32_t w, uint32_t c, size_t stride,
			 const struct pl_jitter *j)
{
	bool rgb = c >= 3;
	for (unsigned n = 0; n < 4; n++) {
		unsigned k = j->order[n];
		if (!j->on[k])
			continue;
		float f = j->factor[k];
		if (k == 0) { /* brightness: blend with black */
			for (uint32_t y = 0; y < h; y++) {
				uint8_t *row = p + (size_t)y * stride;
				for (uint32_t x = 0; x < w; x++)
					for (uint32_t ch = 0; ch < (rgb ? 3u : 1u); ch++)
						row[(size_t)x * c + ch] =
							blend8(0, row[(size_t)x * c + ch], f);
			}
		} else if (k == 1) { /* contrast: blend with the luma's mean, rounded */
			uint64_t sum = 0;
			for (uint32_t y = 0; y < h; y++) {
				const uint8_t *row = p + (size_t)y * stride;
				for (uint32_t x = 0; x < w; x++)
					sum += (uint64_t)(rgb ? luma(row + (size_t)x * c)
							      : row[(size_t)x * c]);
			}
			int m = (int)((double)sum / ((double)h * (double)w) + 0.5);
			for (uint32_t y = 0; y < h; y++) {
				uint8_t *row = p + (size_t)y * stride;
				for (uint32_t x = 0; x < w; x++)
					for (uint32_t ch = 0; ch < (rgb ? 3u : 1u); ch++)
						row[(size_t)x * c + ch] =
							blend8(m, row[(size_t)x * c + ch], f);
			}
		} else if (k == 2 && rgb) { /* saturation: blend with the pixel's luma */
			for (uint32_t y = 0; y < h; y++) {
				uint8_t *row = p + (size_t)y * stride;
				for (uint32_t x = 0; x < w; x++) {
					uint8_t *px = row + (size_t)x * c;
					int l = luma(px);
					for (unsigned ch = 0; ch < 3; ch++)
						px[ch] = blend8(l, px[ch], f);
				}
			}
		} else if (k == 3 && rgb) { /* hue: the H byte shifted, wrapping */
			uint8_t d = (uint8_t)(int)(f * 255.0f);
			for (uint32_t y = 0; y < h; y++) {
				uint8_t *row = p + (size_t)y * stride;
				for (uint32_t x = 0; x < w; x++) {
					uint8_t *px = row + (size_t)x * c, hsv[3];
					rgb_to_hsv8(px, hsv);
					hsv[0] = (uint8_t)(hsv[0] + d);
					hsv8_to_rgb(hsv, px);
				}
			}
		}
	}
}

/* ---- normalization ---- */

#define ROWBUF 8192 /* values of one output row built before it is streamed out */

/* n bytes from src (a row buffer) to dst, non-temporal where the machine has them. */
static void stream_out(void *dst, const void *src, size_t n)
{
	uint8_t *d = dst;
	const uint8_t *s = src;
#ifdef __SSE2__
	size_t head = (16 - ((uintptr_t)d & 15)) & 15;
	if (head > n)
		head = n;
	memcpy(d, s, head);
	d += head, s += head, n -= head;
	for (; n >= 16; d += 16, s += 16, n -= 16)
		_mm_stream_si128((__m128i *)(void *)d,
				 _mm_loadu_si128((const __m128i *)(const void *)s));
#endif
	memcpy(d, s, n);
}

void pl_img_normalize(const struct pl_img *src, void *dst, enum pl_norm_dtype dt,
		      const int64_t stride[3], bool flip_x, bool flip_y, const float *mean,
		      const float *std)
{
	uint32_t h = src->h, w = src->w, c = src->c > 4 ? 4 : src->c;
	/* every output value comes from a uint8: a table per channel (exactly numpy's values) */
	float lutf[4][256];
	uint16_t luth[4][256];
	_Alignas(16) uint8_t rowbuf[ROWBUF * sizeof(float)];
	for (uint32_t ch = 0; ch < c && dt != PL_NORM_UINT8; ch++)
		for (unsigned v = 0; v < 256; v++) {
			lutf[ch][v] = ((float)v - mean[ch]) / std[ch]; /* as numpy */
			if (dt == PL_NORM_FLOAT16)
				luth[ch][v] = pl_f32_to_f16(lutf[ch][v]);
			else if (dt == PL_NORM_BFLOAT16)
				luth[ch][v] = pl_f32_to_bf16(lutf[ch][v]);
		}
	/*
	 * Per dtype a loop of its own (the switch and the channel loop hoisted). Where a row of
	 * the output is contiguous (each plane's of CHW, the whole of HWC), it is built in a
	 * buffer and streamed out with non-temporal stores: the batch is read by another process
	 * much later, and storing into cold memory otherwise costs a read of every line first
	 * (the plain stores were 12% of the ImageNet pipeline's CPU, stalled on the store buffer).
	 */
	int64_t s2 = stride[2];
	bool chw = stride[1] == 1, hwc = stride[1] == (int64_t)c && s2 == 1;
	bool rowwise = (chw || hwc) && (size_t)w * c <= ROWBUF;
#define NORM_LOOP(T, OUT)                                                                          \
	for (uint32_t y = 0; y < h; y++) {                                                         \
		const uint8_t *v = src->p + (size_t)y * src->stride;                               \
		T *q = (T *)dst + (flip_y ? h - 1 - y : y) * stride[0];                            \
		if (rowwise) {                                                                     \
			T *b = (T *)(void *)rowbuf;                                                \
			for (uint32_t ch = 0; ch < (chw ? c : 1); ch++) {                          \
				if (chw)                                                           \
					for (uint32_t x = 0; x < w; x++)                           \
						b[flip_x ? w - 1 - x : x] =                        \
							OUT(ch, v[(size_t)x * src->c + ch]);       \
				else                                                               \
					for (uint32_t x = 0; x < w; x++)                           \
						for (uint32_t k = 0; k < c; k++)                   \
							b[(size_t)(flip_x ? w - 1 - x : x) * c +   \
							  k] = OUT(k, v[(size_t)x * src->c + k]);  \
				stream_out(q + ch * s2, b, (size_t)w * (chw ? 1 : c) * sizeof(T)); \
			}                                                                          \
			continue;                                                                  \
		}                                                                                  \
		q += flip_x ? (int64_t)(w - 1) * stride[1] : 0;                                    \
		int64_t sx = flip_x ? -stride[1] : stride[1];                                      \
		for (uint32_t x = 0; x < w; x++, v += src->c, q += sx)                             \
			for (uint32_t ch = 0; ch < c; ch++)                                        \
				q[ch * s2] = OUT(ch, v[ch]);                                       \
	}
#define OUT_U8(ch, x)  (x)
#define OUT_F32(ch, x) lutf[ch][x]
#define OUT_F16(ch, x) luth[ch][x]
	switch (dt) {
	case PL_NORM_UINT8:
		NORM_LOOP(uint8_t, OUT_U8);
		break;
	case PL_NORM_FLOAT32:
		NORM_LOOP(float, OUT_F32);
		break;
	default:
		NORM_LOOP(uint16_t, OUT_F16);
	}
#ifdef __SSE2__
	if (rowwise)
		_mm_sfence(); /* the streamed stores before whatever publishes the batch */
#endif
#undef NORM_LOOP
#undef OUT_U8
#undef OUT_F32
#undef OUT_F16
}
