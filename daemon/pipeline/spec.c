/* SPDX-License-Identifier: Apache-2.0 */
/* Pipeline spec: JSON parsing with jansson and every rule of docs/pipeline-spec.md. */
#include "spec.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/file.h"
#include "io/jsonmsg.h"
#include "spec_internal.h"

/*
 * Parsing runs in two passes over the jansson tree. The first walks every object's keys in
 * document order and checks each value on its own (type, range, unknown keys, the slice
 * syntax), so that the first problem in the text is the one reported. The second checks the
 * rules that relate keys: required keys, the shuffle knobs, max_window >= min_window, unique
 * to_names and the names that shape, dtype, processing steps and padding refer to, multi_load.
 * Every failure returns -EINVAL with "ORIGIN: JSON.PATH: expected X, got Y"; JSON syntax errors
 * return -EBADMSG with "ORIGIN:LINE:COLUMN: ...". Strings are copied into the spec, which owns
 * them; nothing points into the jansson tree once parsing returns.
 */

#define SPEC_MAX_FILE_BYTES (64u << 20)
#define NAME_MAX_LEN	    128

static const char *const loader_names[] = {
	[PL_LOADER_INDEPENDENT] = "independent",
	[PL_LOADER_CONTINUOUS_SEQUENCE] = "continuous_sequence",
	[PL_LOADER_DISCRETE_SEQUENCE] = "discrete_sequence",
};

static const char *const on_corrupt_names[] = {
	[PL_ON_CORRUPT_FAIL] = "fail",
	[PL_ON_CORRUPT_SKIP_RECORD] = "skip_record",
	[PL_ON_CORRUPT_SKIP_FILE] = "skip_file",
};

const char *pl_loader_type_name(enum pl_loader_type t)
{
	if ((unsigned)t >= ARRAY_LEN(loader_names))
		return "?";
	return loader_names[t];
}

const char *pl_on_corrupt_name(enum pl_on_corrupt c)
{
	if ((unsigned)c >= ARRAY_LEN(on_corrupt_names))
		return "?";
	return on_corrupt_names[c];
}

/* ---- the spec's name ---- */

static bool name_ok(const char *s)
{
	size_t i, n = strlen(s);

	if (n == 0 || n > NAME_MAX_LEN)
		return false;
	for (i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			     (ch >= '0' && ch <= '9');

		if (!alnum && (i == 0 || (ch != '.' && ch != '_' && ch != '-')))
			return false;
	}
	return true;
}

/* ---- args: the dataset and the shard (features, steps, padding: spec_features.c) ---- */

static const char *const dataset_keys[] = { "type", "args" };
static const char *const dataset_types[] = { "dir", "list" };
static const char *const dir_keys[] = { "data_dir", "pattern" };
static const char *const list_keys[] = { "manifest_file", "list_file" };

static int parse_dataset(const struct jsonmsg_ctx *c, const json_t *ds, struct pl_spec *s)
{
	const char *key, *path = "args.dataset";
	const json_t *v, *args = NULL;
	char sub[PATH_LEN];
	bool has_type = false;
	unsigned t = 0;
	int r;

	r = jsonmsg_get_object(c, ds, path);
	if (r < 0)
		return r;
	json_object_foreach ((json_t *)ds, key, v) {
		jsonmsg_path_key(sub, sizeof(sub), path, key);
		switch (jsonmsg_key_index(key, dataset_keys, ARRAY_LEN(dataset_keys))) {
		case 0:
			r = jsonmsg_get_enum(c, v, sub, dataset_types, 2, "\"dir\" or \"list\"",
					     &t);
			s->dataset_type = (enum pl_dataset_type)t;
			has_type = true;
			break;
		case 1:
			r = jsonmsg_get_object(c, v, sub);
			args = v;
			break;
		default:
			r = jsonmsg_unknown_key(c, path, key, "type, args");
		}
		if (r < 0)
			return r;
	}
	if (!has_type)
		return jsonmsg_missing(c, path, "type", "");
	if (!args)
		return jsonmsg_missing(c, path, "args", "");

	path = "args.dataset.args";
	json_object_foreach ((json_t *)args, key, v) {
		jsonmsg_path_key(sub, sizeof(sub), path, key);
		if (s->dataset_type == PL_DATASET_DIR) {
			int k = jsonmsg_key_index(key, dir_keys, ARRAY_LEN(dir_keys));
			if (k < 0)
				return jsonmsg_unknown_key(c, path, key,
							   "data_dir, pattern (for type \"dir\")");
			r = pl_spec_get_name(c, v, sub, k == 0 ? &s->data_dir : &s->pattern);
		} else {
			switch (jsonmsg_key_index(key, list_keys, 2)) {
			case 0:
				r = pl_spec_get_name(c, v, sub, &s->manifest_file);
				break;
			case 1:
				r = pl_spec_get_name(c, v, sub, &s->list_file);
				break;
			default:
				r = jsonmsg_unknown_key(c, path, key,
							"manifest_file, list_file (for type "
							"\"list\")");
			}
		}
		if (r < 0)
			return r;
	}
	if (s->dataset_type == PL_DATASET_DIR && !s->data_dir)
		return jsonmsg_missing(c, path, "data_dir", " (for type \"dir\")");
	if (s->dataset_type == PL_DATASET_LIST && !s->manifest_file)
		return jsonmsg_missing(c, path, "manifest_file", " (for type \"list\")");
	if (s->dataset_type == PL_DATASET_LIST && !s->list_file)
		return jsonmsg_missing(c, path, "list_file", " (for type \"list\")");
	return 0;
}

