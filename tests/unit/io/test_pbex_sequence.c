/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for io/pbex.c: schemas, foreach walks, SequenceExample, a file written by TensorFlow. */
#include "pbex_wire.h"
#include "tests/unit/skip.h"

/* ---- schema ---------------------------------------------------------------------------- */

static void test_schema(void **state)
{
	static const char *const dup[] = { "a", "b", "a" };
	char names[500][12];
	const char *np[500];
	size_t lens[500];
	struct pbex_schema *s;

	assert_null(schema_of(dup, 3));
	for (int i = 0; i < 500; i++) {
		snprintf(names[i], sizeof(names[i]), i % 2 ? "feature%d" : "f%d", i);
		np[i] = names[i];
		lens[i] = strlen(names[i]);
	}
	lens[0] = 0; /* the empty name */
	s = pbex_schema_create(np, lens, 500);
	assert_non_null(s);
	assert_int_equal(pbex_schema_count(s), 500);
	for (int i = 0; i < 500; i++)
		assert_int_equal(pbex_schema_find(s, names[i], lens[i]), i);
	assert_int_equal(pbex_schema_find(s, "f", 1), 0 - 1);
	assert_int_equal(pbex_schema_find(s, "feature1x", 9), -1);
	assert_int_equal(pbex_schema_find(s, "f0", 2), -1);
	pbex_schema_destroy(s);
	pbex_schema_destroy(NULL);
	s = pbex_schema_create(NULL, NULL, 0);
	assert_non_null(s);
	assert_int_equal(pbex_schema_count(s), 0);
	assert_int_equal(pbex_decode_example(s, (const uint8_t *)"", 0, NULL, NULL), 0);
	pbex_schema_destroy(s);
	assert_string_equal(pbex_kind_name(PBEX_KIND_NONE), "none");
	assert_string_equal(pbex_kind_name(PBEX_KIND_BYTES), "bytes_list");
	assert_string_equal(pbex_kind_name(PBEX_KIND_FLOAT), "float_list");
	assert_string_equal(pbex_kind_name(PBEX_KIND_INT64), "int64_list");
}

static void test_decode_many_features(void **state)
{
	static const char *const names[] = { "f0", "c0", "label", "image/encoded", "absent" };
	struct pbex_feature out[5];
	struct pbex_schema *s = schema_of(names, 5);
	struct wire rec;
	int64_t v;
	float fv;

	rec = FEATURES(ENTRY("label", I64LIST(PACKED(V(1)))), ENTRY("zz", I64LIST(PACKED(V(1)))),
		       ENTRY("f0", FLOATLIST(PACKED(F32(0.5f)))),
		       ENTRY("c0", I64LIST(PACKED(V(-7)))),
		       ENTRY("image/encoded", BYTESLIST(BVAL("jpeg"))));
	assert_int_equal(pbex_decode_example(s, rec.b, rec.n, out, NULL), 0);
	pbex_feature_floats(&out[0], &fv);
	assert_true(fv == 0.5f);
	pbex_feature_int64s(&out[1], &v);
	assert_int_equal(v, -7);
	pbex_feature_int64s(&out[2], &v);
	assert_int_equal(v, 1);
	assert_int_equal(out[3].bytes_len, 4);
	assert_false(out[4].present);
	pbex_schema_destroy(s);
}

/* ---- foreach --------------------------------------------------------------------------- */

struct visit_log {
	char s[512];
	int stop_at;
	int n;
};

static int log_cb(void *ctx, const uint8_t *name, size_t name_len, const struct pbex_feature *f)
{
	struct visit_log *lg = ctx;
	size_t o = strlen(lg->s);

	snprintf(lg->s + o, sizeof(lg->s) - o, "%.*s:%s:%u;", (int)name_len, (const char *)name,
		 pbex_kind_name(f->kind), f->count);
	if (++lg->n == lg->stop_at)
		return 42;
	return 0;
}

static int list_log_cb(void *ctx, const uint8_t *name, size_t name_len,
		       const struct pbex_feature_list *l)
{
	struct visit_log *lg = ctx;
	size_t o = strlen(lg->s);

	snprintf(lg->s + o, sizeof(lg->s) - o, "[%.*s:%u];", (int)name_len, (const char *)name,
		 l->count);
	lg->n++;
	return 0;
}

static void test_foreach_order_and_duplicates(void **state)
{
	struct visit_log lg = { .s = "" };
	struct wire rec;

	rec = CAT(FEATURES(ENTRY("b", I64LIST(PACKED(V(1), V(2)))), ENTRY("a", EMPTY),
			   ENTRY("b", FLOATLIST(PACKED(F32(1.0f))))),
		  FEATURES(ENTRY("c", BYTESLIST(CAT(BVAL("x"), BVAL("y"))))));
	assert_int_equal(pbex_example_foreach(rec.b, rec.n, log_cb, &lg, NULL), 0);
	assert_string_equal(lg.s, "b:int64_list:2;a:none:0;b:float_list:1;c:bytes_list:2;");
	memset(&lg, 0, sizeof(lg));
	lg.stop_at = 2;
	assert_int_equal(pbex_example_foreach(rec.b, rec.n, log_cb, &lg, NULL), 42);
	assert_string_equal(lg.s, "b:int64_list:2;a:none:0;");
}

