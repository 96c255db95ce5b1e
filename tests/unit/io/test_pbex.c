/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for io/pbex.c: the odd encodings protobuf accepts, every rejection, the accessors. */
#include "pbex_wire.h"

/* ---- accepted oddities ----------------------------------------------------------------- */

static void test_packed_unpacked_mixed(void **state)
{
	static const int64_t want[] = { 1, 2, 3, 4, 300 };
	static const float fwant[] = { 1.5f, 2.0f, 3.0f, -4.25f };

	expect_i64s(FEATURES(ENTRY("a", I64LIST(CAT(PACKED(V(1), V(2)), TAG(1, 0), V(3),
						    PACKED(V(4)), TAG(1, 0), V(300))))),
		    "a", want, 5);
	expect_floats(FEATURES(ENTRY("x", FLOATLIST(CAT(TAG(1, 5), F32(1.5f),
							PACKED(F32(2.0f), F32(3.0f)), TAG(1, 5),
							F32(-4.25f))))),
		      "x", fwant, 4);
}

static void test_fields_in_any_order(void **state)
{
	static const int64_t want[] = { 5 };

	/* value before key in the entry; unknown fields everywhere before the known ones */
	expect_i64s(
		CAT(UNKNOWNS,
		    LD(1, CAT(UNKNOWNS,
			      LD(1, CAT(UNKNOWNS,
					VALUE(CAT(UNKNOWNS,
						  I64LIST(CAT(UNKNOWNS, PACKED(V(5)), UNKNOWNS)),
						  UNKNOWNS)),
					KEY("k"), UNKNOWNS)),
			      UNKNOWNS)),
		    UNKNOWNS),
		"k", want, 1);
}

static void test_unknown_wire_types_skipped(void **state)
{
	static const int64_t want[] = { 9 };
	struct wire rec;
	int n = 0;

	/* group with nested group holding every wire type, at the top and inside the list */
	rec = CAT(TAG(5, 3), TAG(1, 0), V(1), TAG(6, 3), TAG(6, 4), TAG(2, 1),
		  HEX(0, 0, 0, 0, 0, 0, 0, 0), TAG(3, 5), HEX(0, 0, 0, 0), LD(4, STR("x")),
		  TAG(5, 4),
		  FEATURES(ENTRY("a", I64LIST(CAT(TAG(5, 3), TAG(6, 3), TAG(6, 4), TAG(5, 4),
						  PACKED(V(9)))))));
	expect_i64s(rec, "a", want, 1);
	assert_int_equal(pbex_example_foreach(rec.b, rec.n, count_cb, &n, NULL), 0);
	assert_int_equal(n, 1);
}

static void test_known_field_wrong_wire_type(void **state)
{
	struct pbex_feature f;
	struct wire rec;

	/* Example.features as a varint: an unknown field, so no features */
	assert_int_equal(decode1(CAT(TAG(1, 0), V(5)), "a", &f, NULL), 0);
	assert_false(f.present);
	/* Feature.bytes_list as a varint: Feature{} */
	assert_int_equal(decode1(FEATURES(ENTRY("a", CAT(TAG(1, 0), V(1)))), "a", &f, NULL), 0);
	assert_true(f.present);
	assert_int_equal(f.kind, PBEX_KIND_NONE);
	assert_int_equal(f.count, 0);
	/* Int64List.value as fixed64, FloatList.value as varint and fixed64, BytesList.value as
	 * varint: unknown fields; the list is set and empty */
	assert_int_equal(
		decode1(FEATURES(ENTRY("a", I64LIST(CAT(TAG(1, 1), HEX(1, 0, 0, 0, 0, 0, 0, 0))))),
			"a", &f, NULL),
		0);
	assert_int_equal(f.kind, PBEX_KIND_INT64);
	assert_int_equal(f.count, 0);
	assert_int_equal(decode1(FEATURES(ENTRY("a", FLOATLIST(CAT(TAG(1, 0), V(3), TAG(1, 1),
								   HEX(0, 0, 0, 0, 0, 0, 0, 0))))),
				 "a", &f, NULL),
			 0);
	assert_int_equal(f.kind, PBEX_KIND_FLOAT);
	assert_int_equal(f.count, 0);
	assert_int_equal(
		decode1(FEATURES(ENTRY("a", BYTESLIST(CAT(TAG(1, 0), V(3))))), "a", &f, NULL), 0);
	assert_int_equal(f.kind, PBEX_KIND_BYTES);
	assert_int_equal(f.count, 0);
	/* the map key as a varint: unknown, so the key is "" */
	rec = FEATURES(LD(1, CAT(TAG(1, 0), V(3), VALUE(I64LIST(PACKED(V(1)))))));
	assert_int_equal(decode1(rec, "", &f, NULL), 0);
	assert_true(f.present);
	assert_int_equal(f.count, 1);
	/* the map value as a group: unknown, so Feature{} */
	rec = FEATURES(LD(1, CAT(KEY("a"), TAG(2, 3), TAG(1, 0), V(1), TAG(2, 4))));
	assert_int_equal(decode1(rec, "a", &f, NULL), 0);
	assert_true(f.present);
	assert_int_equal(f.kind, PBEX_KIND_NONE);
}