static const char *const shard_keys[] = { "index", "count" };

/* shuffle: true, false, or "global" (a permutation of every record: semantics doc, 4g). */
static int parse_shuffle(const struct jsonmsg_ctx *c, const json_t *v, const char *path,
			 struct pl_spec *s)
{
	char buf[JSONMSG_DESCRIBE_MAX + 8];

	if (json_is_string(v) && strcmp(json_string_value(v), "global") == 0) {
		s->shuffle = false;
		s->global_shuffle = true;
		return 0;
	}
	if (!json_is_boolean(v))
		return jsonmsg_fail(c, path, "expected true, false or \"global\", got %s",
				    jsonmsg_describe(v, buf, sizeof(buf)));
	s->shuffle = json_is_true(v);
	s->global_shuffle = false;
	return 0;
}

static int parse_shard(const struct jsonmsg_ctx *c, const json_t *o, struct pl_spec *s)
{
	const char *key, *path = "args.shard";
	int64_t index = -1, count = -1;
	char sub[PATH_LEN];
	const json_t *v;
	int r;

	r = jsonmsg_get_object(c, o, path);
	if (r < 0)
		return r;
	json_object_foreach ((json_t *)o, key, v) {
		jsonmsg_path_key(sub, sizeof(sub), path, key);
		switch (jsonmsg_key_index(key, shard_keys, ARRAY_LEN(shard_keys))) {
		case 0:
			r = pl_spec_get_int(c, v, sub, 0, UINT32_MAX - 1, 0, &index);
			break;
		case 1:
			r = pl_spec_get_int(c, v, sub, 1, UINT32_MAX, 0, &count);
			break;
		default:
			r = jsonmsg_unknown_key(c, path, key, "index, count");
		}
		if (r < 0)
			return r;
	}
	if (index < 0)
		return jsonmsg_missing(c, path, "index", "");
	if (count < 0)
		return jsonmsg_missing(c, path, "count", "");
	if (index >= count)
		return jsonmsg_fail(c, "args.shard.index",
				    "expected an integer below count (%" PRId64 "), got %" PRId64,
				    count, index);
	s->has_shard = true;
	s->shard_index = (uint32_t)index;
	s->shard_count = (uint32_t)count;
	return 0;
}

/* ---- args ---- */

enum arg_key {
	A_DATASET,
	A_TARGET_BATCH_SIZE,
	A_DROP_REMAINDER,
	A_EPOCHS,
	A_NUM_PARALLEL_READS,
	A_CYCLE_LENGTH,
	A_NUM_PARALLEL_PARSES,
	A_NUM_READ_BUFFER_BYTES,
	A_NUM_PREFETCH,
	A_RAM_BUDGET,
	A_SHUFFLE,
	A_NUM_SHUFFLE_BUFFER_ELEMENTS,
	A_NUM_FILENAMES_SHUFFLE_BUFFER,
	A_NUM_MIX_FILES,
	A_SLOPPY_INTERLEAVE,
	A_NUM_INTERLEAVE_OUT,
	A_NUM_INTERLEAVE_IN,
	A_PRIMARY_FEATURES,
	A_SECONDARY_FEATURES,
	A_PROCESSING_STEPS,
	A_PADDING,
	A_MULTI_LOAD,
	A_MIN_WINDOW,
	A_MAX_WINDOW,
	A_STRIDE,
	A_SEED,
	A_ON_CORRUPT,
	A_SHARD,
	A_COUNT_
};

