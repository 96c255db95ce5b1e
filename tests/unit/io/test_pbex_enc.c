/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for io/pbex_enc.c: exact bytes for small records, round trips through the decoder. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "io/pbex.h"

static struct pbex_schema *schema_of(const char *const *names, size_t n)
{
	size_t lens[16];

	assert_true(n <= 16);
	for (size_t i = 0; i < n; i++)
		lens[i] = strlen(names[i]);
	return pbex_schema_create(names, lens, n);
}

static void test_example_exact_bytes(void **state)
{
	/*
	 * Example{features{feature{key:"a" value{int64_list{value:[1, -1]}}}
	 *                  feature{key:"f" value{float_list{value:[1.0]}}}
	 *                  feature{key:"s" value{bytes_list{value:["hi", ""]}}}
	 *                  feature{key:"e" value{}}}}
	 * computed by hand from the wire format (and as google.protobuf serializes it)
	 */
	static const uint8_t want[] = {
		0x0a, 0x3b,				  /* features, 59 bytes */
		0x0a, 0x14, 0x0a, 0x01, 'a',  0x12, 0x0f, /* entry "a", Feature 15 bytes */
		0x1a, 0x0d, 0x0a, 0x0b, 0x01,		  /* int64_list, packed 11 bytes: 1 */
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, /* -1 */
		0x0a, 0x0d, 0x0a, 0x01, 'f',  0x12, 0x08,	/* entry "f", Feature 8 bytes */
		0x12, 0x06, 0x0a, 0x04, 0x00, 0x00, 0x80, 0x3f, /* float_list, packed 1.0f */
		0x0a, 0x0d, 0x0a, 0x01, 's',  0x12, 0x08,	/* entry "s", Feature 8 bytes */
		0x0a, 0x06, 0x0a, 0x02, 'h',  'i',  0x0a, 0x00, /* bytes_list "hi", "" */
		0x0a, 0x05, 0x0a, 0x01, 'e',  0x12, 0x00,	/* entry "e", Feature{} */
	};
	static const int64_t iv[] = { 1, -1 };
	static const float fv[] = { 1.0f };
	const void *bv[] = { "hi", "" };
	static const size_t bl[] = { 2, 0 };
	struct pbex_enc e;

	pbex_enc_init(&e);
	pbex_enc_reset(&e, false);
	pbex_enc_add_int64s(&e, "a", iv, 2);
	pbex_enc_add_floats(&e, "f", fv, 1);
	pbex_enc_add_bytes(&e, "s", bv, bl, 2);
	pbex_enc_add_empty(&e, "e");
	assert_int_equal(pbex_enc_finish(&e), 0);
	assert_int_equal(e.len, sizeof(want));
	assert_memory_equal(e.buf, want, sizeof(want));

	/* an Example without features is the empty record (as google.protobuf writes it) */
	pbex_enc_reset(&e, false);
	assert_int_equal(pbex_enc_finish(&e), 0);
	assert_int_equal(e.len, 0);
	/* empty lists: the kind alone */
	pbex_enc_reset(&e, false);
	pbex_enc_add_int64s(&e, "a", NULL, 0);
	assert_int_equal(pbex_enc_finish(&e), 0);
	assert_int_equal(e.len, 11);
	assert_memory_equal(e.buf,
			    ((const uint8_t[]){ 0x0a, 0x09, 0x0a, 0x07, 0x0a, 0x01, 'a', 0x12, 0x02,
						0x1a, 0x00 }),
			    11);
	pbex_enc_fini(&e);
	pbex_enc_fini(NULL);
}

