/* SPDX-License-Identifier: Apache-2.0 */
/* Pipeline spec: JSON parsing with jansson and every rule of docs/pipeline-spec.md. */
#include "spec.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/jsonmsg.h"
#include "io/manifest_internal.h"

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
#define DESCRIBE_MAX	    JSONMSG_DESCRIBE_MAX
#define PATH_LEN	    320
#define MAX_DIMS	    (PL_MAX_RANK - 1) /* of a row: the batch dimension is not written */
#define I32_MAX		    2147483647LL
#define NAME_MAX_LEN	    128

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#define DTYPE_LIST                                                                              \
	"int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, float32, float64, " \
	"bool, string"

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

/* ---- messages ---- */


/* snprintf for JSON paths: a path longer than the buffer is cut (and only ever printed). */
__attribute__((format(printf, 3, 4))) static void path_printf(char *out, size_t n, const char *fmt,
							      ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(out, n, fmt, ap);
	va_end(ap);
}

static int oom(const struct jsonmsg_ctx *c)
{
	io_error_set(c->err, "%s: out of memory", c->origin);
	return -ENOMEM;
}

static int missing(const struct jsonmsg_ctx *c, const char *path, const char *key, const char *why)
{
	char sub[PATH_LEN];

	jsonmsg_path_key(sub, sizeof(sub), path, key);
	return jsonmsg_fail(c, sub, "required key is missing%s", why);
}

static int unknown_key(const struct jsonmsg_ctx *c, const char *path, const char *key, const char *expected)
{
	char sub[PATH_LEN];

	jsonmsg_path_key(sub, sizeof(sub), path, key);
	return jsonmsg_fail(c, sub, "unknown key (expected one of: %s)", expected);
}

/* Index of key in keys[], or -1. */
static int key_index(const char *key, const char *const *keys, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcmp(key, keys[i]) == 0)
			return (int)i;
	return -1;
}

/* ---- values ---- */

enum { ALLOW_AUTO = 1u, ALLOW_NULL = 2u };

/*
 * A JSON integer in [lo, hi] (never a real or a boolean), or "auto" (PL_AUTO) or null
 * (PL_NULL) where flags allow them.
 */
static int get_int(const struct jsonmsg_ctx *c, const json_t *v, const char *path, int64_t lo, int64_t hi,
		   unsigned flags, int64_t *ret)
{
	char buf[DESCRIBE_MAX + 8], range[64];
	int64_t x;

	if ((flags & ALLOW_AUTO) && json_is_string(v) &&
	    strcmp(json_string_value(v), "auto") == 0) {
		*ret = PL_AUTO;
		return 0;
	}
	if ((flags & ALLOW_NULL) && json_is_null(v)) {
		*ret = PL_NULL;
		return 0;
	}
	if (json_is_integer(v)) {
		x = json_integer_value(v);
		if (x >= lo && x <= hi) {
			*ret = x;
			return 0;
		}
	}
	if (hi == INT64_MAX)
		snprintf(range, sizeof(range), ">= %" PRId64, lo);
	else
		snprintf(range, sizeof(range), "from %" PRId64 " to %" PRId64, lo, hi);
	return jsonmsg_fail(c, path, "expected an integer %s%s%s, got %s", range,
		    (flags & ALLOW_AUTO) ? " or \"auto\"" : "",
		    (flags & ALLOW_NULL) ? " or null" : "", jsonmsg_describe(v, buf, sizeof(buf)));
}

static int get_bool(const struct jsonmsg_ctx *c, const json_t *v, const char *path, bool *ret)
{
	char buf[DESCRIBE_MAX + 8];

	if (!json_is_boolean(v))
		return jsonmsg_fail(c, path, "expected true or false, got %s",
			    jsonmsg_describe(v, buf, sizeof(buf)));
	*ret = json_is_true(v);
	return 0;
}

static int dup_str(const struct jsonmsg_ctx *c, const char *s, char **ret)
{
	char *d = strdup(s);

	if (!d)
		return oom(c);
	*ret = d;
	return 0;
}

/* A non-empty string, copied into *ret. */
static int get_name(const struct jsonmsg_ctx *c, const json_t *v, const char *path, char **ret)
{
	char buf[DESCRIBE_MAX + 8];

	if (!json_is_string(v) || json_string_length(v) == 0)
		return jsonmsg_fail(c, path, "expected a non-empty string, got %s",
			    jsonmsg_describe(v, buf, sizeof(buf)));
	return dup_str(c, json_string_value(v), ret);
}

static int get_object(const struct jsonmsg_ctx *c, const json_t *v, const char *path)
{
	char buf[DESCRIBE_MAX + 8];

	if (!json_is_object(v))
		return jsonmsg_fail(c, path, "expected an object, got %s", jsonmsg_describe(v, buf, sizeof(buf)));
	return 0;
}

/* One of names[] (a string), its index in *ret. expected: the list for the message. */
static int get_enum(const struct jsonmsg_ctx *c, const json_t *v, const char *path,
		    const char *const *names, size_t n, const char *expected, unsigned *ret)
{
	char buf[DESCRIBE_MAX + 8];
	int i = json_is_string(v) ? key_index(json_string_value(v), names, n) : -1;

	if (i < 0)
		return jsonmsg_fail(c, path, "expected %s, got %s", expected,
			    jsonmsg_describe(v, buf, sizeof(buf)));
	*ret = (unsigned)i;
	return 0;
}