#define L_IND  (1u << PL_LOADER_INDEPENDENT)
#define L_CONT (1u << PL_LOADER_CONTINUOUS_SEQUENCE)
#define L_DISC (1u << PL_LOADER_DISCRETE_SEQUENCE)
#define L_ALL  (L_IND | L_CONT | L_DISC)

static const struct {
	const char *name;
	unsigned loaders; /* L_* of the loaders that take it */
	bool required;
} arg_keys[A_COUNT_] = {
	[A_DATASET] = { "dataset", L_ALL, true },
	[A_TARGET_BATCH_SIZE] = { "target_batch_size", L_ALL, true },
	[A_DROP_REMAINDER] = { "drop_remainder", L_ALL, true },
	[A_EPOCHS] = { "epochs", L_ALL, true },
	[A_NUM_PARALLEL_READS] = { "num_parallel_reads", L_ALL, false },
	[A_CYCLE_LENGTH] = { "cycle_length", L_ALL, false },
	[A_NUM_PARALLEL_PARSES] = { "num_parallel_parses", L_ALL, false },
	[A_NUM_READ_BUFFER_BYTES] = { "num_read_buffer_bytes", L_ALL, true },
	[A_NUM_PREFETCH] = { "num_prefetch", L_ALL, true },
	[A_RAM_BUDGET] = { "ram_budget", L_ALL, false },
	[A_SHUFFLE] = { "shuffle", L_ALL, false },
	[A_NUM_SHUFFLE_BUFFER_ELEMENTS] = { "num_shuffle_buffer_elements", L_ALL, false },
	[A_NUM_FILENAMES_SHUFFLE_BUFFER] = { "num_filenames_shuffle_buffer", L_ALL, false },
	[A_NUM_MIX_FILES] = { "num_mix_files", L_ALL, false },
	[A_SLOPPY_INTERLEAVE] = { "sloppy_interleave", L_ALL, false },
	[A_NUM_INTERLEAVE_OUT] = { "num_interleave_out_buffer_elements", L_ALL, false },
	[A_NUM_INTERLEAVE_IN] = { "num_interleave_in_buffer_elements", L_ALL, false },
	[A_PRIMARY_FEATURES] = { "primary_features", L_ALL, true },
	[A_SECONDARY_FEATURES] = { "secondary_features", L_ALL, false },
	[A_PROCESSING_STEPS] = { "processing_steps", L_ALL, false },
	[A_PADDING] = { "padding", L_ALL, false },
	[A_MULTI_LOAD] = { "multi_load", L_IND, false },
	[A_MIN_WINDOW] = { "min_window", L_CONT | L_DISC, true },
	[A_MAX_WINDOW] = { "max_window", L_CONT | L_DISC, true },
	[A_STRIDE] = { "stride", L_CONT, false },
	[A_SEED] = { "seed", L_ALL, false },
	[A_ON_CORRUPT] = { "on_corrupt", L_ALL, false },
	[A_SHARD] = { "shard", L_ALL, false },
};

static int arg_index(const char *key)
{
	unsigned i;

	for (i = 0; i < A_COUNT_; i++)
		if (strcmp(key, arg_keys[i].name) == 0)
			return (int)i;
	return -1;
}

/* Which loaders take key k, for "not an argument of the X loader (only of ...)". */
static void loaders_of(unsigned mask, char *buf, size_t n)
{
	size_t len = 0;
	unsigned t;

	buf[0] = '\0';
	for (t = 0; t < ARRAY_LEN(loader_names); t++) {
		if (!(mask & (1u << t)))
			continue;
		snprintf(buf + len, n - len, "%s%s", len ? " and " : "", loader_names[t]);
		len = strlen(buf);
	}
}

static void expected_args(enum pl_loader_type type, char *buf, size_t n)
{
	size_t len = 0;
	unsigned i;

	buf[0] = '\0';
	for (i = 0; i < A_COUNT_; i++) {
		if (!(arg_keys[i].loaders & (1u << type)))
			continue;
		snprintf(buf + len, n - len, "%s%s", len ? ", " : "", arg_keys[i].name);
		len = strlen(buf);
		if (len + 1 >= n)
			break;
	}
}