static void test_sequence_exact_bytes(void **state)
{
	/*
	 * SequenceExample{context{feature{key:"c" value{int64_list{value:[2]}}}}
	 *                 feature_lists{feature_list{key:"L" value{
	 *                     feature{int64_list{value:[3]}} feature{bytes_list{}}}}
	 *                               feature_list{key:"E" value{}}}}
	 */
	static const uint8_t want[] = {
		0x0a, 0x0c,				  /* context, 12 bytes */
		0x0a, 0x0a, 0x0a, 0x01, 'c',  0x12, 0x05, /* entry "c", Feature 5 bytes */
		0x1a, 0x03, 0x0a, 0x01, 0x02,		  /* int64_list [2] */
		0x12, 0x19,				  /* feature_lists, 25 bytes */
		0x0a, 0x10, 0x0a, 0x01, 'L',  0x12, 0x0b, /* entry "L", FeatureList 11 bytes */
		0x0a, 0x05, 0x1a, 0x03, 0x0a, 0x01, 0x03, /* step: int64_list [3] */
		0x0a, 0x02, 0x0a, 0x00,			  /* step: bytes_list {} */
		0x0a, 0x05, 0x0a, 0x01, 'E',  0x12, 0x00, /* entry "E", FeatureList {} */
	};
	static const int64_t two = 2, three = 3;
	struct pbex_enc e;

	pbex_enc_init(&e);
	pbex_enc_reset(&e, true);
	pbex_enc_add_int64s(&e, "c", &two, 1);
	pbex_enc_list_begin(&e, "L");
	pbex_enc_step_int64s(&e, &three, 1);
	pbex_enc_step_bytes(&e, NULL, NULL, 0);
	pbex_enc_list_end(&e);
	pbex_enc_list_begin(&e, "E");
	pbex_enc_list_end(&e);
	assert_int_equal(pbex_enc_finish(&e), 0);
	assert_int_equal(e.len, sizeof(want));
	assert_memory_equal(e.buf, want, sizeof(want));

	/* no context: the field is left out */
	pbex_enc_reset(&e, true);
	pbex_enc_list_begin(&e, "E");
	pbex_enc_list_end(&e);
	assert_int_equal(pbex_enc_finish(&e), 0);
	assert_int_equal(e.len, 9);
	assert_memory_equal(
		e.buf, ((const uint8_t[]){ 0x12, 0x07, 0x0a, 0x05, 0x0a, 0x01, 'E', 0x12, 0x00 }),
		9);
	pbex_enc_fini(&e);
}

/* An Example with long values (lengths of 2 and 3 bytes) decodes to what was encoded. */
static void test_example_round_trip(void **state)
{
	static const char *const names[] = { "ids", "w", "img", "none", "label" };
	struct pbex_schema *s = schema_of(names, 5);
	struct pbex_feature out[5];
	struct pbex_bytes_iter it;
	struct pbex_enc e;
	int64_t ids[300], got[300], label = 7;
	float w[100], gotf[100];
	static uint8_t img[70000];
	const void *bv[2] = { img, "tail" };
	size_t bl[2] = { sizeof(img), 4 }, l;
	const uint8_t *d;

	for (int i = 0; i < 300; i++)
		ids[i] = (int64_t)i * 0x1234567 - 99999999;
	for (int i = 0; i < 100; i++)
		w[i] = (float)i / 3.0f;
	for (size_t i = 0; i < sizeof(img); i++)
		img[i] = (uint8_t)(i * 31);
	pbex_enc_init(&e);
	for (int round = 0; round < 2; round++) { /* the buffer is reused */
		pbex_enc_reset(&e, false);
		pbex_enc_add_int64s(&e, "ids", ids, 300);
		pbex_enc_add_floats(&e, "w", w, 100);
		pbex_enc_add_bytes(&e, "img", bv, bl, 2);
		pbex_enc_add_empty(&e, "none");
		pbex_enc_add_int64s(&e, "label", &label, 1);
		assert_int_equal(pbex_enc_finish(&e), 0);
		assert_int_equal(pbex_decode_example(s, e.buf, e.len, out, NULL), 0);
		assert_int_equal(out[0].count, 300);
		pbex_feature_int64s(&out[0], got);
		assert_memory_equal(got, ids, sizeof(ids));
		assert_int_equal(out[1].count, 100);
		pbex_feature_floats(&out[1], gotf);
		assert_memory_equal(gotf, w, sizeof(w));
		assert_int_equal(out[2].count, 2);
		assert_int_equal(out[2].bytes_len, sizeof(img) + 4);
		pbex_bytes_iter_init(&it, &out[2]);
		assert_true(pbex_bytes_iter_next(&it, &d, &l));
		assert_int_equal(l, sizeof(img));
		assert_memory_equal(d, img, sizeof(img));
		assert_true(pbex_bytes_iter_next(&it, &d, &l));
		assert_int_equal(l, 4);
		assert_memory_equal(d, "tail", 4);
		assert_false(pbex_bytes_iter_next(&it, &d, &l));
		assert_true(out[3].present);
		assert_int_equal(out[3].kind, PBEX_KIND_NONE);
		pbex_feature_int64s(&out[4], got);
		assert_int_equal(got[0], 7);
	}
	pbex_enc_fini(&e);
	pbex_schema_destroy(s);
}

