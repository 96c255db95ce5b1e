/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for daemon/pipeline/spec.c: the slice grammar of processing steps. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/pipeline/spec.h"
#include "tests/unit/pipeline/spec_fixture.h"

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slice_valid),
		cmocka_unit_test(test_slice_invalid),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
