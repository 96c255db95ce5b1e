/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for daemon/pipeline/spec.c: full specs, defaults, one case per rule, slices, files. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/pipeline/spec.h"

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

static struct pl_spec *parse_ok(const char *json)
{
	struct io_error err = { .msg = "untouched" };
	struct pl_spec *s = NULL;
	int r = pl_spec_parse(json, strlen(json), "spec.json", &s, &err);

	if (r != 0)
		print_message("unexpected error %d: %s\n", r, err.msg);
	assert_int_equal(r, 0);
	assert_non_null(s);
	assert_string_equal(err.msg, "untouched");
	return s;
}

static void parse_err(const char *json, int want, const char *want1, const char *want2)
{
	struct io_error err = { { 0 } };
	struct pl_spec *s = (struct pl_spec *)&err; /* must stay as it is on failure */
	int r = pl_spec_parse(json, strlen(json), "spec.json", &s, &err);

	if (r != want || !strstr(err.msg, want1) || (want2 && !strstr(err.msg, want2)))
		print_message("input %s\ngot %d \"%s\"\nwant %d \"%s\" \"%s\"\n", json, r, err.msg,
			      want, want1, want2 ? want2 : "");
	assert_int_equal(r, want);
	assert_non_null(strstr(err.msg, want1));
	if (want2)
		assert_non_null(strstr(err.msg, want2));
	assert_true(strncmp(err.msg, "spec.json", 9) == 0);
	assert_null(strchr(err.msg, '\n'));
	assert_ptr_equal(s, (struct pl_spec *)&err);
	/* The same input with err == NULL fails the same way and does not crash. */
	assert_int_equal(pl_spec_parse(json, strlen(json), "spec.json", &s, NULL), want);
}

/* ---- building specs from a minimal one ---- */

static const char *const base_args[] = {
	"'dataset': {'type': 'dir', 'args': {'data_dir': 'd'}}",
	"'target_batch_size': 4",
	"'drop_remainder': false",
	"'epochs': 1",
	"'num_read_buffer_bytes': 65536",
	"'num_prefetch': 2",
	"'primary_features': [{'from_name': 'a', 'to_name': 'x'}, "
	"{'from_name': 'b', 'to_name': 'y'}]",
	"'min_window': 2", /* sequence loaders only */
	"'max_window': 5",
};

/*
 * A spec of the given loader type: the minimal args, less the keys named in drop (space
 * separated) and those that add sets again, followed by add.
 */
static const char *mk(const char *type, const char *drop, const char *add)
{
	static char out[1 << 14];
	size_t len, i;
	bool seq = strcmp(type, "independent") != 0;

	snprintf(out, sizeof(out), "{'type': '%s', 'args': {", type);
	for (i = 0; i < sizeof(base_args) / sizeof(base_args[0]); i++) {
		const char *e = base_args[i];
		const char *colon = strchr(e, ':');
		char key[64];

		if (i >= 7 && !seq)
			continue;
		snprintf(key, sizeof(key), "%.*s", (int)(colon - e), e); /* 'name' */
		if (add && strstr(add, key))
			continue;
		snprintf(key, sizeof(key), "%.*s", (int)(colon - e - 2), e + 1); /* name */
		if (drop && strstr(drop, key))
			continue;
		len = strlen(out);
		snprintf(out + len, sizeof(out) - len, "%s%s", out[len - 1] == '{' ? "" : ", ", e);
	}
	len = strlen(out);
	if (add)
		snprintf(out + len, sizeof(out) - len, "%s%s", out[len - 1] == '{' ? "" : ", ",
			 add);
	len = strlen(out);
	snprintf(out + len, sizeof(out) - len, "}}");
	return q(out);
}

/* ---- complete specs ---- */

