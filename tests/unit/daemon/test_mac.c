/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for daemon/mac.c: SHA-256 (FIPS 180-4's examples) and HMAC-SHA256 (RFC 4231). */
#include "daemon/mac.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void hexs(const uint8_t *p, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", p[i]);
}

static void sha(const void *data, size_t len, size_t chunk, const char *want)
{
	struct dmn_sha256 s;
	uint8_t out[DMN_SHA256_LEN];
	char h[2 * DMN_SHA256_LEN + 1];
	dmn_sha256_init(&s);
	for (size_t i = 0; i < len; i += chunk) /* fed in pieces: the buffering is tested too */
		dmn_sha256_update(&s, (const uint8_t *)data + i, len - i < chunk ? len - i : chunk);
	dmn_sha256_final(&s, out);
	hexs(out, sizeof(out), h);
	assert_string_equal(h, want);
}

static void test_sha256(void **state)
{
	(void)state;
	static const size_t chunks[] = { 1, 3, 63, 64, 65, 1000 };
	for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
		sha("", 0, chunks[c],
		    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
		sha("abc", 3, chunks[c],
		    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
		const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
		sha(m448, strlen(m448), chunks[c],
		    "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	}
	char *a = malloc(1000000);
	assert_non_null(a);
	memset(a, 'a', 1000000);
	sha(a, 1000000, 4096, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	free(a);
}

static void hm(const uint8_t *key, size_t kl, const char *data, const char *want)
{
	uint8_t out[DMN_SHA256_LEN];
	char h[2 * DMN_SHA256_LEN + 1];
	dmn_hmac_sha256(key, kl, data, strlen(data), out);
	hexs(out, sizeof(out), h);
	assert_string_equal(h, want);
}

static void test_hmac(void **state)
{
	(void)state;
	uint8_t k[131];
	memset(k, 0x0b, 20); /* RFC 4231 test case 1 */
	hm(k, 20, "Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
	hm((const uint8_t *)"Jefe", 4, "what do ya want for nothing?", /* case 2 */
	   "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
	memset(k, 0xaa, 131); /* case 6: a key longer than the block is hashed first */
	hm(k, 131, "Test Using Larger Than Block-Size Key - Hash Key First",
	   "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
	uint8_t x[4] = { 1, 2, 3, 4 }, y[4] = { 1, 2, 3, 5 };
	assert_true(dmn_mac_equal(x, x, 4));
	assert_false(dmn_mac_equal(x, y, 4));
	assert_true(dmn_mac_equal(x, y, 3));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sha256),
		cmocka_unit_test(test_hmac),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
