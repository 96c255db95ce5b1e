/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for io/pbex_flat.c: the flat form of decoded features (the record cache's decoded level). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "io/pbex.h"

static const char *const names[] = { "i", "f", "s", "e", "absent", "none" };
#define N (sizeof(names) / sizeof(names[0]))

/* One record: int64s (negatives too), floats (NaN, -0.0), bytes (an empty value), Feature{}. */
static void encode(struct pbex_enc *e)
{
	static const int64_t i[] = { 1, -1, INT64_MIN, 300 };
	static const float f[] = { 1.5f, -0.0f, __builtin_nanf("7") };
	static const char *const s[] = { "hi", "", "\xff\x00z" };
	static const size_t sl[] = { 2, 0, 3 };
	pbex_enc_init(e);
	pbex_enc_reset(e, false);
	pbex_enc_add_int64s(e, "i", i, 4);
	pbex_enc_add_floats(e, "f", f, 3);
	pbex_enc_add_bytes(e, "s", (const void *const *)s, sl, 3);
	pbex_enc_add_int64s(e, "e", NULL, 0);
	pbex_enc_add_empty(e, "none");
	assert_int_equal(pbex_enc_finish(e), 0);
}

static struct pbex_enc rec; /* the decoded features view it: freed at the end of each test */

static void decode(struct pbex_feature *out, uint8_t **ret_flat, size_t *ret_len)
{
	size_t lens[N];
	for (size_t k = 0; k < N; k++)
		lens[k] = strlen(names[k]);
	struct pbex_schema *sc = pbex_schema_create(names, lens, N);
	assert_non_null(sc);
	encode(&rec);
	assert_int_equal(pbex_decode_example(sc, rec.buf, rec.len, out, NULL), 0);
	size_t need = pbex_flat_size(out, N);
	uint64_t *buf = calloc(need / 8 + 1, 8);
	assert_non_null(buf);
	assert_int_equal(pbex_flatten(out, N, (uint8_t *)buf, need - 1), -ENOSPC);
	assert_int_equal(pbex_flatten(out, N, (uint8_t *)buf + 1, need), -EINVAL);
	assert_int_equal(pbex_flatten(out, N, (uint8_t *)buf, need), (long)need);
	*ret_flat = (uint8_t *)buf;
	*ret_len = need;
	pbex_schema_destroy(sc);
}

static void test_round_trip(void **state)
{
	struct pbex_feature d[N], v[N];
	uint8_t *flat;
	size_t len;
	decode(d, &flat, &len);
	assert_int_equal(pbex_flat_view(flat, len, N, v), 0);
	for (size_t k = 0; k < N; k++) {
		assert_int_equal(v[k].present, d[k].present);
		assert_int_equal(v[k].kind, d[k].kind);
		assert_int_equal(v[k].count, d[k].count);
		assert_int_equal(v[k].bytes_len, d[k].bytes_len);
	}
	assert_false(v[4].present);
	assert_true(v[5].present);
	assert_int_equal(v[5].kind, PBEX_KIND_NONE);
	int64_t i[4];
	pbex_feature_int64s(&v[0], i);
	assert_int_equal(i[0], 1);
	assert_int_equal(i[1], -1);
	assert_true(i[2] == INT64_MIN);
	assert_int_equal(i[3], 300);
	float f[3], fd[3];
	pbex_feature_floats(&v[1], f);
	pbex_feature_floats(&d[1], fd);
	assert_memory_equal(f, fd, sizeof(f)); /* bit for bit: -0.0 and the NaN's payload */
	struct pbex_bytes_iter it;
	const uint8_t *p;
	size_t l;
	pbex_bytes_iter_init(&it, &v[2]);
	assert_true(pbex_bytes_iter_next(&it, &p, &l));
	assert_int_equal(l, 2);
	assert_memory_equal(p, "hi", 2);
	assert_true(pbex_bytes_iter_next(&it, &p, &l));
	assert_int_equal(l, 0);
	assert_true(pbex_bytes_iter_next(&it, &p, &l));
	assert_int_equal(l, 3);
	assert_memory_equal(p, "\xff\x00z", 3);
	assert_false(pbex_bytes_iter_next(&it, &p, &l));
	/* one feature's values as stored */
	struct pbex_flat_values fv = { 0 };
	assert_int_equal(pbex_flat_get(flat, len, 0, &fv), 0);
	assert_int_equal(fv.kind, PBEX_KIND_INT64);
	assert_int_equal(fv.count, 4);
	assert_int_equal(fv.len, 32);
	assert_memory_equal(fv.values, i, 32);
	assert_int_equal(pbex_flat_get(flat, len, N, &fv), -EBADMSG); /* past the heads */
	free(flat);
	pbex_enc_fini(&rec);
}

static void test_damage_refused(void **state)
{
	struct pbex_feature d[N], v[N];
	uint8_t *flat;
	size_t len;
	decode(d, &flat, &len);
	/* cut: the last values run past the end */
	assert_int_equal(pbex_flat_view(flat, len - 1, N, v), -EBADMSG);
	/* fewer bytes than the heads */
	assert_int_equal(pbex_flat_view(flat, N * 16 - 1, N, v), -EBADMSG);
	/* a kind that does not exist */
	uint8_t k = flat[1];
	flat[1] = 9;
	assert_int_equal(pbex_flat_view(flat, len, N, v), -EBADMSG);
	flat[1] = k;
	/* a count that does not match the values' length */
	uint32_t c;
	memcpy(&c, flat + 4, 4);
	c++;
	memcpy(flat + 4, &c, 4);
	assert_int_equal(pbex_flat_view(flat, len, N, v), -EBADMSG);
	c--;
	memcpy(flat + 4, &c, 4);
	/* a bytes value's length that does not add up */
	struct pbex_flat_values fv = { 0 };
	assert_int_equal(pbex_flat_get(flat, len, 2, &fv), 0);
	uint8_t *lens = flat + (fv.values - flat);
	lens[0]++;
	assert_int_equal(pbex_flat_view(flat, len, N, v), -EBADMSG);
	lens[0]--;
	assert_int_equal(pbex_flat_view(flat, len, N, v), 0);
	free(flat);
	pbex_enc_fini(&rec);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_damage_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