/* A JSON scalar: bool, integer, real, string or null (PL_VALUE_NONE). */
static int get_value(const struct jsonmsg_ctx *c, const json_t *v, const char *path, struct pl_value *ret)
{
	char buf[DESCRIBE_MAX + 8];

	memset(ret, 0, sizeof(*ret));
	switch (json_typeof(v)) {
	case JSON_NULL:
		ret->kind = PL_VALUE_NONE;
		return 0;
	case JSON_TRUE:
	case JSON_FALSE:
		ret->kind = PL_VALUE_BOOL;
		ret->b = json_is_true(v);
		return 0;
	case JSON_INTEGER:
		ret->kind = PL_VALUE_INT;
		ret->i = json_integer_value(v);
		return 0;
	case JSON_REAL:
		ret->kind = PL_VALUE_REAL;
		ret->r = json_real_value(v);
		return 0;
	case JSON_STRING:
		ret->s_len = json_string_length(v);
		ret->s = malloc(ret->s_len + 1);
		if (!ret->s)
			return oom(c);
		memcpy(ret->s, json_string_value(v), ret->s_len + 1);
		ret->kind = PL_VALUE_STRING;
		return 0;
	case JSON_OBJECT:
	case JSON_ARRAY:
		break;
	}
	return jsonmsg_fail(c, path, "expected a number, a string, true, false or null, got %s",
		    jsonmsg_describe(v, buf, sizeof(buf)));
}

/* A list of at most MAX_DIMS integers, each in [lo, 2^31 - 1]. */
static int get_dims(const struct jsonmsg_ctx *c, const json_t *v, const char *path, int64_t lo,
		    const char *alt, unsigned *ret_rank, int64_t *dims)
{
	char buf[DESCRIBE_MAX + 8], sub[PATH_LEN];
	size_t i, n;
	int r;

	if (!json_is_array(v))
		return jsonmsg_fail(c, path, "expected an array of integers%s, got %s", alt,
			    jsonmsg_describe(v, buf, sizeof(buf)));
	n = json_array_size(v);
	for (i = 0; i < n; i++) {
		path_printf(sub, sizeof(sub), "%s[%zu]", path, i);
		if (i == MAX_DIMS)
			return jsonmsg_fail(c, path, "expected at most %d dimensions, got %zu", MAX_DIMS,
				    n);
		r = get_int(c, json_array_get(v, i), sub, lo, I32_MAX, 0, &dims[i]);
		if (r < 0)
			return r;
	}
	*ret_rank = (unsigned)n;
	return 0;
}

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

/* ---- slices ---- */

/*
 * Slice syntax: numpy basic indexing of one row, "[" dim ("," dim)* "]", 1 .. MAX_DIMS dims, each
 * an integer or [start]:[stop][:[step]]; white space between tokens. An integer is an optional
 * sign directly followed by decimal digits. Positions in messages count from 1.
 */
struct slice_in {
	const struct jsonmsg_ctx *c;
	const char *path;
	const char *text;
	const char *quoted; /* text as a JSON string, for messages */
	size_t i;
};

static void slice_ws(struct slice_in *in)
{
	while (in->text[in->i] == ' ' || in->text[in->i] == '\t' || in->text[in->i] == '\n' ||
	       in->text[in->i] == '\r')
		in->i++;
}

static int slice_fail(struct slice_in *in, size_t at, const char *what)
{
	const char *p = in->text + at, *hint = "";

	if (*p == '.')
		hint = " (Ellipsis is not supported)";
	else if (strncmp(p, "None", 4) == 0 || strncmp(p, "newaxis", 7) == 0)
		hint = " (new axes are not supported)";
	return jsonmsg_fail(in->c, in->path, "expected %s at character %zu of %s%s", what, at + 1,
		    in->quoted, hint);
}

/* An optional integer: 1 and *ret when there is one, 0 when there is none. */
static int slice_int(struct slice_in *in, int64_t *ret)
{
	const char *t = in->text;
	size_t start = in->i, i = in->i;
	bool neg = false;
	uint64_t x = 0, lim;

	if (t[i] == '+' || t[i] == '-')
		neg = t[i++] == '-';
	if (t[i] < '0' || t[i] > '9') {
		if (i == start)
			return 0;
		return slice_fail(in, i, "a digit");
	}
	lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
	for (; t[i] >= '0' && t[i] <= '9'; i++) {
		unsigned d = (unsigned)(t[i] - '0');

		if (x > (lim - d) / 10)
			return slice_fail(in, start, "an integer that fits in 64 bits");
		x = x * 10 + d;
	}
	in->i = i;
	if (neg)
		*ret = x == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)x;
	else
		*ret = (int64_t)x;
	return 1;
}

static int slice_dim(struct slice_in *in, struct pl_slice_dim *d)
{
	size_t at;
	int r;

	memset(d, 0, sizeof(*d));
	slice_ws(in);
	at = in->i;
	r = slice_int(in, &d->start);
	if (r < 0)
		return r;
	d->has_start = r;
	slice_ws(in);
	if (in->text[in->i] != ':') {
		if (!d->has_start)
			return slice_fail(in, at, "an integer or start:stop:step");
		d->kind = PL_SLICE_INDEX;
		d->index = d->start;
		d->has_start = false;
		d->start = 0;
		return 0;
	}
	d->kind = PL_SLICE_RANGE;
	in->i++;
	slice_ws(in);
	r = slice_int(in, &d->stop);
	if (r < 0)
		return r;
	d->has_stop = r;
	slice_ws(in);
	if (in->text[in->i] != ':')
		return 0;
	in->i++;
	slice_ws(in);
	at = in->i;
	r = slice_int(in, &d->step);
	if (r < 0)
		return r;
	d->has_step = r;
	if (d->has_step && d->step == 0)
		return slice_fail(in, at, "a step other than 0");
	return 0;
}