/*
 * args.ram_budget: bytes, PL_RAM_BUDGET_MIN .. PL_RAM_BUDGET_MAX. No "auto" and no null: the key
 * left out is no budget beyond the tuner's fixed bounds.
 */
static int parse_ram_budget(const struct jsonmsg_ctx *c, const json_t *v, const char *path,
			    struct pl_spec *s)
{
	char buf[DESCRIBE_MAX + 8];

	if (json_is_integer(v)) {
		json_int_t x = json_integer_value(v);

		if (x >= PL_RAM_BUDGET_MIN && x <= PL_RAM_BUDGET_MAX) {
			s->ram_budget = x;
			return 0;
		}
	}
	bool is_auto = json_is_string(v) && strcmp(json_string_value(v), "auto") == 0;
	return jsonmsg_fail(c, path,
			    "expected an integer from %" PRId64 " to %" PRId64 " %s, got %s%s",
			    PL_RAM_BUDGET_MIN, PL_RAM_BUDGET_MAX, "bytes (1 MiB to 1 TiB)",
			    jsonmsg_describe(v, buf, sizeof(buf)),
			    is_auto ? " (leave the key out for no budget)" : "");
}

/* One array of objects: primaries, secondaries, steps. */
static int parse_array_arg(const struct jsonmsg_ctx *c, enum arg_key k, const json_t *v,
			   struct pl_spec *s)
{
	char path[PATH_LEN], sub[PATH_LEN];
	size_t i, n = 0;
	int r;

	pl_spec_path_printf(path, sizeof(path), "args.%s", arg_keys[k].name);
	switch (k) {
	case A_PRIMARY_FEATURES:
		r = jsonmsg_get_array(c, v, path, sizeof(*s->primary), &n, (void **)&s->primary);
		if (r == 0 && n == 0)
			r = jsonmsg_fail(c, path,
					 "expected at least one feature, got an empty array");
		s->n_primary = n;
		break;
	case A_SECONDARY_FEATURES:
		r = jsonmsg_get_array(c, v, path, sizeof(*s->secondary), &n,
				      (void **)&s->secondary);
		s->n_secondary = n;
		break;
	default:
		r = jsonmsg_get_array(c, v, path, sizeof(*s->steps), &n, (void **)&s->steps);
		s->n_steps = n;
		break;
	}
	for (i = 0; r == 0 && i < n; i++) {
		const json_t *e = json_array_get(v, i);

		pl_spec_path_printf(sub, sizeof(sub), "%s[%zu]", path, i);
		if (k == A_PRIMARY_FEATURES)
			r = pl_spec_parse_primary(c, e, sub, &s->primary[i]);
		else if (k == A_SECONDARY_FEATURES)
			r = pl_spec_parse_secondary(c, e, sub, &s->secondary[i]);
		else
			r = pl_spec_parse_step(c, e, sub, &s->steps[i]);
	}
	return r;
}

static int parse_arg(const struct jsonmsg_ctx *c, enum arg_key k, const json_t *v,
		     struct pl_spec *s)
{
	char path[PATH_LEN];
	unsigned u = 0;
	int r;