static void test_repeated_map_key_last_wins(void **state)
{
	static const int64_t want[] = { 2, 3 };
	struct pbex_feature f;

	expect_i64s(FEATURES(ENTRY("a", I64LIST(PACKED(V(1)))), ENTRY("b", I64LIST(PACKED(V(7)))),
			     ENTRY("a", I64LIST(PACKED(V(2), V(3))))),
		    "a", want, 2);
	/* a later entry of another kind replaces the earlier one entirely */
	assert_int_equal(decode1(FEATURES(ENTRY("a", I64LIST(PACKED(V(1)))),
					  ENTRY("a", FLOATLIST(PACKED(F32(1.0f))))),
				 "a", &f, NULL),
			 0);
	assert_int_equal(f.kind, PBEX_KIND_FLOAT);
	assert_int_equal(f.count, 1);
}

/* Project rec to the names, check its length and that "a" still decodes to want. */
static size_t project_a(struct wire rec, const char *const *names, size_t n, const int64_t *want,
			size_t nwant, struct wire *ret)
{
	struct pbex_schema *s = schema_of(names, n);
	long len;

	assert_non_null(s);
	len = pbex_project(s, NULL, false, rec.b, rec.n, ret->b, sizeof(ret->b));
	pbex_schema_destroy(s);
	assert_true(len >= 0 && (size_t)len <= rec.n + 12);
	ret->n = (size_t)len;
	if (want)
		expect_i64s(*ret, "a", want, nwant);
	return ret->n;
}

/*
 * Projection (the record cache's): the named entries stay, copied whole and in wire order, in
 * one Features message; the others go. Repeated keys across Features messages, merged values
 * and fields outside the map keep their meaning for the names kept.
 */
static void test_projection(void **state)
{
	static const char *const a_only[] = { "a" }, *const ab[] = { "a", "b" };
	static const int64_t one[] = { 1 }, two_three[] = { 2, 3 }, merged[] = { 1, 7 };
	struct pbex_feature f;
	struct wire out, rec;

	rec = FEATURES(ENTRY("a", I64LIST(PACKED(V(1)))), ENTRY("big", BYTESLIST(BVAL("012345678901"
										      "234567890123"
										      "456789012345"
										      "6789"))));
	assert_true(project_a(rec, a_only, 1, one, 1, &out) < rec.n / 2);
	assert_int_equal(decode1(out, "big", &f, NULL), 0);
	assert_false(f.present); /* gone */
	/* the last entry of a key wins, also across two Features messages and an unknown field */
	rec = CAT(FEATURES(ENTRY("a", I64LIST(PACKED(V(1)))), ENTRY("b", I64LIST(PACKED(V(9))))),
		  TAG(7, 0), V(3), FEATURES(ENTRY("a", I64LIST(PACKED(V(2), V(3))))));
	project_a(rec, ab, 2, two_three, 2, &out);
	static const int64_t nine[] = { 9 };
	expect_i64s(out, "b", nine, 1);
	/* an entry whose value fields merge is copied whole: they still merge */
	rec = FEATURES(
		LD(1, CAT(KEY("a"), VALUE(I64LIST(PACKED(V(1)))), VALUE(I64LIST(PACKED(V(7)))))));
	project_a(rec, a_only, 1, merged, 2, &out);
	/* an entry without value stays one: present, no kind */
	rec = FEATURES(LD(1, KEY("a")));
	project_a(rec, a_only, 1, NULL, 0, &out);
	assert_int_equal(decode1(out, "a", &f, NULL), 0);
	assert_true(f.present);
	assert_int_equal(f.kind, PBEX_KIND_NONE);
	/* nothing named: an empty record, where every feature is absent as before */
	rec = FEATURES(ENTRY("x", I64LIST(PACKED(V(1)))));
	assert_int_equal(project_a(rec, a_only, 1, NULL, 0, &out), 0);
	/* too small a buffer, and a record whose framing is damaged */
	struct pbex_schema *s = schema_of(a_only, 1);
	rec = FEATURES(ENTRY("a", I64LIST(PACKED(V(1)))));
	assert_int_equal(pbex_project(s, NULL, false, rec.b, rec.n, out.b, 3), -ENOSPC);
	rec.b[1] = 0x7f; /* Features' length past the record */
	assert_int_equal(pbex_project(s, NULL, false, rec.b, rec.n, out.b, sizeof(out.b)),
			 -EBADMSG);
	pbex_schema_destroy(s);
}

