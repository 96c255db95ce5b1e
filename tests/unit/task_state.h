/* SPDX-License-Identifier: Apache-2.0 */
/* What the kernel says of a thread of this process: whether it sleeps in futex(), and on what.
 *
 * The tests that must know a thread is asleep before they wake it (a futex wake through another
 * mapping, a pool's parked workers, a cancelled waiter) wait on this instead of a sleep. The
 * kernel sets a thread's state to S only after FUTEX_WAIT compared the word and queued the
 * thread, so a wake from then on finds it. No cmocka asserts: callers may run on threads of
 * their own. */
#ifndef SLUICE_TESTS_UNIT_TASK_STATE_H
#define SLUICE_TESTS_UNIT_TASK_STATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>

/* Read /proc/self/task/<tid>/<what> into buf (NUL-terminated); false if it cannot be read. */
static inline bool sl_task_file(pid_t tid, const char *what, char *buf, size_t cap)
{
	char path[64];
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/self/task/%d/%s", (int)tid, what);
	f = fopen(path, "re");
	if (!f)
		return false;
	n = fread(buf, 1, cap - 1, f);
	fclose(f);
	buf[n] = '\0';
	return n > 0;
}

/*
 * Whether thread tid sleeps in futex(): its state in /proc/self/task/<tid>/stat is S, and
 * /proc/self/task/<tid>/syscall (it says "running" while the thread is on a CPU) names
 * SYS_futex, with the word (its first argument) in *addr and its timeout (the fourth, 0 for
 * none) in *timeout. Where the syscall file cannot be read (some sandboxes) the state alone is
 * trusted, said once, and *addr is 0.
 */
static inline bool sl_task_in_futex(pid_t tid, uintptr_t *addr, uintptr_t *timeout)
{
	static atomic_bool no_syscall_file;
	char buf[512];
	const char *p;
	long nr;
	unsigned long a, op, val, t;

	*addr = 0;
	*timeout = 0;
	if (!sl_task_file(tid, "stat", buf, sizeof(buf)))
		return false;
	p = strrchr(buf, ')'); /* after the name, which may hold anything */
	if (!p || p[1] != ' ' || p[2] != 'S')
		return false;
	if (atomic_load(&no_syscall_file))
		return true;
	if (!sl_task_file(tid, "syscall", buf, sizeof(buf))) {
		if (!atomic_exchange(&no_syscall_file, true))
			fprintf(stderr,
				"no /proc/self/task/%d/syscall: trusting the thread's "
				"state alone\n",
				(int)tid);
		return true;
	}
	if (sscanf(buf, "%ld %lx %lx %lx %lx", &nr, &a, &op, &val, &t) != 5 || nr != SYS_futex)
		return false;
	*addr = a;
	*timeout = t;
	return true;
}

#endif