static void test_full_independent(void **state)
{
	struct pl_spec *s = parse_ok(
		q("// an MNIST training spec\n"
		  "{'name': 'mnist-train.v1_2', 'type': 'independent', 'args': {\n"
		  " 'dataset': {'type': 'dir', 'args': {'data_dir': '/data/mnist'}},\n"
		  " 'target_batch_size': 32, 'drop_remainder': true, 'epochs': 3,\n"
		  " 'num_parallel_reads': 8, 'num_parallel_parses': 'auto',\n"
		  " 'num_read_buffer_bytes': 1048576, 'num_prefetch': 4, 'shuffle': true,\n"
		  " 'num_shuffle_buffer_elements': 1000, 'num_filenames_shuffle_buffer': 64,\n"
		  " 'num_mix_files': 16, 'sloppy_interleave': true,\n"
		  " 'num_interleave_out_buffer_elements': 'auto',\n"
		  " 'num_interleave_in_buffer_elements': 5,\n"
		  " 'primary_features': [{'from_name': 'image/encoded', 'to_name': 'image'},\n"
		  "                      {'from_name': 'label', 'to_name': 'y'}], // two\n"
		  " 'secondary_features': [\n"
		  "   {'to_name': 'w', 'type': 'const',\n"
		  "    'args': {'shape': [2, 0, 3], 'dtype': 'float', 'value': 1.5}},\n"
		  "   {'to_name': 'm', 'type': 'const', 'args': {'shape': 'image', 'dtype': 'y',\n"
		  "    'value': 'a // not a comment'}},\n"
		  "   {'to_name': 'n', 'type': 'const', 'args': {'shape': [], 'dtype': 'bool',\n"
		  "    'value': true}},\n"
		  "   {'to_name': 'k', 'type': 'const', 'args': {'value': -7, 'dtype': 'int8',\n"
		  "    'shape': [1]}},\n"
		  "   {'to_name': 'z', 'type': 'const', 'args': {'shape': [1], 'dtype': 'string',\n"
		  "    'value': null}}],\n"
		  " 'processing_steps': [{'tensor': 'image', 'type': 'slice',\n"
		  "                       'args': {'slice': '[3, :, 4:, :-2, 1:4:2, ::-1]'}},\n"
		  "                      {'tensor': 'w', 'type': 'slice', 'args': {'slice': "
		  "'[0]'}}],\n"
		  " 'padding': [{'tensor': 'image', 'shape': [-1, 28], 'value': 0},\n"
		  "             {'tensor': 'w'}, {'tensor': 'm', 'shape': null, 'value': 'pad'}],\n"
		  " 'multi_load': false, 'seed': 7, 'on_corrupt': 'skip_record',\n"
		  " 'shard': {'index': 1, 'count': 4}}}\n"));

	assert_string_equal(s->name, "mnist-train.v1_2");
	assert_int_equal(s->type, PL_LOADER_INDEPENDENT);
	assert_int_equal(s->dataset_type, PL_DATASET_DIR);
	assert_string_equal(s->data_dir, "/data/mnist");
	assert_null(s->manifest_file);
	assert_null(s->list_file);
	assert_int_equal(s->target_batch_size, 32);
	assert_true(s->drop_remainder);
	assert_int_equal(s->epochs, 3);
	assert_int_equal(s->num_parallel_reads, 8);
	assert_int_equal(s->num_parallel_parses, PL_AUTO);
	assert_int_equal(s->num_read_buffer_bytes, 1048576);
	assert_int_equal(s->num_prefetch, 4);
	assert_true(s->shuffle);
	assert_int_equal(s->num_shuffle_buffer_elements, 1000);
	assert_int_equal(s->num_filenames_shuffle_buffer, 64);
	assert_int_equal(s->num_mix_files, 16);
	assert_true(s->sloppy_interleave);
	assert_int_equal(s->num_interleave_out_buffer_elements, PL_AUTO);
	assert_int_equal(s->num_interleave_in_buffer_elements, 5);

	assert_int_equal(s->n_primary, 2);
	assert_string_equal(s->primary[0].from_name, "image/encoded");
	assert_string_equal(s->primary[0].to_name, "image");
	assert_string_equal(s->primary[1].from_name, "label");
	assert_string_equal(s->primary[1].to_name, "y");

	assert_int_equal(s->n_secondary, 5);
	assert_string_equal(s->secondary[0].to_name, "w");
	assert_int_equal(s->secondary[0].type, PL_SECONDARY_CONST);
	assert_null(s->secondary[0].shape_from);
	assert_int_equal(s->secondary[0].rank, 3);
	assert_int_equal(s->secondary[0].shape[0], 2);
	assert_int_equal(s->secondary[0].shape[1], 0);
	assert_int_equal(s->secondary[0].shape[2], 3);
	assert_null(s->secondary[0].dtype_from);
	assert_int_equal(s->secondary[0].dtype, MANIFEST_DTYPE_FLOAT32);
	assert_int_equal(s->secondary[0].value.kind, PL_VALUE_REAL);
	assert_true(s->secondary[0].value.r == 1.5);
	assert_string_equal(s->secondary[1].shape_from, "image");
	assert_string_equal(s->secondary[1].dtype_from, "y");
	assert_int_equal(s->secondary[1].value.kind, PL_VALUE_STRING);
	assert_string_equal(s->secondary[1].value.s, "a // not a comment");
	assert_int_equal(s->secondary[1].value.s_len, 18);
	assert_int_equal(s->secondary[2].rank, 0);
	assert_int_equal(s->secondary[2].dtype, MANIFEST_DTYPE_BOOL);
	assert_int_equal(s->secondary[2].value.kind, PL_VALUE_BOOL);
	assert_true(s->secondary[2].value.b);
	assert_int_equal(s->secondary[3].value.kind, PL_VALUE_INT);
	assert_int_equal(s->secondary[3].value.i, -7);
	assert_int_equal(s->secondary[3].dtype, MANIFEST_DTYPE_INT8);
	assert_int_equal(s->secondary[4].dtype, MANIFEST_DTYPE_STRING);
	assert_int_equal(s->secondary[4].value.kind, PL_VALUE_NONE);
	assert_null(s->secondary[4].value.s);

	assert_int_equal(s->n_steps, 2);
	assert_string_equal(s->steps[0].tensor, "image");
	assert_int_equal(s->steps[0].type, PL_STEP_SLICE);
	assert_string_equal(s->steps[0].slice_text, "[3, :, 4:, :-2, 1:4:2, ::-1]");
	assert_int_equal(s->steps[0].n_dims, 6);
	assert_int_equal(s->steps[0].dims[0].kind, PL_SLICE_INDEX);
	assert_int_equal(s->steps[0].dims[0].index, 3);
	assert_int_equal(s->steps[0].dims[1].kind, PL_SLICE_RANGE);
	assert_false(s->steps[0].dims[1].has_start || s->steps[0].dims[1].has_stop ||
		     s->steps[0].dims[1].has_step);
	assert_true(s->steps[0].dims[2].has_start && !s->steps[0].dims[2].has_stop);
	assert_int_equal(s->steps[0].dims[2].start, 4);
	assert_true(!s->steps[0].dims[3].has_start && s->steps[0].dims[3].has_stop);
	assert_int_equal(s->steps[0].dims[3].stop, -2);
	assert_int_equal(s->steps[0].dims[4].start, 1);
	assert_int_equal(s->steps[0].dims[4].stop, 4);
	assert_true(s->steps[0].dims[4].has_step);
	assert_int_equal(s->steps[0].dims[4].step, 2);
	assert_int_equal(s->steps[0].dims[5].step, -1);
	assert_string_equal(s->steps[1].tensor, "w");
	assert_int_equal(s->steps[1].n_dims, 1);

	assert_true(s->padding);
	assert_int_equal(s->n_padding, 3);
	assert_string_equal(s->paddings[0].tensor, "image");
	assert_true(s->paddings[0].has_shape);
	assert_int_equal(s->paddings[0].rank, 2);
	assert_int_equal(s->paddings[0].shape[0], -1);
	assert_int_equal(s->paddings[0].shape[1], 28);
	assert_int_equal(s->paddings[0].value.kind, PL_VALUE_INT);
	assert_int_equal(s->paddings[0].value.i, 0);
	assert_false(s->paddings[1].has_shape);
	assert_int_equal(s->paddings[1].value.kind, PL_VALUE_NONE);
	assert_false(s->paddings[2].has_shape);
	assert_string_equal(s->paddings[2].value.s, "pad");

	assert_false(s->multi_load);
	assert_int_equal(s->stride, PL_NULL);
	assert_int_equal(s->seed, 7);
	assert_int_equal(s->on_corrupt, PL_ON_CORRUPT_SKIP_RECORD);
	assert_true(s->has_shard);
	assert_int_equal(s->shard_index, 1);
	assert_int_equal(s->shard_count, 4);
	pl_spec_destroy(s);
}

static void test_full_continuous(void **state)
{
	struct pl_spec *s = parse_ok(
		q("{'type': 'continuous_sequence', 'name': 'A', 'args': {\n"
		  " 'dataset': {'args': {'list_file': 'files.txt', 'manifest_file': 'm.json'},\n"
		  "             'type': 'list'},\n"
		  " 'target_batch_size': 2147483647, 'drop_remainder': false, 'epochs': null,\n"
		  " 'num_parallel_reads': 'auto', 'num_parallel_parses': 1024,\n"
		  " 'num_read_buffer_bytes': 'auto', 'num_prefetch': 'auto', 'shuffle': false,\n"
		  " 'num_shuffle_buffer_elements': 99, 'num_filenames_shuffle_buffer': 98,\n"
		  " 'num_mix_files': 97, 'sloppy_interleave': false,\n"
		  " 'num_interleave_out_buffer_elements': 1048576,\n"
		  " 'num_interleave_in_buffer_elements': 'auto',\n"
		  " 'primary_features': [{'to_name': 'audio', 'from_name': 'pcm'}],\n"
		  " 'secondary_features': [], 'processing_steps': [], 'padding': true,\n"
		  " 'min_window': 10, 'max_window': 10, 'stride': 3, 'seed': 9223372036854775807,\n"
		  " 'on_corrupt': 'skip_file', 'shard': {'count': 1, 'index': 0}}}"));

	assert_string_equal(s->name, "A");
	assert_int_equal(s->type, PL_LOADER_CONTINUOUS_SEQUENCE);
	assert_int_equal(s->dataset_type, PL_DATASET_LIST);
	assert_null(s->data_dir);
	assert_string_equal(s->manifest_file, "m.json"); /* kept as written by pl_spec_parse */
	assert_string_equal(s->list_file, "files.txt");
	assert_int_equal(s->target_batch_size, 2147483647);
	assert_false(s->drop_remainder);
	assert_int_equal(s->epochs, PL_NULL);
	assert_int_equal(s->num_parallel_reads, PL_AUTO);
	assert_int_equal(s->num_parallel_parses, 1024);
	assert_int_equal(s->num_read_buffer_bytes, PL_AUTO);
	assert_int_equal(s->num_prefetch, PL_AUTO);
	assert_false(s->shuffle);
	/* validated, then stored as 1 because shuffle is false */
	assert_int_equal(s->num_shuffle_buffer_elements, 1);
	assert_int_equal(s->num_filenames_shuffle_buffer, 1);
	assert_int_equal(s->num_mix_files, 1);
	assert_false(s->sloppy_interleave);
	assert_int_equal(s->num_interleave_out_buffer_elements, 1048576);
	assert_int_equal(s->num_interleave_in_buffer_elements, PL_AUTO);
	assert_int_equal(s->n_primary, 1);
	assert_string_equal(s->primary[0].from_name, "pcm");
	assert_string_equal(s->primary[0].to_name, "audio");
	assert_int_equal(s->n_secondary, 0);
	assert_int_equal(s->n_steps, 0);
	assert_true(s->padding);
	assert_int_equal(s->n_padding, 0);
	assert_false(s->multi_load);
	assert_int_equal(s->min_window, 10);
	assert_int_equal(s->max_window, 10);
	assert_int_equal(s->stride, 3);
	assert_true(s->seed == 9223372036854775807ull);
	assert_int_equal(s->on_corrupt, PL_ON_CORRUPT_SKIP_FILE);
	assert_true(s->has_shard);
	assert_int_equal(s->shard_index, 0);
	assert_int_equal(s->shard_count, 1);

	assert_int_equal(pl_spec_parallel_reads(s), 4);
	assert_int_equal(pl_spec_parallel_parses(s), 1024);
	assert_int_equal(pl_spec_prefetch(s), 2);
	assert_int_equal(pl_spec_read_buffer_bytes(s), 1 << 20);
	pl_spec_destroy(s);
}

