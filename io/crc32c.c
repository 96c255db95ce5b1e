/* SPDX-License-Identifier: Apache-2.0 */
/* CRC32C: slicing-by-8 table, SSE4.2 (three streams), VPCLMULQDQ folding; fused copy + CRC. */
#include "crc32c.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define CRC32C_HAVE_X86 1
#endif

/* Reflected Castagnoli polynomial. */
#define POLY 0x82f63b78u

/*
 * Everything below works on the raw register (no pre/post inversion), where the CRC is linear:
 * raw(s, A || B) = shift_|B|(raw(s, A)) ^ raw(0, B). crc32c_extend() adds the inversions.
 */
static uint32_t table[8][256];

/* Blocks of the interleaved SSE4.2 loop, and the operator that moves a register past them. */
#define BLK_LONG  2048
#define BLK_SHORT 256
/* Below this the three crc32 streams win over the carry-less multiply set-up. */
#define FOLD_MIN_LEN 256
static uint32_t shift_long[4][256];
static uint32_t shift_short[4][256];

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static bool hw_ok;
static bool fold_ok; /* AVX-512 with VPCLMULQDQ: fold with carry-less multiplies */

/*
 * Folding constants for the carry-less multiply path. A 16-byte lane loaded little-endian is
 * the polynomial R(q0) x^64 + R(q1), where R(w) = sum w_j x^(63-j) (byte 0 bit 0 is the highest
 * degree: the reflected bit order of CRC32C). PCLMULQDQ gives R128(clmul(a, b)) = x R(a) R(b),
 * so moving a lane D bits further, modulo P, is clmul(q0, K1) ^ clmul(q1, K2) with
 * R(K1) = x^(63+D) mod P and R(K2) = x^(D-1) mod P.
 */
struct fold_k {
	uint64_t k1, k2;
};
static struct fold_k fold_2048, fold_512, fold_384, fold_256, fold_128;