static void test_repeated_key_and_value_in_entry(void **state)
{
	static const int64_t want[] = { 1, 7 };
	struct pbex_feature f;
	struct wire rec;

	/* two key fields: the last names the entry */
	rec = FEATURES(LD(1, CAT(KEY("a"), VALUE(I64LIST(PACKED(V(1)))), KEY("b"))));
	assert_int_equal(decode1(rec, "a", &f, NULL), 0);
	assert_false(f.present);
	expect_i64s(rec, "b", want, 1);
	/* two value fields: the Features merge, the lists concatenate */
	rec = FEATURES(
		LD(1, CAT(KEY("a"), VALUE(I64LIST(PACKED(V(1)))), VALUE(I64LIST(PACKED(V(7)))))));
	expect_i64s(rec, "a", want, 2);
	/* two value fields of different kinds: the last kind wins */
	rec = FEATURES(LD(1, CAT(KEY("a"), VALUE(I64LIST(PACKED(V(1)))),
				 VALUE(FLOATLIST(PACKED(F32(2.0f)))))));
	assert_int_equal(decode1(rec, "a", &f, NULL), 0);
	assert_int_equal(f.kind, PBEX_KIND_FLOAT);
	assert_int_equal(f.count, 1);
}

static void test_features_twice_merge(void **state)
{
	static const int64_t wa[] = { 2 }, wb[] = { 5 };
	struct wire rec;

	rec = CAT(FEATURES(ENTRY("a", I64LIST(PACKED(V(1)))), ENTRY("b", I64LIST(PACKED(V(5))))),
		  FEATURES(ENTRY("a", I64LIST(PACKED(V(2))))));
	expect_i64s(rec, "a", wa, 1);
	expect_i64s(rec, "b", wb, 1);
}

static void test_kind_set_twice(void **state)
{
	static const int64_t concat[] = { 1, 5, 6 }, last[] = { 9 };
	static const float fl[] = { 2.0f };
	char got[64];
	struct pbex_feature f;
	struct wire rec;

	/* another kind: the last wins */
	expect_floats(
		FEATURES(ENTRY("a", CAT(I64LIST(PACKED(V(1))), FLOATLIST(PACKED(F32(2.0f)))))), "a",
		fl, 1);
	/* the same kind twice: the lists concatenate */
	expect_i64s(FEATURES(ENTRY("a", CAT(I64LIST(PACKED(V(1))), I64LIST(PACKED(V(5), V(6)))))),
		    "a", concat, 3);
	/* int, float, int: only the values after the last switch */
	expect_i64s(FEATURES(ENTRY("a", CAT(I64LIST(PACKED(V(1), V(2), V(3), V(4))),
					    FLOATLIST(PACKED(F32(1.0f))), I64LIST(PACKED(V(9)))))),
		    "a", last, 1);
	/* bytes twice, then merged through a second value field of the entry */
	rec = FEATURES(LD(1, CAT(KEY("s"),
				 VALUE(CAT(BYTESLIST(BVAL("x")), UNKNOWNS,
					   BYTESLIST(CAT(BVAL("yy"), BVAL(""))))),
				 VALUE(BYTESLIST(BVAL("zzz"))))));
	assert_int_equal(decode1(rec, "s", &f, NULL), 0);
	assert_int_equal(f.kind, PBEX_KIND_BYTES);
	assert_int_equal(f.count, 4);
	assert_int_equal(f.bytes_len, 6);
	bytes_joined(&f, got, sizeof(got));
	assert_string_equal(got, "x|yy||zzz");
}

