/* SPDX-License-Identifier: Apache-2.0 */
/*
 * io/creds.c: files opened with another user's rights. The kernel decides at the open: a file
 * only root may read is refused, a group's file is read through a supplementary group, and
 * only the thread that took the rights has them. Needs root (exit 77 otherwise).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "io/creds.h"

#define NOBODY 65534
#define TEAM   4242 /* a group no one is in */

static char dir[] = "/tmp/sluice-test-creds-XXXXXX";
static char secret[300], team[300], open_[300];

static void make(const char *path, mode_t mode, gid_t gid)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "x", 1), 1);
	assert_int_equal(fchown(fd, 0, gid), 0);
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static int try_open(const struct io_creds *c, const char *path)
{
	int fd = io_creds_open(c, path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		close(fd);
		return 0;
	}
	return fd;
}

static void test_the_kernel_decides(void **state)
{
	(void)state;
	struct io_creds nobody = { .uid = NOBODY, .gid = NOBODY };
	gid_t g[] = { 7, TEAM };
	struct io_creds member = { .uid = NOBODY, .gid = NOBODY, .n_groups = 2, .groups = g };
	assert_int_equal(try_open(NULL, secret), 0); /* the process's own rights */
	assert_int_equal(try_open(&nobody, secret), -EACCES);
	assert_int_equal(try_open(&nobody, open_), 0);
	assert_int_equal(try_open(&nobody, team), -EACCES);
	assert_int_equal(try_open(&member, team), 0); /* through a supplementary group */
	assert_int_equal(try_open(&member, secret), -EACCES);
	/* and back: the thread has its own rights again, file capabilities included */
	assert_int_equal(try_open(NULL, secret), 0);
	assert_int_equal((uid_t)setfsuid((uid_t)-1), geteuid());
	gid_t now[8];
	int n = getgroups(8, now);
	assert_true(n >= 0);
	for (int i = 0; i < n; i++)
		assert_int_not_equal(now[i], TEAM);
}

struct other {
	pthread_barrier_t *in, *out;
	int r;
};

static void *other_thread(void *arg)
{
	struct other *o = arg;
	pthread_barrier_wait(o->in); /* the main thread has taken nobody's rights */
	o->r = try_open(NULL, secret);
	pthread_barrier_wait(o->out);
	return NULL;
}

static void test_one_thread_only(void **state)
{
	(void)state;
	pthread_barrier_t in, out;
	pthread_barrier_init(&in, NULL, 2);
	pthread_barrier_init(&out, NULL, 2);
	struct other o = { .in = &in, .out = &out, .r = 1 };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, other_thread, &o), 0);
	struct io_creds nobody = { .uid = NOBODY, .gid = NOBODY };
	assert_int_equal(io_creds_enter(&nobody), 0);
	assert_int_equal(open(secret, O_RDONLY | O_CLOEXEC), -1);
	assert_int_equal(errno, EACCES);
	pthread_barrier_wait(&in);
	pthread_barrier_wait(&out);
	io_creds_leave(&nobody);
	pthread_join(t, NULL);
	assert_int_equal(o.r, 0); /* the other thread kept the process's rights meanwhile */
	pthread_barrier_destroy(&in);
	pthread_barrier_destroy(&out);
}

static void test_usable_and_copy(void **state)
{
	(void)state;
	char msg[256] = "";
	struct io_creds nobody = { .uid = NOBODY, .gid = NOBODY };
	assert_true(io_creds_usable(NULL, msg, sizeof(msg)));
	assert_true(io_creds_usable(&nobody, msg, sizeof(msg))); /* root has CAP_SETUID */
	gid_t g[] = { 1, 2, 3 };
	struct io_creds src = { .uid = 5, .gid = 6, .n_groups = 3, .groups = g }, dst;
	assert_int_equal(io_creds_copy(&dst, &src), 0);
	assert_true(dst.groups != g);
	assert_memory_equal(dst.groups, g, sizeof(g));
	assert_int_equal(dst.uid, 5);
	io_creds_clear(&dst);
	assert_null(dst.groups);
}

int main(void)
{
	if (geteuid() != 0) {
		printf("# skip: [root] taking another user's rights needs root\n");
		return 77;
	}
	if (!mkdtemp(dir))
		return 1;
	chmod(dir, 0755);
	snprintf(secret, sizeof(secret), "%s/secret", dir);
	snprintf(team, sizeof(team), "%s/team", dir);
	snprintf(open_, sizeof(open_), "%s/open", dir);
	make(secret, 0600, 0);
	make(team, 0640, TEAM);
	make(open_, 0644, 0);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_the_kernel_decides),
		cmocka_unit_test(test_one_thread_only),
		cmocka_unit_test(test_usable_and_copy),
	};
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	unlink(secret);
	unlink(team);
	unlink(open_);
	rmdir(dir);
	return r;
}
