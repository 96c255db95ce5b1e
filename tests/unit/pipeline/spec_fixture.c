/* SPDX-License-Identifier: Apache-2.0 */
/* Test support for daemon/pipeline/spec.c: JSON with single quotes, minimal specs, parse checks. */
#include "tests/unit/pipeline/spec_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/pipeline/spec.h"

/*
 * JSON in these tests is written with single quotes, turned into double quotes by q() (no test
 * string needs a real apostrophe). The returned buffer is static: one JSON text at a time.
 */
static char qbuf[1 << 16];

const char *q(const char *s)
{
	size_t i, n = strlen(s);

	assert_true(n < sizeof(qbuf));
	for (i = 0; i <= n; i++)
		qbuf[i] = s[i] == '\'' ? '"' : s[i];
	return qbuf;
}

struct pl_spec *parse_ok(const char *json)
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

void parse_err(const char *json, int want, const char *want1, const char *want2)
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
const char *mk(const char *type, const char *drop, const char *add)
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