static void test_full_discrete(void **state)
{
	struct pl_spec *s =
		parse_ok(q("{'type': 'discrete_sequence', 'args': {\n"
			   " 'dataset': {'type': 'dir', 'args': {'data_dir': 'rel/dir'}},\n"
			   " 'target_batch_size': 1, 'drop_remainder': true, 'epochs': 1,\n"
			   " 'num_parallel_reads': 1, 'num_parallel_parses': 'auto',\n"
			   " 'num_read_buffer_bytes': 1073741824, 'num_prefetch': 0, 'shuffle': "
			   "true,\n"
			   " 'num_shuffle_buffer_elements': 2147483647, "
			   "'num_filenames_shuffle_buffer': 1,\n"
			   " 'num_mix_files': 1024, 'sloppy_interleave': true,\n"
			   " 'num_interleave_out_buffer_elements': 1, "
			   "'num_interleave_in_buffer_elements': 1,\n"
			   " 'primary_features': [{'from_name': 'tok', 'to_name': 'tokens'}],\n"
			   " 'secondary_features': [{'to_name': 'mask', 'type': 'const',\n"
			   "   'args': {'shape': 'tokens', 'dtype': 'tokens'}}],\n"
			   " 'processing_steps': [{'type': 'slice', 'tensor': 'mask',\n"
			   "   'args': {'slice': ' [ 1 : ] '}}],\n"
			   " 'padding': [], 'min_window': 1, 'max_window': 2147483647,\n"
			   " 'seed': 0, 'on_corrupt': 'fail'}}"));

	assert_null(s->name);
	assert_int_equal(s->type, PL_LOADER_DISCRETE_SEQUENCE);
	assert_string_equal(s->data_dir, "rel/dir");
	assert_int_equal(s->num_read_buffer_bytes, 1073741824);
	assert_int_equal(s->num_prefetch, 0);
	assert_true(s->shuffle);
	assert_int_equal(s->num_shuffle_buffer_elements, 2147483647);
	assert_int_equal(s->num_filenames_shuffle_buffer, 1);
	assert_int_equal(s->num_mix_files, 1024);
	assert_int_equal(s->n_secondary, 1);
	assert_string_equal(s->secondary[0].shape_from, "tokens");
	assert_string_equal(s->secondary[0].dtype_from, "tokens");
	assert_int_equal(s->secondary[0].value.kind, PL_VALUE_NONE);
	assert_int_equal(s->n_steps, 1);
	assert_string_equal(s->steps[0].slice_text, " [ 1 : ] ");
	assert_int_equal(s->steps[0].n_dims, 1);
	assert_int_equal(s->steps[0].dims[0].kind, PL_SLICE_RANGE);
	assert_true(s->steps[0].dims[0].has_start);
	assert_false(s->steps[0].dims[0].has_stop);
	assert_false(s->steps[0].dims[0].has_step);
	assert_false(s->padding); /* an empty list is false */
	assert_int_equal(s->n_padding, 0);
	assert_int_equal(s->min_window, 1);
	assert_int_equal(s->max_window, 2147483647);
	assert_int_equal(s->stride, PL_NULL);
	assert_int_equal(s->seed, 0);
	assert_int_equal(s->on_corrupt, PL_ON_CORRUPT_FAIL);
	assert_false(s->has_shard);
	assert_true(pl_spec_parallel_parses(s) >= 1);
	assert_int_equal(pl_spec_parallel_parses(s), sysconf(_SC_NPROCESSORS_ONLN));
	pl_spec_destroy(s);
}

static void test_defaults(void **state)
{
	struct pl_spec *s = parse_ok(mk("independent", NULL, NULL));

	assert_null(s->name);
	assert_int_equal(s->num_parallel_reads, 1);
	assert_int_equal(s->num_parallel_parses, 1);
	assert_false(s->shuffle);
	assert_int_equal(s->num_shuffle_buffer_elements, 1);
	assert_int_equal(s->num_filenames_shuffle_buffer, 1);
	assert_int_equal(s->num_mix_files, 1);
	assert_false(s->sloppy_interleave);
	assert_int_equal(s->num_interleave_out_buffer_elements, 1);
	assert_int_equal(s->num_interleave_in_buffer_elements, 1);
	assert_int_equal(s->n_secondary, 0);
	assert_null(s->secondary);
	assert_int_equal(s->n_steps, 0);
	assert_null(s->steps);
	assert_false(s->padding);
	assert_int_equal(s->n_padding, 0);
	assert_false(s->multi_load);
	assert_int_equal(s->stride, PL_NULL);
	assert_int_equal(s->seed, 0);
	assert_int_equal(s->on_corrupt, PL_ON_CORRUPT_FAIL);
	assert_false(s->has_shard);
	assert_int_equal(pl_spec_parallel_reads(s), 1);
	assert_int_equal(pl_spec_parallel_parses(s), 1);
	assert_int_equal(pl_spec_prefetch(s), 2);
	assert_int_equal(pl_spec_read_buffer_bytes(s), 65536);
	pl_spec_destroy(s);

	s = parse_ok(mk("continuous_sequence", NULL, NULL));
	assert_int_equal(s->stride, PL_NULL);
	assert_int_equal(s->min_window, 2);
	assert_int_equal(s->max_window, 5);
	pl_spec_destroy(s);

	/* multi_load alone is fine; the stride may be given as null */
	s = parse_ok(mk("independent", NULL, "'multi_load': true, 'padding': false"));
	assert_true(s->multi_load);
	pl_spec_destroy(s);
	s = parse_ok(mk("continuous_sequence", NULL, "'stride': null"));
	assert_int_equal(s->stride, PL_NULL);
	pl_spec_destroy(s);

	/* origin defaults to "<spec>" */
	{
		struct io_error err;
		struct pl_spec *t = NULL;

		assert_int_equal(pl_spec_parse("[]", 2, NULL, &t, &err), -EINVAL);
		assert_non_null(strstr(err.msg, "<spec>: "));
	}
	pl_spec_destroy(NULL);
}

