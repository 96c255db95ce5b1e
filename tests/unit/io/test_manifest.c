/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for io/manifest.c: one test per manifest rule, with the exact message. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "io/manifest.h"

/*
 * JSON in these tests is written with single quotes, turned into double quotes by q() (no test
 * string needs a real apostrophe). The returned buffer is static: one JSON text at a time.
 */
static char qbuf[1 << 16];

static const char *q(const char *s)
{
	size_t i, n = strlen(s);

	assert_true(n < sizeof(qbuf));
	for (i = 0; i <= n; i++)
		qbuf[i] = s[i] == '\'' ? '"' : s[i];
	return qbuf;
}

/* A manifest with one feature (and allow_var_len as given). */
static const char *one(const char *feature, bool allow_var_len)
{
	char tmp[4096];

	snprintf(tmp, sizeof(tmp), "{'compression': null, 'allow_var_len': %s, 'features': [%s]}",
		 allow_var_len ? "true" : "false", feature);
	return q(tmp);
}

static struct manifest *load_ok(const char *json)
{
	struct io_error err = { .msg = "untouched" };
	struct manifest *m = NULL;
	int r = manifest_load_string(json, strlen(json), "manifest.json", &m, &err);

	if (r != 0)
		print_message("unexpected error %d: %s\n", r, err.msg);
	assert_int_equal(r, 0);
	assert_non_null(m);
	assert_string_equal(err.msg, "untouched");
	return m;
}

static void load_err(const char *json, int want, const char *want_msg)
{
	struct io_error err = { { 0 } };
	struct manifest *m = (struct manifest *)&err; /* must stay as it is on failure */
	int r = manifest_load_string(json, strlen(json), "manifest.json", &m, &err);

	if (r != want || !strstr(err.msg, want_msg))
		print_message("got %d \"%s\"\nwant %d \"%s\"\n", r, err.msg, want, want_msg);
	assert_int_equal(r, want);
	assert_non_null(strstr(err.msg, want_msg));
	assert_ptr_equal(m, (struct manifest *)&err);
	/* The same input with err == NULL fails the same way and does not crash. */
	assert_int_equal(manifest_load_string(json, strlen(json), "manifest.json", &m, NULL), want);
}

#define FEAT_INT "{'name': 'label', 'dtype': 'int64', 'shape': [], 'deserialize_type': 'int'}"

/* ---- valid manifests ---- */

static void test_valid_nnetmaker_example(void **state)
{
	/* The example manifest from nnetmaker's MNIST dataset writer. */
	struct manifest *m = load_ok(q("{'compression': 'zlib', 'allow_var_len': false, "
				       "'features': ["
				       " {'name': 'example', 'dtype': 'float32', 'shape': [28, "
				       "28], 'var_len': false,"
				       "  'deserialize_type': 'float'},"
				       " {'name': 'target', 'dtype': 'int64', 'shape': [], "
				       "'var_len': false,"
				       "  'deserialize_type': 'int'}]}"));

	assert_int_equal(m->compression, TFR_COMPRESSION_ZLIB);
	assert_false(m->allow_var_len);
	assert_int_equal(m->n_features, 2);
	assert_string_equal(m->features[0].name, "example");
	assert_int_equal(m->features[0].dtype, MANIFEST_DTYPE_FLOAT32);
	assert_int_equal(m->features[0].deser, MANIFEST_DESER_FLOAT);
	assert_int_equal(m->features[0].rank, 2);
	assert_int_equal(m->features[0].shape[0], 28);
	assert_int_equal(m->features[0].shape[1], 28);
	assert_false(m->features[0].var_len);
	assert_int_equal(m->features[0].raw_len, -1);
	assert_string_equal(m->features[1].name, "target");
	assert_int_equal(m->features[1].rank, 0);
	assert_int_equal(manifest_find(m, "target"), 1);
	assert_int_equal(manifest_find(m, "example"), 0);
	assert_int_equal(manifest_find(m, "nope"), -1);
	manifest_destroy(m);
}

static void test_valid_sequence_raw(void **state)
{
	struct manifest *m =
		load_ok(q("{'compression': 'gzip', 'allow_var_len': true, 'features': ["
			  " {'name': 'audio', 'dtype': 'int16', 'shape': [160], 'var_len': true,"
			  "  'deserialize_type': 'raw', 'deserialize_args': {'endian': 'big'}},"
			  " {'name': 'img', 'dtype': 'uint8', 'shape': [-1, 3], 'var_len': false,"
			  "  'deserialize_type': 'raw', 'deserialize_args': {'endian': 'little', "
			  "'len': 4}},"
			  " {'name': 'words', 'dtype': 'string', 'shape': [], 'var_len': true,"
			  "  'deserialize_type': 'string', 'deserialize_args': {}}]}"));
	int64_t dims[MANIFEST_MAX_RANK];

	assert_int_equal(m->compression, TFR_COMPRESSION_GZIP);
	assert_true(m->allow_var_len);
	assert_true(m->features[0].var_len);
	assert_true(m->features[0].raw_big_endian);
	assert_int_equal(m->features[0].raw_len, -1);
	assert_int_equal(manifest_feature_record_shape(&m->features[0], dims), 2);
	assert_int_equal(dims[0], -1);
	assert_int_equal(dims[1], 160);
	assert_false(m->features[1].raw_big_endian);
	assert_int_equal(m->features[1].raw_len, 4);
	assert_int_equal(manifest_feature_record_shape(&m->features[1], dims), 3);
	assert_int_equal(dims[0], 4);
	assert_int_equal(dims[1], -1);
	assert_int_equal(dims[2], 3);
	assert_int_equal(m->features[2].deser, MANIFEST_DESER_STRING);
	manifest_destroy(m);
}

