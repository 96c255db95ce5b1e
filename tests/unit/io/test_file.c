/* SPDX-License-Identifier: Apache-2.0 */
/* io/file.c: whole small files, and every way reading one can fail. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "io/file.h"

static char dir[] = "/tmp/sluice-test-file-XXXXXX";

static void write_file(const char *path, const char *text, size_t len)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

static void test_reads_all_and_terminates(void **state)
{
	char path[256], *buf = NULL;
	size_t len = 0;
	struct io_error err;
	(void)state;
	snprintf(path, sizeof(path), "%s/a.json", dir);
	write_file(path, "{\"a\":\0 1}", 9); /* a NUL inside is kept: the length says */
	assert_int_equal(io_file_read(path, 9, &buf, &len, &err), 0);
	assert_int_equal(len, 9);
	assert_memory_equal(buf, "{\"a\":\0 1}", 9);
	assert_int_equal(buf[9], 0);
	free(buf);
	snprintf(path, sizeof(path), "%s/empty", dir);
	write_file(path, "", 0);
	assert_int_equal(io_file_read(path, 0, &buf, &len, &err), 0);
	assert_int_equal(len, 0);
	assert_int_equal(buf[0], 0);
	free(buf);
}

static void test_errors_name_the_file(void **state)
{
	char path[256], want[512], *buf = (char *)0x1;
	size_t len = 77;
	struct io_error err;
	(void)state;
	snprintf(path, sizeof(path), "%s/big", dir);
	write_file(path, "0123456789", 10);
	assert_int_equal(io_file_read(path, 9, &buf, &len, &err), -EFBIG);
	snprintf(want, sizeof(want), "%s: expected at most 9 bytes, got 10", path);
	assert_string_equal(err.msg, want);
	assert_ptr_equal(buf, (char *)0x1); /* ret_ untouched on failure */
	assert_int_equal(len, 77);

	snprintf(path, sizeof(path), "%s/missing", dir);
	assert_int_equal(io_file_read(path, 100, &buf, &len, &err), -ENOENT);
	snprintf(want, sizeof(want), "%s: No such file or directory", path);
	assert_string_equal(err.msg, want);

	assert_int_equal(io_file_read(dir, 100, &buf, &len, &err), -EISDIR);
	snprintf(want, sizeof(want), "%s: not a regular file", dir);
	assert_string_equal(err.msg, want);

	assert_int_equal(io_file_read("/dev/null", 100, &buf, &len, &err), -EINVAL);
	assert_string_equal(err.msg, "/dev/null: not a regular file");
}

static int setup(void **state)
{
	(void)state;
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[300];
	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reads_all_and_terminates),
		cmocka_unit_test(test_errors_name_the_file),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