static uint32_t raw_table(uint32_t crc, const uint8_t *p, size_t len)
{
	while (len && ((uintptr_t)p & 7)) {
		crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
		len--;
	}
	while (len >= 8) {
		uint32_t lo, hi;

		memcpy(&lo, p, 4);
		memcpy(&hi, p + 4, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
		lo = __builtin_bswap32(lo);
		hi = __builtin_bswap32(hi);
#endif
		lo ^= crc;
		crc = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^
		      table[5][(lo >> 16) & 0xff] ^ table[4][lo >> 24] ^ table[3][hi & 0xff] ^
		      table[2][(hi >> 8) & 0xff] ^ table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
		p += 8;
		len -= 8;
	}
	while (len--)
		crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return crc;
}

/* The register after len zero bytes, starting from crc: the linear map we tabulate. */
static uint32_t raw_zeros(uint32_t crc, size_t len)
{
	while (len--)
		crc = table[0][crc & 0xff] ^ (crc >> 8);
	return crc;
}

static void build_shift(uint32_t t[4][256], size_t len)
{
	uint32_t bit[32];

	for (int b = 0; b < 32; b++)
		bit[b] = raw_zeros(1u << b, len);
	for (int k = 0; k < 4; k++)
		for (unsigned v = 0; v < 256; v++) {
			uint32_t r = 0;

			for (int b = 0; b < 8; b++)
				if (v & (1u << b))
					r ^= bit[8 * k + b];
			t[k][v] = r;
		}
}

static inline uint32_t apply_shift(const uint32_t t[4][256], uint32_t crc)
{
	return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^
	       t[3][crc >> 24];
}

/* x^k mod P, in the normal bit order (bit d = coefficient of x^d). */
static uint32_t xpow_mod(unsigned k)
{
	uint32_t v = 1;

	while (k--)
		v = (v << 1) ^ ((v >> 31) ? 0x1edc6f41u : 0);
	return v;
}

static uint64_t fold_const(unsigned k)
{
	uint32_t p = xpow_mod(k), r = 0;

	for (int d = 0; d < 32; d++)
		if (p & (1u << d))
			r |= 1u << (31 - d);
	return (uint64_t)r << 32;
}

static struct fold_k fold_for(unsigned bits)
{
	struct fold_k k = { fold_const(63 + bits), fold_const(bits - 1) };

	return k;
}

static void crc32c_init(void)
{
	for (unsigned n = 0; n < 256; n++) {
		uint32_t c = n;

		for (int k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
		table[0][n] = c;
	}
	for (unsigned n = 0; n < 256; n++)
		for (int k = 1; k < 8; k++)
			table[k][n] = table[0][table[k - 1][n] & 0xff] ^ (table[k - 1][n] >> 8);
	build_shift(shift_long, BLK_LONG);
	build_shift(shift_short, BLK_SHORT);
	fold_2048 = fold_for(2048);
	fold_512 = fold_for(512);
	fold_384 = fold_for(384);
	fold_256 = fold_for(256);
	fold_128 = fold_for(128);
#ifdef CRC32C_HAVE_X86
	__builtin_cpu_init();
	hw_ok = __builtin_cpu_supports("sse4.2");
	fold_ok = hw_ok && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("avx512f") &&
		  __builtin_cpu_supports("vpclmulqdq") && !getenv("SLUICE_CRC32C_NO_FOLD");
#endif
}

#ifdef CRC32C_HAVE_X86
#define HW_TARGET     __attribute__((target("sse4.2")))
#define ALWAYS_INLINE inline __attribute__((always_inline))

/*
 * 64 bytes at p, p + blk and p + 2 blk to the same places of d, in 16-byte vectors (gcc -O3
 * turned 8-byte copies next to the crc32 loads into slow shuffles: 12 GB/s instead of 27).
 */
HW_TARGET static ALWAYS_INLINE void copy64x3(uint8_t *restrict d, const uint8_t *restrict p,
					     size_t blk)
{
	for (size_t s = 0; s < 3 * blk; s += blk)
		for (size_t i = 0; i < 64; i += 16)
			_mm_storeu_si128((__m128i *)(d + s + i),
					 _mm_loadu_si128((const __m128i *)(p + s + i)));
}

/*
 * Three crc32 streams over consecutive blocks of blk bytes, joined with the shift tables, while
 * at least 3 blk bytes remain; advances *pp (and *pd) past what it consumed. With d non-NULL,
 * each 64 bytes of each stream are copied to d before they are checked (one pass over the
 * source), and the next group of blocks is prefetched while it lies within the source (sources
 * are cold; this doubles the rate of 100 KiB copies). Callers pass d as a constant NULL or not,
 * so each inlined copy keeps only one of the two loops.
 */
HW_TARGET static ALWAYS_INLINE uint32_t hw_3way(uint32_t crc, uint8_t *restrict *pd,
						const uint8_t *restrict *pp, size_t *plen,
						size_t blk, const uint32_t t[4][256])
{
	uint8_t *restrict d = pd ? *pd : NULL;
	const uint8_t *restrict p = *pp;
	size_t len = *plen;

	while (len >= 3 * blk) {
		uint64_t c0 = crc, c1 = 0, c2 = 0;

		bool pf = d && len >= 6 * blk;

		for (size_t i0 = 0; i0 < blk; i0 += 64) {
			if (pf) {
				_mm_prefetch((const char *)p + 3 * blk + i0, _MM_HINT_T0);
				_mm_prefetch((const char *)p + 4 * blk + i0, _MM_HINT_T0);
				_mm_prefetch((const char *)p + 5 * blk + i0, _MM_HINT_T0);
			}
			if (d)
				copy64x3(d + i0, p + i0, blk);
			for (size_t i = i0; i < i0 + 64; i += 8) {
				uint64_t a, b, c;

				memcpy(&a, p + i, 8);
				memcpy(&b, p + blk + i, 8);
				memcpy(&c, p + 2 * blk + i, 8);
				c0 = _mm_crc32_u64(c0, a);
				c1 = _mm_crc32_u64(c1, b);
				c2 = _mm_crc32_u64(c2, c);
			}
		}
		crc = apply_shift(t, (uint32_t)c0) ^ (uint32_t)c1;
		crc = apply_shift(t, crc) ^ (uint32_t)c2;
		p += 3 * blk;
		if (d)
			d += 3 * blk;
		len -= 3 * blk;
	}
	if (pd)
		*pd = d;
	*pp = p;
	*plen = len;
	return crc;
}

/* CRC of p with the crc32 instruction; with d non-NULL, p is also copied to d on the way. */
HW_TARGET static ALWAYS_INLINE uint32_t hw_run(uint32_t crc, uint8_t *restrict d,
					       const uint8_t *restrict p, size_t len)
{
	while (len && ((uintptr_t)p & 7)) {
		if (d)
			*d++ = *p;
		crc = _mm_crc32_u8(crc, *p++);
		len--;
	}
	crc = hw_3way(crc, d ? &d : NULL, &p, &len, BLK_LONG, shift_long);
	crc = hw_3way(crc, d ? &d : NULL, &p, &len, BLK_SHORT, shift_short);
	if (d) /* under 768 bytes left: copy them, then check them while the copy has them in L1 */
		memcpy(d, p, len);
	{
		uint64_t c = crc;

		while (len >= 8) {
			uint64_t v;

			memcpy(&v, p, 8);
			c = _mm_crc32_u64(c, v);
			p += 8;
			len -= 8;
		}
		crc = (uint32_t)c;
	}
	while (len--)
		crc = _mm_crc32_u8(crc, *p++);
	return crc;
}

HW_TARGET static uint32_t raw_hw(uint32_t crc, const uint8_t *p, size_t len)
{
	return hw_run(crc, NULL, p, len);
}

HW_TARGET static uint32_t raw_copy_hw(uint32_t crc, uint8_t *restrict d, const uint8_t *restrict p,
				      size_t len)
{
	return hw_run(crc, d, p, len);
}

/* How far ahead of its loads crc32c_copy prefetches the source (4-8 KiB measured alike). */
#define COPY_PREFETCH 4096
#define FOLD_TARGET   __attribute__((target("sse4.2,pclmul,avx512f,vpclmulqdq")))

FOLD_TARGET static inline __m128i fold128(__m128i v, struct fold_k k)
{
	__m128i kk = _mm_set_epi64x((long long)k.k2, (long long)k.k1);

	return _mm_xor_si128(_mm_clmulepi64_si128(v, kk, 0x00), _mm_clmulepi64_si128(v, kk, 0x11));
}

FOLD_TARGET static inline __m512i fold512x4(__m512i v, __m512i kk, __m512i data)
{
	/* 0x96: a ^ b ^ c */
	return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(v, kk, 0x00),
					 _mm512_clmulepi64_epi128(v, kk, 0x11), data, 0x96);
}

/*
 * The end of a fold: merge the four 512-bit accumulators, fold in the remaining 64- and 16-byte
 * blocks of p, then reduce to 128 bits F, congruent to the message modulo P; the CRC of the
 * message is the crc32 instruction over F's 16 bytes from state 0 (F x^32 mod P), continued over
 * the last len % 16 bytes. len is below 256.
 */
FOLD_TARGET static inline __attribute__((always_inline)) uint32_t
fold_finish(__m512i a0, __m512i a1, __m512i a2, __m512i a3, const uint8_t *p, size_t len)
{
	__m512i k512 = _mm512_broadcast_i32x4(
		_mm_set_epi64x((long long)fold_512.k2, (long long)fold_512.k1));
	__m128i l0, l1, l2, l3, v;
	uint64_t c, q0, q1;
	uint32_t crc;

	a1 = fold512x4(a0, k512, a1);
	a2 = fold512x4(a1, k512, a2);
	a3 = fold512x4(a2, k512, a3);
	while (len >= 64) {
		a3 = fold512x4(a3, k512, _mm512_loadu_si512(p));
		p += 64;
		len -= 64;
	}
	l0 = _mm512_extracti32x4_epi32(a3, 0);
	l1 = _mm512_extracti32x4_epi32(a3, 1);
	l2 = _mm512_extracti32x4_epi32(a3, 2);
	l3 = _mm512_extracti32x4_epi32(a3, 3);
	v = _mm_xor_si128(_mm_xor_si128(fold128(l0, fold_384), fold128(l1, fold_256)),
			  _mm_xor_si128(fold128(l2, fold_128), l3));
	while (len >= 16) {
		v = _mm_xor_si128(fold128(v, fold_128), _mm_loadu_si128((const __m128i *)p));
		p += 16;
		len -= 16;
	}
	q0 = (uint64_t)_mm_cvtsi128_si64(v);
	q1 = (uint64_t)_mm_extract_epi64(v, 1);
	c = _mm_crc32_u64(0, q0);
	c = _mm_crc32_u64(c, q1);
	crc = (uint32_t)c;
	while (len--)
		crc = _mm_crc32_u8(crc, *p++);
	return crc;
}

/*
 * Fold 64-byte blocks with four 512-bit accumulators (256 bytes a round), then fold_finish().
 * len must be at least 256.
 */
FOLD_TARGET static uint32_t raw_fold(uint32_t crc, const uint8_t *p, size_t len)
{
	__m512i k2048 = _mm512_broadcast_i32x4(
		_mm_set_epi64x((long long)fold_2048.k2, (long long)fold_2048.k1));
	__m512i a0, a1, a2, a3;

	a0 = _mm512_xor_si512(_mm512_loadu_si512(p),
			      _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)crc)));
	a1 = _mm512_loadu_si512(p + 64);
	a2 = _mm512_loadu_si512(p + 128);
	a3 = _mm512_loadu_si512(p + 192);
	p += 256;
	len -= 256;
	while (len >= 256) {
		a0 = fold512x4(a0, k2048, _mm512_loadu_si512(p));
		a1 = fold512x4(a1, k2048, _mm512_loadu_si512(p + 64));
		a2 = fold512x4(a2, k2048, _mm512_loadu_si512(p + 128));
		a3 = fold512x4(a3, k2048, _mm512_loadu_si512(p + 192));
		p += 256;
		len -= 256;
	}
	return fold_finish(a0, a1, a2, a3, p, len);
}