/* ---- SequenceExample ------------------------------------------------------------------- */

static struct wire sequence_record(void)
{
	return CAT(CONTEXT(ENTRY("len", I64LIST(PACKED(V(3)))), ENTRY("id", BYTESLIST(BVAL("s1")))),
		   FLISTS(ENTRY("tok", CAT(STEP(I64LIST(PACKED(V(1), V(2)))), STEP(EMPTY),
					   STEP(FLOATLIST(PACKED(F32(0.25f)))))),
			  ENTRY("other", STEP(I64LIST(PACKED(V(5))))),
			  /* a FeatureList given as two value fields: the steps concatenate */
			  LD(1, CAT(KEY("w"), VALUE(STEP(BYTESLIST(CAT(BVAL("a"), BVAL("bc"))))),
				    UNKNOWNS,
				    VALUE(CAT(UNKNOWNS,
					      STEP(I64LIST(CAT(TAG(1, 0), V(7), PACKED(V(8))))))))),
			  ENTRY("empty", EMPTY)));
}

static void test_sequence_example(void **state)
{
	static const char *const cn[] = { "len", "id", "nope" };
	static const char *const ln[] = { "tok", "w", "empty", "nope" };
	struct pbex_schema *cs = schema_of(cn, 3), *ls = schema_of(ln, 4);
	struct pbex_feature ctx[3], step;
	struct pbex_feature_list lists[4];
	struct pbex_list_iter it;
	struct wire rec = sequence_record();
	int64_t v[4];
	float fv;
	char got[64];

	assert_int_equal(pbex_decode_sequence_example(cs, ls, rec.b, rec.n, ctx, lists, NULL), 0);
	pbex_feature_int64s(&ctx[0], v);
	assert_int_equal(v[0], 3);
	bytes_joined(&ctx[1], got, sizeof(got));
	assert_string_equal(got, "s1");
	assert_false(ctx[2].present);

	assert_true(lists[0].present);
	assert_int_equal(lists[0].count, 3);
	pbex_list_iter_init(&it, &lists[0]);
	assert_true(pbex_list_iter_next(&it, &step));
	assert_int_equal(step.kind, PBEX_KIND_INT64);
	assert_int_equal(step.count, 2);
	pbex_feature_int64s(&step, v);
	assert_int_equal(v[0], 1);
	assert_int_equal(v[1], 2);
	assert_true(pbex_list_iter_next(&it, &step));
	assert_true(step.present);
	assert_int_equal(step.kind, PBEX_KIND_NONE);
	assert_true(pbex_list_iter_next(&it, &step));
	assert_int_equal(step.kind, PBEX_KIND_FLOAT);
	pbex_feature_floats(&step, &fv);
	assert_true(fv == 0.25f);
	assert_false(pbex_list_iter_next(&it, &step));

	assert_int_equal(lists[1].count, 2);
	pbex_list_iter_init(&it, &lists[1]);
	assert_true(pbex_list_iter_next(&it, &step));
	bytes_joined(&step, got, sizeof(got));
	assert_string_equal(got, "a|bc");
	assert_true(pbex_list_iter_next(&it, &step));
	assert_int_equal(step.count, 2);
	pbex_feature_int64s(&step, v);
	assert_int_equal(v[0], 7);
	assert_int_equal(v[1], 8);
	assert_false(pbex_list_iter_next(&it, &step));

	assert_true(lists[2].present);
	assert_int_equal(lists[2].count, 0);
	pbex_list_iter_init(&it, &lists[2]);
	assert_false(pbex_list_iter_next(&it, &step));
	assert_false(lists[3].present);
	pbex_list_iter_init(&it, &lists[3]);
	assert_false(pbex_list_iter_next(&it, &step));

	/* NULL schemas: nothing asked, the framing still checked */
	assert_int_equal(pbex_decode_sequence_example(NULL, NULL, rec.b, rec.n, NULL, NULL, NULL),
			 0);
	pbex_schema_destroy(cs);
	pbex_schema_destroy(ls);
}

