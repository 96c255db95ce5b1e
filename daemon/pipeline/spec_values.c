/* SPDX-License-Identifier: Apache-2.0 */
/* Pipeline spec: reading one JSON value (numbers, names, enums, dims, slices) and the messages. */
#include "spec_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- messages ---- */

/* snprintf for JSON paths: a path longer than the buffer is cut (and only ever printed). */
void pl_spec_path_printf(char *out, size_t n, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(out, n, fmt, ap);
	va_end(ap);
}

/* ---- values ---- */

/*
 * A JSON integer in [lo, hi] (never a real or a boolean), or "auto" (PL_AUTO) or null
 * (PL_NULL) where flags allow them.
 */
int pl_spec_get_int(const struct jsonmsg_ctx *c, const json_t *v, const char *path, int64_t lo,
		    int64_t hi, unsigned flags, int64_t *ret)
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
			    (flags & ALLOW_NULL) ? " or null" : "",
			    jsonmsg_describe(v, buf, sizeof(buf)));
}

int pl_spec_dup_str(const struct jsonmsg_ctx *c, const char *s, char **ret)
{
	char *d = strdup(s);

	if (!d)
		return jsonmsg_oom(c);
	*ret = d;
	return 0;
}

/* A non-empty string, copied into *ret. */
int pl_spec_get_name(const struct jsonmsg_ctx *c, const json_t *v, const char *path, char **ret)
{
	const char *name;
	int r = jsonmsg_get_name(c, v, path, &name);

	return r < 0 ? r : pl_spec_dup_str(c, name, ret);
}

/* A JSON scalar: bool, integer, real, string or null (PL_VALUE_NONE). */
int pl_spec_get_value(const struct jsonmsg_ctx *c, const json_t *v, const char *path,
		      struct pl_value *ret)
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
			return jsonmsg_oom(c);
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
int pl_spec_get_dims(const struct jsonmsg_ctx *c, const json_t *v, const char *path, int64_t lo,
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
		pl_spec_path_printf(sub, sizeof(sub), "%s[%zu]", path, i);
		if (i == MAX_DIMS)
			return jsonmsg_fail(c, path, "expected at most %d dimensions, got %zu",
					    MAX_DIMS, n);
		r = pl_spec_get_int(c, json_array_get(v, i), sub, lo, I32_MAX, 0, &dims[i]);
		if (r < 0)
			return r;
	}
	*ret_rank = (unsigned)n;
	return 0;
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

int pl_spec_parse_slice(const struct jsonmsg_ctx *c, const char *path, const json_t *v,
			struct pl_step *st)
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
