/* SPDX-License-Identifier: Apache-2.0 */
/* daemon/service.c: the socket path, systemd's variables (watchdog, LISTEN_FDS, NOTIFY_SOCKET,
   StateDirectory=) and the cgroup limits, as sluiced reads them. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "daemon/service.h"

static int sock(const char *option, const char *env_sock, const char *rtd, const char *xdg,
		char *buf, size_t cap)
{
	const struct dmn_sock_env env = { env_sock, rtd, xdg };
	return dmn_socket_path(option, &env, buf, cap);
}

/* README, "The service": --socket, $SLUICE_SOCKET, $RUNTIME_DIRECTORY's first, $XDG_RUNTIME_DIR,
   /run/sluice; test_service.py runs the RUNTIME_DIRECTORY case end to end. */
static void test_socket_order(void **state)
{
	(void)state;
	char b[256];
	assert_int_equal(sock("/o.sock", "/e.sock", "/rt", "/xdg", b, sizeof(b)), DMN_SOCK_OPTION);
	assert_string_equal(b, "/o.sock");
	assert_int_equal(sock(NULL, "/e.sock", "/rt", "/xdg", b, sizeof(b)), DMN_SOCK_ENV);
	assert_string_equal(b, "/e.sock");
	assert_int_equal(sock(NULL, NULL, "/rt", "/xdg", b, sizeof(b)), DMN_SOCK_RUNTIME_DIR);
	assert_string_equal(b, "/rt/sluice.sock");
	assert_int_equal(sock(NULL, NULL, NULL, "/xdg", b, sizeof(b)), DMN_SOCK_XDG);
	assert_string_equal(b, "/xdg/sluice/sluice.sock");
	assert_int_equal(sock(NULL, NULL, NULL, NULL, b, sizeof(b)), DMN_SOCK_SYSTEM);
	assert_string_equal(b, "/run/sluice/sluice.sock");
	/* empty variables count as unset */
	assert_int_equal(sock(NULL, "", "", "", b, sizeof(b)), DMN_SOCK_SYSTEM);
	assert_int_equal(sock(NULL, "", "", "/xdg", b, sizeof(b)), DMN_SOCK_XDG);
}

/* systemd lists a unit's runtime directories separated by ':': ours is the first. */
static void test_socket_runtime_directory_split(void **state)
{
	(void)state;
	char b[256];
	assert_int_equal(sock(NULL, NULL, "/run/sluice:/run/other", NULL, b, sizeof(b)),
			 DMN_SOCK_RUNTIME_DIR);
	assert_string_equal(b, "/run/sluice/sluice.sock");
	assert_int_equal(sock(NULL, NULL, "/a:/b:/c", NULL, b, sizeof(b)), DMN_SOCK_RUNTIME_DIR);
	assert_string_equal(b, "/a/sluice.sock");
	/* an empty first directory is none: on to the next source */
	assert_int_equal(sock(NULL, NULL, ":/b", "/xdg", b, sizeof(b)), DMN_SOCK_XDG);
}

static void test_socket_too_long(void **state)
{
	(void)state;
	char b[512], longp[200];
	memset(longp, 'a', sizeof(longp) - 1);
	longp[0] = '/';
	longp[sizeof(longp) - 1] = '\0';
	/* a sockaddr_un holds 107 bytes of path: never a truncated path */
	assert_int_equal(sock(longp, NULL, NULL, NULL, b, sizeof(b)), -ENAMETOOLONG);
	assert_int_equal(sock(NULL, NULL, longp, NULL, b, sizeof(b)), -ENAMETOOLONG);
	assert_int_equal(sock(NULL, NULL, NULL, NULL, b, 10), -ENAMETOOLONG); /* nor buf's cap */
	longp[108] = '\0'; /* 108 bytes and the NUL: one too many */
	assert_int_equal(sock(longp, NULL, NULL, NULL, b, sizeof(b)), -ENAMETOOLONG);
	longp[107] = '\0';
	assert_int_equal(sock(longp, NULL, NULL, NULL, b, sizeof(b)), DMN_SOCK_OPTION);
}