static void test_entry_without_key_or_value(void **state)
{
	static const int64_t want[] = { 4 };
	struct pbex_feature f;

	expect_i64s(FEATURES(LD(1, VALUE(I64LIST(PACKED(V(4)))))), "", want, 1);
	assert_int_equal(decode1(FEATURES(LD(1, KEY("k"))), "k", &f, NULL), 0);
	assert_true(f.present);
	assert_int_equal(f.kind, PBEX_KIND_NONE);
	assert_int_equal(f.count, 0);
	/* neither: key "" with Feature{} */
	assert_int_equal(decode1(FEATURES(LD(1, EMPTY)), "", &f, NULL), 0);
	assert_true(f.present);
	assert_int_equal(f.kind, PBEX_KIND_NONE);
}

static void test_empty_messages(void **state)
{
	struct pbex_feature f;
	int64_t i64;
	float fl;

	assert_int_equal(decode1(EMPTY, "a", &f, NULL), 0);
	assert_false(f.present);
	assert_int_equal(f.kind, PBEX_KIND_NONE);
	assert_int_equal(decode1(FEATURES(EMPTY), "a", &f, NULL), 0);
	assert_false(f.present);
	assert_int_equal(decode1(FEATURES(ENTRY("a", EMPTY)), "a", &f, NULL), 0);
	assert_true(f.present);
	assert_int_equal(f.kind, PBEX_KIND_NONE);
	/* empty lists: the kind is set, no values; a zero-length packed field too */
	assert_int_equal(decode1(FEATURES(ENTRY("a", I64LIST(EMPTY))), "a", &f, NULL), 0);
	assert_int_equal(f.kind, PBEX_KIND_INT64);
	assert_int_equal(f.count, 0);
	pbex_feature_int64s(&f, &i64);
	assert_int_equal(decode1(FEATURES(ENTRY("a", I64LIST(PACKED(EMPTY)))), "a", &f, NULL), 0);
	assert_int_equal(f.kind, PBEX_KIND_INT64);
	assert_int_equal(f.count, 0);
	assert_int_equal(decode1(FEATURES(ENTRY("a", FLOATLIST(PACKED(EMPTY)))), "a", &f, NULL), 0);
	assert_int_equal(f.kind, PBEX_KIND_FLOAT);
	assert_int_equal(f.count, 0);
	pbex_feature_floats(&f, &fl);
	assert_int_equal(decode1(FEATURES(ENTRY("a", BYTESLIST(EMPTY))), "a", &f, NULL), 0);
	assert_int_equal(f.kind, PBEX_KIND_BYTES);
	assert_int_equal(f.count, 0);
	assert_int_equal(f.bytes_len, 0);
}

static void test_varint_encodings(void **state)
{
	static const int64_t want[] = { -1, INT64_MIN, INT64_MAX, 1, 1, 0, -1, INT64_MIN };

	/* negative as 10 bytes; 1 as an over-long varint; 10th byte above 1 keeps its low bit
	 * (google.protobuf reads 80x9 02 as 0 and ffx9 7f as -1) */
	expect_i64s(FEATURES(ENTRY("a", I64LIST(CAT(PACKED(V(-1), V(INT64_MIN), V(INT64_MAX),
							   HEX(0x81, 0x80, 0x80, 0x00)),
						    TAG(1, 0),
						    HEX(0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
							0x80, 0x80, 0x00),
						    PACKED(HEX(0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
							       0x80, 0x80, 0x80, 0x02),
							   HEX(0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
							       0xff, 0xff, 0xff, 0x7f)),
						    TAG(1, 0),
						    HEX(0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
							0x80, 0x80, 0x01))))),
		    "a", want, 8);
}