	pl_spec_path_printf(path, sizeof(path), "args.%s", arg_keys[k].name);
	switch (k) {
	case A_DATASET:
		return parse_dataset(c, v, s);
	case A_TARGET_BATCH_SIZE:
		return pl_spec_get_int(c, v, path, 1, I32_MAX, 0, &s->target_batch_size);
	case A_DROP_REMAINDER:
		return jsonmsg_get_bool(c, v, path, &s->drop_remainder);
	case A_EPOCHS:
		return pl_spec_get_int(c, v, path, 1, INT64_MAX, ALLOW_NULL, &s->epochs);
	case A_NUM_PARALLEL_READS:
		return pl_spec_get_int(c, v, path, 1, 1024, ALLOW_AUTO, &s->num_parallel_reads);
	case A_CYCLE_LENGTH:
		/* no "auto": the cycle fixes the order, so no tuner may pick it */
		if (json_is_string(v) && strcmp(json_string_value(v), "auto") == 0)
			return jsonmsg_fail(c, path,
					    "expected an integer from 1 to 1024, got \"auto\" (the "
					    "cycle fixes the order of the elements; \"auto\" is "
					    "for "
					    "num_parallel_reads, the reads in flight)");
		return pl_spec_get_int(c, v, path, 1, 1024, 0, &s->cycle_length);
	case A_NUM_PARALLEL_PARSES:
		return pl_spec_get_int(c, v, path, 1, 1024, ALLOW_AUTO, &s->num_parallel_parses);
	case A_NUM_READ_BUFFER_BYTES:
		return pl_spec_get_int(c, v, path, 0, 1 << 30, ALLOW_AUTO,
				       &s->num_read_buffer_bytes);
	case A_NUM_PREFETCH:
		return pl_spec_get_int(c, v, path, 0, 1024, ALLOW_AUTO, &s->num_prefetch);
	case A_RAM_BUDGET:
		return parse_ram_budget(c, v, path, s);
	case A_SHUFFLE:
		return parse_shuffle(c, v, path, s);
	case A_NUM_SHUFFLE_BUFFER_ELEMENTS:
		return pl_spec_get_int(c, v, path, 1, I32_MAX, 0, &s->num_shuffle_buffer_elements);
	case A_NUM_FILENAMES_SHUFFLE_BUFFER:
		return pl_spec_get_int(c, v, path, 1, I32_MAX, 0, &s->num_filenames_shuffle_buffer);
	case A_NUM_MIX_FILES:
		return pl_spec_get_int(c, v, path, 1, 1024, 0, &s->num_mix_files);
	case A_SLOPPY_INTERLEAVE:
		return jsonmsg_get_bool(c, v, path, &s->sloppy_interleave);
	case A_NUM_INTERLEAVE_OUT:
		return pl_spec_get_int(c, v, path, 1, 1 << 20, ALLOW_AUTO,
				       &s->num_interleave_out_buffer_elements);
	case A_NUM_INTERLEAVE_IN:
		return pl_spec_get_int(c, v, path, 1, 1 << 20, ALLOW_AUTO,
				       &s->num_interleave_in_buffer_elements);
	case A_PRIMARY_FEATURES:
	case A_SECONDARY_FEATURES:
	case A_PROCESSING_STEPS:
		return parse_array_arg(c, k, v, s);
	case A_PADDING:
		return pl_spec_parse_padding(c, v, s);
	case A_MULTI_LOAD:
		return jsonmsg_get_bool(c, v, path, &s->multi_load);
	case A_MIN_WINDOW:
		return pl_spec_get_int(c, v, path, 1, I32_MAX, 0, &s->min_window);
	case A_MAX_WINDOW:
		return pl_spec_get_int(c, v, path, 1, I32_MAX, 0, &s->max_window);
	case A_STRIDE:
		return pl_spec_get_int(c, v, path, 1, INT64_MAX, ALLOW_NULL, &s->stride);
	case A_SEED: {
		int64_t seed;

		r = pl_spec_get_int(c, v, path, 0, INT64_MAX, 0, &seed);
		if (r == 0)
			s->seed = (uint64_t)seed;
		return r;
	}
	case A_ON_CORRUPT:
		r = jsonmsg_get_enum(c, v, path, on_corrupt_names, ARRAY_LEN(on_corrupt_names),
				     "\"fail\", \"skip_record\" or \"skip_file\"", &u);
		if (r == 0)
			s->on_corrupt = (enum pl_on_corrupt)u;
		return r;
	case A_SHARD:
		return parse_shard(c, v, s);
	case A_COUNT_:
		break;
	}
	return -EINVAL;
}

/* ---- rules across keys (those on names: spec_features.c) ---- */