static void test_first_dir(void **state)
{
	(void)state;
	char b[16];
	assert_int_equal(dmn_first_dir("/var/lib/sluice", b, sizeof(b)), 0);
	assert_string_equal(b, "/var/lib/sluice");
	assert_int_equal(dmn_first_dir("/a:/b", b, sizeof(b)), 0);
	assert_string_equal(b, "/a");
	assert_int_equal(dmn_first_dir(NULL, b, sizeof(b)), -ENOENT);
	assert_int_equal(dmn_first_dir("", b, sizeof(b)), -ENOENT);
	assert_int_equal(dmn_first_dir(":/b", b, sizeof(b)), -ENOENT);
	assert_int_equal(dmn_first_dir("/var/lib/sluice/x", b, sizeof(b)), -ENAMETOOLONG);
}

static void test_watchdog(void **state)
{
	(void)state;
	assert_true(dmn_watchdog_ms("30000000", NULL, 42) == 15000); /* WatchdogSec=30s */
	assert_true(dmn_watchdog_ms("200000", "42", 42) == 100);
	assert_true(dmn_watchdog_ms("200000", "", 42) == 100); /* empty: unset */
	/* another process's (a child that inherited the environment) */
	assert_true(dmn_watchdog_ms("200000", "1", 42) == 0);
	assert_true(dmn_watchdog_ms("200000", "42x", 42) == 0);
	assert_true(dmn_watchdog_ms(NULL, NULL, 42) == 0);
	assert_true(dmn_watchdog_ms("", NULL, 42) == 0);
	assert_true(dmn_watchdog_ms("0", NULL, 42) == 0);
	assert_true(dmn_watchdog_ms("abc", NULL, 42) == 0);
	assert_true(dmn_watchdog_ms("-5", NULL, 42) == 0);
}

/* A period under 2 ms rounded half of it down to 0, and 0 meant no pings at all: systemd then
   killed the daemon for never answering. */
static void test_watchdog_short_period_still_pings(void **state)
{
	(void)state;
	assert_true(dmn_watchdog_ms("1000", NULL, 42) == 1);
	assert_true(dmn_watchdog_ms("1", NULL, 42) == 1);
}

static void test_listen_fds(void **state)
{
	(void)state;
	assert_true(dmn_listen_fds_ours("42", "1", 42));
	assert_false(dmn_listen_fds_ours("43", "1", 42));
	assert_false(dmn_listen_fds_ours("42", "2", 42)); /* sluiced.socket passes one */
	assert_false(dmn_listen_fds_ours("42", "0", 42));
	assert_false(dmn_listen_fds_ours(NULL, "1", 42));
	assert_false(dmn_listen_fds_ours("42", NULL, 42));
	assert_false(dmn_listen_fds_ours("", "", 0));
	assert_false(dmn_listen_fds_ours("42junk", "1", 42));
}

static void test_notify_addr(void **state)
{
	(void)state;
	struct sockaddr_un sa;
	socklen_t len = 0;
	assert_int_equal(dmn_notify_addr("/run/systemd/notify", &sa, &len), 0);
	assert_string_equal(sa.sun_path, "/run/systemd/notify");
	assert_int_equal(len, offsetof(struct sockaddr_un, sun_path) + 19);
	assert_int_equal(dmn_notify_addr("@/org/systemd/x", &sa, &len), 0);
	assert_int_equal(sa.sun_path[0], '\0'); /* abstract */
	assert_memory_equal(sa.sun_path + 1, "/org/systemd/x", 14);
	assert_int_equal(len, offsetof(struct sockaddr_un, sun_path) + 15);
	len = 7;
	assert_int_equal(dmn_notify_addr(NULL, &sa, &len), -EINVAL);
	assert_int_equal(dmn_notify_addr("", &sa, &len), -EINVAL);
	assert_int_equal(dmn_notify_addr("@", &sa, &len), -EINVAL);
	assert_int_equal(dmn_notify_addr("relative", &sa, &len), -EINVAL);
	char longp[120];
	memset(longp, 'a', sizeof(longp) - 1);
	longp[0] = '/';
	longp[sizeof(longp) - 1] = '\0';
	assert_int_equal(dmn_notify_addr(longp, &sa, &len), -EINVAL);
	assert_int_equal(len, 7);
}