static void test_compression_case_insensitive(void **state)
{
	/* nnetmaker upper-cases the value before checking it. */
	struct manifest *m = load_ok(q("{'compression': 'GZip', 'allow_var_len': false, "
				       "'features': []}"));

	assert_int_equal(m->compression, TFR_COMPRESSION_GZIP);
	assert_int_equal(m->n_features, 0);
	manifest_destroy(m);
}

static void test_comments_are_blanked(void **state)
{
	const char *json = q("// dataset of things\n"
			     "{'compression': null, // none\n"
			     " 'allow_var_len': false,\n"
			     " 'features': [{'name': 'a//b', 'dtype': 'int64', 'shape': [],\n"
			     "               'deserialize_type': 'int'}]}\n");
	struct manifest *m = load_ok(json);

	assert_string_equal(m->features[0].name, "a//b");
	manifest_destroy(m);
	/* Positions still point at the original text: the error is on line 3. */
	load_err(q("{'compression': null, // c\n 'allow_var_len': false,\n 'features': [,]}"),
		 -EBADMSG, "manifest.json:3:");
}

static void test_integral_reals_and_aliases(void **state)
{
	struct manifest *m = load_ok(one("{'name': 'x', 'dtype': 'double', 'shape': [28.0, 2], "
					 "'deserialize_type': "
					 "'float'}",
					 false));

	assert_int_equal(m->features[0].dtype, MANIFEST_DTYPE_FLOAT64);
	assert_int_equal(m->features[0].shape[0], 28);
	manifest_destroy(m);
}

/* ---- JSON syntax ---- */

static void test_syntax_error_line_column(void **state)
{
	load_err(q("{\n  'compression': null,\n  'allow_var_len': false,,\n}"), -EBADMSG,
		 "manifest.json:3:26: invalid JSON: string or '}' expected near ',' (byte 51)");
	load_err("", -EBADMSG, "manifest.json:1:0: invalid JSON:");
	load_err(q("{'compression': null} x"), -EBADMSG,
		 "manifest.json:1:23: invalid JSON: end of "
		 "file expected");
}

static void test_duplicate_key_rejected(void **state)
{
	load_err(q("{'compression': null, 'compression': 'zlib', 'allow_var_len': false, "
		   "'features': []}"),
		 -EBADMSG,
		 "manifest.json:1:35: invalid JSON: duplicate object key near "
		 "'\"compression\"'");
}

static void test_nul_in_string_rejected(void **state)
{
	load_err(one("{'name': 'a\\u0000b', 'dtype': 'int64', 'shape': [], "
		     "'deserialize_type': 'int'}",
		     false),
		 -EBADMSG, "\\u0000 is not allowed");
}

/* ---- top level ---- */

static void test_top_level_must_be_object(void **state)
{
	load_err("[1, 2]", -EINVAL,
		 "manifest.json: expected a JSON object at the top level, got an array");
	load_err("\"x\"", -EINVAL,
		 "manifest.json: expected a JSON object at the top level, got \"x\"");
}

static void test_top_level_unknown_key(void **state)
{
	load_err(q("{'compression': null, 'allow_var_len': false, 'features': [], 'version': 2}"),
		 -EINVAL,
		 "manifest.json: version: unknown key (expected one of: compression, "
		 "allow_var_len, features)");
	load_err(q("{'compression': null, 'allow_var_len': false, 'features': [], 'a b': 2}"),
		 -EINVAL, "manifest.json: [\"a b\"]: unknown key");
}

static void test_compression_required(void **state)
{
	load_err(q("{'allow_var_len': false, 'features': []}"), -EINVAL,
		 "manifest.json: compression: required key is missing");
}

static void test_compression_values(void **state)
{
	load_err(q("{'compression': 'lz4', 'allow_var_len': false, 'features': []}"), -EINVAL,
		 "manifest.json: compression: expected \"zlib\", \"gzip\" or null, got \"lz4\"");
	load_err(q("{'compression': 'none', 'allow_var_len': false, 'features': []}"), -EINVAL,
		 "compression: expected \"zlib\", \"gzip\" or null, got \"none\"");
	load_err(q("{'compression': false, 'allow_var_len': false, 'features': []}"), -EINVAL,
		 "compression: expected \"zlib\", \"gzip\" or null, got false");
}

static void test_allow_var_len_required_bool(void **state)
{
	load_err(q("{'compression': null, 'features': []}"), -EINVAL,
		 "manifest.json: allow_var_len: required key is missing");
	load_err(q("{'compression': null, 'allow_var_len': 1, 'features': []}"), -EINVAL,
		 "manifest.json: allow_var_len: expected true or false, got 1");
}

static void test_features_required_array(void **state)
{
	load_err(q("{'compression': null, 'allow_var_len': false}"), -EINVAL,
		 "manifest.json: features: required key is missing");
	load_err(q("{'compression': null, 'allow_var_len': false, 'features': {}}"), -EINVAL,
		 "manifest.json: features: expected an array of objects, got an object");
	load_err(q("{'compression': null, 'allow_var_len': false, 'features': [" FEAT_INT ", 3]}"),
		 -EINVAL, "manifest.json: features[1]: expected an object, got 3");
}

/* ---- feature keys ---- */

static void test_feature_unknown_key(void **state)
{
	load_err(one("{'name': 'x', 'dtyp': 'int64', 'shape': [], 'deserialize_type': 'int'}",
		     false),
		 -EINVAL,
		 "manifest.json: features[0].dtyp: unknown key (expected one of: name, dtype, "
		 "shape, var_len, deserialize_type, deserialize_args, default)");
}

