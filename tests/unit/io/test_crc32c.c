/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for io/crc32c.c: RFC 3720 vectors, both implementations, masking, extension. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

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
		skip();
	check_rfc3720(crc32c_extend_hw);
}

static void test_rfc3720_fold(void **state)
{
	check_rfc3720(crc32c_extend_fold);
}

static void test_rfc3720_dispatch(void **state)
{
	check_rfc3720(crc32c_extend);
	assert_string_equal(crc32c_impl_name(), crc32c_fold_available() ? "vpclmulqdq" :
						crc32c_hw_available()   ? "sse4.2" :
									  "table");
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
	const size_t lens[] = {0, 1, 7, 63, 64, 255, 256, 4095, 4096, 4097, 8192, 12345, N};
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

static void test_mask(void **state)
{
	/* masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 */
	assert_int_equal(crc32c_mask(0), 0xa282ead8);
	assert_int_equal(crc32c_mask(0x8a9136aa), ((0x8a9136aau >> 15) | (0x8a9136aau << 17)) +
							  0xa282ead8u);
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
		cmocka_unit_test(test_rfc3720_table),  cmocka_unit_test(test_rfc3720_hw),
		cmocka_unit_test(test_rfc3720_fold),   cmocka_unit_test(test_rfc3720_dispatch),
		cmocka_unit_test(test_hw_table_agree),
		cmocka_unit_test(test_extend_split),   cmocka_unit_test(test_mask),
		cmocka_unit_test(test_copy),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