static int parse_slice(const struct jsonmsg_ctx *c, const char *path, const json_t *v, struct pl_step *st)
{
	char quoted[DESCRIBE_MAX + 8];
	struct slice_in in = { .c = c, .path = path, .text = json_string_value(v), .i = 0 };
	int r;

	in.quoted = jsonmsg_describe(v, quoted, sizeof(quoted));
	slice_ws(&in);
	if (in.text[in.i] != '[')
		return slice_fail(&in, in.i, "'['");
	in.i++;
	for (;;) {
		if (st->n_dims == MAX_DIMS) {
			slice_ws(&in);
			return jsonmsg_fail(c, path,
				    "expected at most %d dimensions at character %zu of %s",
				    MAX_DIMS, in.i + 1, in.quoted);
		}
		r = slice_dim(&in, &st->dims[st->n_dims]);
		if (r < 0)
			return r;
		st->n_dims++;
		slice_ws(&in);
		if (in.text[in.i] == ']')
			break;
		if (in.text[in.i] != ',')
			return slice_fail(&in, in.i, "',' or ']'");
		in.i++;
	}
	in.i++;
	slice_ws(&in);
	if (in.text[in.i] != '\0')
		return slice_fail(&in, in.i, "nothing after ']'");
	return 0;
}

/* ---- args: one function per object kind ---- */

static const char *const dataset_keys[] = { "type", "args" };
static const char *const dataset_types[] = { "dir", "list" };
static const char *const dir_keys[] = { "data_dir" };
static const char *const list_keys[] = { "manifest_file", "list_file" };

static int parse_dataset(const struct jsonmsg_ctx *c, const json_t *ds, struct pl_spec *s)
{
	const char *key, *path = "args.dataset";
	const json_t *v, *args = NULL;
	char sub[PATH_LEN];
	bool has_type = false;
	unsigned t = 0;
	int r;

	r = get_object(c, ds, path);
	if (r < 0)
		return r;
	json_object_foreach ((json_t *)ds, key, v) {
		jsonmsg_path_key(sub, sizeof(sub), path, key);
		switch (key_index(key, dataset_keys, ARRAY_LEN(dataset_keys))) {
		case 0:
			r = get_enum(c, v, sub, dataset_types, 2, "\"dir\" or \"list\"", &t);
			s->dataset_type = (enum pl_dataset_type)t;
			has_type = true;
			break;
		case 1:
			r = get_object(c, v, sub);
			args = v;
			break;
		default:
			r = unknown_key(c, path, key, "type, args");
		}
		if (r < 0)
			return r;
	}
	if (!has_type)
		return missing(c, path, "type", "");
	if (!args)
		return missing(c, path, "args", "");

	path = "args.dataset.args";
	json_object_foreach ((json_t *)args, key, v) {
		jsonmsg_path_key(sub, sizeof(sub), path, key);
		if (s->dataset_type == PL_DATASET_DIR) {
			if (key_index(key, dir_keys, 1) < 0)
				return unknown_key(c, path, key, "data_dir (for type \"dir\")");
			r = get_name(c, v, sub, &s->data_dir);
		} else {
			switch (key_index(key, list_keys, 2)) {
			case 0:
				r = get_name(c, v, sub, &s->manifest_file);
				break;
			case 1:
				r = get_name(c, v, sub, &s->list_file);
				break;
			default:
				r = unknown_key(c, path, key,
						"manifest_file, list_file (for type \"list\")");
			}
		}
		if (r < 0)
			return r;
	}
	if (s->dataset_type == PL_DATASET_DIR && !s->data_dir)
		return missing(c, path, "data_dir", " (for type \"dir\")");
	if (s->dataset_type == PL_DATASET_LIST && !s->manifest_file)
		return missing(c, path, "manifest_file", " (for type \"list\")");
	if (s->dataset_type == PL_DATASET_LIST && !s->list_file)
		return missing(c, path, "list_file", " (for type \"list\")");
	return 0;
}

/* An array of objects: its size in *ret_n, with an array of n elements of size sz. */
static int get_list(const struct jsonmsg_ctx *c, const json_t *v, const char *path, size_t sz,
		    size_t *ret_n, void **ret_a)
{
	char buf[DESCRIBE_MAX + 8];
	size_t n;

	if (!json_is_array(v))
		return jsonmsg_fail(c, path, "expected an array of objects, got %s",
			    jsonmsg_describe(v, buf, sizeof(buf)));
	n = json_array_size(v);
	if (n) {
		*ret_a = calloc(n, sz);
		if (!*ret_a)
			return oom(c);
	}
	*ret_n = n;
	return 0;
}

static const char *const primary_keys[] = { "from_name", "to_name" };

static int parse_primary(const struct jsonmsg_ctx *c, const json_t *o, const char *path,
			 struct pl_primary *p)
{
	char sub[PATH_LEN];
	const char *key;
	const json_t *v;
	int r;