static void test_feature_name(void **state)
{
	load_err(one("{'dtype': 'int64', 'shape': [], 'deserialize_type': 'int'}", false), -EINVAL,
		 "manifest.json: features[0].name: required key is missing");
	load_err(one("{'name': '', 'dtype': 'int64', 'shape': [], 'deserialize_type': 'int'}",
		     false),
		 -EINVAL, "manifest.json: features[0].name: expected a non-empty string, got \"\"");
	load_err(one("{'name': 7, 'dtype': 'int64', 'shape': [], 'deserialize_type': 'int'}",
		     false),
		 -EINVAL, "features[0].name: expected a non-empty string, got 7");
}

static void test_feature_dtype(void **state)
{
	load_err(one("{'name': 'x', 'shape': [], 'deserialize_type': 'int'}", false), -EINVAL,
		 "manifest.json: features[0].dtype: required key is missing");
	load_err(one("{'name': 'x', 'dtype': 'complex64', 'shape': [], 'deserialize_type': 'int'}",
		     false),
		 -EINVAL,
		 "manifest.json: features[0].dtype: expected one of int8, int16, int32, int64, "
		 "uint8, uint16, uint32, uint64, float16, float32, float64, bool, string, got "
		 "\"complex64\"");
}

static void test_feature_shape_type(void **state)
{
	load_err(one("{'name': 'x', 'dtype': 'int64', 'deserialize_type': 'int'}", false), -EINVAL,
		 "manifest.json: features[0].shape: required key is missing");
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': '28', 'deserialize_type': 'int'}",
		     false),
		 -EINVAL,
		 "manifest.json: features[0].shape: expected an array of integers, got "
		 "\"28\"");
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [2, 2.5], 'deserialize_type': "
		     "'int'}",
		     false),
		 -EINVAL, "manifest.json: features[0].shape[1]: expected an integer, got 2.5");
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [null], 'deserialize_type': "
		     "'int'}",
		     false),
		 -EINVAL, "manifest.json: features[0].shape[0]: expected an integer, got null");
}

static void test_feature_shape_negative(void **state)
{
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [3, -1], 'deserialize_type': "
		     "'int'}",
		     false),
		 -EINVAL,
		 "manifest.json: features[0].shape[1]: expected an integer >= 0 (-1 only as the "
		 "first entry: a variable-length feature), got -1");
	load_err(one("{'name': 'x', 'dtype': 'uint8', 'shape': [-2], 'deserialize_type': 'raw', "
		     "'deserialize_args': {'endian': 'little'}}",
		     false),
		 -EINVAL, "manifest.json: features[0].shape[0]: expected an integer >= -1, got -2");
	load_err(one("{'name': 'x', 'dtype': 'uint8', 'shape': [-1, 4, -1], 'deserialize_type': "
		     "'raw', 'deserialize_args': {'endian': 'little'}}",
		     false),
		 -EINVAL,
		 "manifest.json: features[0].shape[2]: expected at most one -1 (inferred "
		 "dimension), got a second one");
}

static void test_feature_shape_rank(void **state)
{
	struct manifest *m = load_ok(one("{'name': 'x', 'dtype': 'int64', 'shape': "
					 "[1, 1, 1, 1, 1, 1, 1], 'deserialize_type': 'int'}",
					 false));

	assert_int_equal(m->features[0].rank, 7);
	manifest_destroy(m);
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [1, 1, 1, 1, 1, 1, 1, 1], "
		     "'deserialize_type': 'int'}",
		     false),
		 -EINVAL, "manifest.json: features[0].shape: expected at most 7 dimensions, got 8");
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],"
		     " 'deserialize_type': 'int'}",
		     false),
		 -EINVAL, "features[0].shape: expected at most 7 dimensions, got 11");
	/* var_len adds the steps dimension. */
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [1, 1, 1, 1, 1, 1, 1], "
		     "'var_len': true, 'deserialize_type': 'int'}",
		     true),
		 -EINVAL,
		 "manifest.json: features[0].shape: expected at most 6 dimensions (var_len and "
		 "deserialize_args.len add one each), got 7");
	/* So does a raw len > 1. */
	load_err(one("{'name': 'x', 'dtype': 'int8', 'shape': [1, 1, 1, 1, 1, 1, 1], "
		     "'deserialize_type': 'raw', 'deserialize_args': {'endian': 'big', 'len': 2}}",
		     false),
		 -EINVAL, "features[0].shape: expected at most 6 dimensions");
}

static void test_feature_shape_too_many_values(void **state)
{
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [65536, 65536], "
		     "'deserialize_type': 'int'}",
		     false),
		 -EINVAL,
		 "manifest.json: features[0].shape: expected at most 2147483647 values per record "
		 "(protobuf's limit), got more");
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [4294967296], "
		     "'deserialize_type': 'int'}",
		     false),
		 -EINVAL, "features[0].shape[0]: expected at most 2147483647, got 4294967296");
	load_err(one("{'name': 'x', 'dtype': 'float64', 'shape': [1073741824], "
		     "'deserialize_type': 'raw', 'deserialize_args': {'endian': 'big'}}",
		     false),
		 -EINVAL,
		 "features[0].shape: expected at most 2147483647 bytes per raw value (protobuf's "
		 "limit), got 8589934592");
}

static void test_var_len_required_when_allowed(void **state)
{
	load_err(one(FEAT_INT, true), -EINVAL,
		 "manifest.json: features[0].var_len: required key is missing (required when "
		 "allow_var_len is true)");
}

static void test_var_len_needs_allow_var_len(void **state)
{
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [], 'var_len': true, "
		     "'deserialize_type': 'int'}",
		     false),
		 -EINVAL,
		 "manifest.json: features[0].var_len: expected false because allow_var_len is "
		 "false, got true");
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [], 'var_len': 'yes', "
		     "'deserialize_type': 'int'}",
		     true),
		 -EINVAL,
		 "manifest.json: features[0].var_len: expected true or false, got \"yes\"");
}