static void test_overlong_tag_and_length(void **state)
{
	static const int64_t want[] = { 5, 6 };

	/* a 5-byte tag is truncated to 32 bits (88 80 80 80 10 is field 1, varint); a length
	 * takes up to 5 bytes: both as google.protobuf's cpp parser */
	expect_i64s(
		FEATURES(ENTRY("a", I64LIST(CAT(HEX(0x88, 0x80, 0x80, 0x80, 0x10), V(5),
						HEX(0x0a, 0x81, 0x80, 0x80, 0x80, 0x00), V(6))))),
		"a", want, 2);
}

static void test_group_nesting_limit_ok(void **state)
{
	static const int64_t want[] = { 1 };

	/* 4 messages below the record (Features, entry, Feature, Int64List) + 96 groups = 100 */
	expect_i64s(FEATURES(ENTRY("a", I64LIST(CAT(PACKED(V(1)), w_repeat(TAG(5, 3), 96),
						    w_repeat(TAG(5, 4), 96))))),
		    "a", want, 1);
	expect_i64s(CAT(w_repeat(TAG(5, 3), 100), w_repeat(TAG(5, 4), 100),
			FEATURES(ENTRY("a", I64LIST(PACKED(V(1)))))),
		    "a", want, 1);
}

static void test_unrequested_damage_not_seen(void **state)
{
	static const int64_t want[] = { 3 };
	struct io_error err;
	struct wire rec;

	/* projection: an entry nobody asked for is skipped as a blob */
	rec = FEATURES(ENTRY("bad", I64LIST(CAT(TAG(1, 7), V(1)))),
		       ENTRY("ok", I64LIST(PACKED(V(3)))));
	expect_i64s(rec, "ok", want, 1);
	assert_int_equal(pbex_example_foreach(rec.b, rec.n, NULL, NULL, &err), -EBADMSG);
	assert_string_equal(err.msg, "feature \"bad\": int64_list: invalid wire type 7 (field 1) "
				     "(byte 13)");
}

/* ---- rejections ------------------------------------------------------------------------ */

static void test_reject_varint_too_long(void **state)
{
	struct wire rec,
		eleven = HEX(0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00);
	char msg[200];

	/* packed: the offset is that of the varint */
	rec = FEATURES(ENTRY("a", I64LIST(PACKED(V(1), eleven))));
	snprintf(msg, sizeof(msg),
		 "feature \"a\": int64_list: varint longer than 10 bytes (byte %zu)", rec.n - 11);
	expect_reject(rec, "a", msg);
	/* unpacked */
	rec = FEATURES(ENTRY("a", I64LIST(CAT(TAG(1, 0), eleven))));
	snprintf(msg, sizeof(msg),
		 "feature \"a\": int64_list: varint longer than 10 bytes (byte %zu)", rec.n - 11);
	expect_reject(rec, "a", msg);
	/* in an unknown field of the Example */
	rec = CAT(TAG(3, 0), eleven);
	expect_reject(rec, "a", "Example: varint longer than 10 bytes (byte 1)");
}

static void test_reject_truncated_varint(void **state)
{
	struct wire rec;
	char msg[200];

	rec = FEATURES(ENTRY("a", I64LIST(PACKED(V(1), HEX(0x80, 0x81)))));
	snprintf(msg, sizeof(msg), "feature \"a\": int64_list: truncated varint (byte %zu)",
		 rec.n - 2);
	expect_reject(rec, "a", msg);
	rec = FEATURES(ENTRY("a", I64LIST(CAT(TAG(1, 0), HEX(0xff)))));
	snprintf(msg, sizeof(msg), "feature \"a\": int64_list: truncated varint (byte %zu)",
		 rec.n - 1);
	expect_reject(rec, "a", msg);
	/* a truncated tag and a truncated length */
	expect_reject(HEX(0x80), "a", "Example: truncated tag (byte 0)");
	expect_reject(HEX(0x0a, 0x80), "a", "Example: truncated length (byte 1)");
}