static void test_names(void **state)
{
	assert_string_equal(pl_loader_type_name(PL_LOADER_INDEPENDENT), "independent");
	assert_string_equal(pl_loader_type_name(PL_LOADER_CONTINUOUS_SEQUENCE), "continuous_"
										"sequence");
	assert_string_equal(pl_loader_type_name(PL_LOADER_DISCRETE_SEQUENCE), "discrete_sequence");
	assert_string_equal(pl_loader_type_name((enum pl_loader_type)99), "?");
	assert_string_equal(pl_on_corrupt_name(PL_ON_CORRUPT_FAIL), "fail");
	assert_string_equal(pl_on_corrupt_name(PL_ON_CORRUPT_SKIP_RECORD), "skip_record");
	assert_string_equal(pl_on_corrupt_name(PL_ON_CORRUPT_SKIP_FILE), "skip_file");
	assert_string_equal(pl_on_corrupt_name((enum pl_on_corrupt)99), "?");
}

/* ---- one case per rule ---- */

#define IND  "independent"
#define CONT "continuous_sequence"
#define DISC "discrete_sequence"

struct err_case {
	const char *type; /* NULL: add is the whole text */
	const char *drop;
	const char *add;
	int rc;
	const char *want1, *want2;
};

#define SEC(args) "'secondary_features': [{'to_name': 's', 'type': 'const', 'args': " args "}]"
#define STEP(t, sl)                                                  \
	"'processing_steps': [{'tensor': '" t "', 'type': 'slice', " \
	"'args': {'slice': '" sl "'}}]"