static void test_var_len_false_allowed(void **state)
{
	/* var_len may be given as false when allow_var_len is false; default false. */
	struct manifest *m = load_ok(one("{'name': 'x', 'dtype': 'int64', 'shape': [], "
					 "'var_len': false, 'deserialize_type': 'int'}",
					 false));

	assert_false(m->features[0].var_len);
	manifest_destroy(m);
}

static void test_deserialize_type(void **state)
{
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': []}", false), -EINVAL,
		 "manifest.json: features[0].deserialize_type: required key is missing");
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [], 'deserialize_type': 'bytes'}",
		     false),
		 -EINVAL,
		 "manifest.json: features[0].deserialize_type: expected \"int\", \"float\", "
		 "\"string\" or \"raw\", got \"bytes\"");
}

static void test_deserialize_args_object(void **state)
{
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [], 'deserialize_type': 'int', "
		     "'deserialize_args': []}",
		     false),
		 -EINVAL,
		 "manifest.json: features[0].deserialize_args: expected an object, got an "
		 "array");
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [], 'deserialize_type': 'int', "
		     "'deserialize_args': null}",
		     false),
		 -EINVAL, "features[0].deserialize_args: expected an object, got null");
}

static void test_deserialize_args_only_raw(void **state)
{
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [], 'deserialize_type': 'int', "
		     "'deserialize_args': {'endian': 'big'}}",
		     false),
		 -EINVAL,
		 "manifest.json: features[0].deserialize_args.endian: unexpected: "
		 "deserialize_type \"int\" takes no arguments");
	load_err(one("{'name': 'x', 'dtype': 'string', 'shape': [], 'deserialize_type': 'string', "
		     "'deserialize_args': {'len': 1}}",
		     false),
		 -EINVAL,
		 "features[0].deserialize_args.len: unexpected: deserialize_type \"string\"");
}

static void test_raw_endian(void **state)
{
	load_err(one("{'name': 'x', 'dtype': 'uint8', 'shape': [], 'deserialize_type': 'raw'}",
		     false),
		 -EINVAL,
		 "manifest.json: features[0].deserialize_args.endian: required key is missing");
	load_err(q("{'compression': null, 'allow_var_len': false, 'features': [" FEAT_INT
		   ", " FEAT_INT ", " FEAT_INT ", {'name': 'x', 'dtype': 'uint8', 'shape': [], "
		   "'deserialize_type': 'raw', 'deserialize_args': {'endian': 'middle'}}]}"),
		 -EINVAL,
		 "manifest.json: features[3].deserialize_args.endian: expected \"little\" or "
		 "\"big\", got \"middle\"");
	load_err(one("{'name': 'x', 'dtype': 'uint8', 'shape': [], 'deserialize_type': 'raw', "
		     "'deserialize_args': {'endian': 'little', 'order': 'C'}}",
		     false),
		 -EINVAL,
		 "features[0].deserialize_args.order: unknown key (expected one of: "
		 "endian, len)");
}

static void test_raw_len(void **state)
{
	struct manifest *m;

	load_err(one("{'name': 'x', 'dtype': 'uint8', 'shape': [], 'deserialize_type': 'raw', "
		     "'deserialize_args': {'endian': 'little', 'len': 0}}",
		     false),
		 -EINVAL,
		 "manifest.json: features[0].deserialize_args.len: expected an integer >= 1, got "
		 "0");
	load_err(one("{'name': 'x', 'dtype': 'uint8', 'shape': [], 'deserialize_type': 'raw', "
		     "'deserialize_args': {'endian': 'little', 'len': null}}",
		     false),
		 -EINVAL, "features[0].deserialize_args.len: expected an integer >= 1, got null");
	load_err(one("{'name': 'x', 'dtype': 'uint8', 'shape': [], 'var_len': true, "
		     "'deserialize_type': 'raw', 'deserialize_args': {'endian': 'little', 'len': "
		     "2}}",
		     true),
		 -EINVAL,
		 "manifest.json: features[0].deserialize_args.len: expected null or no key when "
		 "var_len is true, got 2");
	/* null is what nnetmaker accepts for a var_len feature. */
	m = load_ok(one("{'name': 'x', 'dtype': 'uint8', 'shape': [], 'var_len': true, "
			"'deserialize_type': 'raw', 'deserialize_args': {'endian': 'little', "
			"'len': null}}",
			true));
	assert_int_equal(m->features[0].raw_len, -1);
	manifest_destroy(m);
	m = load_ok(one("{'name': 'x', 'dtype': 'uint8', 'shape': [], 'deserialize_type': 'raw', "
			"'deserialize_args': {'endian': 'little', 'len': 1}}",
			false));
	assert_int_equal(m->features[0].raw_len, 1);
	manifest_destroy(m);
}

static void test_cast_string_only_to_string(void **state)
{
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [], 'deserialize_type': 'string'}",
		     false),
		 -EINVAL,
		 "manifest.json: features[0].dtype: expected \"string\" for deserialize_type "
		 "\"string\", got \"int64\"");
}

static void test_cast_numeric_not_to_string(void **state)
{
	load_err(one("{'name': 'x', 'dtype': 'string', 'shape': [], 'deserialize_type': 'int'}",
		     false),
		 -EINVAL,
		 "manifest.json: features[0].dtype: expected a numeric or bool dtype for "
		 "deserialize_type \"int\", got \"string\"");
	load_err(one("{'name': 'x', 'dtype': 'string', 'shape': [], 'deserialize_type': 'float'}",
		     false),
		 -EINVAL, "for deserialize_type \"float\", got \"string\"");
	load_err(one("{'name': 'x', 'dtype': 'string', 'shape': [], 'deserialize_type': 'raw', "
		     "'deserialize_args': {'endian': 'big'}}",
		     false),
		 -EINVAL, "for deserialize_type \"raw\", got \"string\"");
}