static void test_sequence_round_trip(void **state)
{
	static const char *const cn[] = { "ctx" }, *const ln[] = { "frames", "labels" };
	struct pbex_schema *cs = schema_of(cn, 1), *ls = schema_of(ln, 2);
	struct pbex_feature ctx[1], step;
	struct pbex_feature_list lists[2];
	struct pbex_list_iter it;
	struct pbex_enc e;
	float fr[3][200], got[200];
	int64_t lab = 0, gl;
	const char *name = "x";
	size_t len = 1;
	int n = 0;

	for (int t = 0; t < 3; t++)
		for (int i = 0; i < 200; i++)
			fr[t][i] = (float)(t * 1000 + i);
	pbex_enc_init(&e);
	pbex_enc_reset(&e, true);
	pbex_enc_add_bytes(&e, "ctx", (const void *const *)&name, &len, 1);
	pbex_enc_list_begin(&e, "frames");
	for (int t = 0; t < 3; t++)
		pbex_enc_step_floats(&e, fr[t], 200);
	pbex_enc_list_end(&e);
	pbex_enc_list_begin(&e, "labels");
	for (int t = 0; t < 3; t++) {
		lab = -t;
		pbex_enc_step_int64s(&e, &lab, 1);
	}
	pbex_enc_list_end(&e);
	assert_int_equal(pbex_enc_finish(&e), 0);
	assert_int_equal(pbex_decode_sequence_example(cs, ls, e.buf, e.len, ctx, lists, NULL), 0);
	assert_int_equal(ctx[0].bytes_len, 1);
	assert_int_equal(lists[0].count, 3);
	pbex_list_iter_init(&it, &lists[0]);
	while (pbex_list_iter_next(&it, &step)) {
		assert_int_equal(step.count, 200);
		pbex_feature_floats(&step, got);
		assert_memory_equal(got, fr[n], sizeof(got));
		n++;
	}
	assert_int_equal(n, 3);
	n = 0;
	pbex_list_iter_init(&it, &lists[1]);
	while (pbex_list_iter_next(&it, &step)) {
		pbex_feature_int64s(&step, &gl);
		assert_int_equal(gl, -n);
		n++;
	}
	assert_int_equal(n, 3);
	pbex_enc_fini(&e);
	pbex_schema_destroy(cs);
	pbex_schema_destroy(ls);
}

static void test_calls_out_of_order(void **state)
{
	static const int64_t one = 1;
	struct pbex_enc e;

	pbex_enc_init(&e);
	/* before any reset */
	pbex_enc_add_int64s(&e, "a", &one, 1);
	assert_int_equal(pbex_enc_finish(&e), -EINVAL);
	/* a feature list in an Example */
	pbex_enc_reset(&e, false);
	pbex_enc_list_begin(&e, "l");
	assert_int_equal(pbex_enc_finish(&e), -EINVAL);
	/* a step outside a list; a context feature after the lists; finish inside a list */
	pbex_enc_reset(&e, true);
	pbex_enc_step_int64s(&e, &one, 1);
	assert_int_equal(pbex_enc_finish(&e), -EINVAL);
	pbex_enc_reset(&e, true);
	pbex_enc_list_begin(&e, "l");
	pbex_enc_list_end(&e);
	pbex_enc_add_int64s(&e, "a", &one, 1);
	assert_int_equal(pbex_enc_finish(&e), -EINVAL);
	pbex_enc_reset(&e, true);
	pbex_enc_list_begin(&e, "l");
	assert_int_equal(pbex_enc_finish(&e), -EINVAL);
	pbex_enc_reset(&e, true);
	pbex_enc_list_end(&e);
	assert_int_equal(pbex_enc_finish(&e), -EINVAL);
	/* a reset clears the error */
	pbex_enc_reset(&e, false);
	pbex_enc_add_int64s(&e, "a", &one, 1);
	assert_int_equal(pbex_enc_finish(&e), 0);
	assert_int_equal(e.len, 14);
	pbex_enc_fini(&e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_example_exact_bytes),
		cmocka_unit_test(test_sequence_exact_bytes),
		cmocka_unit_test(test_example_round_trip),
		cmocka_unit_test(test_sequence_round_trip),
		cmocka_unit_test(test_calls_out_of_order),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