static void test_reject_length_past_parent(void **state)
{
	struct wire rec, bad = CAT(TAG(1, 2), V(4000), STR("abc"));
	char msg[200];

	/* the message of the issue: inside the BytesList of a requested feature */
	rec = FEATURES(ENTRY("image/encoded", BYTESLIST(bad)));
	snprintf(msg, sizeof(msg),
		 "feature \"image/encoded\": bytes_list: length 4000 runs past the end of its "
		 "message (byte %zu)",
		 rec.n - bad.n);
	/* 2 + 2 + 15 + 2 + 2: the tags, lengths and key above */
	assert_int_equal(rec.n - bad.n, 23);
	expect_reject(rec, "image/encoded", msg);
	/* a list running past its Feature, the Feature past its entry */
	rec = FEATURES(LD(1, CAT(KEY("a"), VALUE(CAT(TAG(3, 2), V(9), HEX(1))))));
	expect_reject(rec, "a",
		      "feature \"a\": Feature: length 9 runs past the end of its message "
		      "(byte 9)");
	rec = FEATURES(LD(1, CAT(KEY("a"), TAG(2, 2), V(9), HEX(1))));
	expect_reject(rec, "a",
		      "feature \"a\": map entry: length 9 runs past the end of its "
		      "message (byte 7)");
	/* an entry running past the Features, the Features past the record */
	rec = LD(1, CAT(TAG(1, 2), V(9), HEX(1)));
	expect_reject(rec, "a", "Features: length 9 runs past the end of its message (byte 2)");
	rec = CAT(TAG(1, 2), V(200), HEX(1));
	expect_reject(rec, "a", "Example: length 200 runs past the end of its message (byte 0)");
}

static void test_reject_wire_types_6_7(void **state)
{
	struct wire rec;
	char msg[200];

	expect_reject(CAT(TAG(5, 6)), "a", "Example: invalid wire type 6 (field 5) (byte 0)");
	rec = FEATURES(ENTRY("a", I64LIST(CAT(PACKED(V(1)), TAG(2, 7)))));
	snprintf(msg, sizeof(msg),
		 "feature \"a\": int64_list: invalid wire type 7 (field 2) (byte %zu)", rec.n - 1);
	expect_reject(rec, "a", msg);
	/* inside a skipped group */
	expect_reject(CAT(TAG(5, 3), TAG(6, 6), TAG(5, 4)), "a",
		      "Example: invalid wire type 6 (field 6) (byte 1)");
}

static void test_reject_bad_groups(void **state)
{
	struct wire rec;
	char msg[200];

	rec = FEATURES(ENTRY("a", I64LIST(CAT(PACKED(V(1)), TAG(5, 4)))));
	snprintf(msg, sizeof(msg),
		 "feature \"a\": int64_list: end-group tag for field 5 without a matching "
		 "start-group (byte %zu)",
		 rec.n - 1);
	expect_reject(rec, "a", msg);
	/* at the top level too (google.protobuf's Python implementation rejects it) */
	expect_reject(TAG(5, 4), "a",
		      "Example: end-group tag for field 5 without a matching start-group (byte 0)");
	expect_reject(CAT(TAG(5, 3), TAG(7, 3), TAG(5, 4)), "a",
		      "Example: end-group tag for field 5 does not match start-group for field 7 "
		      "(byte 2)");
	/* a group left open at the end of its message */
	rec = FEATURES(ENTRY("a", CAT(TAG(8, 3), TAG(1, 0), V(1))));
	snprintf(msg, sizeof(msg),
		 "feature \"a\": Feature: group (field 8) has no end-group tag (byte %zu)",
		 rec.n - 3);
	expect_reject(rec, "a", msg);
	/* a start-group whose end is outside the length-delimited message holding it */
	rec = CAT(LD(1, TAG(9, 3)), TAG(9, 4));
	expect_reject(rec, "a", "Features: group (field 9) has no end-group tag (byte 2)");
}

static void test_reject_packed_float_length(void **state)
{
	struct wire rec;
	char msg[200];

	rec = FEATURES(ENTRY("f", FLOATLIST(PACKED(F32(1.0f), HEX(0)))));
	snprintf(msg, sizeof(msg),
		 "feature \"f\": float_list: packed float_list length 5 is not a multiple of 4 "
		 "(byte %zu)",
		 rec.n - 7);
	expect_reject(rec, "f", msg);
}

