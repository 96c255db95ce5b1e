/* SPDX-License-Identifier: Apache-2.0 */
/* Multi-process stress of the batch ring: fork()ed readers check every byte; one is killed -9. */
#include "ipc/ring.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ipc/batch.h"

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif

#define MS		       1000000ll
#define N_BROADCAST	       100000u
#define N_SPLIT		       30000u
#define VICTIM_STOPS_RELEASING (N_BROADCAST / 3)

/* Child exit codes. */
enum {
	CX_OK = 0,
	CX_ATTACH = 10,
	CX_ORDER,
	CX_LEN,
	CX_BYTES,
	CX_VIEW,
	CX_NEXT,
	CX_RELEASE,
	CX_COUNT
};

static uint64_t blen(uint64_t seq)
{
	return sizeof(struct ipc_batch_hdr) + (seq * 2654435761u) % 1500;
}

static uint8_t pat(uint64_t seq, uint64_t i)
{
	return (uint8_t)(seq * 131u + i * 7u + (i >> 9) + (seq >> 8));
}

static void fill(uint8_t *p, uint64_t len, uint64_t seq)
{
	struct ipc_batch_hdr h = { .magic = IPC_BATCH_MAGIC,
				   .version = IPC_BATCH_VERSION,
				   .seq = seq,
				   .epoch = seq / 1000,
				   .total_bytes = len };

	memcpy(p, &h, sizeof(h));
	for (uint64_t i = sizeof(h); i < len; i++)
		p[i] = pat(seq, i);
}

static int check(const struct ipc_ring_batch *b)
{
	const uint8_t *p = b->mem;
	struct ipc_batch_view v;

	if (b->len != blen(b->seq) || b->epoch != b->seq / 1000)
		return CX_LEN;
	if (ipc_batch_view(b->mem, b->len, &v, NULL, 0) || v.seq != b->seq)
		return CX_VIEW;
	for (uint64_t i = sizeof(struct ipc_batch_hdr); i < b->len; i++)
		if (p[i] != pat(b->seq, i))
			return CX_BYTES;
	return CX_OK;
}

struct child_args {
	int data_fd, cb_fd;
	enum ipc_ring_mode mode;
	bool victim;	   /* stops releasing at VICTIM_STOPS_RELEASING and waits to be killed */
	uint64_t expect_n; /* broadcast: batches it must see */
	_Atomic uint8_t *seen; /* split: a count per seq, shared with the parent */
};

/* A reader process. Holds up to 3 batches and releases them out of order. */
static int child_main(const struct child_args *a)
{
	struct ipc_ring_client *c;
	struct ipc_ring_batch b;
	struct ipc_ring_batch held[3];
	uint64_t n_held = 0, expect = 0, got = 0;
	int rc;

	if (ipc_ring_client_attach(a->data_fd, a->cb_fd, &c, NULL, 0))
		return CX_ATTACH;
	while ((rc = ipc_ring_client_next(c, 60000 * MS, &b)) == 0) {
		int x;

		if (a->mode == IPC_RING_BROADCAST ? b.seq != expect : b.seq < expect)
			return CX_ORDER;
		x = check(&b);
		if (x)
			return x;
		if (a->seen)
			atomic_fetch_add(&a->seen[b.seq], 1);
		expect = b.seq + 1;
		got++;
		if (a->victim && b.seq >= VICTIM_STOPS_RELEASING)
			continue; /* hold it: the ring fills up until the parent kills us */
		held[n_held++] = b;
		if (n_held == 3) {
			/* Release the middle one, then the newest, then the oldest. */
			if (ipc_ring_client_release(c, &held[1]) ||
			    ipc_ring_client_release(c, &held[2]) ||
			    ipc_ring_client_release(c, &held[0]))
				return CX_RELEASE;
			n_held = 0;
		}
	}
	if (rc != -ENODATA)
		return CX_NEXT;
	for (uint64_t i = 0; i < n_held; i++)
		if (ipc_ring_client_release(c, &held[i]))
			return CX_RELEASE;
	if (a->expect_n && got != a->expect_n)
		return CX_COUNT;
	ipc_ring_client_detach(c);
	return CX_OK;
}

static pid_t spawn(struct ipc_ring *r, struct child_args *a, unsigned *ret_id)
{
	pid_t pid;

	assert_int_equal(ipc_ring_add_reader(r, 0, ret_id, &a->cb_fd), 0);
	a->data_fd = ipc_ring_data_fd(r);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child_main(a));
	return pid;
}

static struct ipc_ring *make(enum ipc_ring_mode mode)
{
	struct ipc_ring_opts o;
	struct ipc_ring *r = NULL;
	char msg[256] = "";

	ipc_ring_opts_init(&o);
	o.mode = mode;
	o.data_bytes = 256 << 10;
	o.n_slots = 64;
	o.split_depth = 4;
	if (ipc_ring_create(&o, &r, msg, sizeof(msg)))
		fail_msg("ipc_ring_create: %s", msg);
	return r;
}