static const struct err_case err_cases[] = {
	/* top level */
	{ NULL, NULL, "[1]", -EINVAL, "spec.json: expected a JSON object at the top level",
	  "got an array" },
	{ NULL, NULL, "{'type': 'independent', 'args': {}, 'nme': 'x'}", -EINVAL,
	  "spec.json: nme: unknown key", "(expected one of: name, type, args)" },
	{ NULL, NULL, "{'args': {}}", -EINVAL, "spec.json: type: required key is missing", NULL },
	{ NULL, NULL, "{'type': 'independent'}", -EINVAL,
	  "spec.json: args: required key is missing", NULL },
	{ NULL, NULL, "{'type': 'indep', 'args': {}}", -EINVAL,
	  "type: expected \"independent\", \"continuous_sequence\" or \"discrete_sequence\"",
	  "got \"indep\"" },
	{ NULL, NULL, "{'type': 3, 'args': {}}", -EINVAL, "type: expected", "got 3" },
	{ NULL, NULL, "{'type': 'independent', 'args': []}", -EINVAL,
	  "args: expected an object, got an array", NULL },
	{ NULL, NULL, "{'name': '-x', 'type': 'independent', 'args': {}}", -EINVAL,
	  "name: expected 1 to 128 characters", "got \"-x\"" },
	{ NULL, NULL, "{'name': 'a b', 'type': 'independent', 'args': {}}", -EINVAL,
	  "name: ", "got \"a b\"" },
	{ NULL, NULL, "{'name': '', 'type': 'independent', 'args': {}}", -EINVAL,
	  "name: ", "got \"\"" },
	{ NULL, NULL, "{'name': 7, 'type': 'independent', 'args': {}}", -EINVAL,
	  "name: ", "got 7" },
	{ NULL, NULL,
	  "{'name': 'a123456789012345678901234567890123456789012345678901234567890123456789"
	  "01234567890123456789012345678901234567890123456789012345678', 'type': 'independent'}",
	  -EINVAL, "name: expected 1 to 128", NULL },
	{ NULL, NULL, "{'type': 'independent', 'args': {},}", -EBADMSG,
	  "spec.json:1:", "invalid JSON" },
	{ NULL, NULL, "{'type': 'independent', 'type': 'independent', 'args': {}}", -EBADMSG,
	  "spec.json:1:", "duplicate" },
	{ NULL, NULL, "", -EBADMSG, "invalid JSON", NULL },
	{ NULL, NULL, "{'type': 'independent', // unterminated\n 'args': {'x': '\\u0000'}}",
	  -EBADMSG, "spec.json:2:", NULL },

	/* args keys */
	{ IND, NULL, "'shuffel': true", -EINVAL, "spec.json: args.shuffel: unknown key",
	  "(expected one of: dataset, target_batch_size, drop_remainder" },
	{ IND, NULL, "'a b': 1", -EINVAL, "args[\"a b\"]: unknown key", NULL },
	{ IND, NULL, "'min_window': 3", -EINVAL,
	  "args.min_window: not an argument of the independent loader",
	  "continuous_sequence and discrete_sequence" },
	{ IND, NULL, "'stride': 3", -EINVAL, "args.stride: not an argument of the independent",
	  NULL },
	{ DISC, NULL, "'stride': 3", -EINVAL,
	  "args.stride: not an argument of the discrete_sequence loader",
	  "(only of continuous_sequence)" },
	{ CONT, NULL, "'multi_load': false", -EINVAL,
	  "args.multi_load: not an argument of the continuous_sequence loader", NULL },
	{ IND, "dataset", NULL, -EINVAL, "args.dataset: required key is missing", NULL },
	{ IND, "target_batch_size", NULL, -EINVAL, "args.target_batch_size: required key", NULL },
	{ IND, "drop_remainder", NULL, -EINVAL, "args.drop_remainder: required key", NULL },
	{ IND, "epochs", NULL, -EINVAL, "args.epochs: required key is missing", NULL },
	{ IND, "num_read_buffer_bytes", NULL, -EINVAL, "args.num_read_buffer_bytes: required",
	  NULL },
	{ IND, "num_prefetch", NULL, -EINVAL, "args.num_prefetch: required key is missing", NULL },
	{ IND, "primary_features", NULL, -EINVAL, "args.primary_features: required key", NULL },
	{ CONT, "min_window", NULL, -EINVAL, "args.min_window: required key is missing", NULL },
	{ DISC, "max_window", NULL, -EINVAL, "args.max_window: required key is missing", NULL },
	/* document order: the first problem in the text is reported */
	{ IND, NULL, "'seed': -1, 'shuffel': 1", -EINVAL, "args.seed: ", NULL },
	{ IND, NULL, "'shuffel': 1, 'seed': -1", -EINVAL, "args.shuffel: ", NULL },

	/* dataset */
	{ IND, NULL, "'dataset': 'd'", -EINVAL, "args.dataset: expected an object, got \"d\"",
	  NULL },
	{ IND, NULL, "'dataset': {'type': 'file', 'args': {}}", -EINVAL,
	  "args.dataset.type: expected \"dir\" or \"list\"", "got \"file\"" },
	{ IND, NULL, "'dataset': {'args': {'data_dir': 'd'}}", -EINVAL,
	  "args.dataset.type: required key is missing", NULL },
	{ IND, NULL, "'dataset': {'type': 'dir'}", -EINVAL,
	  "args.dataset.args: required key is missing", NULL },
	{ IND, NULL, "'dataset': {'type': 'dir', 'args': {'data_dir': 'd'}, 'x': 1}", -EINVAL,
	  "args.dataset.x: unknown key (expected one of: type, args)", NULL },
	{ IND, NULL, "'dataset': {'type': 'dir', 'args': ['d']}", -EINVAL,
	  "args.dataset.args: expected an object, got an array", NULL },
	{ IND, NULL, "'dataset': {'type': 'dir', 'args': {'manifest_file': 'm'}}", -EINVAL,
	  "args.dataset.args.manifest_file: unknown key (expected one of: data_dir", NULL },
	{ IND, NULL, "'dataset': {'type': 'dir', 'args': {'data_dir': ''}}", -EINVAL,
	  "args.dataset.args.data_dir: expected a non-empty string, got \"\"", NULL },
	{ IND, NULL, "'dataset': {'type': 'dir', 'args': {}}", -EINVAL,
	  "args.dataset.args.data_dir: required key is missing", NULL },
	{ IND, NULL, "'dataset': {'type': 'list', 'args': {'manifest_file': 'm'}}", -EINVAL,
	  "args.dataset.args.list_file: required key is missing", NULL },
	{ IND, NULL, "'dataset': {'type': 'list', 'args': {'list_file': 'l'}}", -EINVAL,
	  "args.dataset.args.manifest_file: required key is missing", NULL },
	{ IND, NULL, "'dataset': {'type': 'list', 'args': {'manifest_file': 5, 'list_file': 'l'}}",
	  -EINVAL, "args.dataset.args.manifest_file: expected a non-empty string, got 5", NULL },
	{ IND, NULL, "'dataset': {'type': 'list', 'args': {'data_dir': 'd'}}", -EINVAL,
	  "args.dataset.args.data_dir: unknown key (expected one of: manifest_file, list_file",
	  NULL },

	/* integers and booleans */
	{ IND, NULL, "'target_batch_size': 0", -EINVAL,
	  "args.target_batch_size: expected an integer from 1 to 2147483647, got 0", NULL },
	{ IND, NULL, "'target_batch_size': 3.5", -EINVAL, "args.target_batch_size: ", "got 3.5" },
	{ IND, NULL, "'target_batch_size': 3.0", -EINVAL, "args.target_batch_size: ", "got 3.0" },
	{ IND, NULL, "'target_batch_size': true", -EINVAL,
	  "args.target_batch_size: expected an "
	  "integer",
	  "got true" },
	{ IND, NULL, "'target_batch_size': 'x'", -EINVAL, "args.target_batch_size: ", "got \"x\"" },
	{ IND, NULL, "'target_batch_size': 2147483648", -EINVAL,
	  "args.target_batch_size: ", "got 2147483648" },
	{ IND, NULL, "'target_batch_size': 'auto'", -EINVAL,
	  "args.target_batch_size: expected an "
	  "integer from 1 to 2147483647, got \"auto\"",
	  NULL },
	{ IND, NULL, "'drop_remainder': 'yes'", -EINVAL,
	  "args.drop_remainder: expected true or false, got \"yes\"", NULL },
	{ IND, NULL, "'drop_remainder': 0", -EINVAL, "args.drop_remainder: expected true or false",
	  "got 0" },
	{ IND, NULL, "'epochs': 0", -EINVAL, "args.epochs: expected an integer >= 1 or null, got 0",
	  NULL },
	{ IND, NULL, "'epochs': 'auto'", -EINVAL, "args.epochs: ", "got \"auto\"" },
	{ IND, NULL, "'num_parallel_reads': 0", -EINVAL,
	  "args.num_parallel_reads: expected an integer from 1 to 1024 or \"auto\", got 0", NULL },
	{ IND, NULL, "'num_parallel_reads': 1025", -EINVAL,
	  "args.num_parallel_reads: ", "got 1025" },
	{ IND, NULL, "'num_parallel_reads': 'Auto'", -EINVAL,
	  "args.num_parallel_reads: ", "got \"Auto\"" },
	{ IND, NULL, "'num_parallel_parses': null", -EINVAL,
	  "args.num_parallel_parses: expected an "
	  "integer from 1 to 1024 or \"auto\"",
	  "got null" },
	{ IND, NULL, "'num_read_buffer_bytes': -1", -EINVAL,
	  "args.num_read_buffer_bytes: expected an integer from 0 to 1073741824 or \"auto\"",
	  "got -1" },
	{ IND, NULL, "'num_read_buffer_bytes': 1073741825", -EINVAL, "args.num_read_buffer_bytes",
	  "got 1073741825" },
	{ IND, NULL, "'num_prefetch': -1", -EINVAL,
	  "args.num_prefetch: expected an integer from 0 to 1024 or \"auto\", got -1", NULL },
	{ IND, NULL, "'num_interleave_out_buffer_elements': 0", -EINVAL,
	  "args.num_interleave_out_buffer_elements: expected an integer from 1 to 1048576 or "
	  "\"auto\", got 0",
	  NULL },
	{ IND, NULL, "'num_interleave_in_buffer_elements': 1048577", -EINVAL,
	  "args.num_interleave_in_buffer_elements: ", "got 1048577" },
	{ IND, NULL, "'num_interleave_in_buffer_elements': false", -EINVAL,
	  "args.num_interleave_in_buffer_elements: ", "got false" },

	/* shuffle */
	{ IND, NULL, "'shuffle': 'true'", -EINVAL, "args.shuffle: expected true or false",
	  "got \"true\"" },
	{ IND, NULL, "'shuffle': true, 'num_filenames_shuffle_buffer': 1, 'num_mix_files': 1",
	  -EINVAL, "args.num_shuffle_buffer_elements: required key is missing",
	  "(required when shuffle is true)" },
	{ IND, NULL, "'shuffle': true, 'num_shuffle_buffer_elements': 1, 'num_mix_files': 1",
	  -EINVAL, "args.num_filenames_shuffle_buffer: required key is missing", NULL },
	{ IND, NULL,
	  "'shuffle': true, 'num_shuffle_buffer_elements': 1, 'num_filenames_shuffle_buffer': 1",
	  -EINVAL, "args.num_mix_files: required key is missing", NULL },
	{ IND, NULL, "'num_mix_files': 1025", -EINVAL,
	  "args.num_mix_files: expected an integer from 1 to 1024, got 1025", NULL },
	{ IND, NULL, "'num_shuffle_buffer_elements': 0", -EINVAL,
	  "args.num_shuffle_buffer_elements: expected an integer from 1 to 2147483647, got 0",
	  NULL },
	{ IND, NULL, "'num_filenames_shuffle_buffer': 'auto'", -EINVAL,
	  "args.num_filenames_shuffle_buffer: ", "got \"auto\"" },
	{ IND, NULL, "'sloppy_interleave': 1", -EINVAL,
	  "args.sloppy_interleave: expected true or false, got 1", NULL },

	/* primary features */
	{ IND, NULL, "'primary_features': {}", -EINVAL,
	  "args.primary_features: expected an array of objects, got an object", NULL },
	{ IND, NULL, "'primary_features': []", -EINVAL,
	  "args.primary_features: expected at least one feature", NULL },
	{ IND, NULL, "'primary_features': ['a']", -EINVAL,
	  "args.primary_features[0]: expected an object, got \"a\"", NULL },
	{ IND, NULL, "'primary_features': [{'to_name': 'x'}]", -EINVAL,
	  "args.primary_features[0].from_name: required key is missing", NULL },
	{ IND, NULL, "'primary_features': [{'from_name': 'a'}]", -EINVAL,
	  "args.primary_features[0].to_name: required key is missing", NULL },
	{ IND, NULL, "'primary_features': [{'from_name': 'a', 'to_name': 'b', 'dtype': 'int8'}]",
	  -EINVAL, "args.primary_features[0].dtype: unknown key",
	  "(expected one of: from_name, to_name)" },
	{ IND, NULL, "'primary_features': [{'from_name': 'a', 'to_name': ''}]", -EINVAL,
	  "args.primary_features[0].to_name: expected a non-empty string, got \"\"", NULL },
	{ IND, NULL, "'primary_features': [{'from_name': 5, 'to_name': 'x'}]", -EINVAL,
	  "args.primary_features[0].from_name: expected a non-empty string, got 5", NULL },
	{ IND, NULL,
	  "'primary_features': [{'from_name': 'a', 'to_name': 'label'}, "
	  "{'from_name': 'b', 'to_name': 'label'}]",
	  -EINVAL,
	  "args.primary_features[1].to_name: duplicate \"label\" (also "
	  "args.primary_features[0].to_name)",
	  NULL },
	{ IND, NULL, SEC("{'shape': [], 'dtype': 'int8'}") ", 'padding': false", 0, NULL, NULL },
	{ IND, NULL,
	  "'secondary_features': [{'to_name': 'y', 'type': 'const', "
	  "'args': {'shape': [], 'dtype': 'int8'}}]",
	  -EINVAL,
	  "args.secondary_features[0].to_name: duplicate \"y\" (also "
	  "args.primary_features[1].to_name)",
	  NULL },

	/* secondary features */
	{ IND, NULL, "'secondary_features': 1", -EINVAL,
	  "args.secondary_features: expected an array of objects, got 1", NULL },
	{ IND, NULL, "'secondary_features': [{'type': 'const', 'args': {}}]", -EINVAL,
	  "args.secondary_features[0].args.shape: required key is missing", NULL },
	{ IND, NULL,
	  "'secondary_features': [{'type': 'const', 'args': {'shape': [], "
	  "'dtype': 'int8'}}]",
	  -EINVAL, "args.secondary_features[0].to_name: required key", NULL },
	{ IND, NULL, "'secondary_features': [{'to_name': 's', 'type': 'var', 'args': {}}]", -EINVAL,
	  "args.secondary_features[0].type: expected \"const\", got \"var\"", NULL },
	{ IND, NULL,
	  "'secondary_features': [{'to_name': 's', 'args': {'shape': [], "
	  "'dtype': 'int8'}}]",
	  -EINVAL, "args.secondary_features[0].type: required key", NULL },
	{ IND, NULL, "'secondary_features': [{'to_name': 's', 'type': 'const'}]", -EINVAL,
	  "args.secondary_features[0].args.shape: required key is missing", NULL },
	{ IND, NULL, SEC("[]"), -EINVAL,
	  "args.secondary_features[0].args: expected an object, got an array", NULL },
	{ IND, NULL, SEC("{'shape': [], 'dtype': 'int8', 'fill': 0}"), -EINVAL,
	  "args.secondary_features[0].args.fill: unknown key",
	  "(expected one of: shape, dtype, value" },
	{ IND, NULL, SEC("{'dtype': 'int8'}"), -EINVAL,
	  "args.secondary_features[0].args.shape: required key is missing", NULL },
	{ IND, NULL, SEC("{'shape': [1]}"), -EINVAL,
	  "args.secondary_features[0].args.dtype: required key is missing", NULL },
	{ IND, NULL, SEC("{'shape': [1, 2, 3, 4, 5, 6, 7, 8], 'dtype': 'int8'}"), -EINVAL,
	  "args.secondary_features[0].args.shape: expected at most 7 dimensions, got 8", NULL },
	{ IND, NULL, SEC("{'shape': [1, -1], 'dtype': 'int8'}"), -EINVAL,
	  "args.secondary_features[0].args.shape[1]: expected an integer from 0 to 2147483647, "
	  "got -1",
	  NULL },
	{ IND, NULL, SEC("{'shape': [2.5], 'dtype': 'int8'}"), -EINVAL,
	  "args.secondary_features[0].args.shape[0]: ", "got 2.5" },
	{ IND, NULL, SEC("{'shape': true, 'dtype': 'int8'}"), -EINVAL,
	  "args.secondary_features[0].args.shape: expected an array of integers or the to_name of "
	  "a primary feature, got true",
	  NULL },
	{ IND, NULL, SEC("{'shape': 'nope', 'dtype': 'int8'}"), -EINVAL,
	  "args.secondary_features[0].args.shape: expected an array of integers or the to_name",
	  "got \"nope\", which is neither" },
	{ IND, NULL,
	  "'secondary_features': [{'to_name': 's', 'type': 'const', 'args': {'shape': [], "
	  "'dtype': 'int8'}}, {'to_name': 't', 'type': 'const', 'args': {'shape': 's', "
	  "'dtype': 'int8'}}]",
	  -EINVAL, "args.secondary_features[1].args.shape: ", "got \"s\" (a secondary feature)" },
	{ IND, NULL, SEC("{'shape': [], 'dtype': 'bfloat16'}"), -EINVAL,
	  "args.secondary_features[0].args.dtype: expected a dtype name (int8, ",
	  "or the to_name of a primary feature, got \"bfloat16\", which is neither" },
	{ IND, NULL, SEC("{'shape': [], 'dtype': 5}"), -EINVAL,
	  "args.secondary_features[0].args.dtype: expected a dtype name or the to_name of a "
	  "primary feature, got 5",
	  NULL },
	{ IND, NULL, SEC("{'shape': [], 'dtype': 'int8', 'value': [1]}"), -EINVAL,
	  "args.secondary_features[0].args.value: expected a number, a string, true, false or "
	  "null, got an array",
	  NULL },
	{ IND, NULL, SEC("{'shape': [], 'dtype': 'int8', 'value': {}}"), -EINVAL,
	  "args.secondary_features[0].args.value: ", "got an object" },
	{ IND, NULL, "'secondary_features': [{'to_name': 's', 'type': 'const', 'x': 1}]", -EINVAL,
	  "args.secondary_features[0].x: unknown key (expected one of: to_name, type, args)",
	  NULL },

	/* processing steps */
	{ IND, NULL, STEP("nope", "[1]"), -EINVAL,
	  "args.processing_steps[0].tensor: expected the to_name of a primary or secondary "
	  "feature, got \"nope\"",
	  NULL },
	{ IND, NULL, "'processing_steps': [{'tensor': 'x', 'type': 'crop', 'args': {}}]", -EINVAL,
	  "args.processing_steps[0].type: expected \"slice\", got \"crop\"", NULL },
	{ IND, NULL, "'processing_steps': [{'tensor': 'x', 'type': 'slice'}]", -EINVAL,
	  "args.processing_steps[0].args: required key is missing", NULL },
	{ IND, NULL, "'processing_steps': [{'tensor': 'x', 'args': {'slice': '[1]'}}]", -EINVAL,
	  "args.processing_steps[0].type: required key is missing", NULL },
	{ IND, NULL, "'processing_steps': [{'type': 'slice', 'args': {'slice': '[1]'}}]", -EINVAL,
	  "args.processing_steps[0].tensor: required key is missing", NULL },
	{ IND, NULL, "'processing_steps': [{'tensor': 'x', 'type': 'slice', 'args': {}}]", -EINVAL,
	  "args.processing_steps[0].args.slice: required key is missing", NULL },
	{ IND, NULL,
	  "'processing_steps': [{'tensor': 'x', 'type': 'slice', 'args': "
	  "{'slice': '[1]', 'axis': 0}}]",
	  -EINVAL, "args.processing_steps[0].args.axis: unknown key (expected one of: slice",
	  NULL },
	{ IND, NULL,
	  "'processing_steps': [{'tensor': 'x', 'type': 'slice', 'args': "
	  "{'slice': [1]}}]",
	  -EINVAL, "args.processing_steps[0].args.slice: expected a string", "got an array" },
	{ IND, NULL, "'processing_steps': [{'tensor': 'x', 'type': 'slice', 'args': 5}]", -EINVAL,
	  "args.processing_steps[0].args: expected an object, got 5", NULL },
	{ IND, NULL,
	  "'processing_steps': [{'tensor': 'x', 'type': 'slice', 'args': {'slice': '[1]'}}, "
	  "{'tensor': 'y', 'type': 'slice', 'args': {'slice': '[1,x]'}}]",
	  -EINVAL,
	  "args.processing_steps[1].args.slice: expected an integer or start:stop:step at "
	  "character 4 of \"[1,x]\"",
	  NULL },

	/* padding */
	{ IND, NULL, "'padding': 'yes'", -EINVAL,
	  "args.padding: expected true, false or an array of objects, got \"yes\"", NULL },
	{ IND, NULL, "'padding': [1]", -EINVAL, "args.padding[0]: expected an object, got 1",
	  NULL },
	{ IND, NULL, "'padding': [{'tensor': 'nope'}]", -EINVAL,
	  "args.padding[0].tensor: expected the to_name of a primary or secondary feature",
	  "got \"nope\"" },
	{ IND, NULL, "'padding': [{'tensor': 'x'}, {'tensor': 'y'}, {'tensor': 'x'}]", -EINVAL,
	  "args.padding[2].tensor: duplicate \"x\" (also args.padding[0].tensor)", NULL },
	{ IND, NULL, "'padding': [{'shape': [1]}]", -EINVAL,
	  "args.padding[0].tensor: required key is missing", NULL },
	{ IND, NULL, "'padding': [{'tensor': 'x', 'shape': [3, -2]}]", -EINVAL,
	  "args.padding[0].shape[1]: expected an integer from -1 to 2147483647, got -2", NULL },
	{ IND, NULL, "'padding': [{'tensor': 'x', 'shape': [1, 1, 1, 1, 1, 1, 1, 1]}]", -EINVAL,
	  "args.padding[0].shape: expected at most 7 dimensions, got 8", NULL },
	{ IND, NULL, "'padding': [{'tensor': 'x', 'shape': 3}]", -EINVAL,
	  "args.padding[0].shape: expected an array of integers or null, got 3", NULL },
	{ IND, NULL, "'padding': [{'tensor': 'x', 'value': [0]}]", -EINVAL,
	  "args.padding[0].value: expected a number, a string, true, false or null", NULL },
	{ IND, NULL, "'padding': [{'tensor': 'x', 'fill': 0}]", -EINVAL,
	  "args.padding[0].fill: unknown key (expected one of: tensor, shape, value)", NULL },

	/* multi_load */
	{ IND, NULL, "'multi_load': 'no'", -EINVAL, "args.multi_load: expected true or false",
	  NULL },
	{ IND, NULL, "'multi_load': true, " SEC("{'shape': [], 'dtype': 'int8'}"), -EINVAL,
	  "args.multi_load: expected false because secondary_features is not empty, got true",
	  NULL },
	{ IND, NULL, "'multi_load': true, " STEP("x", "[0]"), -EINVAL,
	  "args.multi_load: expected false because processing_steps is not empty", NULL },
	{ IND, NULL, "'padding': true, 'multi_load': true", -EINVAL,
	  "args.multi_load: expected false because padding is used", NULL },

	/* windows */
	{ CONT, NULL, "'min_window': 0", -EINVAL,
	  "args.min_window: expected an integer from 1 to 2147483647, got 0", NULL },
	{ DISC, NULL, "'min_window': 6", -EINVAL,
	  "args.max_window: expected an integer >= min_window (6), got 5", NULL },
	{ CONT, NULL, "'max_window': 1.0", -EINVAL, "args.max_window: ", "got 1.0" },
	{ CONT, NULL, "'stride': 0", -EINVAL,
	  "args.stride: expected an integer >= 1 or null, got 0", NULL },
	{ CONT, NULL, "'stride': 'auto'", -EINVAL, "args.stride: ", "got \"auto\"" },

	/* sluice additions */
	{ IND, NULL, "'seed': -1", -EINVAL, "args.seed: expected an integer >= 0, got -1", NULL },
	{ IND, NULL, "'seed': 1.5", -EINVAL, "args.seed: ", "got 1.5" },
	{ IND, NULL, "'on_corrupt': 'skip'", -EINVAL,
	  "args.on_corrupt: expected \"fail\", \"skip_record\" or \"skip_file\", got \"skip\"",
	  NULL },
	{ IND, NULL, "'shard': [0, 2]", -EINVAL, "args.shard: expected an object, got an array",
	  NULL },
	{ IND, NULL, "'shard': {'index': 4, 'count': 4}", -EINVAL,
	  "args.shard.index: expected an integer below count (4), got 4", NULL },
	{ IND, NULL, "'shard': {'index': 0, 'count': 0}", -EINVAL,
	  "args.shard.count: expected an integer from 1 to 4294967295, got 0", NULL },
	{ IND, NULL, "'shard': {'index': -1, 'count': 2}", -EINVAL,
	  "args.shard.index: ", "got -1" },
	{ IND, NULL, "'shard': {'index': 0}", -EINVAL, "args.shard.count: required key is missing",
	  NULL },
	{ IND, NULL, "'shard': {'count': 2}", -EINVAL, "args.shard.index: required key is missing",
	  NULL },
	{ IND, NULL, "'shard': {'index': 0, 'count': 2, 'of': 3}", -EINVAL,
	  "args.shard.of: unknown key (expected one of: index, count)", NULL },
};