static void test_cast_numeric_allowed(void **state)
{
	/* tf.cast: int64 lists and float lists cast to any numeric or bool dtype. */
	struct manifest *m = load_ok(q("{'compression': null, 'allow_var_len': false, 'features': ["
				       " {'name': 'a', 'dtype': 'float16', 'shape': [], "
				       "'deserialize_type': 'int'},"
				       " {'name': 'b', 'dtype': 'bool', 'shape': [], "
				       "'deserialize_type': 'int'},"
				       " {'name': 'c', 'dtype': 'int32', 'shape': [], "
				       "'deserialize_type': 'float'},"
				       " {'name': 'd', 'dtype': 'uint64', 'shape': [2], "
				       "'deserialize_type': 'raw',"
				       "  'deserialize_args': {'endian': 'big'}},"
				       " {'name': 'e', 'dtype': 'bool', 'shape': [2], "
				       "'deserialize_type': 'raw',"
				       "  'deserialize_args': {'endian': 'big'}}]}"));

	assert_int_equal(m->n_features, 5);
	assert_int_equal(m->features[1].dtype, MANIFEST_DTYPE_BOOL);
	manifest_destroy(m);
}

static void test_duplicate_feature_names(void **state)
{
	load_err(q("{'compression': null, 'allow_var_len': false, 'features': ["
		   "{'name': 'a', 'dtype': 'int64', 'shape': [], 'deserialize_type': 'int'},"
		   "{'name': 'b', 'dtype': 'int64', 'shape': [], 'deserialize_type': 'int'},"
		   "{'name': 'b', 'dtype': 'int64', 'shape': [], 'deserialize_type': 'int'},"
		   "{'name': 'a', 'dtype': 'int64', 'shape': [], 'deserialize_type': 'int'}]}"),
		 -EINVAL,
		 "manifest.json: features[2].name: duplicate feature name \"b\" (also "
		 "features[1].name)");
}

static void test_first_error_wins(void **state)
{
	/* Errors are reported in document order: features[1] before features[2]. */
	load_err(q("{'compression': null, 'allow_var_len': false, 'features': [" FEAT_INT ","
		   "{'name': 'y', 'dtype': 'int64', 'shape': [-5], 'deserialize_type': 'int'},"
		   "{'name': 'z', 'dtype': 'bad', 'shape': [], 'deserialize_type': 'int'}]}"),
		 -EINVAL,
		 "features[1].shape[0]: expected an integer >= -1 (-1: a variable-length feature), "
		 "got -5");
}

static void test_long_value_is_cut(void **state)
{
	char feat[600], want[128];

	snprintf(feat, sizeof(feat),
		 "{'name': 'x', 'dtype': '%0200d', 'shape': [], 'deserialize_type': 'int'}", 7);
	snprintf(want, sizeof(want), "got \"%059d...\"", 0);
	load_err(one(feat, false), -EINVAL, want);
}

/* ---- files, writing, round trip ---- */

static char *tmp_path(const char *name)
{
	const char *t = getenv("TMPDIR");
	char tmpl[4096], *dir, *p;

	snprintf(tmpl, sizeof(tmpl), "%s/test_manifest.XXXXXX", t && *t ? t : "/tmp");
	dir = mkdtemp(tmpl);
	assert_non_null(dir);
	p = malloc(strlen(dir) + strlen(name) + 2);
	assert_non_null(p);
	snprintf(p, strlen(dir) + strlen(name) + 2, "%s/%s", dir, name);
	return p;
}

static void rm_tmp(char *p)
{
	char *slash = strrchr(p, '/');

	unlink(p);
	*slash = '\0';
	assert_int_equal(rmdir(p), 0);
	free(p);
}

static void test_load_file_errors(void **state)
{
	struct io_error err = { { 0 } };
	struct manifest *m = NULL;
	char *p = tmp_path("none.json");

	assert_int_equal(manifest_load_file(p, &m, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "none.json: No such file or directory"));
	assert_null(m);
	/* A directory is not a manifest. */
	*strrchr(p, '/') = '\0';
	assert_int_equal(manifest_load_file(p, &m, &err), -EISDIR);
	assert_non_null(strstr(err.msg, ": not a regular file"));
	p[strlen(p)] = '/';
	rm_tmp(p);
}