/* Collect until nothing is held (split readers get the rest and the end on the way). */
static void drain(struct ipc_ring *r)
{
	for (;;) {
		uint64_t seq, holders, bad = 0;

		ipc_ring_collect(r, &bad);
		assert_int_equal(bad, 0);
		if (ipc_ring_oldest(r, &seq, &holders) == -ENOENT)
			return;
		ipc_ring_wait(r, 100 * MS);
	}
}

static void expect_exit(pid_t pid, int code)
{
	int st;

	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != code)
		fail_msg("reader %d: status 0x%x, expected exit %d", (int)pid, st, code);
}

/*
 * One producer, four reader processes in broadcast; the fourth stops releasing a third of the
 * way and is killed -9 once it alone holds the ring back; the parent removes it (releasing all
 * it held at once) and the others go on to the end, every byte checked.
 */
static void test_procs_broadcast_kill(void **state)
{
	struct ipc_ring *r = make(IPC_RING_BROADCAST);
	struct child_args a[4];
	pid_t pid[4];
	unsigned id[4];
	bool victim_alive = true;
	int kills = 0;

	for (int i = 0; i < 4; i++) {
		memset(&a[i], 0, sizeof(a[i]));
		a[i].mode = IPC_RING_BROADCAST;
		a[i].victim = i == 3;
		a[i].expect_n = i == 3 ? 0 : N_BROADCAST;
		pid[i] = spawn(r, &a[i], &id[i]);
	}
	for (uint64_t s = 0; s < N_BROADCAST; s++) {
		struct ipc_ring_extent e;
		int rc;

		while ((rc = ipc_ring_reserve(r, blen(s), &e)) == -EAGAIN) {
			uint64_t bad = 0, seq, holders;

			if (ipc_ring_collect(r, &bad) > 0)
				continue;
			assert_int_equal(bad, 0);
			if (victim_alive && ipc_ring_oldest(r, &seq, &holders) == 0 &&
			    holders == 1ull << id[3] && s > VICTIM_STOPS_RELEASING) {
				int st;

				assert_int_equal(kill(pid[3], SIGKILL), 0);
				assert_int_equal(waitpid(pid[3], &st, 0), pid[3]);
				assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
				assert_int_equal(ipc_ring_remove_reader(r, id[3]), 0);
				victim_alive = false;
				kills++;
				continue;
			}
			ipc_ring_wait(r, 100 * MS);
		}
		assert_int_equal(rc, 0);
		fill(e.mem, blen(s), s);
		assert_int_equal(ipc_ring_publish(r, &e, blen(s), s / 1000, 0, NULL), 0);
	}
	assert_int_equal(kills, 1);
	assert_int_equal(ipc_ring_set_eos(r), 0);
	drain(r);
	for (int i = 0; i < 3; i++)
		expect_exit(pid[i], CX_OK);
	ipc_ring_destroy(r);
}

/* Split across three reader processes: every batch reaches exactly one of them. */
static void test_procs_split(void **state)
{
	struct ipc_ring *r = make(IPC_RING_SPLIT);
	_Atomic uint8_t *seen =
		mmap(NULL, N_SPLIT, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct child_args a[3];
	pid_t pid[3];
	unsigned id[3];

	assert_true(seen != MAP_FAILED);
	for (int i = 0; i < 3; i++) {
		memset(&a[i], 0, sizeof(a[i]));
		a[i].mode = IPC_RING_SPLIT;
		a[i].seen = seen;
		pid[i] = spawn(r, &a[i], &id[i]);
	}
	for (uint64_t s = 0; s < N_SPLIT; s++) {
		struct ipc_ring_extent e;
		int rc;

		while ((rc = ipc_ring_reserve(r, blen(s), &e)) == -EAGAIN) {
			uint64_t bad = 0;

			if (ipc_ring_collect(r, &bad) == 0)
				ipc_ring_wait(r, 100 * MS);
			assert_int_equal(bad, 0);
		}
		assert_int_equal(rc, 0);
		fill(e.mem, blen(s), s);
		assert_int_equal(ipc_ring_publish(r, &e, blen(s), s / 1000, 0, NULL), 0);
	}
	assert_int_equal(ipc_ring_set_eos(r), 0);
	drain(r);
	for (int i = 0; i < 3; i++)
		expect_exit(pid[i], CX_OK);
	for (unsigned s = 0; s < N_SPLIT; s++)
		if (seen[s] != 1)
			fail_msg("seq %u was delivered %u times", s, (unsigned)seen[s]);
	munmap((void *)seen, N_SPLIT);
	ipc_ring_destroy(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_procs_broadcast_kill),
		cmocka_unit_test(test_procs_split),
	};

	if (UNDER_TSAN) {
		/* a "# skip:" line: tests/tap_cmocka.py gives meson the reason */
		printf("# skip: [sanitizer] fork()ed readers under ThreadSanitizer "
		       "(test_ring runs the threaded stress)\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