	r = get_object(c, o, path);
	if (r < 0)
		return r;
	json_object_foreach ((json_t *)o, key, v) {
		jsonmsg_path_key(sub, sizeof(sub), path, key);
		switch (key_index(key, primary_keys, ARRAY_LEN(primary_keys))) {
		case 0:
			r = get_name(c, v, sub, &p->from_name);
			break;
		case 1:
			r = get_name(c, v, sub, &p->to_name);
			break;
		default:
			r = unknown_key(c, path, key, "from_name, to_name");
		}
		if (r < 0)
			return r;
	}
	if (!p->from_name)
		return missing(c, path, "from_name", "");
	if (!p->to_name)
		return missing(c, path, "to_name", "");
	return 0;
}

static const char *const secondary_keys[] = { "to_name", "type", "args" };
static const char *const const_keys[] = { "shape", "dtype", "value" };
static const char *const secondary_types[] = { "const" };

static int parse_const_args(const struct jsonmsg_ctx *c, const json_t *o, const char *path,
			    struct pl_secondary *x)
{
	char sub[PATH_LEN], buf[DESCRIBE_MAX + 8];
	bool has_shape = false, has_dtype = false;
	const char *key;
	const json_t *v;
	int r;

	json_object_foreach ((json_t *)o, key, v) {
		jsonmsg_path_key(sub, sizeof(sub), path, key);
		switch (key_index(key, const_keys, ARRAY_LEN(const_keys))) {
		case 0:
			has_shape = true;
			if (json_is_string(v) && json_string_length(v) > 0)
				r = dup_str(c, json_string_value(v), &x->shape_from);
			else
				r = get_dims(c, v, sub, 0, " or the to_name of a primary feature",
					     &x->rank, x->shape);
			break;
		case 1:
			has_dtype = true;
			if (!json_is_string(v) || json_string_length(v) == 0)
				r = jsonmsg_fail(c, sub,
					 "expected a dtype name or the to_name of a primary "
					 "feature, got %s",
					 jsonmsg_describe(v, buf, sizeof(buf)));
			else if (manifest_dtype_parse(json_string_value(v), &x->dtype) == 0)
				r = 0;
			else /* checked against the primaries by check_refs() */
				r = dup_str(c, json_string_value(v), &x->dtype_from);
			break;
		case 2:
			r = get_value(c, v, sub, &x->value);
			break;
		default:
			r = unknown_key(c, path, key, "shape, dtype, value (for type \"const\")");
		}
		if (r < 0)
			return r;
	}
	if (!has_shape)
		return missing(c, path, "shape", " (for type \"const\")");
	if (!has_dtype)
		return missing(c, path, "dtype", " (for type \"const\")");
	return 0;
}

static int parse_secondary(const struct jsonmsg_ctx *c, const json_t *o, const char *path,
			   struct pl_secondary *x)
{
	char sub[PATH_LEN], apath[PATH_LEN];
	const json_t *v, *args = NULL;
	bool has_type = false;
	const char *key;
	unsigned t;
	int r;

	r = get_object(c, o, path);
	if (r < 0)
		return r;
	json_object_foreach ((json_t *)o, key, v) {
		jsonmsg_path_key(sub, sizeof(sub), path, key);
		switch (key_index(key, secondary_keys, ARRAY_LEN(secondary_keys))) {
		case 0:
			r = get_name(c, v, sub, &x->to_name);
			break;
		case 1:
			r = get_enum(c, v, sub, secondary_types, 1, "\"const\"", &t);
			x->type = (enum pl_secondary_type)t;
			has_type = true;
			break;
		case 2:
			r = get_object(c, v, sub);
			if (r == 0) {
				args = v;
				r = parse_const_args(c, v, sub, x);
			}
			break;
		default:
			r = unknown_key(c, path, key, "to_name, type, args");
		}
		if (r < 0)
			return r;
	}
	if (!x->to_name)
		return missing(c, path, "to_name", "");
	if (!has_type)
		return missing(c, path, "type", "");
	if (!args) { /* args defaults to {}: shape and dtype are still required */
		path_printf(apath, sizeof(apath), "%s.args", path);
		return missing(c, apath, "shape", " (for type \"const\")");
	}
	return 0;
}

static const char *const step_keys[] = { "tensor", "type", "args" };
static const char *const step_types[] = { "slice" };
static const char *const slice_keys[] = { "slice" };

static int parse_step(const struct jsonmsg_ctx *c, const json_t *o, const char *path, struct pl_step *st)
{
	char sub[PATH_LEN], sub2[PATH_LEN], buf[DESCRIBE_MAX + 8];
	const json_t *v, *v2;
	bool has_type = false, has_args = false;
	const char *key, *key2;
	unsigned t;
	int r;

	r = get_object(c, o, path);
	if (r < 0)
		return r;
	json_object_foreach ((json_t *)o, key, v) {
		jsonmsg_path_key(sub, sizeof(sub), path, key);
		switch (key_index(key, step_keys, ARRAY_LEN(step_keys))) {
		case 0:
			r = get_name(c, v, sub, &st->tensor);
			break;
		case 1:
			r = get_enum(c, v, sub, step_types, 1, "\"slice\"", &t);
			st->type = (enum pl_step_type)t;
			has_type = true;
			break;
		case 2:
			has_args = true;
			r = get_object(c, v, sub);
			if (r < 0)
				break;
			json_object_foreach ((json_t *)v, key2, v2) {
				if (key_index(key2, slice_keys, 1) < 0)
					return unknown_key(c, sub, key2,
							   "slice (for type \"slice\")");
				jsonmsg_path_key(sub2, sizeof(sub2), sub, key2);
				if (!json_is_string(v2))
					return jsonmsg_fail(c, sub2,
						    "expected a string such as \"[1:, 0]\", "
						    "got %s",
						    jsonmsg_describe(v2, buf, sizeof(buf)));
				r = parse_slice(c, sub2, v2, st);
				if (r == 0)
					r = dup_str(c, json_string_value(v2), &st->slice_text);
				if (r < 0)
					return r;
			}
			if (!st->slice_text)
				return missing(c, sub, "slice", " (for type \"slice\")");
			break;
		default:
			r = unknown_key(c, path, key, "tensor, type, args");
		}
		if (r < 0)
			return r;
	}
	if (!st->tensor)
		return missing(c, path, "tensor", "");
	if (!has_type)
		return missing(c, path, "type", "");
	if (!has_args)
		return missing(c, path, "args", "");
	return 0;
}