static void test_load_file_names_the_file(void **state)
{
	struct io_error err = { { 0 } };
	struct manifest *m = NULL;
	char *p = tmp_path("__manifest__.json");
	const char *json = one("{'name': 'x', 'dtype': 'int64', 'shape': [], 'deserialize_type': "
			       "'int', 'deserialize_args': {'len': 1}}",
			       false);
	FILE *f = fopen(p, "w");
	char want[4200];

	assert_non_null(f);
	assert_int_equal(fputs(json, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(manifest_load_file(p, &m, &err), -EINVAL);
	snprintf(want, sizeof(want), "%s: features[0].deserialize_args.len: unexpected", p);
	assert_int_equal(strncmp(err.msg, p, strlen(p)), 0);
	assert_non_null(strstr(err.msg, want));
	rm_tmp(p);
}

static void fill_feature(struct manifest_feature *f, const char *name, enum manifest_dtype t,
			 enum manifest_deser d)
{
	memset(f, 0, sizeof(*f));
	f->name = strdup(name);
	assert_non_null(f->name);
	f->dtype = t;
	f->deser = d;
	f->raw_len = -1;
}

static void test_round_trip_file(void **state)
{
	struct manifest m = { .compression = TFR_COMPRESSION_ZLIB, .allow_var_len = true };
	struct manifest_feature feats[4];
	struct io_error err = { { 0 } };
	struct manifest *back = NULL;
	char *p = tmp_path("__manifest__.json");
	size_t i;

	fill_feature(&feats[0], "image/encoded", MANIFEST_DTYPE_STRING, MANIFEST_DESER_STRING);
	fill_feature(&feats[1], "frames", MANIFEST_DTYPE_FLOAT16, MANIFEST_DESER_RAW);
	feats[1].var_len = true;
	feats[1].raw_big_endian = true;
	feats[1].rank = 3;
	feats[1].shape[0] = 2;
	feats[1].shape[1] = -1;
	feats[1].shape[2] = 0;
	fill_feature(&feats[2], "patch", MANIFEST_DTYPE_UINT32, MANIFEST_DESER_RAW);
	feats[2].raw_len = 5;
	feats[2].rank = 1;
	feats[2].shape[0] = 9;
	fill_feature(&feats[3], "label \"quoted\" \xc3\xa9", MANIFEST_DTYPE_BOOL,
		     MANIFEST_DESER_INT);
	m.features = feats;
	m.n_features = 4;

	assert_int_equal(manifest_write_file(&m, p, &err), 0);
	assert_int_equal(manifest_load_file(p, &back, &err), 0);
	assert_true(manifest_equal(&m, back));
	assert_string_equal(back->features[3].name, "label \"quoted\" \xc3\xa9");
	assert_int_equal(back->features[2].raw_len, 5);
	assert_int_equal(back->features[1].shape[1], -1);
	/* A change anywhere is seen by manifest_equal. */
	back->features[2].raw_len = 4;
	assert_false(manifest_equal(&m, back));
	back->features[2].raw_len = 5;
	back->features[1].shape[2] = 1;
	assert_false(manifest_equal(&m, back));
	manifest_destroy(back);
	for (i = 0; i < 4; i++)
		free(feats[i].name);
	rm_tmp(p);
}

/* ---- variable-length Example features and defaults ---- */

static void test_var_count_features(void **state)
{
	struct manifest *m =
		load_ok(q("{'compression': null, 'allow_var_len': true, 'features': ["
			  " {'name': 'tok', 'dtype': 'int32', 'shape': [-1], 'var_len': false,"
			  "  'deserialize_type': 'int'},"
			  " {'name': 'box', 'dtype': 'float32', 'shape': [-1, 4], 'var_len': false,"
			  "  'deserialize_type': 'float'},"
			  " {'name': 'w', 'dtype': 'string', 'shape': [-1], 'var_len': false,"
			  "  'deserialize_type': 'string'},"
			  " {'name': 'r', 'dtype': 'uint8', 'shape': [-1], 'var_len': false,"
			  "  'deserialize_type': 'raw', 'deserialize_args': {'endian': 'little'}},"
			  " {'name': 'f', 'dtype': 'int64', 'shape': [2], 'var_len': true,"
			  "  'deserialize_type': 'int'}]}"));
	int64_t dims[MANIFEST_MAX_RANK];

	(void)state;
	assert_true(manifest_feature_var_count(&m->features[0]));
	assert_true(manifest_feature_var_count(&m->features[1]));
	assert_true(manifest_feature_var_count(&m->features[2]));
	assert_false(manifest_feature_var_count(&m->features[3])); /* raw: inferred bytes */
	assert_false(manifest_feature_var_count(&m->features[4])); /* a feature list */
	assert_int_equal(manifest_feature_record_shape(&m->features[1], dims), 2);
	assert_int_equal(dims[0], -1);
	assert_int_equal(dims[1], 4);
	manifest_destroy(m);

	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [-1, 0], 'deserialize_type': "
		     "'int'}",
		     false),
		 -EINVAL,
		 "manifest.json: features[0].shape[1]: expected an integer >= 1 after a -1");
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [-1, -1], 'deserialize_type': "
		     "'int'}",
		     false),
		 -EINVAL, "manifest.json: features[0].shape[1]: expected an integer >= 0 (-1 only");
	/* a feature list's steps have a fixed shape */
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [-1], 'var_len': true, "
		     "'deserialize_type': 'int'}",
		     true),
		 -EINVAL, "manifest.json: features[0].shape[0]: expected an integer >= 0, got -1");
}

