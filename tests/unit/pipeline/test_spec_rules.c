/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for daemon/pipeline/spec.c: one case per validation rule. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/pipeline/spec.h"
#include "tests/unit/pipeline/spec_fixture.h"

/* ---- one case per rule ---- */

struct err_case {
	const char *type; /* NULL: add is the whole text */
	const char *drop;
	const char *add;
	int rc;
	const char *want1, *want2;
};

#define SEC(args) "'secondary_features': [{'to_name': 's', 'type': 'const', 'args': " args "}]"

static const struct err_case err_cases[] = {
	/* top level */
	{ NULL, NULL, "[1]", -EINVAL, "spec.json: expected a JSON object at the top level",
	  "got an array" },
	{ NULL, NULL, "{'type': 'independent', 'args': {}, 'nme': 'x'}", -EINVAL,
	  "spec.json: nme: unknown key", "(expected one of: name, type, args, readers)" },
	{ NULL, NULL, "{'args': {}}", -EINVAL, "spec.json: type: required key is missing", NULL },
	{ NULL, NULL, "{'type': 'independent', 'args': {}, 'readers': {'uids': 'x'}}", -EINVAL,
	  "spec.json: readers.uids: expected a list of at most 256 ids", "got \"x\"" },
	{ NULL, NULL, "{'type': 'independent', 'args': {}, 'readers': {'gids': [1, -1]}}", -EINVAL,
	  "spec.json: readers.gids[1]: expected an integer from 0 to 4294967294", "got -1" },
	{ NULL, NULL, "{'type': 'independent', 'args': {}, 'readers': {'groups': []}}", -EINVAL,
	  "unknown key", "(expected one of: uids, gids)" },
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
	{ IND, NULL, "'dataset': {'type': 'dir', 'args': {'pattern': 't-*'}}", -EINVAL,
	  "args.dataset.args.data_dir: required key is missing", NULL },
	{ IND, NULL, "'dataset': {'type': 'dir', 'args': {'data_dir': 'd', 'pattern': ''}}",
	  -EINVAL, "args.dataset.args.pattern: expected a non-empty string, got \"\"", NULL },
	{ IND, NULL, "'dataset': {'type': 'dir', 'args': {'data_dir': 'd', 'patern': 'x'}}",
	  -EINVAL,
	  "args.dataset.args.patern: unknown key (expected one of: data_dir, pattern (for type "
	  "\"dir\"))",
	  NULL },
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
	{ IND, NULL, "'cycle_length': 0", -EINVAL,
	  "args.cycle_length: expected an integer from 1 to 1024, got 0", NULL },
	{ IND, NULL, "'cycle_length': 1025", -EINVAL,
	  "args.cycle_length: expected an integer from 1 to 1024, got 1025", NULL },
	{ IND, NULL, "'cycle_length': -3", -EINVAL, "args.cycle_length: ", "got -3" },
	{ IND, NULL, "'cycle_length': 'auto'", -EINVAL,
	  "args.cycle_length: expected an integer from 1 to 1024, got \"auto\"",
	  "the cycle fixes the order of the elements" },
	{ IND, NULL, "'cycle_length': '4'", -EINVAL,
	  "args.cycle_length: expected an integer from 1 to 1024, got \"4\"", NULL },
	{ IND, NULL, "'cycle_length': 4.0", -EINVAL, "args.cycle_length: ", "got 4.0" },
	{ IND, NULL, "'cycle_length': null", -EINVAL, "args.cycle_length: ", "got null" },
	{ IND, NULL, "'cycle_length': true", -EINVAL, "args.cycle_length: ", "got true" },
	/* ram_budget: bytes from 1 MiB to 1 TiB; no "auto", no null (absent: no budget) */
	{ IND, NULL, "'ram_budget': 0", -EINVAL,
	  "args.ram_budget: expected an integer from 1048576 to 1099511627776 bytes (1 MiB to 1 "
	  "TiB), got 0",
	  NULL },
	{ IND, NULL, "'ram_budget': 1000", -EINVAL,
	  "args.ram_budget: expected an integer from 1048576 to 1099511627776 bytes", "got 1000" },
	{ IND, NULL, "'ram_budget': 1048575", -EINVAL, "args.ram_budget: ", "got 1048575" },
	{ IND, NULL, "'ram_budget': 2199023255552", -EINVAL,
	  "args.ram_budget: ", "got 2199023255552" },
	{ IND, NULL, "'ram_budget': 1099511627777", -EINVAL,
	  "args.ram_budget: ", "got 1099511627777" },
	{ IND, NULL, "'ram_budget': -1048576", -EINVAL, "args.ram_budget: ", "got -1048576" },
	{ IND, NULL, "'ram_budget': 'auto'", -EINVAL,
	  "args.ram_budget: expected an integer from 1048576 to 1099511627776 bytes",
	  "got \"auto\" (leave the key out for no budget)" },
	{ IND, NULL, "'ram_budget': '4194304'", -EINVAL, "args.ram_budget: ", "got \"4194304\"" },
	{ IND, NULL, "'ram_budget': 4194304.0", -EINVAL, "args.ram_budget: ", "got 4194304.0" },
	{ IND, NULL, "'ram_budget': null", -EINVAL, "args.ram_budget: ", "got null" },
	{ CONT, NULL, "'ram_budget': [1048576]", -EINVAL, "args.ram_budget: ", "got an array" },
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
	{ IND, NULL, "'shuffle': 'true'", -EINVAL,
	  "args.shuffle: expected true, false or \"global\"", "got \"true\"" },
	{ IND, NULL, "'shuffle': 'globally'", -EINVAL, "args.shuffle: expected true, false or",
	  "got \"globally\"" },
	{ CONT, NULL, "'shuffle': 'global'", -EINVAL,
	  "args.shuffle: \"global\" is for the independent loader", NULL },
	{ IND, NULL, "'shuffle': 'global', 'sloppy_interleave': true", -EINVAL,
	  "args.sloppy_interleave: not allowed when shuffle is \"global\"", NULL },
	{ IND, NULL, "'shuffle': 'global', 'cycle_length': 2", -EINVAL,
	  "args.cycle_length: not allowed when shuffle is \"global\"", NULL },
	{ IND, NULL, "'shuffle': 'global', 'on_corrupt': 'skip_file'", -EINVAL,
	  "args.on_corrupt: \"skip_file\" is not allowed when shuffle is \"global\"", NULL },
	{ IND, NULL, "'shuffle': true, 'num_filenames_shuffle_buffer': 1, 'num_mix_files': 1",
	  -EINVAL, "args.num_shuffle_buffer_elements: required key is missing",
	  "(required when shuffle is true)" },
	{ IND, NULL, "'shuffle': true, 'num_shuffle_buffer_elements': 1, 'num_mix_files': 1",
	  -EINVAL, "args.num_filenames_shuffle_buffer: required key is missing", NULL },
	{ IND, NULL,
	  "'shuffle': true, 'num_shuffle_buffer_elements': 1, 'num_filenames_shuffle_buffer': 1",
	  -EINVAL, "args.num_mix_files: required key is missing", NULL },
	{ IND, NULL,
	  "'shuffle': true, 'num_shuffle_buffer_elements': 1, 'num_filenames_shuffle_buffer': 1, "
	  "'num_mix_files': 4, 'cycle_length': 4",
	  -EINVAL,
	  "args.cycle_length: not allowed when shuffle is true: the interleave cycle is then "
	  "num_mix_files (use num_mix_files instead)",
	  NULL },
	{ IND, NULL, "'cycle_length': 2, 'shuffle': true", -EINVAL,
	  "args.cycle_length: ", "use num_mix_files" },
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
	  "args.processing_steps[0].type: expected \"slice\", \"decode_image\", "
	  "\"random_resized_crop\", \"resize\", \"center_crop\", \"random_flip\", "
	  "\"normalize\", \"color_jitter\" or \"boxes\", got \"crop\"",
	  NULL },