static void test_rules(void **state)
{
	size_t i;

	for (i = 0; i < sizeof(err_cases) / sizeof(err_cases[0]); i++) {
		const struct err_case *e = &err_cases[i];
		const char *json = e->type ? mk(e->type, e->drop, e->add) : q(e->add);

		if (e->rc == 0)
			pl_spec_destroy(parse_ok(json));
		else
			parse_err(json, e->rc, e->want1, e->want2);
	}
	print_message("%zu rule cases\n", i);
}

/* ---- slices ---- */

struct slice_ok {
	const char *text;
	unsigned n;
	/* per dim: "i5" index 5, "r" range with parts "s1", "e-2", "p3", "-" for absent */
	const char *dims[7];
};

static const struct slice_ok slice_ok_cases[] = {
	{ "[3]", 1, { "i3" } },
	{ "[-1]", 1, { "i-1" } },
	{ "[+2]", 1, { "i2" } },
	{ "[0]", 1, { "i0" } },
	{ "[:]", 1, { "r - - -" } },
	{ "[::]", 1, { "r - - -" } },
	{ "[1:]", 1, { "r 1 - -" } },
	{ "[:-2]", 1, { "r - -2 -" } },
	{ "[::2]", 1, { "r - - 2" } },
	{ "[::-1]", 1, { "r - - -1" } },
	{ "[1:4:2]", 1, { "r 1 4 2" } },
	{ "[-3:-1:1]", 1, { "r -3 -1 1" } },
	{ "[1:4:]", 1, { "r 1 4 -" } },
	{ " [ 3 , : , 4: , :-2 , 1 : 4 ] ",
	  5,
	  { "i3", "r - - -", "r 4 - -", "r - -2 -", "r 1 4 -" } },
	{ "[1,2,3,4,5,6,7]", 7, { "i1", "i2", "i3", "i4", "i5", "i6", "i7" } },
	{ "[9223372036854775807]", 1, { "i9223372036854775807" } },
	{ "[-9223372036854775808]", 1, { "i-9223372036854775808" } },
	{ "[\\t1\\n:\\r2 ]", 1, { "r 1 2 -" } },
	{ "[007]", 1, { "i7" } },
};

