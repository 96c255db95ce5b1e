/* SPDX-License-Identifier: Apache-2.0 */
/* daemon/names.c: the edit distance behind sluiced's "did you mean". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/names.h"

static void test_distance(void **state)
{
	(void)state;
	assert_int_equal(dmn_name_distance("", "", 2), 0);
	assert_int_equal(dmn_name_distance("mnist", "mnist", 2), 0);
	assert_int_equal(dmn_name_distance("mnist_train", "mnist-train", 2), 1); /* substitute */
	assert_int_equal(dmn_name_distance("mnist", "mnst", 2), 1);		 /* delete */
	assert_int_equal(dmn_name_distance("mnst", "mnist", 2), 1);		 /* insert */
	assert_int_equal(dmn_name_distance("mnsit", "mnist", 2), 1); /* swap of neighbours */
	assert_int_equal(dmn_name_distance("ab", "ba", 2), 1);
	assert_int_equal(dmn_name_distance("kitten", "sitting", 5), 3);
	/* past max: max + 1, however far */
	assert_int_equal(dmn_name_distance("kitten", "sitting", 2), 3);
	assert_int_equal(dmn_name_distance("a", "abcdefgh", 2), 3);
	assert_int_equal(dmn_name_distance("abc", "xyz", 1), 2);
	/* symmetric */
	assert_int_equal(dmn_name_distance("imagenet-val", "imagenet_tr", 9),
			 dmn_name_distance("imagenet_tr", "imagenet-val", 9));
	/* names longer than the table: equal or far */
	char a[300], b[300];
	memset(a, 'x', 299);
	a[299] = '\0';
	memcpy(b, a, 300);
	assert_int_equal(dmn_name_distance(a, b, 2), 0);
	b[0] = 'y';
	assert_int_equal(dmn_name_distance(a, b, 2), 3);
}

static void test_close(void **state)
{
	(void)state;
	assert_true(dmn_name_close("mnist_train", "mnist-train"));
	assert_true(dmn_name_close("mnist", "mnist-train")); /* a common prefix */
	assert_true(dmn_name_close("mnist-train-v2", "mnist-train"));
	assert_true(dmn_name_close("ctr", "ctx"));
	assert_false(dmn_name_close("mnist", "mnist")); /* itself is no suggestion */
	assert_false(dmn_name_close("mnist", "imagenet"));
	assert_false(dmn_name_close("ab", "abcdef")); /* a prefix of 2 bytes says little */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_distance),
		cmocka_unit_test(test_close),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