static int check_rules(const struct jsonmsg_ctx *c, const json_t *args, struct pl_spec *s)
{
	static const enum arg_key shuffle_knobs[] = { A_NUM_SHUFFLE_BUFFER_ELEMENTS,
						      A_NUM_FILENAMES_SHUFFLE_BUFFER,
						      A_NUM_MIX_FILES };
	const char *what = NULL;
	unsigned i;
	int r;

	for (i = 0; i < A_COUNT_; i++)
		if (arg_keys[i].required && (arg_keys[i].loaders & (1u << s->type)) &&
		    !json_object_get(args, arg_keys[i].name))
			return jsonmsg_missing(c, "args", arg_keys[i].name, "");
	if (s->global_shuffle) {
		if (s->type != PL_LOADER_INDEPENDENT)
			return jsonmsg_fail(c, "args.shuffle",
					    "\"global\" is for the independent loader (records are "
					    "read by offset; a sequence loader's windows are made "
					    "of "
					    "consecutive records)");
		if (s->cycle_length != PL_CYCLE_UNSET)
			return jsonmsg_fail(c, "args.cycle_length",
					    "not allowed when shuffle is \"global\": there is no "
					    "interleave");
		if (s->sloppy_interleave)
			return jsonmsg_fail(c, "args.sloppy_interleave",
					    "not allowed when shuffle is \"global\": there is no "
					    "interleave");
		if (s->on_corrupt == PL_ON_CORRUPT_SKIP_FILE)
			return jsonmsg_fail(c, "args.on_corrupt",
					    "\"skip_file\" is not allowed when shuffle is "
					    "\"global\": a file's records are not read in order "
					    "(use "
					    "\"skip_record\")");
	}
	if (s->shuffle && s->cycle_length != PL_CYCLE_UNSET)
		return jsonmsg_fail(c, "args.cycle_length",
				    "not allowed when shuffle is true: the interleave cycle is "
				    "then num_mix_files (use num_mix_files instead)");
	for (i = 0; i < ARRAY_LEN(shuffle_knobs); i++) {
		if (s->shuffle && !json_object_get(args, arg_keys[shuffle_knobs[i]].name))
			return jsonmsg_missing(c, "args", arg_keys[shuffle_knobs[i]].name,
					       " (required when shuffle is true)");
	}
	if (!s->shuffle) {
		s->num_shuffle_buffer_elements = 1;
		s->num_filenames_shuffle_buffer = 1;
		s->num_mix_files = 1;
	}
	if (s->type != PL_LOADER_INDEPENDENT && s->max_window < s->min_window)
		return jsonmsg_fail(c, "args.max_window",
				    "expected an integer >= min_window (%" PRId64 "), got %" PRId64,
				    s->min_window, s->max_window);

	r = pl_spec_check_names(c, s);
	if (r == 0)
		r = pl_spec_check_draws(c, s);
	if (r < 0)
		return r;

	if (s->multi_load) {
		if (s->n_secondary)
			what = "secondary_features is not empty";
		else if (s->n_steps)
			what = "processing_steps is not empty";
		else if (s->padding)
			what = "padding is used";
		if (what)
			return jsonmsg_fail(c, "args.multi_load",
					    "expected false because %s, got true", what);
	}
	return 0;
}

/* ---- top level ---- */

static const char *const top_keys[] = { "name", "type", "args", "readers" };
static const char *const readers_keys[] = { "uids", "gids" };
#define MAX_READER_IDS 256

/* "readers": {"uids": [N...], "gids": [N...]} */
static int parse_readers(const struct jsonmsg_ctx *c, const json_t *o, struct pl_spec *s)
{
	const char *key;
	const json_t *v;
	char sub[PATH_LEN], el[PATH_LEN + 24];
	int r = jsonmsg_get_object(c, o, "readers");
	if (r < 0)
		return r;
	json_object_foreach ((json_t *)o, key, v) {
		int k = jsonmsg_key_index(key, readers_keys, ARRAY_LEN(readers_keys));
		if (k < 0)
			return jsonmsg_unknown_key(c, "readers", key, "uids, gids");
		jsonmsg_path_key(sub, sizeof(sub), "readers", key);
		if (!json_is_array(v) || json_array_size(v) > MAX_READER_IDS) {
			char buf[DESCRIBE_MAX + 8];
			return jsonmsg_fail(c, sub, "expected a list of at most %d ids, got %s",
					    MAX_READER_IDS, jsonmsg_describe(v, buf, sizeof(buf)));
		}
		uint32_t **ids = k == 0 ? &s->reader_uids : &s->reader_gids;
		size_t *n = k == 0 ? &s->n_reader_uids : &s->n_reader_gids;
		free(*ids);
		*n = 0;
		*ids = calloc(json_array_size(v) + 1, sizeof(**ids));
		if (!*ids)
			return jsonmsg_oom(c);
		size_t i;
		const json_t *x;
		json_array_foreach (v, i, x) {
			int64_t id;
			snprintf(el, sizeof(el), "%s[%zu]", sub, i);
			/* (uid_t)-1 is no one's */
			r = pl_spec_get_int(c, x, el, 0, UINT32_MAX - 1, 0, &id);
			if (r < 0)
				return r;
			(*ids)[(*n)++] = (uint32_t)id;
		}
	}
	return 0;
}

