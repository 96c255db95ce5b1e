/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for daemon/pipeline/spec.c: full specs, defaults, names, files. */
#include <errno.h>
#include <math.h>
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
#include "tests/unit/pipeline/spec_fixture.h"

/* ---- complete specs ---- */

static void test_full_independent(void **state)
{
	struct pl_spec *s = parse_ok(
		q("// an MNIST training spec\n"
		  "{'name': 'mnist-train.v1_2', 'type': 'independent', 'args': {\n"
		  " 'dataset': {'type': 'dir', 'args': {'data_dir': '/data/mnist', 'pattern': "
		  "'train-*'}},\n"
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
	assert_string_equal(s->pattern, "train-*");
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
	assert_int_equal(s->cycle_length, PL_CYCLE_UNSET);
	assert_int_equal(pl_spec_cycle(s), 16); /* shuffled: num_mix_files */
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
		  " 'num_parallel_reads': 'auto', 'cycle_length': 1024, 'num_parallel_parses': "
		  "1024,\n"
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
	assert_int_equal(s->cycle_length, 1024);
	assert_int_equal(pl_spec_cycle(s), 1024); /* not num_parallel_reads */
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

/* The interleave cycle: num_mix_files shuffled, else cycle_length, else num_parallel_reads. */
static void test_cycle(void **state)
{
	static const struct {
		const char *add;
		int64_t cycle_length, cycle;
	} cases[] = {
		{ "'num_parallel_reads': 6", PL_CYCLE_UNSET, 6 },
		{ "'num_parallel_reads': 'auto'", PL_CYCLE_UNSET, 4 },
		{ "'cycle_length': 3", 3, 3 },
		{ "'cycle_length': 3, 'num_parallel_reads': 1", 3, 3 },
		{ "'num_parallel_reads': 8, 'cycle_length': 3", 3, 3 },
		{ "'cycle_length': 2, 'num_parallel_reads': 'auto'", 2, 2 },
		{ "'cycle_length': 1024, 'num_parallel_reads': 1", 1024, 1024 },
		{ "'shuffle': true, 'num_shuffle_buffer_elements': 9, "
		  "'num_filenames_shuffle_buffer': 2, 'num_mix_files': 5, 'num_parallel_reads': 8",
		  PL_CYCLE_UNSET, 5 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct pl_spec *s = parse_ok(mk(IND, NULL, cases[i].add));
		if (s->cycle_length != cases[i].cycle_length || pl_spec_cycle(s) != cases[i].cycle)
			fail_msg("%s: cycle_length %lld, cycle %lld; expected %lld, %lld",
				 cases[i].add, (long long)s->cycle_length,
				 (long long)pl_spec_cycle(s), (long long)cases[i].cycle_length,
				 (long long)cases[i].cycle);
		pl_spec_destroy(s);
	}
}

/* args.ram_budget: bytes from 1 MiB to 1 TiB, any integer between, for every loader. */
static void test_ram_budget(void **state)
{
	static const struct {
		const char *type, *add;
		int64_t budget;
	} cases[] = {
		{ IND, "'ram_budget': 1048576", 1048576 },
		{ IND, "'ram_budget': 4194304", 4194304 },
		{ IND, "'ram_budget': 3000001", 3000001 }, /* no power of two needed */
		{ IND, "'ram_budget': 1099511627776", 1099511627776 },
		{ IND,
		  "'num_prefetch': 'auto', 'num_read_buffer_bytes': 'auto', 'cycle_length': 2, "
		  "'num_parallel_reads': 'auto', 'ram_budget': 67108864",
		  67108864 },
		{ IND, "'num_prefetch': 3, 'ram_budget': 1048576", 1048576 }, /* explicit: kept */
		{ CONT, "'ram_budget': 1073741824", 1073741824 },
		{ DISC, "'ram_budget': 8388608", 8388608 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct pl_spec *s = parse_ok(mk(cases[i].type, NULL, cases[i].add));
		if (s->ram_budget != cases[i].budget)
			fail_msg("%s: ram_budget %lld, expected %lld", cases[i].add,
				 (long long)s->ram_budget, (long long)cases[i].budget);
		pl_spec_destroy(s);
	}
	struct pl_spec *s = parse_ok(mk(IND, NULL, "'num_prefetch': 3, 'ram_budget': 1048576"));
	assert_int_equal(s->num_prefetch, 3); /* the budget bounds only what a tuner gives */
	assert_int_equal(pl_spec_prefetch(s), 3);
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
	assert_int_equal(s->cycle_length, PL_CYCLE_UNSET);
	assert_int_equal(pl_spec_cycle(s), 1); /* num_parallel_reads, as before cycle_length */
	assert_int_equal(s->ram_budget, PL_RAM_BUDGET_UNSET);
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

/* The ResNet-50 training steps, as docs/pipeline-spec.md shows them, with every default. */
static void test_image_steps(void **state)
{
	struct pl_spec *s =
		parse_ok(q("{'type': 'independent', 'args': {\n"
			   " 'dataset': {'type': 'dir', 'args': {'data_dir': '/data/imagenet'}},\n"
			   " 'target_batch_size': 256, 'drop_remainder': true, 'epochs': null,\n"
			   " 'num_read_buffer_bytes': 1048576, 'num_prefetch': 2,\n"
			   " 'primary_features': [{'from_name': 'image/encoded', 'to_name': "
			   "'image'}],\n"
			   " 'processing_steps': [\n"
			   "  {'type': 'decode_image', 'tensor': 'image', 'args': {'channels': "
			   "3}},\n"
			   "  {'tensor': 'image', 'type': 'random_resized_crop', 'args': {'size': "
			   "[224, 224]}},\n"
			   "  {'tensor': 'image', 'type': 'random_flip', 'args': {}},\n"
			   "  {'tensor': 'image', 'type': 'resize', 'args': {'shorter_side': 256,\n"
			   "   'interpolation': 'area'}},\n"
			   "  {'tensor': 'image', 'type': 'center_crop', 'args': {'size': [224, "
			   "200]}},\n"
			   "  {'tensor': 'image', 'type': 'normalize', 'args': {\n"
			   "   'mean': [123.675, 116.28, 103.53], 'std': [58.395, 57.12, 57.375],\n"
			   "   'dtype': 'float16', 'layout': 'HWC'}}]}}"));
	const struct pl_image_args *a;

	(void)state;
	assert_int_equal(s->n_steps, 6);
	assert_int_equal(s->steps[0].type, PL_STEP_DECODE_IMAGE);
	a = &s->steps[0].img;
	assert_int_equal(a->channels, 3);
	assert_false(a->dct_fast);
	assert_int_equal(a->max_pixels, 64ll << 20);
	a = &s->steps[1].img;
	assert_int_equal(s->steps[1].type, PL_STEP_RANDOM_RESIZED_CROP);
	assert_int_equal(a->size[0], 224);
	assert_int_equal(a->size[1], 224);
	assert_true(a->scale[0] == 0.08 && a->scale[1] == 1.0);
	assert_true(a->ratio[0] == 0.75 && fabs(a->ratio[1] - 4.0 / 3.0) < 1e-12);
	assert_int_equal(a->interp, PL_INTERP_BILINEAR);
	a = &s->steps[2].img;
	assert_int_equal(a->axis, 1);
	assert_true(a->probability == 0.5);
	a = &s->steps[3].img;
	assert_int_equal(a->shorter_side, 256);
	assert_int_equal(a->size[0], 0);
	assert_int_equal(a->interp, PL_INTERP_AREA);
	a = &s->steps[4].img;
	assert_int_equal(a->size[1], 200);
	a = &s->steps[5].img;
	assert_int_equal(a->n_mean, 3);
	assert_true(a->mean[1] == 116.28f && a->std[2] == 57.375f);
	assert_int_equal(a->dtype, PL_NORM_FLOAT16);
	assert_false(a->chw);
	assert_string_equal(pl_step_type_name(s->steps[5].type), "normalize");
	pl_spec_destroy(s);
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
		cmocka_unit_test(test_full_independent), cmocka_unit_test(test_image_steps),
		cmocka_unit_test(test_full_continuous),	 cmocka_unit_test(test_full_discrete),
		cmocka_unit_test(test_defaults),	 cmocka_unit_test(test_names),
		cmocka_unit_test(test_load_file),	 cmocka_unit_test(test_cycle),
		cmocka_unit_test(test_ram_budget),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
