/* SPDX-License-Identifier: Apache-2.0 */
/* A case that cannot run here says why, and a program none of whose cases could run exits 77.
 *
 * cmocka's skip() says neither: a skipped case is reported without a reason, and a program
 * whose every case skipped exits 0, which meson counts as a pass. SL_SKIP("[tag] why") prints
 * "# skip: [tag] why" (a TAP comment: tests/tap_cmocka.py gives it to meson as the case's SKIP
 * reason), counts the skip and skips; SL_RUN_GROUP() is cmocka_run_group_tests() that exits
 * 77 when every case skipped, and runs only the cases whose names match SL_TEST_FILTER (a
 * cmocka pattern, "*" a wildcard) where that is set. The tags are the rule tools/test_summary.py
 * applies to what a machine may skip (docs/testing.md): [testdata], [io_uring], [root], [nonroot],
 * [gpu], [cpu]. */
#ifndef SLUICE_TESTS_UNIT_SKIP_H
#define SLUICE_TESTS_UNIT_SKIP_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static unsigned sl_skipped_;

#define SL_SKIP(...)                            \
	do {                                    \
		printf("# skip: " __VA_ARGS__); \
		printf("\n");                   \
		fflush(stdout);                 \
		sl_skipped_++;                  \
		skip();                         \
	} while (0)

static inline int sl_group_exit_(int failed, size_t cases)
{
	if (failed)
		return failed;
	return sl_skipped_ == cases ? 77 : 0;
}

static inline void sl_group_filter_(void)
{
	const char *f = getenv("SL_TEST_FILTER");

	if (f && *f)
		cmocka_set_test_filter(f);
}

#define SL_RUN_GROUP(tests, setup, teardown)                                                \
	(sl_group_filter_(), sl_group_exit_(cmocka_run_group_tests(tests, setup, teardown), \
					    sizeof(tests) / sizeof((tests)[0])))

/* ../shared/testdata (SLUICE_SHARED_DIR/testdata), or NULL when it is absent. */
static inline const char *sl_testdata_dir(void)
{
	const char *s = getenv("SLUICE_SHARED_DIR");
	static char buf[512];
	struct stat st;

	snprintf(buf, sizeof(buf), "%s/testdata", s ? s : "../shared");
	return stat(buf, &st) == 0 ? buf : NULL;
}

#endif