static int parse_args(const struct jsonmsg_ctx *c, const json_t *args, struct pl_spec *s)
{
	char expected[512], which[96];
	const char *key;
	const json_t *v;
	int k, r;

	json_object_foreach ((json_t *)args, key, v) {
		k = arg_index(key);
		if (k < 0) {
			expected_args(s->type, expected, sizeof(expected));
			return jsonmsg_unknown_key(c, "args", key, expected);
		}
		if (!(arg_keys[k].loaders & (1u << s->type))) {
			char sub[PATH_LEN];

			loaders_of(arg_keys[k].loaders, which, sizeof(which));
			jsonmsg_path_key(sub, sizeof(sub), "args", key);
			return jsonmsg_fail(c, sub, "not an argument of the %s loader (only of %s)",
					    loader_names[s->type], which);
		}
		r = parse_arg(c, (enum arg_key)k, v, s);
		if (r < 0)
			return r;
	}
	return check_rules(c, args, s);
}

static int parse_spec(const struct jsonmsg_ctx *c, const json_t *root, struct pl_spec *s)
{
	char buf[DESCRIBE_MAX + 8];
	const json_t *v, *args = NULL;
	bool has_type = false;
	const char *key;
	unsigned t = 0;
	int r;

	r = jsonmsg_get_object(c, root, NULL);
	if (r < 0)
		return r;
	json_object_foreach ((json_t *)root, key, v) {
		switch (jsonmsg_key_index(key, top_keys, ARRAY_LEN(top_keys))) {
		case 0:
			if (!json_is_string(v) || !name_ok(json_string_value(v)))
				return jsonmsg_fail(c, "name",
						    "expected 1 to %d characters of A-Z a-z 0-9 . "
						    "_ - "
						    "starting with a letter or digit, got %s",
						    NAME_MAX_LEN,
						    jsonmsg_describe(v, buf, sizeof(buf)));
			r = pl_spec_dup_str(c, json_string_value(v), &s->name);
			break;
		case 1:
			r = jsonmsg_get_enum(c, v, "type", loader_names, ARRAY_LEN(loader_names),
					     "\"independent\", \"continuous_sequence\" or "
					     "\"discrete_sequence\"",
					     &t);
			s->type = (enum pl_loader_type)t;
			has_type = true;
			break;
		case 2:
			r = jsonmsg_get_object(c, v, "args");
			args = v;
			break;
		case 3:
			r = parse_readers(c, v, s);
			break;
		default:
			r = jsonmsg_unknown_key(c, "", key, "name, type, args, readers");
		}
		if (r < 0)
			return r;
	}
	if (!has_type)
		return jsonmsg_missing(c, "", "type", "");
	if (!args)
		return jsonmsg_missing(c, "", "args", "");
	return parse_args(c, args, s);
}

static struct pl_spec *spec_new(void)
{
	struct pl_spec *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->epochs = PL_NULL;
	s->num_parallel_reads = 1;
	s->cycle_length = PL_CYCLE_UNSET;
	s->num_parallel_parses = 1;
	s->num_shuffle_buffer_elements = 1;
	s->num_filenames_shuffle_buffer = 1;
	s->num_mix_files = 1;
	s->num_interleave_out_buffer_elements = 1;
	s->num_interleave_in_buffer_elements = 1;
	s->stride = PL_NULL;
	s->on_corrupt = PL_ON_CORRUPT_FAIL;
	return s;
}

int pl_spec_parse(const char *json, size_t len, const char *origin, struct pl_spec **ret_spec,
		  struct io_error *err)
{
	struct jsonmsg_ctx c = { .origin = origin ? origin : "<spec>", .err = err };
	json_t *root;
	struct pl_spec *s = spec_new();
	if (!s)
		return jsonmsg_oom(&c);
	int r = jsonmsg_load(&c, json, len, &root);
	if (r < 0) {
		free(s);
		return r;
	}
	r = parse_spec(&c, root, s);
	json_decref(root);
	if (r < 0) {
		pl_spec_destroy(s);
		return r;
	}
	*ret_spec = s;
	return 0;
}