/* image steps (sluice): each argument checked, with its JSON path */
#define IMG(type, args) \
	"'processing_steps': [{'tensor': 'x', 'type': '" type "', 'args': " args "}]"
	{ IND, NULL, IMG("decode_image", "{'channels': 2}"), -EINVAL,
	  "args.processing_steps[0].args.channels: expected 0 (as stored), 1 or 3, got 2", NULL },
	{ IND, NULL, IMG("decode_image", "{'channels': 4}"), -EINVAL,
	  "args.processing_steps[0].args.channels: expected an integer from 0 to 3, got 4", NULL },
	{ IND, NULL, IMG("decode_image", "{'dct_method': 'slow'}"), -EINVAL,
	  "args.processing_steps[0].args.dct_method: expected \"accurate\" or \"fast\"", NULL },
	{ IND, NULL, IMG("decode_image", "{'max_pixels': 0}"), -EINVAL,
	  "args.processing_steps[0].args.max_pixels: expected an integer from 1", NULL },
	{ IND, NULL, IMG("decode_image", "{'size': [1, 1]}"), -EINVAL,
	  "args.processing_steps[0].args.size: unknown key (expected one of: channels, "
	  "dct_method, max_pixels, scaled_idct (for type \"decode_image\"))",
	  NULL },
	{ IND, NULL, IMG("random_resized_crop", "{}"), -EINVAL,
	  "args.processing_steps[0].args.size: required key is missing (for type "
	  "\"random_resized_crop\")",
	  NULL },
	{ IND, NULL, IMG("random_resized_crop", "{'size': [224]}"), -EINVAL,
	  "args.processing_steps[0].args.size: expected [height, width], got an array", NULL },
	{ IND, NULL, IMG("random_resized_crop", "{'size': [224, 0]}"), -EINVAL,
	  "args.processing_steps[0].args.size[1]: expected an integer", NULL },
	{ IND, NULL, IMG("random_resized_crop", "{'size': [2, 2], 'scale': [0.5, 0.2]}"), -EINVAL,
	  "args.processing_steps[0].args.scale: expected low <= high, got [0.5, 0.2]", NULL },
	{ IND, NULL, IMG("random_resized_crop", "{'size': [2, 2], 'scale': [0, 1]}"), -EINVAL,
	  "args.processing_steps[0].args.scale[0]: expected a number > 0 and <= 1, got 0", NULL },
	{ IND, NULL, IMG("random_resized_crop", "{'size': [2, 2], 'interpolation': 'cubic'}"),
	  -EINVAL,
	  "args.processing_steps[0].args.interpolation: expected \"bilinear\", \"nearest\" or "
	  "\"area\"",
	  NULL },
	{ IND, NULL, IMG("resize", "{}"), -EINVAL,
	  "args.processing_steps[0].args: expected exactly one of size and shorter_side, got "
	  "neither",
	  NULL },
	{ IND, NULL, IMG("resize", "{'size': [2, 2], 'shorter_side': 3}"), -EINVAL,
	  "args.processing_steps[0].args: expected exactly one of size and shorter_side, got both",
	  NULL },
	{ IND, NULL, IMG("random_flip", "{'axis': 2}"), -EINVAL,
	  "args.processing_steps[0].args.axis: expected an integer from 0 to 1, got 2", NULL },
	{ IND, NULL, IMG("random_flip", "{'probability': 1.5}"), -EINVAL,
	  "args.processing_steps[0].args.probability: expected a number >= 0 and <= 1, got 1.5",
	  NULL },
	/* steps that share a draw: the same type and random arguments, on other tensors */
	{ IND, NULL,
	  "'processing_steps': [{'tensor': 'x', 'type': 'random_flip', 'args': {'draw': 'd'}}, "
	  "{'tensor': 'x', 'type': 'random_resized_crop', 'args': {'size': [2, 2], 'draw': 'd'}}]",
	  -EINVAL,
	  "args.processing_steps[1].args.draw: draw \"d\" is also args.processing_steps[0]'s: ",
	  "(type differs)" },
	{ IND, NULL,
	  "'processing_steps': [{'tensor': 'x', 'type': 'random_flip', 'args': {'draw': 'd'}}, "
	  "{'tensor': 'x', 'type': 'random_flip', 'args': {'draw': 'd'}}]",
	  -EINVAL, "args.processing_steps[1].args.draw: ", "(tensor differs)" },
	{ IND, NULL, IMG("random_flip", "{'draw': 3}"), -EINVAL,
	  "args.processing_steps[0].args.draw: ", NULL },
	{ IND, NULL, IMG("color_jitter", "{'hue': 0.75}"), -EINVAL,
	  "args.processing_steps[0].args.hue: expected a number >= 0 and <= 0.5, got 0.75", NULL },
	{ IND, NULL, IMG("color_jitter", "{'brightness': [1.5, 0.5]}"), -EINVAL,
	  "args.processing_steps[0].args.brightness: expected low <= high, got [1.5, 0.5]", NULL },
	{ IND, NULL, IMG("color_jitter", "{'contrast': 'x'}"), -EINVAL,
	  "args.processing_steps[0].args.contrast: expected a number or [low, high], got \"x\"",
	  NULL },
	{ IND, NULL, IMG("decode_image", "{'scaled_idct': 'yes'}"), -EINVAL,
	  "args.processing_steps[0].args.scaled_idct: ", NULL },
	{ IND, NULL, IMG("boxes", "{}"), -EINVAL,
	  "args.processing_steps[0].args.image: required key is missing (for type \"boxes\")",
	  NULL },
	{ IND, NULL, IMG("boxes", "{'image': 'y', 'format': 'xywh'}"), -EINVAL,
	  "args.processing_steps[0].args.format: expected \"yxyx\" or \"xyxy\"", NULL },
	{ IND, NULL, IMG("boxes", "{'image': 'y', 'normalized': 1}"), -EINVAL,
	  "args.processing_steps[0].args.normalized: ", NULL },
	{ IND, NULL, IMG("color_jitter", "{'gamma': 1}"), -EINVAL,
	  "args.processing_steps[0].args.gamma: unknown key (expected one of: brightness, "
	  "contrast, saturation, hue (for type \"color_jitter\"))",
	  NULL },
	{ IND, NULL, IMG("normalize", "{'mean': [1, 2, 3]}"), -EINVAL,
	  "args.processing_steps[0].args.std: required key is missing (for type \"normalize\")",
	  NULL },
	{ IND, NULL, IMG("normalize", "{'mean': [1, 2, 3], 'std': [1, 2]}"), -EINVAL,
	  "args.processing_steps[0].args.std: expected 3 numbers, as mean has, got 2", NULL },
	{ IND, NULL, IMG("normalize", "{'mean': 0, 'std': [0]}"), -EINVAL,
	  "args.processing_steps[0].args.std[0]: expected a number > 0", NULL },
	{ IND, NULL, IMG("normalize", "{'dtype': 'int8'}"), -EINVAL,
	  "args.processing_steps[0].args.dtype: expected \"uint8\", \"float16\", \"bfloat16\" "
	  "or \"float32\"",
	  NULL },
	{ IND, NULL, IMG("normalize", "{'dtype': 'uint8', 'layout': 'NHWC'}"), -EINVAL,
	  "args.processing_steps[0].args.layout: expected \"HWC\" or \"CHW\"", NULL },
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rules),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
