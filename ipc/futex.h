/* SPDX-License-Identifier: Apache-2.0 */
/* Inline helpers around the futex system calls, for words in memory shared by processes. */
#ifndef SLUICE_IPC_FUTEX_H
#define SLUICE_IPC_FUTEX_H

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include <linux/futex.h>
#include <sys/syscall.h>

/*
 * Every word here may be shared between processes (a MAP_SHARED mapping of a memfd), so none of
 * these calls uses FUTEX_PRIVATE_FLAG. A wait only reads the word: it works on a read-only mapping.
 */

/* An absolute CLOCK_MONOTONIC deadline timeout_ns from now (timeout_ns >= 0). */
static inline struct timespec ipc_futex_deadline(int64_t timeout_ns)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(timeout_ns / 1000000000);
	ts.tv_nsec += (long)(timeout_ns % 1000000000);
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	return ts;
}

/*
 * Sleep while *word == expected, until a wake or the absolute CLOCK_MONOTONIC deadline (NULL: no
 * limit). Returns 0 (woken, or spuriously), -EAGAIN (the word differed), -ETIMEDOUT, -EINTR.
 */
static inline int ipc_futex_wait(const _Atomic uint32_t *word, uint32_t expected,
				 const struct timespec *deadline)
{
	long rc = syscall(SYS_futex, (const void *)word, FUTEX_WAIT_BITSET, expected, deadline,
			  NULL, FUTEX_BITSET_MATCH_ANY);

	return rc < 0 ? -errno : 0;
}

/* Wake up to n sleepers on word. Returns how many were woken, or -errno. */
static inline int ipc_futex_wake(_Atomic uint32_t *word, int n)
{
	long rc = syscall(SYS_futex, (void *)word, FUTEX_WAKE, n, NULL, NULL, 0);

	return rc < 0 ? -errno : (int)rc;
}

/*
 * Sleep until one of n words (n <= FUTEX_WAITV_MAX) differs from its value in vals[] or is woken,
 * or the deadline passes. Returns 0, -EAGAIN (a word differed), -ETIMEDOUT, -EINTR, -ENOSYS
 * (a kernel older than 5.16). Each waiter names its word (uaddr), value (val) and FUTEX_32.
 */
static inline int ipc_futex_waitv(struct futex_waitv *waiters, unsigned n,
				  const struct timespec *deadline)
{
#ifdef SYS_futex_waitv
	long rc = syscall(SYS_futex_waitv, waiters, n, 0, deadline, CLOCK_MONOTONIC);

	return rc < 0 ? -errno : 0;
#else
	(void)waiters;
	(void)n;
	(void)deadline;
	return -ENOSYS;
#endif
}

#endif
