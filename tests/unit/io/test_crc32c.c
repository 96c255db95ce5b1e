/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for io/crc32c.c: RFC 3720 vectors, every implementation, masking, extension, copy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/skip.h"

#include "io/crc32c.h"

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);

static void check_rfc3720(crc_fn fn)
{
	uint8_t buf[48];

	/* RFC 3720 B.4: 32 bytes of zeros, of ones, incrementing, decrementing. */
	memset(buf, 0, 32);
	assert_int_equal(fn(0, buf, 32), 0x8a9136aa);
	memset(buf, 0xff, 32);
	assert_int_equal(fn(0, buf, 32), 0x62a8ab43);
	for (int i = 0; i < 32; i++)
		buf[i] = (uint8_t)i;
	assert_int_equal(fn(0, buf, 32), 0x46dd794e);
	for (int i = 0; i < 32; i++)
		buf[i] = (uint8_t)(31 - i);
	assert_int_equal(fn(0, buf, 32), 0x113fdb5c);
	/* The iSCSI read command PDU of B.4. */
	static const uint8_t pdu[48] = {
		0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
		0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	};
	assert_int_equal(fn(0, pdu, sizeof(pdu)), 0xd9963a56);
	/* The common check value of "123456789". */
	assert_int_equal(fn(0, "123456789", 9), 0xe3069283);
	assert_int_equal(fn(0, "", 0), 0);
}

static void test_rfc3720_table(void **state)
{
	check_rfc3720(crc32c_extend_table);
}

static void test_rfc3720_hw(void **state)
{
	if (!crc32c_hw_available())
		SL_SKIP("[cpu] this CPU has no CRC32C instruction");
	check_rfc3720(crc32c_extend_hw);
}

static void test_rfc3720_fold(void **state)
{
	check_rfc3720(crc32c_extend_fold);
}

static void test_rfc3720_dispatch(void **state)
{
	check_rfc3720(crc32c_extend);
	assert_string_equal(crc32c_impl_name(), crc32c_fold_available() ? "vpclmulqdq"
						: crc32c_hw_available() ? "sse4.2"
									: "table");
}

/*
 * Every path agrees with the table on random buffers, at every alignment, for every length up to
 * 2100 (each fold tail and 3-way block boundary) and many beyond, from non-zero initial CRCs.
 */
static void test_hw_table_agree(void **state)
{
	size_t n = 3 * 2048 * 3 + 999;
	uint8_t *buf = malloc(n + 16);
	uint64_t x = 0x9e3779b97f4a7c15ull;

	assert_non_null(buf);
	for (size_t i = 0; i < n + 16; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		buf[i] = (uint8_t)x;
	}
	for (size_t off = 0; off < 9; off++)
		for (size_t len = 0; len <= n; len += len < 2100 ? 1 : 331) {
			uint32_t init = (uint32_t)(len * 2654435761u);
			uint32_t t = crc32c_extend_table(init, buf + off, len);

			assert_int_equal(crc32c_extend(init, buf + off, len), t);
			assert_int_equal(crc32c_extend_hw(init, buf + off, len), t);
			assert_int_equal(crc32c_extend_fold(init, buf + off, len), t);
		}
	free(buf);
}

/* Extending in pieces equals one pass. */
static void test_extend_split(void **state)
{
	uint8_t buf[20000];

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 7 + 3);
	uint32_t whole = crc32c(buf, sizeof(buf));
	for (size_t cut = 0; cut <= sizeof(buf); cut += 1237) {
		uint32_t a = crc32c_extend(0, buf, cut);

		assert_int_equal(crc32c_extend(a, buf + cut, sizeof(buf) - cut), whole);
		assert_int_equal(crc32c_extend_table(crc32c_extend_table(0, buf, cut), buf + cut,
						     sizeof(buf) - cut),
				 whole);
	}
}