/* ---- files ---- */

/* *p = dir + "/" + *p when *p is relative (dir_len: of dir, without the final '/'). */
static int rebase(const char *dir, size_t dir_len, char **p)
{
	size_t n;
	char *q;

	if (!*p || (*p)[0] == '/')
		return 0;
	n = dir_len + 1 + strlen(*p) + 1;
	q = malloc(n);
	if (!q)
		return -ENOMEM;
	if (dir_len == 1 && dir[0] == '/')
		snprintf(q, n, "/%s", *p);
	else
		snprintf(q, n, "%.*s/%s", (int)dir_len, dir, *p);
	free(*p);
	*p = q;
	return 0;
}

int pl_spec_load_file(const char *path, struct pl_spec **ret_spec, struct io_error *err)
{
	const char *slash = strrchr(path, '/');
	struct pl_spec *s;
	size_t len = 0;
	char *buf = NULL;
	int r;

	r = io_file_read(path, SPEC_MAX_FILE_BYTES, &buf, &len, err);
	if (r < 0)
		return r;
	r = pl_spec_parse(buf, len, path, &s, err);
	free(buf);
	if (r < 0)
		return r;
	/* Relative dataset paths are relative to the spec file's directory. */
	if (slash) {
		r = pl_spec_rebase(s, path, slash == path ? 1 : (size_t)(slash - path));
		if (r < 0) {
			pl_spec_destroy(s);
			io_error_set(err, "%s: out of memory", path);
			return r;
		}
	}
	*ret_spec = s;
	return 0;
}

int pl_spec_rebase(struct pl_spec *s, const char *dir, size_t dir_len)
{
	if (dir_len > 1 && dir[dir_len - 1] == '/')
		dir_len--;
	int r = rebase(dir, dir_len, &s->data_dir);
	if (r == 0)
		r = rebase(dir, dir_len, &s->manifest_file);
	if (r == 0)
		r = rebase(dir, dir_len, &s->list_file);
	return r;
}

void pl_spec_destroy(struct pl_spec *s)
{
	size_t i;

	if (!s)
		return;
	free(s->name);
	free(s->reader_uids);
	free(s->reader_gids);
	free(s->data_dir);
	free(s->pattern);
	free(s->manifest_file);
	free(s->list_file);
	for (i = 0; i < s->n_primary && s->primary; i++) {
		free(s->primary[i].from_name);
		free(s->primary[i].to_name);
	}
	free(s->primary);
	for (i = 0; i < s->n_secondary && s->secondary; i++) {
		free(s->secondary[i].to_name);
		free(s->secondary[i].shape_from);
		free(s->secondary[i].dtype_from);
		free(s->secondary[i].value.s);
	}
	free(s->secondary);
	for (i = 0; i < s->n_steps && s->steps; i++) {
		free(s->steps[i].tensor);
		free(s->steps[i].slice_text);
		free(s->steps[i].img.draw);
		free(s->steps[i].img.box_image);
	}
	free(s->steps);
	for (i = 0; i < s->n_padding && s->paddings; i++) {
		free(s->paddings[i].tensor);
		free(s->paddings[i].value.s);
	}
	free(s->paddings);
	free(s);
}

/* ---- "auto" ---- */

int64_t pl_spec_parallel_reads(const struct pl_spec *s)
{
	return s->num_parallel_reads == PL_AUTO ? 4 : s->num_parallel_reads;
}

int64_t pl_spec_cycle(const struct pl_spec *s)
{
	if (s->shuffle)
		return s->num_mix_files;
	if (s->cycle_length != PL_CYCLE_UNSET)
		return s->cycle_length;
	return pl_spec_parallel_reads(s);
}

int64_t pl_spec_parallel_parses(const struct pl_spec *s)
{
	long n;

	if (s->num_parallel_parses != PL_AUTO)
		return s->num_parallel_parses;
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n >= 1 ? (int64_t)n : 1;
}

int64_t pl_spec_prefetch(const struct pl_spec *s)
{
	return s->num_prefetch == PL_AUTO ? 2 : s->num_prefetch;
}

int64_t pl_spec_read_buffer_bytes(const struct pl_spec *s)
{
	return s->num_read_buffer_bytes == PL_AUTO ? (int64_t)1 << 20 : s->num_read_buffer_bytes;
}