static void test_reject_truncated_fixed(void **state)
{
	struct wire rec;
	char msg[200];

	rec = FEATURES(ENTRY("f", FLOATLIST(CAT(TAG(1, 5), HEX(0, 0, 0)))));
	snprintf(msg, sizeof(msg),
		 "feature \"f\": float_list: truncated fixed32 (field 1) (byte %zu)", rec.n - 4);
	expect_reject(rec, "f", msg);
	expect_reject(CAT(TAG(4, 5), HEX(0, 0)), "a",
		      "Example: truncated fixed32 (field 4) (byte 0)");
	rec = FEATURES(ENTRY("f", I64LIST(CAT(TAG(7, 1), HEX(0, 0, 0, 0, 0, 0, 0)))));
	snprintf(msg, sizeof(msg),
		 "feature \"f\": int64_list: truncated fixed64 (field 7) (byte %zu)", rec.n - 8);
	expect_reject(rec, "f", msg);
}

static void test_reject_nesting_too_deep(void **state)
{
	struct wire rec;
	char msg[200];

	/* 4 messages + 97 groups = 101 levels below the record */
	rec = FEATURES(ENTRY(
		"a", I64LIST(CAT(PACKED(V(1)), w_repeat(TAG(5, 3), 97), w_repeat(TAG(5, 4), 97)))));
	snprintf(msg, sizeof(msg), "feature \"a\": int64_list: nesting deeper than 100 (byte %zu)",
		 rec.n - 2 * 97 + 96);
	expect_reject(rec, "a", msg);
	expect_reject(CAT(w_repeat(TAG(5, 3), 101), w_repeat(TAG(5, 4), 101)), "a",
		      "Example: nesting deeper than 100 (byte 100)");
}

static void test_reject_field_zero_and_long_tags(void **state)
{
	expect_reject(CAT(TAG(0, 0), V(1)), "a", "Example: field number 0 (byte 0)");
	expect_reject(HEX(0x88, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01), "a",
		      "Example: tag varint longer than 5 bytes (byte 0)");
	expect_reject(HEX(0x0a, 0x81, 0x80, 0x80, 0x80, 0x80, 0x00, 0x00), "a",
		      "Example: length varint longer than 5 bytes (byte 1)");
	/* a 5-byte length is not truncated to 32 bits (cpp rejects it as too large) */
	expect_reject(HEX(0x0a, 0x81, 0x80, 0x80, 0x80, 0x50, 0x00), "a",
		      "Example: length 21474836481 runs past the end of its message (byte 0)");
}

static void test_error_names_escaped(void **state)
{
	struct wire rec;
	char name[] = "q\"\\\x01z";
	char msg[200];

	rec = FEATURES(ENTRY(name, I64LIST(CAT(TAG(1, 0)))));
	snprintf(msg, sizeof(msg),
		 "feature \"q\\x22\\x5c\\x01z\": int64_list: truncated varint (byte %zu)", rec.n);
	expect_reject(rec, name, msg);
}

/* ---- accessors ------------------------------------------------------------------------- */

static void test_int64_extremes(void **state)
{
	static const int64_t want[] = { INT64_MIN, INT64_MAX, 0, -1, 1, INT32_MIN, UINT32_MAX };
	struct wire p = EMPTY;

	for (size_t i = 0; i < 7; i++)
		p = w_cat(p, V(want[i]));
	/* packed (the fast path) and unpacked (the walk) */
	expect_i64s(FEATURES(ENTRY("a", I64LIST(LD(1, p)))), "a", want, 7);
	p = EMPTY;
	for (size_t i = 0; i < 7; i++)
		p = CAT(p, TAG(1, 0), V(want[i]));
	expect_i64s(FEATURES(ENTRY("a", I64LIST(p))), "a", want, 7);
}

static void test_float_bit_patterns(void **state)
{
	static const uint32_t bits[] = { 0x7fc00000, 0xffc00001, 0x7f800001, 0x7f800000,
					 0xff800000, 0x80000000, 0x00000001, 0x3f800000 };
	struct pbex_feature f;
	struct wire p = EMPTY, u = EMPTY;
	uint32_t got[8];

	for (size_t i = 0; i < 8; i++) {
		p = w_cat(p, w_f32bits(bits[i]));
		u = CAT(u, TAG(1, 5), w_f32bits(bits[i]));
	}
	assert_int_equal(decode1(FEATURES(ENTRY("f", FLOATLIST(LD(1, p)))), "f", &f, NULL), 0);
	assert_int_equal(f.count, 8);
	pbex_feature_floats(&f, (float *)got);
	assert_memory_equal(got, bits, sizeof(bits));
	memset(got, 0, sizeof(got));
	assert_int_equal(decode1(FEATURES(ENTRY("f", FLOATLIST(u))), "f", &f, NULL), 0);
	assert_int_equal(f.count, 8);
	pbex_feature_floats(&f, (float *)got);
	assert_memory_equal(got, bits, sizeof(bits));
	assert_true(isnan(((float *)got)[0]));
	assert_true(isinf(((float *)got)[3]));
}