/*
 * raw_fold() that also stores every 64-byte block it loads to d: one pass over the source.
 * Sources are cold (records just read), so the loop prefetches COPY_PREFETCH bytes ahead, never
 * past the end of src. The last len % 256 bytes are copied with memcpy and folded from the
 * copy, which that memcpy left in L1. len must be at least 256.
 * Measured (sluice-bench crc, Zen 4): the prefetch lifts cold 16-100 KiB records from about
 * 0.75x to 1.0x memcpy's rate; aligning d to 64 bytes first gained nothing, so d is not aligned.
 */
FOLD_TARGET static uint32_t raw_copy_fold(uint32_t crc, uint8_t *d, const uint8_t *p, size_t len)
{
	__m512i k2048 = _mm512_broadcast_i32x4(
		_mm_set_epi64x((long long)fold_2048.k2, (long long)fold_2048.k1));
	__m512i a0, a1, a2, a3;

	a0 = _mm512_loadu_si512(p);
	a1 = _mm512_loadu_si512(p + 64);
	a2 = _mm512_loadu_si512(p + 128);
	a3 = _mm512_loadu_si512(p + 192);
	_mm512_storeu_si512(d, a0);
	_mm512_storeu_si512(d + 64, a1);
	_mm512_storeu_si512(d + 128, a2);
	_mm512_storeu_si512(d + 192, a3);
	a0 = _mm512_xor_si512(a0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)crc)));
	p += 256;
	d += 256;
	len -= 256;
	while (len >= 256) {
		__m512i b0, b1, b2, b3;

		if (len >= COPY_PREFETCH + 256) {
			_mm_prefetch((const char *)p + COPY_PREFETCH, _MM_HINT_T0);
			_mm_prefetch((const char *)p + COPY_PREFETCH + 64, _MM_HINT_T0);
			_mm_prefetch((const char *)p + COPY_PREFETCH + 128, _MM_HINT_T0);
			_mm_prefetch((const char *)p + COPY_PREFETCH + 192, _MM_HINT_T0);
		}
		b0 = _mm512_loadu_si512(p);
		b1 = _mm512_loadu_si512(p + 64);
		b2 = _mm512_loadu_si512(p + 128);
		b3 = _mm512_loadu_si512(p + 192);
		_mm512_storeu_si512(d, b0);
		_mm512_storeu_si512(d + 64, b1);
		_mm512_storeu_si512(d + 128, b2);
		_mm512_storeu_si512(d + 192, b3);
		a0 = fold512x4(a0, k2048, b0);
		a1 = fold512x4(a1, k2048, b1);
		a2 = fold512x4(a2, k2048, b2);
		a3 = fold512x4(a3, k2048, b3);
		p += 256;
		d += 256;
		len -= 256;
	}
	memcpy(d, p, len);
	return fold_finish(a0, a1, a2, a3, d, len);
}
#endif