static void test_sequence_foreach_and_errors(void **state)
{
	static const char *const ln[] = { "tok" };
	struct pbex_schema *ls = schema_of(ln, 1);
	struct pbex_feature_list l;
	struct visit_log lg = { .s = "" };
	struct io_error err;
	struct wire rec = sequence_record(), bad;
	char msg[200];

	assert_int_equal(
		pbex_sequence_example_foreach(rec.b, rec.n, log_cb, list_log_cb, &lg, NULL), 0);
	assert_string_equal(lg.s, "len:int64_list:1;id:bytes_list:1;[tok:3];[other:1];[w:2];"
				  "[empty:0];");
	assert_int_equal(pbex_sequence_example_foreach(rec.b, rec.n, NULL, NULL, NULL, NULL), 0);

	/* a bad step: named by list and step index */
	bad = FLISTS(ENTRY("tok", CAT(STEP(I64LIST(PACKED(V(1)))),
				      STEP(FLOATLIST(PACKED(HEX(1, 2, 3)))))));
	snprintf(msg, sizeof(msg),
		 "feature_list \"tok\": step 1: float_list: packed float_list length 3 is not a "
		 "multiple of 4 (byte %zu)",
		 bad.n - 5);
	assert_int_equal(pbex_decode_sequence_example(NULL, ls, bad.b, bad.n, NULL, &l, &err),
			 -EBADMSG);
	assert_string_equal(err.msg, msg);
	memset(&err, 0, sizeof(err));
	assert_int_equal(pbex_sequence_example_foreach(bad.b, bad.n, NULL, NULL, NULL, &err),
			 -EBADMSG);
	assert_string_equal(err.msg, msg);
	/* not asked for: not looked at */
	assert_int_equal(pbex_decode_sequence_example(NULL, NULL, bad.b, bad.n, NULL, NULL, NULL),
			 0);
	/* a bad context feature */
	bad = CONTEXT(ENTRY("c", I64LIST(CAT(TAG(1, 0)))));
	snprintf(msg, sizeof(msg), "context feature \"c\": int64_list: truncated varint (byte %zu)",
		 bad.n);
	assert_int_equal(pbex_sequence_example_foreach(bad.b, bad.n, NULL, NULL, NULL, &err),
			 -EBADMSG);
	assert_string_equal(err.msg, msg);
	bad = CAT(TAG(3, 7));
	assert_int_equal(pbex_decode_sequence_example(NULL, ls, bad.b, bad.n, NULL, &l, &err),
			 -EBADMSG);
	assert_string_equal(err.msg, "SequenceExample: invalid wire type 7 (field 3) (byte 0)");
	pbex_schema_destroy(ls);
}

/* ---- a file written by TensorFlow ------------------------------------------------------ */

static void test_real_file_singles(void **state)
{
	static const char *const names[] = { "int_feature", "float_feature", "byte_feature" };
	const char *dir = sl_testdata_dir();
	struct pbex_schema *s = schema_of(names, 3);
	struct pbex_feature out[3];
	uint8_t buf[512];
	char path[4096], got[64];
	size_t n, off = 0;
	int rec = 0, visited = 0;
	struct io_error err;
	int64_t v;
	float f;
	FILE *fp;

	if (!dir) {
		pbex_schema_destroy(s);
		SL_SKIP("[testdata] no ../shared/testdata (SLUICE_SHARED_DIR)");
	}
	snprintf(path, sizeof(path), "%s/%s", dir, "pwnall+tfrecord__testdata_singles.tfrecords");
	fp = fopen(path, "rb");
	if (!fp) {
		pbex_schema_destroy(s);
		SL_SKIP("[testdata] %s is missing", path);
	}
	n = fread(buf, 1, sizeof(buf), fp);
	fclose(fp);
	assert_int_equal(n, 130);
	/* TFRecord framing: u64 length, u32 crc, data, u32 crc (CRCs are tfr's business) */
	while (off + 12 <= n) {
		uint64_t len = 0;

		for (int i = 0; i < 8; i++)
			len |= (uint64_t)buf[off + i] << (8 * i);
		assert_true(off + 12 + len + 4 <= n);
		memset(&err, 0, sizeof(err));
		assert_int_equal(pbex_decode_example(s, buf + off + 12, len, out, &err), 0);
		assert_int_equal(
			pbex_example_foreach(buf + off + 12, len, count_cb, &visited, NULL), 0);
		for (int i = 0; i < 3; i++)
			assert_int_equal(out[i].present, i == rec);
		switch (rec) {
		case 0:
			assert_int_equal(out[0].count, 1);
			pbex_feature_int64s(&out[0], &v);
			assert_int_equal(v, 42);
			break;
		case 1:
			assert_int_equal(out[1].count, 1);
			pbex_feature_floats(&out[1], &f);
			assert_true(f == 3.14f);
			break;
		case 2:
			bytes_joined(&out[2], got, sizeof(got));
			assert_string_equal(got, "@ABCD");
			break;
		}
		off += 12 + len + 4;
		rec++;
	}
	assert_int_equal(off, n);
	assert_int_equal(rec, 3);
	assert_int_equal(visited, 3);
	pbex_schema_destroy(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_schema),
		cmocka_unit_test(test_decode_many_features),
		cmocka_unit_test(test_foreach_order_and_duplicates),
		cmocka_unit_test(test_sequence_example),
		cmocka_unit_test(test_sequence_foreach_and_errors),
		cmocka_unit_test(test_real_file_singles),
	};

	return SL_RUN_GROUP(tests, NULL, NULL);
}