static void check_part(const char *want, bool has, int64_t v)
{
	if (strcmp(want, "-") == 0) {
		assert_false(has);
		return;
	}
	assert_true(has);
	assert_int_equal(v, strtoll(want, NULL, 10));
}

static void test_slice_valid(void **state)
{
	char buf[1024], a[32], b[32], c[32];
	size_t i;
	unsigned d;

	for (i = 0; i < sizeof(slice_ok_cases) / sizeof(slice_ok_cases[0]); i++) {
		const struct slice_ok *t = &slice_ok_cases[i];
		struct pl_spec *s;

		snprintf(buf, sizeof(buf), STEP("x", "%s"), t->text);
		s = parse_ok(mk(IND, NULL, buf));
		assert_int_equal(s->n_steps, 1);
		assert_int_equal(s->steps[0].n_dims, t->n);
		for (d = 0; d < t->n; d++) {
			const struct pl_slice_dim *x = &s->steps[0].dims[d];

			if (t->dims[d][0] == 'i') {
				assert_int_equal(x->kind, PL_SLICE_INDEX);
				assert_true(x->index == strtoll(t->dims[d] + 1, NULL, 10));
				continue;
			}
			assert_int_equal(x->kind, PL_SLICE_RANGE);
			assert_int_equal(sscanf(t->dims[d], "r %31s %31s %31s", a, b, c), 3);
			check_part(a, x->has_start, x->start);
			check_part(b, x->has_stop, x->stop);
			check_part(c, x->has_step, x->step);
		}
		pl_spec_destroy(s);
	}
}