static void test_defaults(void **state)
{
	struct manifest *m = load_ok(q("{'compression': null, 'allow_var_len': false, 'features': ["
				       " {'name': 'a', 'dtype': 'int8', 'shape': [], "
				       "'deserialize_type': 'int',"
				       "  'default': -3},"
				       " {'name': 'b', 'dtype': 'float32', 'shape': [2, 2], "
				       "'deserialize_type': 'float',"
				       "  'default': [[1, 2.5], [3, 4]]},"
				       " {'name': 'c', 'dtype': 'string', 'shape': [3], "
				       "'deserialize_type': 'string',"
				       "  'default': 'unk'},"
				       " {'name': 'd', 'dtype': 'int64', 'shape': [0], "
				       "'deserialize_type': 'int',"
				       "  'default': []}]}"));
	const struct manifest_default *d;
	struct manifest *back;
	char *text = NULL;

	(void)state;
	d = m->features[0].dflt;
	assert_non_null(d);
	assert_int_equal(d->n, 1);
	assert_int_equal(d->ints[0], -3);
	d = m->features[1].dflt;
	assert_int_equal(d->n, 4);
	assert_true(d->floats[1] == 2.5f && d->floats[3] == 4.0f);
	d = m->features[2].dflt;
	assert_int_equal(d->n, 1);
	assert_int_equal(d->str_lens[0], 3);
	assert_memory_equal(d->strs[0], "unk", 3);
	assert_int_equal(m->features[3].dflt->n, 0);
	/* written and read back equal; a different default is a different manifest */
	assert_int_equal(manifest_format(m, &text, NULL), 0);
	back = load_ok(text);
	assert_true(manifest_equal(m, back));
	back->features[1].dflt->floats[2] = 7.0f;
	assert_false(manifest_equal(m, back));
	manifest_default_destroy(back->features[0].dflt);
	back->features[0].dflt = NULL;
	assert_false(manifest_equal(m, back));
	free(text);
	manifest_destroy(back);
	manifest_destroy(m);

	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [3], 'deserialize_type': 'int', "
		     "'default': [1, 2]}",
		     false),
		 -EINVAL,
		 "manifest.json: features[0].default: expected 1 value (for every element) or 3 "
		 "(the shape's elements), got 2");
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [2], 'deserialize_type': 'int', "
		     "'default': [1, 2.5]}",
		     false),
		 -EINVAL,
		 "manifest.json: features[0].default[1]: expected an integer (deserialize_type "
		 "\"int\"), got 2.5");
	load_err(one("{'name': 'x', 'dtype': 'float32', 'shape': [], 'deserialize_type': "
		     "'float', 'default': 'a'}",
		     false),
		 -EINVAL, "features[0].default: expected a number (deserialize_type \"float\")");
	/* float32 overflows (what fuzz_manifest found: it loaded, then could not be written) */
	load_err(one("{'name': 'x', 'dtype': 'float16', 'shape': [3], 'deserialize_type': "
		     "'float', 'default': 3.3e45}",
		     false),
		 -EINVAL,
		 "features[0].default: expected a number within float32's range (at most "
		 "3.4028235e38 in magnitude), got 3.3000000000000001e45");
	load_err(one("{'name': 'x', 'dtype': 'string', 'shape': [], 'deserialize_type': "
		     "'string', 'default': 0}",
		     false),
		 -EINVAL, "features[0].default: expected a string (deserialize_type \"string\")");
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [-1], 'deserialize_type': 'int', "
		     "'default': 0}",
		     false),
		 -EINVAL,
		 "features[0].default: unexpected: a variable-length feature (shape starting "
		 "with -1) has no default");
	load_err(one("{'name': 'x', 'dtype': 'int64', 'shape': [], 'var_len': true, "
		     "'deserialize_type': 'int', 'default': 0}",
		     true),
		 -EINVAL,
		 "features[0].default: unexpected: a feature list (var_len) has no default");
	load_err(one("{'name': 'x', 'dtype': 'uint8', 'shape': [2], 'deserialize_type': 'raw', "
		     "'deserialize_args': {'endian': 'little'}, 'default': 0}",
		     false),
		 -EINVAL,
		 "features[0].default: unexpected: deserialize_type \"raw\" takes no default");
}

static void test_round_trip_string(void **state)
{
	struct manifest *a = load_ok(q("{'compression': 'GZIP', 'allow_var_len': true, 'features': "
				       "["
				       " {'name': 'w', 'dtype': 'half', 'shape': [3.0], 'var_len': "
				       "false,"
				       "  'deserialize_type': 'raw', 'deserialize_args': "
				       "{'endian': 'little', 'len': 2}},"
				       " {'name': 's', 'dtype': 'string', 'shape': [1], 'var_len': "
				       "true,"
				       "  'deserialize_type': 'string'}]}"));
	struct manifest *b;
	char *text = NULL;

	assert_int_equal(manifest_format(a, &text, NULL), 0);
	/* Canonical spelling: lower-case compression, canonical dtype, integer shapes. */
	assert_non_null(strstr(text, "\"compression\": \"gzip\""));
	assert_non_null(strstr(text, "\"dtype\": \"float16\""));
	assert_int_equal(text[strlen(text) - 1], '\n');
	b = load_ok(text);
	assert_true(manifest_equal(a, b));
	free(text);
	manifest_destroy(a);
	manifest_destroy(b);
}

static void test_format_rejects_invalid(void **state)
{
	struct manifest m = { .compression = TFR_COMPRESSION_NONE };
	struct manifest_feature f[2];
	struct io_error err = { { 0 } };
	char *text = (char *)"untouched";

	fill_feature(&f[0], "a", MANIFEST_DTYPE_STRING, MANIFEST_DESER_INT);
	m.features = f;
	m.n_features = 1;
	assert_int_equal(manifest_format(&m, &text, &err), -EINVAL);
	assert_string_equal(text, "untouched");
	assert_non_null(strstr(err.msg, "<manifest>: features[0].dtype: expected a numeric"));
	free(f[0].name);

	fill_feature(&f[0], "a", MANIFEST_DTYPE_INT8, MANIFEST_DESER_INT);
	fill_feature(&f[1], "a", MANIFEST_DTYPE_INT8, MANIFEST_DESER_INT);
	m.n_features = 2;
	assert_int_equal(manifest_format(&m, &text, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "duplicate feature name \"a\""));
	free(f[1].name);
	m.n_features = 1;
	f[0].rank = MANIFEST_MAX_RANK + 1;
	assert_int_equal(manifest_format(&m, &text, &err), -EINVAL);
	assert_string_equal(err.msg, "<manifest>: features[0]: not a valid feature");
	f[0].rank = 0;
	free(f[0].name);
	f[0].name = strdup("\xff\xfe");
	assert_int_equal(manifest_format(&m, &text, &err), -EINVAL);
	assert_string_equal(err.msg, "<manifest>: features[0]: its name or a default is not UTF-8 "
				     "(or a default is not finite)");
	free(f[0].name);
}

static void test_write_file_error(void **state)
{
	struct manifest m = { .compression = TFR_COMPRESSION_NONE };
	struct io_error err = { { 0 } };

	assert_int_equal(manifest_write_file(&m, "/nonexistent-dir/x.json", &err), -ENOENT);
	assert_non_null(strstr(err.msg, "/nonexistent-dir/x.json.tmp."));
	assert_non_null(strstr(err.msg, "No such file or directory"));
}