static void test_cgroup_parse(void **state)
{
	(void)state;
	assert_true(dmn_cgroup_parse_max("1073741824\n") == 1ull << 30);
	assert_true(dmn_cgroup_parse_max("max\n") == UINT64_MAX);
	assert_true(dmn_cgroup_parse_max("") == UINT64_MAX);
	assert_true(dmn_cgroup_parse_max(NULL) == UINT64_MAX);
	assert_true(dmn_cgroup_parse_cpu_max("150000 100000\n") == 1500);
	assert_true(dmn_cgroup_parse_cpu_max("50000 100000\n") == 500);
	assert_true(dmn_cgroup_parse_cpu_max("max 100000\n") == UINT64_MAX);
	assert_true(dmn_cgroup_parse_cpu_max("100 0\n") == UINT64_MAX);
	assert_true(dmn_cgroup_parse_cpu_max("") == UINT64_MAX);
}

static void put(const char *root, const char *rel, const char *text)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_cgroup_min(void **state)
{
	(void)state;
	char root[] = "/tmp/sluice-cgroup-XXXXXX", path[512];
	assert_non_null(mkdtemp(root));
	snprintf(path, sizeof(path), "%s/system.slice", root);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/system.slice/sluiced.service", root);
	assert_int_equal(mkdir(path, 0755), 0);
	put(root, "memory.max", "2147483648\n"); /* read only for "0::/" */
	put(root, "system.slice/memory.max", "4294967296\n");
	put(root, "system.slice/sluiced.service/memory.max", "max\n");
	put(root, "system.slice/sluiced.service/cpu.max", "250000 100000\n");
	const char *v2 = "0::/system.slice/sluiced.service\n";
	/* the smallest of the cgroup and its parents */
	assert_true(dmn_cgroup_min(v2, root, "memory.max", dmn_cgroup_parse_max) == 4ull << 30);
	assert_true(dmn_cgroup_min(v2, root, "cpu.max", dmn_cgroup_parse_cpu_max) == 2500);
	put(root, "system.slice/sluiced.service/memory.max", "1073741824\n");
	assert_true(dmn_cgroup_min(v2, root, "memory.max", dmn_cgroup_parse_max) == 1ull << 30);
	/* cgroup v1 lines beside it are not read; without a v2 line, none */
	const char *mixed = "12:memory:/x\n0::/system.slice/sluiced.service\n";
	assert_true(dmn_cgroup_min(mixed, root, "memory.max", dmn_cgroup_parse_max) == 1ull << 30);
	assert_true(dmn_cgroup_min("12:memory:/system.slice\n", root, "memory.max",
				   dmn_cgroup_parse_max) == UINT64_MAX);
	/* "/": a container's cgroup namespace, whose root is the container's cgroup (issue 19's
	   integration test runs there); a nested path stops below the root */
	assert_true(dmn_cgroup_min("0::/\n", root, "memory.max", dmn_cgroup_parse_max) ==
		    2ull << 30);
	assert_true(dmn_cgroup_min("0::/\n", root, "cpu.max", dmn_cgroup_parse_cpu_max) ==
		    UINT64_MAX);
	assert_true(dmn_cgroup_min("", root, "memory.max", dmn_cgroup_parse_max) == UINT64_MAX);
	/* a file that is not there is no limit */
	assert_true(dmn_cgroup_min(v2, root, "pids.max", dmn_cgroup_parse_max) == UINT64_MAX);
	snprintf(path, sizeof(path), "%s/system.slice/sluiced.service/memory.max", root);
	unlink(path);
	snprintf(path, sizeof(path), "%s/system.slice/sluiced.service/cpu.max", root);
	unlink(path);
	snprintf(path, sizeof(path), "%s/system.slice/memory.max", root);
	unlink(path);
	snprintf(path, sizeof(path), "%s/memory.max", root);
	unlink(path);
	snprintf(path, sizeof(path), "%s/system.slice/sluiced.service", root);
	rmdir(path);
	snprintf(path, sizeof(path), "%s/system.slice", root);
	rmdir(path);
	rmdir(root);
}