/* crc32c_copy: the same CRC as crc32c_extend, and the same bytes, at every length and offset. */
static void test_copy(void **state)
{
	(void)state;
	enum { N = 20000 };
	uint8_t *src = malloc(N + 64), *dst = malloc(N + 64);
	assert_non_null(src);
	assert_non_null(dst);
	for (size_t i = 0; i < N + 64; i++)
		src[i] = (uint8_t)(i * 131 + (i >> 7));
	const size_t lens[] = { 0, 1, 7, 63, 64, 255, 256, 4095, 4096, 4097, 8192, 12345, N };
	for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
		for (size_t off = 0; off < 3; off++) {
			memset(dst, 0xee, N + 64);
			uint32_t want = crc32c_extend(0x12345678u, src + off, lens[k]);
			uint32_t got = crc32c_copy(0x12345678u, dst + 1, src + off, lens[k]);
			assert_int_equal(got, want);
			assert_memory_equal(dst + 1, src + off, lens[k]);
			assert_int_equal(dst[0], 0xee); /* nothing outside the copy */
			assert_int_equal(dst[1 + lens[k]], 0xee);
		}
	}
	free(src);
	free(dst);
}

typedef uint32_t (*copy_fn)(uint32_t, void *, const void *, size_t);

/* The crc32c_copy implementations this CPU runs (the _hw and _fold ones fall back otherwise). */
static size_t copy_fns(copy_fn fns[4], const char *names[4])
{
	size_t n = 0;

	fns[n] = crc32c_copy;
	names[n++] = "crc32c_copy";
	fns[n] = crc32c_copy_table;
	names[n++] = "crc32c_copy_table";
	if (crc32c_hw_available()) {
		fns[n] = crc32c_copy_hw;
		names[n++] = "crc32c_copy_hw";
	}
	if (crc32c_fold_available()) {
		fns[n] = crc32c_copy_fold;
		names[n++] = "crc32c_copy_fold";
	}
	return n;
}

/* Bytes either side of the destination that must stay untouched; the most dst offset, plus one. */
#define GUARD	   64
#define MAX_OFF	   64
#define GUARD_BYTE 0xa5

static void fill_random(uint8_t *buf, size_t n, uint64_t seed)
{
	uint64_t x = seed | 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		buf[i] = (uint8_t)(x >> 24);
	}
}

/*
 * One crc32c_copy of len bytes from src to dbuf + GUARD + doff (dbuf holds GUARD + MAX_OFF + len
 * + GUARD bytes): the CRC is crc32c_extend's, the copy is exact, every other byte of dbuf keeps
 * GUARD_BYTE.
 */
static void check_copy(copy_fn fn, const char *name, uint32_t init, const uint8_t *src, size_t len,
		       uint8_t *dbuf, size_t doff)
{
	size_t total = GUARD + MAX_OFF + len + GUARD;
	uint8_t *dst = dbuf + GUARD + doff;
	uint32_t want = crc32c_extend(init, src, len);
	uint32_t got;

	memset(dbuf, GUARD_BYTE, total);
	got = fn(init, dst, src, len);
	if (got != want)
		fail_msg("%s: len %zu, src %% 64 = %zu, dst offset %zu, crc %#x: got %#x, want %#x",
			 name, len, (size_t)((uintptr_t)src & 63), doff, init, got, want);
	if (len && memcmp(dst, src, len) != 0)
		fail_msg("%s: len %zu, dst offset %zu: the copy differs from the source", name, len,
			 doff);
	for (uint8_t *q = dbuf; q < dst; q++)
		if (*q != GUARD_BYTE)
			fail_msg("%s: len %zu, dst offset %zu: byte %td before dst written", name,
				 len, doff, dst - q);
	for (uint8_t *q = dst + len; q < dbuf + total; q++)
		if (*q != GUARD_BYTE)
			fail_msg("%s: len %zu, dst offset %zu: byte %td after dst written", name,
				 len, doff, q - (dst + len));
}

static const uint32_t copy_inits[] = { 0, 0xffffffffu, 0x12345678u, 0x8a9136aau };
#define N_INITS (sizeof(copy_inits) / sizeof(copy_inits[0]))

/* Every length up to 1100 (each fold, 3-way and tail boundary), for each initial CRC. */
static void test_copy_every_length(void **state)
{
	enum { MAXLEN = 1100 };
	copy_fn fns[4];
	const char *names[4];
	size_t nf = copy_fns(fns, names);
	uint8_t *src = malloc(MAXLEN + 64), *dbuf = malloc(GUARD + MAX_OFF + MAXLEN + GUARD);

	(void)state;
	assert_non_null(src);
	assert_non_null(dbuf);
	fill_random(src, MAXLEN + 64, 0x9e3779b97f4a7c15ull);
	for (size_t f = 0; f < nf; f++)
		for (size_t k = 0; k < N_INITS; k++)
			for (size_t len = 0; len <= MAXLEN; len++)
				check_copy(fns[f], names[f], copy_inits[k], src + (len % 7), len,
					   dbuf, (len * 13) % MAX_OFF);
	free(src);
	free(dbuf);
}