static const char *const padding_keys[] = { "tensor", "shape", "value" };

static int parse_padding_entry(const struct jsonmsg_ctx *c, const json_t *o, const char *path,
			       struct pl_padding *p)
{
	char sub[PATH_LEN];
	const char *key;
	const json_t *v;
	int r;

	r = get_object(c, o, path);
	if (r < 0)
		return r;
	json_object_foreach ((json_t *)o, key, v) {
		jsonmsg_path_key(sub, sizeof(sub), path, key);
		switch (key_index(key, padding_keys, ARRAY_LEN(padding_keys))) {
		case 0:
			r = get_name(c, v, sub, &p->tensor);
			break;
		case 1:
			p->has_shape = !json_is_null(v);
			r = p->has_shape ? get_dims(c, v, sub, -1, " or null", &p->rank, p->shape)
					 : 0;
			break;
		case 2:
			r = get_value(c, v, sub, &p->value);
			break;
		default:
			r = unknown_key(c, path, key, "tensor, shape, value");
		}
		if (r < 0)
			return r;
	}
	if (!p->tensor)
		return missing(c, path, "tensor", "");
	return 0;
}

static int parse_padding(const struct jsonmsg_ctx *c, const json_t *v, struct pl_spec *s)
{
	char buf[DESCRIBE_MAX + 8], sub[PATH_LEN];
	size_t i;
	int r;

	if (json_is_boolean(v)) {
		s->padding = json_is_true(v);
		return 0;
	}
	if (!json_is_array(v))
		return jsonmsg_fail(c, "args.padding",
			    "expected true, false or an array of objects, got %s",
			    jsonmsg_describe(v, buf, sizeof(buf)));
	r = get_list(c, v, "args.padding", sizeof(*s->paddings), &s->n_padding,
		     (void **)&s->paddings);
	if (r < 0)
		return r;
	s->padding = s->n_padding > 0;
	for (i = 0; i < s->n_padding; i++) {
		path_printf(sub, sizeof(sub), "args.padding[%zu]", i);
		r = parse_padding_entry(c, json_array_get(v, i), sub, &s->paddings[i]);
		if (r < 0)
			return r;
	}
	return 0;
}

static const char *const shard_keys[] = { "index", "count" };