/*
 * cgroup v1: memory.limit_in_bytes over the memory hierarchy's path (the kernel's "no limit"
 * is none), cfs quota over period over the cpu hierarchy's, mounted as "cpu,cpuacct" (found
 * by the line's controllers) or by the controller's own name; v2 lines are not read here.
 */
static void test_cgroup_v1(void **state)
{
	(void)state;
	char root[] = "/tmp/sluice-cgroup1-XXXXXX", path[512];
	static const char *const dirs[] = { "memory", "memory/job", "memory/job/sluiced",
					    "cpu,cpuacct", "cpu,cpuacct/job" };
	assert_non_null(mkdtemp(root));
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", root, dirs[i]);
		assert_int_equal(mkdir(path, 0755), 0);
	}
	put(root, "memory/memory.limit_in_bytes", "9223372036854771712\n"); /* the host's */
	put(root, "memory/job/memory.limit_in_bytes", "67108864\n");
	put(root, "memory/job/sluiced/memory.limit_in_bytes", "9223372036854771712\n");
	put(root, "cpu,cpuacct/job/cpu.cfs_quota_us", "150000\n");
	put(root, "cpu,cpuacct/job/cpu.cfs_period_us", "100000\n");
	const char *cg = "9:cpu,cpuacct:/job\n4:memory:/job/sluiced\n0::/\n";
	assert_true(dmn_cgroup_v1_memory(cg, root) == 64ull << 20); /* the parent's */
	assert_true(dmn_cgroup_v1_cpu(cg, root) == 1500);
	/* no quota (-1), no hierarchy, the root's "no limit" */
	put(root, "cpu,cpuacct/job/cpu.cfs_quota_us", "-1\n");
	assert_true(dmn_cgroup_v1_cpu(cg, root) == UINT64_MAX);
	assert_true(dmn_cgroup_v1_memory("0::/job\n", root) == UINT64_MAX);
	assert_true(dmn_cgroup_v1_memory("4:memory:/\n", root) == UINT64_MAX);
	assert_true(dmn_cgroup_parse_v1_limit("9223372036854771712") == UINT64_MAX);
	assert_true(dmn_cgroup_parse_v1_limit("1048576\n") == 1u << 20);
	/* a hierarchy mounted by the controller's own name ("cpu" beside "cpuacct") */
	snprintf(path, sizeof(path), "%s/cpu", root);
	assert_int_equal(mkdir(path, 0755), 0);
	put(root, "cpu/cpu.cfs_quota_us", "50000\n");
	put(root, "cpu/cpu.cfs_period_us", "100000\n");
	assert_true(dmn_cgroup_v1_cpu("1:cpu:/\n", root) == 500);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_socket_order),
		cmocka_unit_test(test_socket_runtime_directory_split),
		cmocka_unit_test(test_socket_too_long),
		cmocka_unit_test(test_first_dir),
		cmocka_unit_test(test_watchdog),
		cmocka_unit_test(test_watchdog_short_period_still_pings),
		cmocka_unit_test(test_listen_fds),
		cmocka_unit_test(test_notify_addr),
		cmocka_unit_test(test_cgroup_parse),
		cmocka_unit_test(test_cgroup_min),
		cmocka_unit_test(test_cgroup_v1),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
