/* SPDX-License-Identifier: Apache-2.0 */
/* io/jsonmsg.c: the checks of one JSON value that the manifest and the spec share, and their words.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "io/jsonmsg.h"

static struct io_error err;

/* A test's inputs: the elements of one JSON array (the caller json_decref()s it). */
static json_t *parse(const char *text)
{
	json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
	assert_non_null(v);
	return v;
}

#define AT(doc, i) json_array_get(doc, i)

static void test_object(void **state)
{
	struct jsonmsg_ctx c = { .origin = "m.json", .err = &err };
	json_t *doc = parse("[{}, [1]]");
	(void)state;
	assert_int_equal(jsonmsg_get_object(&c, AT(doc, 0), "x"), 0);
	assert_int_equal(jsonmsg_get_object(&c, AT(doc, 1), "x.y"), -EINVAL);
	assert_string_equal(err.msg, "m.json: x.y: expected an object, got an array");
	assert_int_equal(jsonmsg_get_object(&c, AT(doc, 1), NULL), -EINVAL);
	assert_string_equal(err.msg, "m.json: expected a JSON object at the top level, got an "
				     "array");
	assert_int_equal(jsonmsg_get_object(&c, AT(doc, 1), ""), -EINVAL);
	assert_string_equal(err.msg, "m.json: expected a JSON object at the top level, got an "
				     "array");
	json_decref(doc);
}

static void test_bool_and_name(void **state)
{
	struct jsonmsg_ctx c = { .origin = "<spec>", .err = &err };
	json_t *doc = parse("[true, 1, \"ab\", \"\"]");
	const char *name = "unchanged";
	bool b = false;
	(void)state;
	assert_int_equal(jsonmsg_get_bool(&c, AT(doc, 0), "p", &b), 0);
	assert_true(b);
	b = false;
	assert_int_equal(jsonmsg_get_bool(&c, AT(doc, 1), "p", &b), -EINVAL);
	assert_false(b); /* not written on failure */
	assert_string_equal(err.msg, "<spec>: p: expected true or false, got 1");
	assert_int_equal(jsonmsg_get_name(&c, AT(doc, 2), "n", &name), 0);
	assert_string_equal(name, "ab");
	name = "unchanged";
	assert_int_equal(jsonmsg_get_name(&c, AT(doc, 3), "n", &name), -EINVAL);
	assert_string_equal(name, "unchanged");
	assert_string_equal(err.msg, "<spec>: n: expected a non-empty string, got \"\"");
	json_decref(doc);
}

static void test_enum(void **state)
{
	static const char *const names[] = { "little", "big" };
	static const char expected[] = "\"little\" or \"big\"";
	struct jsonmsg_ctx c = { .origin = "m.json", .err = &err };
	json_t *doc = parse("[\"big\", \"BIG\", null]");
	unsigned i = 7;
	(void)state;
	assert_int_equal(jsonmsg_get_enum(&c, AT(doc, 0), "e", names, 2, expected, &i), 0);
	assert_int_equal(i, 1);
	i = 7;
	assert_int_equal(jsonmsg_get_enum(&c, AT(doc, 1), "e", names, 2, expected, &i), -EINVAL);
	assert_int_equal(i, 7);
	assert_string_equal(err.msg, "m.json: e: expected \"little\" or \"big\", got \"BIG\"");
	assert_int_equal(jsonmsg_get_enum(&c, AT(doc, 2), "e", names, 2, expected, &i), -EINVAL);
	assert_string_equal(err.msg, "m.json: e: expected \"little\" or \"big\", got null");
	json_decref(doc);
}

static void test_array(void **state)
{
	struct jsonmsg_ctx c = { .origin = "m.json", .err = &err };
	json_t *doc = parse("[[{}, {}, {}], [], {}]");
	uint64_t *elems = NULL;
	size_t n = 99;
	(void)state;
	assert_int_equal(
		jsonmsg_get_array(&c, AT(doc, 0), "f", sizeof(*elems), &n, (void **)&elems), 0);
	assert_int_equal(n, 3);
	assert_non_null(elems);
	assert_int_equal(elems[0] | elems[1] | elems[2], 0);
	free(elems);
	elems = (uint64_t *)&n; /* an empty array gives NULL */
	assert_int_equal(
		jsonmsg_get_array(&c, AT(doc, 1), "f", sizeof(*elems), &n, (void **)&elems), 0);
	assert_int_equal(n, 0);
	assert_null(elems);
	n = 99;
	assert_int_equal(jsonmsg_get_array(&c, AT(doc, 2), "f", sizeof(*elems), &n,
					   (void **)&elems),
			 -EINVAL);
	assert_int_equal(n, 99);
	assert_string_equal(err.msg, "m.json: f: expected an array of objects, got an object");
	json_decref(doc);
}

static void test_check_keys(void **state)
{
	static const char *const keys[] = { "a", "b" };
	struct jsonmsg_ctx c = { .origin = "m.json", .err = &err };
	json_t *doc = parse("[{\"b\": 1, \"a\": 2}, {\"a\": 1, \"c d\": 2, \"e\": 3}]");
	(void)state;
	assert_int_equal(jsonmsg_check_keys(&c, AT(doc, 0), "x", keys, 2, "a, b"), 0);
	assert_int_equal(jsonmsg_check_keys(&c, AT(doc, 1), "x", keys, 2, "a, b"), -EINVAL);
	assert_string_equal(err.msg, "m.json: x[\"c d\"]: unknown key (expected one of: a, b)");
	json_decref(doc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_object),	   cmocka_unit_test(test_bool_and_name),
		cmocka_unit_test(test_enum),	   cmocka_unit_test(test_array),
		cmocka_unit_test(test_check_keys),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