static void test_bytes_values(void **state)
{
	struct pbex_bytes_iter it;
	struct pbex_feature f;
	const uint8_t *d;
	char got[64];
	size_t l;

	assert_int_equal(
		decode1(FEATURES(ENTRY("b", BYTESLIST(CAT(BVAL(""), BVAL("ab"), BVAL(""))))), "b",
			&f, NULL),
		0);
	assert_int_equal(f.count, 3);
	assert_int_equal(f.bytes_len, 2);
	bytes_joined(&f, got, sizeof(got));
	assert_string_equal(got, "|ab|");
	/* one value of length 0 (the fast path) */
	assert_int_equal(decode1(FEATURES(ENTRY("b", BYTESLIST(BVAL("")))), "b", &f, NULL), 0);
	assert_int_equal(f.count, 1);
	pbex_bytes_iter_init(&it, &f);
	assert_true(pbex_bytes_iter_next(&it, &d, &l));
	assert_int_equal(l, 0);
	assert_false(pbex_bytes_iter_next(&it, &d, &l));
	assert_false(pbex_bytes_iter_next(&it, &d, &l));
	/* an absent feature iterates nothing */
	assert_int_equal(decode1(EMPTY, "b", &f, NULL), 0);
	pbex_bytes_iter_init(&it, &f);
	assert_false(pbex_bytes_iter_next(&it, &d, &l));
}

static void test_long_values(void **state)
{
	struct pbex_feature f;
	struct wire p = EMPTY;
	int64_t got[200], want[200];
	char big[300];

	/* lengths of 2 bytes: the general path */
	for (int i = 0; i < 200; i++) {
		want[i] = (int64_t)i * 1000;
		p = w_cat(p, V(want[i]));
	}
	assert_int_equal(decode1(FEATURES(ENTRY("a", I64LIST(LD(1, p)))), "a", &f, NULL), 0);
	assert_int_equal(f.count, 200);
	pbex_feature_int64s(&f, got);
	assert_memory_equal(got, want, sizeof(want));
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(decode1(FEATURES(ENTRY("b", BYTESLIST(BVAL(big)))), "b", &f, NULL), 0);
	assert_int_equal(f.count, 1);
	assert_int_equal(f.bytes_len, 299);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_packed_unpacked_mixed),
		cmocka_unit_test(test_fields_in_any_order),
		cmocka_unit_test(test_unknown_wire_types_skipped),
		cmocka_unit_test(test_known_field_wrong_wire_type),
		cmocka_unit_test(test_repeated_map_key_last_wins),
		cmocka_unit_test(test_repeated_key_and_value_in_entry),
		cmocka_unit_test(test_features_twice_merge),
		cmocka_unit_test(test_kind_set_twice),
		cmocka_unit_test(test_entry_without_key_or_value),
		cmocka_unit_test(test_empty_messages),
		cmocka_unit_test(test_varint_encodings),
		cmocka_unit_test(test_overlong_tag_and_length),
		cmocka_unit_test(test_group_nesting_limit_ok),
		cmocka_unit_test(test_unrequested_damage_not_seen),
		cmocka_unit_test(test_reject_varint_too_long),
		cmocka_unit_test(test_reject_truncated_varint),
		cmocka_unit_test(test_reject_length_past_parent),
		cmocka_unit_test(test_reject_wire_types_6_7),
		cmocka_unit_test(test_reject_bad_groups),
		cmocka_unit_test(test_reject_packed_float_length),
		cmocka_unit_test(test_reject_truncated_fixed),
		cmocka_unit_test(test_reject_nesting_too_deep),
		cmocka_unit_test(test_reject_field_zero_and_long_tags),
		cmocka_unit_test(test_error_names_escaped),
		cmocka_unit_test(test_int64_extremes),
		cmocka_unit_test(test_float_bit_patterns),
		cmocka_unit_test(test_bytes_values),
		cmocka_unit_test(test_long_values),
		cmocka_unit_test(test_projection),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