/* Random lengths (a fixed seed) up to 1 MiB, from random offsets of a random source. */
static void test_copy_long(void **state)
{
	enum { MAXLEN = 1 << 20, ROUNDS = 48 };
	copy_fn fns[4];
	const char *names[4];
	size_t nf = copy_fns(fns, names);
	uint8_t *src = malloc(MAXLEN + 64), *dbuf = malloc(GUARD + MAX_OFF + MAXLEN + GUARD);
	uint64_t x = 0x2545f4914f6cdd1dull;

	(void)state;
	assert_non_null(src);
	assert_non_null(dbuf);
	fill_random(src, MAXLEN + 64, 42);
	for (int r = 0; r < ROUNDS; r++) {
		size_t len, soff, doff;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		/* half of them up to 64 KiB, the rest up to 1 MiB; the last one 1 MiB exactly */
		len = r == ROUNDS - 1 ? MAXLEN : (size_t)(x % (r & 1 ? MAXLEN : 65536));
		soff = (size_t)(x >> 40) % 64;
		doff = (size_t)(x >> 50) % MAX_OFF;
		for (size_t f = 0; f < nf; f++)
			check_copy(fns[f], names[f], copy_inits[r % N_INITS], src + soff, len, dbuf,
				   doff);
	}
	free(src);
	free(dbuf);
}

/* Every source and destination alignment, around the fold and the 3-way block sizes. */
static void test_copy_alignment(void **state)
{
	static const size_t lens[] = { 255, 256, 257, 4095, 16391 };
	enum { MAXLEN = 16391 };
	copy_fn fns[4];
	const char *names[4];
	size_t nf = copy_fns(fns, names);
	/* C11: the size is a multiple of the alignment */
	uint8_t *src = aligned_alloc(64, (MAXLEN + 128 + 63) & ~(size_t)63);
	uint8_t *dbuf = aligned_alloc(64, (GUARD + MAX_OFF + MAXLEN + GUARD + 63) & ~(size_t)63);

	(void)state;
	assert_non_null(src);
	assert_non_null(dbuf);
	fill_random(src, MAXLEN + 128, 7);
	for (size_t f = 0; f < nf; f++)
		for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++)
			for (size_t soff = 0; soff < 64; soff++)
				for (size_t doff = 0; doff < MAX_OFF; doff++)
					check_copy(fns[f], names[f],
						   copy_inits[(soff + doff) % N_INITS], src + soff,
						   lens[k], dbuf, doff);
	free(src);
	free(dbuf);
}

static void test_mask(void **state)
{
	/* masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 */
	assert_int_equal(crc32c_mask(0), 0xa282ead8);
	assert_int_equal(crc32c_mask(0x8a9136aa),
			 ((0x8a9136aau >> 15) | (0x8a9136aau << 17)) + 0xa282ead8u);
	for (uint32_t c = 1; c < 0xffff0000u; c += 0x10001u * 7)
		assert_int_equal(crc32c_unmask(crc32c_mask(c)), c);
	/* The header TensorFlow wrote for a 24-byte record (pwnall singles.tfrecords, record 0). */
	uint8_t len24[8] = { 24, 0, 0, 0, 0, 0, 0, 0 };
	assert_int_equal(crc32c_mask(crc32c(len24, 8)), 0x224b7fa3);
	assert_int_equal(crc32c_mask(crc32c_extend_table(0, len24, 8)), 0x224b7fa3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rfc3720_table),
		cmocka_unit_test(test_rfc3720_hw),
		cmocka_unit_test(test_rfc3720_fold),
		cmocka_unit_test(test_rfc3720_dispatch),
		cmocka_unit_test(test_hw_table_agree),
		cmocka_unit_test(test_extend_split),
		cmocka_unit_test(test_mask),
		cmocka_unit_test(test_copy),
		cmocka_unit_test(test_copy_every_length),
		cmocka_unit_test(test_copy_long),
		cmocka_unit_test(test_copy_alignment),
	};

	return SL_RUN_GROUP(tests, NULL, NULL);
}