struct slice_bad {
	const char *text;
	const char *want;
};

static const struct slice_bad slice_bad_cases[] = {
	{ "", "expected '[' at character 1 of \"\"" },
	{ "1", "expected '[' at character 1 of \"1\"" },
	{ "(1)", "expected '[' at character 1" },
	{ "[]", "expected an integer or start:stop:step at character 2 of \"[]\"" },
	{ "[ ]", "expected an integer or start:stop:step at character 3" },
	{ "[1,x]", "expected an integer or start:stop:step at character 4 of \"[1,x]\"" },
	{ "[1,]", "expected an integer or start:stop:step at character 4" },
	{ "[,1]", "expected an integer or start:stop:step at character 2" },
	{ "[1,,2]", "expected an integer or start:stop:step at character 4" },
	{ "[1 2]", "expected ',' or ']' at character 4" },
	{ "[1:2:3:4]", "expected ',' or ']' at character 7" },
	{ "[1", "expected ',' or ']' at character 3" },
	{ "[1:", "expected ',' or ']' at character 4" },
	{ "[1.5]", "expected ',' or ']' at character 3" },
	{ "[::0]", "expected a step other than 0 at character 4 of \"[::0]\"" },
	{ "[1:2:-0]", "expected a step other than 0 at character 6" },
	{ "[...]", "at character 2 of \"[...]\" (Ellipsis is not supported)" },
	{ "[1, ...]", "(Ellipsis is not supported)" },
	{ "[None]", "at character 2 of \"[None]\" (new axes are not supported)" },
	{ "[:, newaxis]", "at character 5 of \"[:, newaxis]\" (new axes are not supported)" },
	{ "[np.newaxis]", "expected an integer or start:stop:step at character 2" },
	{ "[1,2,3,4,5,6,7,8]", "expected at most 7 dimensions at character 16" },
	{ "[1]x", "expected nothing after ']' at character 4" },
	{ "[1][2]", "expected nothing after ']' at character 4" },
	{ "[- 1]", "expected a digit at character 3" },
	{ "[-]", "expected a digit at character 3" },
	{ "[+:]", "expected a digit at character 3" },
	{ "[9223372036854775808]", "expected an integer that fits in 64 bits at character 2" },
	{ "[-9223372036854775809]", "expected an integer that fits in 64 bits at character 2" },
	{ "[a:b]", "expected an integer or start:stop:step at character 2" },
	{ "[1:b]", "expected ',' or ']' at character 4" },
	{ "[0x10]", "expected ',' or ']' at character 3" },
	{ "[1_000]", "expected ',' or ']' at character 3" },
};

static void test_slice_invalid(void **state)
{
	char buf[1024];
	size_t i;

	for (i = 0; i < sizeof(slice_bad_cases) / sizeof(slice_bad_cases[0]); i++) {
		snprintf(buf, sizeof(buf), STEP("x", "%s"), slice_bad_cases[i].text);
		parse_err(mk(IND, NULL, buf), -EINVAL,
			  "args.processing_steps[0].args.slice: ", slice_bad_cases[i].want);
	}
}

/* ---- files ---- */

static char tmpdir[64];

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
	assert_int_equal(fclose(f), 0);
}

static void test_load_file(void **state)
{
	struct io_error err = { { 0 } };
	struct pl_spec *s = NULL;
	char path[256], sub[128], big[256];
	int fd;

	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_pl_spec.XXXXXX");
	assert_non_null(mkdtemp(tmpdir));
	snprintf(sub, sizeof(sub), "%s/conf", tmpdir);
	assert_int_equal(mkdir(sub, 0700), 0);

	/* a relative data_dir is relative to the spec's directory */
	snprintf(path, sizeof(path), "%s/spec.json", sub);
	write_file(path, mk(IND, "dataset",
			    "'dataset': {'type': 'dir', 'args': {'data_dir': '../data'}}"));
	assert_int_equal(pl_spec_load_file(path, &s, &err), 0);
	snprintf(big, sizeof(big), "%s/../data", sub);
	assert_string_equal(s->data_dir, big);
	pl_spec_destroy(s);

	/* list paths, one absolute (kept) */
	write_file(path, mk(IND, "dataset",
			    "'dataset': {'type': 'list', 'args': {'manifest_file': '/m/x.json', "
			    "'list_file': 'files.txt'}}"));
	assert_int_equal(pl_spec_load_file(path, &s, &err), 0);
	assert_string_equal(s->manifest_file, "/m/x.json");
	snprintf(big, sizeof(big), "%s/files.txt", sub);
	assert_string_equal(s->list_file, big);
	pl_spec_destroy(s);

	/* errors name the file */
	write_file(path, mk(IND, NULL, "'seed': -1"));
	s = (struct pl_spec *)&err;
	assert_int_equal(pl_spec_load_file(path, &s, &err), -EINVAL);
	assert_ptr_equal(s, (struct pl_spec *)&err);
	assert_true(strncmp(err.msg, path, strlen(path)) == 0);
	assert_non_null(strstr(err.msg, ": args.seed: "));

	snprintf(big, sizeof(big), "%s/missing.json", sub);
	assert_int_equal(pl_spec_load_file(big, &s, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "missing.json"));
	assert_int_equal(pl_spec_load_file(sub, &s, &err), -EISDIR);

	/* more than 64 MiB */
	snprintf(big, sizeof(big), "%s/big.json", sub);
	fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (64 << 20) + 1), 0);
	close(fd);
	assert_int_equal(pl_spec_load_file(big, &s, &err), -EFBIG);
	assert_non_null(strstr(err.msg, "big.json"));
	assert_ptr_equal(s, (struct pl_spec *)&err);
	unlink(big);
	unlink(path);
	rmdir(sub);
	rmdir(tmpdir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_full_independent),
		cmocka_unit_test(test_full_continuous),
		cmocka_unit_test(test_full_discrete),
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_rules),
		cmocka_unit_test(test_slice_valid),
		cmocka_unit_test(test_slice_invalid),
		cmocka_unit_test(test_load_file),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