static int parse_shard(const struct jsonmsg_ctx *c, const json_t *o, struct pl_spec *s)
{
	const char *key, *path = "args.shard";
	int64_t index = -1, count = -1;
	char sub[PATH_LEN];
	const json_t *v;
	int r;

	r = get_object(c, o, path);
	if (r < 0)
		return r;
	json_object_foreach ((json_t *)o, key, v) {
		jsonmsg_path_key(sub, sizeof(sub), path, key);
		switch (key_index(key, shard_keys, ARRAY_LEN(shard_keys))) {
		case 0:
			r = get_int(c, v, sub, 0, UINT32_MAX - 1, 0, &index);
			break;
		case 1:
			r = get_int(c, v, sub, 1, UINT32_MAX, 0, &count);
			break;
		default:
			r = unknown_key(c, path, key, "index, count");
		}
		if (r < 0)
			return r;
	}
	if (index < 0)
		return missing(c, path, "index", "");
	if (count < 0)
		return missing(c, path, "count", "");
	if (index >= count)
		return jsonmsg_fail(c, "args.shard.index",
			    "expected an integer below count (%" PRId64 "), got %" PRId64, count,
			    index);
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
	A_NUM_PARALLEL_PARSES,
	A_NUM_READ_BUFFER_BYTES,
	A_NUM_PREFETCH,
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
	[A_NUM_PARALLEL_PARSES] = { "num_parallel_parses", L_ALL, false },
	[A_NUM_READ_BUFFER_BYTES] = { "num_read_buffer_bytes", L_ALL, true },
	[A_NUM_PREFETCH] = { "num_prefetch", L_ALL, true },
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

/* One array of objects: primaries, secondaries, steps. */
static int parse_array_arg(const struct jsonmsg_ctx *c, enum arg_key k, const json_t *v, struct pl_spec *s)
{
	char path[PATH_LEN], sub[PATH_LEN];
	size_t i, n = 0;
	int r;

	path_printf(path, sizeof(path), "args.%s", arg_keys[k].name);
	switch (k) {
	case A_PRIMARY_FEATURES:
		r = get_list(c, v, path, sizeof(*s->primary), &n, (void **)&s->primary);
		if (r == 0 && n == 0)
			r = jsonmsg_fail(c, path, "expected at least one feature, got an empty array");
		s->n_primary = n;
		break;
	case A_SECONDARY_FEATURES:
		r = get_list(c, v, path, sizeof(*s->secondary), &n, (void **)&s->secondary);
		s->n_secondary = n;
		break;
	default:
		r = get_list(c, v, path, sizeof(*s->steps), &n, (void **)&s->steps);
		s->n_steps = n;
		break;
	}
	for (i = 0; r == 0 && i < n; i++) {
		const json_t *e = json_array_get(v, i);

		path_printf(sub, sizeof(sub), "%s[%zu]", path, i);
		if (k == A_PRIMARY_FEATURES)
			r = parse_primary(c, e, sub, &s->primary[i]);
		else if (k == A_SECONDARY_FEATURES)
			r = parse_secondary(c, e, sub, &s->secondary[i]);
		else
			r = parse_step(c, e, sub, &s->steps[i]);
	}
	return r;
}

static int parse_arg(const struct jsonmsg_ctx *c, enum arg_key k, const json_t *v, struct pl_spec *s)
{
	char path[PATH_LEN];
	unsigned u = 0;
	int r;

	path_printf(path, sizeof(path), "args.%s", arg_keys[k].name);
	switch (k) {
	case A_DATASET:
		return parse_dataset(c, v, s);
	case A_TARGET_BATCH_SIZE:
		return get_int(c, v, path, 1, I32_MAX, 0, &s->target_batch_size);
	case A_DROP_REMAINDER:
		return get_bool(c, v, path, &s->drop_remainder);
	case A_EPOCHS:
		return get_int(c, v, path, 1, INT64_MAX, ALLOW_NULL, &s->epochs);
	case A_NUM_PARALLEL_READS:
		return get_int(c, v, path, 1, 1024, ALLOW_AUTO, &s->num_parallel_reads);
	case A_NUM_PARALLEL_PARSES:
		return get_int(c, v, path, 1, 1024, ALLOW_AUTO, &s->num_parallel_parses);
	case A_NUM_READ_BUFFER_BYTES:
		return get_int(c, v, path, 0, 1 << 30, ALLOW_AUTO, &s->num_read_buffer_bytes);
	case A_NUM_PREFETCH:
		return get_int(c, v, path, 0, 1024, ALLOW_AUTO, &s->num_prefetch);
	case A_SHUFFLE:
		return get_bool(c, v, path, &s->shuffle);
	case A_NUM_SHUFFLE_BUFFER_ELEMENTS:
		return get_int(c, v, path, 1, I32_MAX, 0, &s->num_shuffle_buffer_elements);
	case A_NUM_FILENAMES_SHUFFLE_BUFFER:
		return get_int(c, v, path, 1, I32_MAX, 0, &s->num_filenames_shuffle_buffer);
	case A_NUM_MIX_FILES:
		return get_int(c, v, path, 1, 1024, 0, &s->num_mix_files);
	case A_SLOPPY_INTERLEAVE:
		return get_bool(c, v, path, &s->sloppy_interleave);
	case A_NUM_INTERLEAVE_OUT:
		return get_int(c, v, path, 1, 1 << 20, ALLOW_AUTO,
			       &s->num_interleave_out_buffer_elements);
	case A_NUM_INTERLEAVE_IN:
		return get_int(c, v, path, 1, 1 << 20, ALLOW_AUTO,
			       &s->num_interleave_in_buffer_elements);
	case A_PRIMARY_FEATURES:
	case A_SECONDARY_FEATURES:
	case A_PROCESSING_STEPS:
		return parse_array_arg(c, k, v, s);
	case A_PADDING:
		return parse_padding(c, v, s);
	case A_MULTI_LOAD:
		return get_bool(c, v, path, &s->multi_load);
	case A_MIN_WINDOW:
		return get_int(c, v, path, 1, I32_MAX, 0, &s->min_window);
	case A_MAX_WINDOW:
		return get_int(c, v, path, 1, I32_MAX, 0, &s->max_window);
	case A_STRIDE:
		return get_int(c, v, path, 1, INT64_MAX, ALLOW_NULL, &s->stride);
	case A_SEED: {
		int64_t seed;

		r = get_int(c, v, path, 0, INT64_MAX, 0, &seed);
		if (r == 0)
			s->seed = (uint64_t)seed;
		return r;
	}
	case A_ON_CORRUPT:
		r = get_enum(c, v, path, on_corrupt_names, ARRAY_LEN(on_corrupt_names),
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

/* ---- rules across keys ---- */

struct name_idx {
	const char *name;
	size_t idx;
};

static int cmp_name_idx(const void *a, const void *b)
{
	const struct name_idx *x = a, *y = b;
	int r = strcmp(x->name, y->name);

	if (r)
		return r;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int cmp_name(const void *key, const void *b)
{
	return strcmp(key, ((const struct name_idx *)b)->name);
}

/*
 * Sort v[0..n) by (name, idx); if a name occurs twice, *ret_dup is the smallest idx that is a
 * second (or later) occurrence and *ret_orig the first occurrence of that name.
 */
static bool find_duplicate(struct name_idx *v, size_t n, size_t *ret_dup, size_t *ret_orig)
{
	size_t i, first = 0, dup = SIZE_MAX, orig = 0;

	qsort(v, n, sizeof(*v), cmp_name_idx);
	for (i = 1; i < n; i++) {
		if (strcmp(v[i].name, v[i - 1].name) != 0) {
			first = i;
			continue;
		}
		if (v[i].idx < dup) {
			dup = v[i].idx;
			orig = v[first].idx;
		}
	}
	if (dup == SIZE_MAX)
		return false;
	*ret_dup = dup;
	*ret_orig = orig;
	return true;
}

static void to_name_path(const struct pl_spec *s, size_t idx, char *buf, size_t n)
{
	if (idx < s->n_primary)
		snprintf(buf, n, "args.primary_features[%zu].to_name", idx);
	else
		snprintf(buf, n, "args.secondary_features[%zu].to_name", idx - s->n_primary);
}

/* The to_names sorted (names[], n), unique; idx < n_primary for primaries. */
static const struct name_idx *lookup(const struct name_idx *names, size_t n, const char *name)
{
	return bsearch(name, names, n, sizeof(*names), cmp_name);
}

static int check_refs(const struct jsonmsg_ctx *c, const struct pl_spec *s, struct name_idx *names)
{
	char path[PATH_LEN], path2[PATH_LEN], buf[DESCRIBE_MAX + 8];
	size_t n = s->n_primary + s->n_secondary, i, dup, orig;
	const struct name_idx *f;

	for (i = 0; i < n; i++) {
		names[i].name = i < s->n_primary ? s->primary[i].to_name
						 : s->secondary[i - s->n_primary].to_name;
		names[i].idx = i;
	}
	if (find_duplicate(names, n, &dup, &orig)) {
		to_name_path(s, dup, path, sizeof(path));
		to_name_path(s, orig, path2, sizeof(path2));
		return jsonmsg_fail(c, path, "duplicate %s (also %s)",
			    jsonmsg_quote(dup < s->n_primary ? s->primary[dup].to_name
						     : s->secondary[dup - s->n_primary].to_name,
				  buf, sizeof(buf)),
			    path2);
	}
	for (i = 0; i < s->n_secondary; i++) {
		const struct pl_secondary *x = &s->secondary[i];

		if (x->shape_from) {
			f = lookup(names, n, x->shape_from);
			path_printf(path, sizeof(path), "args.secondary_features[%zu].args.shape",
				    i);
			if (!f || f->idx >= s->n_primary)
				return jsonmsg_fail(c, path,
					    "expected an array of integers or the to_name of a "
					    "primary feature, got %s%s",
					    jsonmsg_quote(x->shape_from, buf, sizeof(buf)),
					    f ? " (a secondary feature)" : ", which is neither");
		}
		if (x->dtype_from) {
			f = lookup(names, n, x->dtype_from);
			path_printf(path, sizeof(path), "args.secondary_features[%zu].args.dtype",
				    i);
			if (!f || f->idx >= s->n_primary)
				return jsonmsg_fail(c, path,
					    "expected a dtype name (" DTYPE_LIST ") or the to_name "
					    "of a primary feature, got %s%s",
					    jsonmsg_quote(x->dtype_from, buf, sizeof(buf)),
					    f ? " (a secondary feature)" : ", which is neither");
		}
	}
	for (i = 0; i < s->n_steps; i++) {
		if (lookup(names, n, s->steps[i].tensor))
			continue;
		path_printf(path, sizeof(path), "args.processing_steps[%zu].tensor", i);
		return jsonmsg_fail(c, path,
			    "expected the to_name of a primary or secondary feature, got %s",
			    jsonmsg_quote(s->steps[i].tensor, buf, sizeof(buf)));
	}
	for (i = 0; i < s->n_padding; i++) {
		if (lookup(names, n, s->paddings[i].tensor))
			continue;
		path_printf(path, sizeof(path), "args.padding[%zu].tensor", i);
		return jsonmsg_fail(c, path,
			    "expected the to_name of a primary or secondary feature, got %s",
			    jsonmsg_quote(s->paddings[i].tensor, buf, sizeof(buf)));
	}
	return 0;
}

static int check_padding_dups(const struct jsonmsg_ctx *c, const struct pl_spec *s)
{
	char path[PATH_LEN], buf[DESCRIBE_MAX + 8];
	struct name_idx *v;
	size_t i, dup, orig;
	bool found;

	if (s->n_padding < 2)
		return 0;
	v = malloc(sizeof(*v) * s->n_padding);
	if (!v)
		return oom(c);
	for (i = 0; i < s->n_padding; i++) {
		v[i].name = s->paddings[i].tensor;
		v[i].idx = i;
	}
	found = find_duplicate(v, s->n_padding, &dup, &orig);
	free(v);
	if (!found)
		return 0;
	path_printf(path, sizeof(path), "args.padding[%zu].tensor", dup);
	return jsonmsg_fail(c, path, "duplicate %s (also args.padding[%zu].tensor)",
		    jsonmsg_quote(s->paddings[dup].tensor, buf, sizeof(buf)), orig);
}

static int check_rules(const struct jsonmsg_ctx *c, const json_t *args, struct pl_spec *s)
{
	static const enum arg_key shuffle_knobs[] = { A_NUM_SHUFFLE_BUFFER_ELEMENTS,
						      A_NUM_FILENAMES_SHUFFLE_BUFFER,
						      A_NUM_MIX_FILES };
	struct name_idx *names;
	const char *what = NULL;
	unsigned i;
	int r;

	for (i = 0; i < A_COUNT_; i++)
		if (arg_keys[i].required && (arg_keys[i].loaders & (1u << s->type)) &&
		    !json_object_get(args, arg_keys[i].name))
			return missing(c, "args", arg_keys[i].name, "");
	for (i = 0; i < ARRAY_LEN(shuffle_knobs); i++) {
		if (s->shuffle && !json_object_get(args, arg_keys[shuffle_knobs[i]].name))
			return missing(c, "args", arg_keys[shuffle_knobs[i]].name,
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

	names = malloc(sizeof(*names) * (s->n_primary + s->n_secondary));
	if (!names)
		return oom(c);
	r = check_refs(c, s, names);
	free(names);
	if (r < 0)
		return r;
	r = check_padding_dups(c, s);
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
			return jsonmsg_fail(c, "args.multi_load", "expected false because %s, got true",
				    what);
	}
	return 0;
}

/* ---- top level ---- */

static const char *const top_keys[] = { "name", "type", "args" };

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
			return unknown_key(c, "args", key, expected);
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

	if (!json_is_object(root))
		return jsonmsg_fail(c, NULL, "expected a JSON object at the top level, got %s",
			    jsonmsg_describe(root, buf, sizeof(buf)));
	json_object_foreach ((json_t *)root, key, v) {
		switch (key_index(key, top_keys, ARRAY_LEN(top_keys))) {
		case 0:
			if (!json_is_string(v) || !name_ok(json_string_value(v)))
				return jsonmsg_fail(c, "name",
					    "expected 1 to %d characters of A-Z a-z 0-9 . _ - "
					    "starting with a letter or digit, got %s",
					    NAME_MAX_LEN, jsonmsg_describe(v, buf, sizeof(buf)));
			r = dup_str(c, json_string_value(v), &s->name);
			break;
		case 1:
			r = get_enum(c, v, "type", loader_names, ARRAY_LEN(loader_names),
				     "\"independent\", \"continuous_sequence\" or "
				     "\"discrete_sequence\"",
				     &t);
			s->type = (enum pl_loader_type)t;
			has_type = true;
			break;
		case 2:
			r = get_object(c, v, "args");
			args = v;
			break;
		default:
			r = unknown_key(c, "", key, "name, type, args");
		}
		if (r < 0)
			return r;
	}
	if (!has_type)
		return missing(c, "", "type", "");
	if (!args)
		return missing(c, "", "args", "");
	return parse_args(c, args, s);
}

static struct pl_spec *spec_new(void)
{
	struct pl_spec *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->epochs = PL_NULL;
	s->num_parallel_reads = 1;
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
	struct pl_spec *s;
	json_error_t je;
	json_t *root;
	char *copy;
	int r;

	copy = malloc(len ? len : 1);
	s = spec_new();
	if (!copy || !s) {
		free(copy);
		free(s);
		return oom(&c);
	}
	if (len)
		memcpy(copy, json, len);
	manifest_strip_comments(copy, len);
	root = json_loadb(copy, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
	free(copy);
	if (!root) {
		free(s);
		if (json_error_code(&je) == json_error_out_of_memory)
			return oom(&c);
		io_error_set(err, "%s:%d:%d: invalid JSON: %s (byte %d)", c.origin, je.line,
			     je.column, je.text, je.position);
		return -EBADMSG;
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

/* Read all of path (at most SPEC_MAX_FILE_BYTES) into a new buffer. */
static int read_file(const char *path, char **ret_buf, size_t *ret_len, struct io_error *err)
{
	struct stat st;
	size_t len = 0;
	char *buf;
	int fd, r;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		io_error_set(err, "%s: %s", path, strerror(-r));
		return r;
	}
	if (fstat(fd, &st) < 0) {
		r = -errno;
		io_error_set(err, "%s: %s", path, strerror(-r));
		goto fail_close;
	}
	if (!S_ISREG(st.st_mode)) {
		io_error_set(err, "%s: not a regular file", path);
		r = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		goto fail_close;
	}
	if ((uint64_t)st.st_size > SPEC_MAX_FILE_BYTES) {
		io_error_set(err, "%s: expected at most %u bytes, got %lld", path,
			     SPEC_MAX_FILE_BYTES, (long long)st.st_size);
		r = -EFBIG;
		goto fail_close;
	}
	/* One byte more than the size, to notice a file that grew meanwhile. */
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		io_error_set(err, "%s: out of memory", path);
		r = -ENOMEM;
		goto fail_close;
	}
	for (;;) {
		ssize_t n = read(fd, buf + len, (size_t)st.st_size + 1 - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			io_error_set(err, "%s: read: %s", path, strerror(-r));
			goto fail_free;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > (size_t)st.st_size) {
			io_error_set(err, "%s: file changed while being read", path);
			r = -EAGAIN;
			goto fail_free;
		}
	}
	close(fd);
	*ret_buf = buf;
	*ret_len = len;
	return 0;

fail_free:
	free(buf);
fail_close:
	close(fd);
	return r;
}

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

	r = read_file(path, &buf, &len, err);
	if (r < 0)
		return r;
	r = pl_spec_parse(buf, len, path, &s, err);
	free(buf);
	if (r < 0)
		return r;
	/* Relative dataset paths are relative to the spec file's directory. */
	if (slash) {
		size_t dir_len = (size_t)(slash - path);

		r = rebase(path, dir_len, &s->data_dir);
		if (r == 0)
			r = rebase(path, dir_len, &s->manifest_file);
		if (r == 0)
			r = rebase(path, dir_len, &s->list_file);
		if (r < 0) {
			pl_spec_destroy(s);
			io_error_set(err, "%s: out of memory", path);
			return r;
		}
	}
	*ret_spec = s;
	return 0;
}

void pl_spec_destroy(struct pl_spec *s)
{
	size_t i;

	if (!s)
		return;
	free(s->name);
	free(s->data_dir);
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