static void test_many_features(void **state)
{
	size_t cap = 2000 * 120 + 128, n = 0, i;
	char *json = malloc(cap);
	struct manifest *m;

	assert_non_null(json);
	n += (size_t)snprintf(json + n, cap - n,
			      "{\"compression\": null, \"allow_var_len\": false, \"features\": [");
	for (i = 0; i < 2000; i++)
		n += (size_t)snprintf(json + n, cap - n,
				      "%s{\"name\": \"f%04zu\", \"dtype\": \"float32\", \"shape\": "
				      "[%zu], \"deserialize_type\": \"float\"}",
				      i ? "," : "", i, i % 17);
	n += (size_t)snprintf(json + n, cap - n, "]}");
	assert_true(n < cap);
	m = load_ok(json);
	assert_int_equal(m->n_features, 2000);
	assert_int_equal(manifest_find(m, "f1999"), 1999);
	assert_int_equal(m->features[1999].shape[0], 1999 % 17);
	manifest_destroy(m);
	/* A duplicate at the very end is still found, naming both. */
	memcpy(strstr(json, "f1999"), "f0003", 5);
	load_err(json, -EINVAL,
		 "features[1999].name: duplicate feature name \"f0003\" (also "
		 "features[3].name)");
	free(json);
}

static void test_names_and_sizes(void **state)
{
	enum manifest_dtype t;
	enum manifest_deser d;
	unsigned i;

	for (i = 0; i < MANIFEST_DTYPE_COUNT_; i++) {
		assert_int_equal(manifest_dtype_parse(manifest_dtype_name(i), &t), 0);
		assert_int_equal(t, i);
	}
	assert_int_equal(manifest_dtype_parse("float", &t), 0);
	assert_int_equal(t, MANIFEST_DTYPE_FLOAT32);
	assert_int_equal(manifest_dtype_parse("Float32", &t), -EINVAL);
	assert_int_equal(manifest_dtype_parse(NULL, &t), -EINVAL);
	/* bfloat16: an output dtype (normalize's) with a name and a size, never a feature's */
	assert_string_equal(manifest_dtype_name(MANIFEST_DTYPE_BFLOAT16), "bfloat16");
	assert_int_equal(manifest_dtype_size(MANIFEST_DTYPE_BFLOAT16), 2);
	assert_int_equal(manifest_dtype_parse("bfloat16", &t), -EINVAL);
	assert_string_equal(manifest_dtype_name(MANIFEST_DTYPE_ALL_), "?");
	assert_int_equal(manifest_dtype_size(MANIFEST_DTYPE_FLOAT16), 2);
	assert_int_equal(manifest_dtype_size(MANIFEST_DTYPE_UINT64), 8);
	assert_int_equal(manifest_dtype_size(MANIFEST_DTYPE_BOOL), 1);
	assert_int_equal(manifest_dtype_size(MANIFEST_DTYPE_STRING), 0);
	assert_int_equal(manifest_deser_parse("raw", &d), 0);
	assert_int_equal(d, MANIFEST_DESER_RAW);
	assert_int_equal(manifest_deser_parse("bytes", &d), -EINVAL);
	assert_string_equal(manifest_deser_name(MANIFEST_DESER_FLOAT), "float");
	manifest_destroy(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid_nnetmaker_example),
		cmocka_unit_test(test_var_count_features),
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_valid_sequence_raw),
		cmocka_unit_test(test_compression_case_insensitive),
		cmocka_unit_test(test_comments_are_blanked),
		cmocka_unit_test(test_integral_reals_and_aliases),
		cmocka_unit_test(test_syntax_error_line_column),
		cmocka_unit_test(test_duplicate_key_rejected),
		cmocka_unit_test(test_nul_in_string_rejected),
		cmocka_unit_test(test_top_level_must_be_object),
		cmocka_unit_test(test_top_level_unknown_key),
		cmocka_unit_test(test_compression_required),
		cmocka_unit_test(test_compression_values),
		cmocka_unit_test(test_allow_var_len_required_bool),
		cmocka_unit_test(test_features_required_array),
		cmocka_unit_test(test_feature_unknown_key),
		cmocka_unit_test(test_feature_name),
		cmocka_unit_test(test_feature_dtype),
		cmocka_unit_test(test_feature_shape_type),
		cmocka_unit_test(test_feature_shape_negative),
		cmocka_unit_test(test_feature_shape_rank),
		cmocka_unit_test(test_feature_shape_too_many_values),
		cmocka_unit_test(test_var_len_required_when_allowed),
		cmocka_unit_test(test_var_len_needs_allow_var_len),
		cmocka_unit_test(test_var_len_false_allowed),
		cmocka_unit_test(test_deserialize_type),
		cmocka_unit_test(test_deserialize_args_object),
		cmocka_unit_test(test_deserialize_args_only_raw),
		cmocka_unit_test(test_raw_endian),
		cmocka_unit_test(test_raw_len),
		cmocka_unit_test(test_cast_string_only_to_string),
		cmocka_unit_test(test_cast_numeric_not_to_string),
		cmocka_unit_test(test_cast_numeric_allowed),
		cmocka_unit_test(test_duplicate_feature_names),
		cmocka_unit_test(test_first_error_wins),
		cmocka_unit_test(test_long_value_is_cut),
		cmocka_unit_test(test_load_file_errors),
		cmocka_unit_test(test_load_file_names_the_file),
		cmocka_unit_test(test_round_trip_file),
		cmocka_unit_test(test_round_trip_string),
		cmocka_unit_test(test_format_rejects_invalid),
		cmocka_unit_test(test_write_file_error),
		cmocka_unit_test(test_many_features),
		cmocka_unit_test(test_names_and_sizes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