uint32_t crc32c_extend_table(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&init_once, crc32c_init);
	return ~raw_table(~crc, buf, len);
}

uint32_t crc32c_extend_hw(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&init_once, crc32c_init);
#ifdef CRC32C_HAVE_X86
	if (hw_ok)
		return ~raw_hw(~crc, buf, len);
#endif
	return ~raw_table(~crc, buf, len);
}

uint32_t crc32c_extend_fold(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&init_once, crc32c_init);
#ifdef CRC32C_HAVE_X86
	if (fold_ok && len >= 256)
		return ~raw_fold(~crc, buf, len);
#endif
	return crc32c_extend_hw(crc, buf, len);
}

bool crc32c_fold_available(void)
{
	pthread_once(&init_once, crc32c_init);
	return fold_ok;
}

bool crc32c_hw_available(void)
{
	pthread_once(&init_once, crc32c_init);
	return hw_ok;
}

const char *crc32c_impl_name(void)
{
	pthread_once(&init_once, crc32c_init);
	return fold_ok ? "vpclmulqdq" : hw_ok ? "sse4.2" : "table";
}

uint32_t crc32c_extend(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&init_once, crc32c_init);
#ifdef CRC32C_HAVE_X86
	if (fold_ok && len >= FOLD_MIN_LEN)
		return ~raw_fold(~crc, buf, len);
	if (hw_ok)
		return ~raw_hw(~crc, buf, len);
#endif
	return ~raw_table(~crc, buf, len);
}

/* memcpy then the table, a few KiB at a time so the table reads the copy from L1. */
static uint32_t raw_copy_table(uint32_t crc, uint8_t *d, const uint8_t *p, size_t len)
{
	while (len > 0) {
		size_t n = len < 4096 ? len : 4096;

		memcpy(d, p, n);
		crc = raw_table(crc, d, n);
		d += n;
		p += n;
		len -= n;
	}
	return crc;
}

uint32_t crc32c_copy_table(uint32_t crc, void *dst, const void *src, size_t len)
{
	pthread_once(&init_once, crc32c_init);
	return ~raw_copy_table(~crc, dst, src, len);
}

uint32_t crc32c_copy_hw(uint32_t crc, void *dst, const void *src, size_t len)
{
	pthread_once(&init_once, crc32c_init);
#ifdef CRC32C_HAVE_X86
	if (hw_ok)
		return ~raw_copy_hw(~crc, dst, src, len);
#endif
	return ~raw_copy_table(~crc, dst, src, len);
}

uint32_t crc32c_copy_fold(uint32_t crc, void *dst, const void *src, size_t len)
{
	pthread_once(&init_once, crc32c_init);
#ifdef CRC32C_HAVE_X86
	if (fold_ok && len >= 256)
		return ~raw_copy_fold(~crc, dst, src, len);
#endif
	return crc32c_copy_hw(crc, dst, src, len);
}

uint32_t crc32c_copy(uint32_t crc, void *dst, const void *src, size_t len)
{
	pthread_once(&init_once, crc32c_init);
#ifdef CRC32C_HAVE_X86
	if (fold_ok && len >= FOLD_MIN_LEN)
		return ~raw_copy_fold(~crc, dst, src, len);
	if (hw_ok)
		return ~raw_copy_hw(~crc, dst, src, len);
#endif
	return ~raw_copy_table(~crc, dst, src, len);
}
