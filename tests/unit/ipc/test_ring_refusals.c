/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for ipc/ring.c and ipc/ring_client.c: seals, corrupt headers, impossible shared values. */
#include "ipc/ring.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ipc/ring_internal.h"

#include "ring_fixture.h"

/* ---- refusals ---- */

static void test_data_fd_is_readonly(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 8, 0);
	int fd = ipc_ring_data_fd(r), rw;
	char path[64];
	void *m;

	errno = 0;
	assert_true(mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
	assert_true(ftruncate(fd, 0) < 0);
	assert_true(write(fd, "x", 1) < 0);
	/* A read-only mapping cannot be made writable. */
	m = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(m != MAP_FAILED);
	assert_int_equal(mprotect(m, PAGE, PROT_READ | PROT_WRITE), -1);
	munmap(m, PAGE);
	/* Even through a read-write descriptor of the same memfd, the seals hold. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	rw = open(path, O_RDWR);
	if (rw >= 0) {
		assert_true(mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0) ==
			    MAP_FAILED);
		assert_int_equal(errno, EPERM);
		assert_int_equal(ftruncate(rw, 0), -1);
		assert_int_equal(errno, EPERM);
		assert_int_equal(ftruncate(rw, 1 << 21), -1);
		assert_int_equal(write(rw, "x", 1), -1);
		assert_int_equal(fcntl(rw, F_ADD_SEALS, 0), -1); /* F_SEAL_SEAL */
		close(rw);
	}
	ipc_ring_destroy(r);
}

/* A sealed (seals) memfd holding a copy of r's data memfd with one edit. */
static int copy_ring(struct ipc_ring *r, int seals, void (*edit)(uint8_t *, void *), void *arg)
{
	struct stat st;
	uint8_t *src, *dst;
	int fd;

	assert_int_equal(fstat(ipc_ring_data_fd(r), &st), 0);
	src = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, ipc_ring_data_fd(r), 0);
	assert_true(src != MAP_FAILED);
	fd = memfd_create("copy", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, st.st_size), 0);
	dst = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(dst != MAP_FAILED);
	memcpy(dst, src, (size_t)st.st_size);
	if (edit)
		edit(dst, arg);
	munmap(dst, (size_t)st.st_size);
	munmap(src, (size_t)st.st_size);
	if (seals)
		assert_int_equal(fcntl(fd, F_ADD_SEALS, seals), 0);
	return fd;
}

static void test_unsealed_refused(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 8, 0);
	struct ipc_ring_client *c = NULL;
	char msg[256];
	unsigned id;
	int cb_fd, fd, p[2];

	assert_int_equal(ipc_ring_add_reader(r, 0, &id, &cb_fd), 0);
	fd = copy_ring(r, 0, NULL, NULL);
	assert_int_equal(ipc_ring_client_attach(fd, cb_fd, &c, msg, sizeof(msg)), -EPERM);
	assert_non_null(strstr(msg, "seals"));
	close(fd);
	fd = copy_ring(r, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL, NULL, NULL); /* writable */
	assert_int_equal(ipc_ring_client_attach(fd, cb_fd, &c, msg, sizeof(msg)), -EPERM);
	close(fd);
	fd = copy_ring(r, IPC_RING_DATA_SEALS, NULL, NULL); /* the same, sealed: fine */
	assert_int_equal(ipc_ring_client_attach(fd, cb_fd, &c, msg, sizeof(msg)), 0);
	ipc_ring_client_detach(c);
	close(fd);
	assert_int_equal(pipe(p), 0); /* not a memfd at all */
	assert_int_equal(ipc_ring_client_attach(p[0], cb_fd, &c, msg, sizeof(msg)), -EPERM);
	close(p[0]);
	close(p[1]);
	/* The control block must be sealed against shrinking too. */
	fd = memfd_create("cb", MFD_CLOEXEC);
	assert_int_equal(ftruncate(fd, (off_t)ipc_ring_cb_size(8)), 0);
	assert_int_equal(ipc_ring_client_attach(ipc_ring_data_fd(r), fd, &c, msg, sizeof(msg)),
			 -EPERM);
	close(fd);
	ipc_ring_destroy(r);
}

struct edit {
	size_t off;
	uint64_t val;
	unsigned width;
};

static void apply_edit(uint8_t *m, void *arg)
{
	const struct edit *e = arg;

	if (e->width > 8)
		memset(m + e->off, (int)(e->val & 0xff), e->width); /* a run of one byte */
	else
		memcpy(m + e->off, &e->val, e->width);
}

static void test_corrupt_header(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 8, 0);
	const struct ipc_ring_hdr *h = ipc_ring_hdr_(r);
	uint64_t so = h->schema_off;
	const struct edit edits[] = {
		{ offsetof(struct ipc_ring_hdr, magic), 0x12345678, 4 },
		{ offsetof(struct ipc_ring_hdr, version), 9, 2 },
		{ offsetof(struct ipc_ring_hdr, hdr_size), 64, 2 },
		{ offsetof(struct ipc_ring_hdr, mode), 3, 4 },
		{ offsetof(struct ipc_ring_hdr, rank_n), 3, 4 },
		{ offsetof(struct ipc_ring_hdr, total_size), 1ull << 40, 8 },
		{ offsetof(struct ipc_ring_hdr, n_slots), 6, 4 },
		{ offsetof(struct ipc_ring_hdr, n_slots), 1u << 20, 4 },
		{ offsetof(struct ipc_ring_hdr, n_schema), 100000, 4 },
		{ offsetof(struct ipc_ring_hdr, n_schema), 1000, 4 }, /* runs into the slots */
		{ offsetof(struct ipc_ring_hdr, schema_off), 8, 8 },
		{ offsetof(struct ipc_ring_hdr, slots_off), UINT64_MAX - 63, 8 },
		{ offsetof(struct ipc_ring_hdr, order_off), 64, 8 },
		{ offsetof(struct ipc_ring_hdr, order_off), 1ull << 50, 8 },
		{ offsetof(struct ipc_ring_hdr, data_off), 1ull << 62, 8 },
		{ offsetof(struct ipc_ring_hdr, data_off), 8192, 8 }, /* data ends past the end */
		{ offsetof(struct ipc_ring_hdr, data_size), UINT64_MAX & ~4095ull, 8 },
		{ offsetof(struct ipc_ring_hdr, data_size), 0, 8 },
		{ so + offsetof(struct ipc_ring_tensor, dtype), 99, 1 },
		{ so + offsetof(struct ipc_ring_tensor, rank), 9, 1 },
		{ so + offsetof(struct ipc_ring_tensor, ragged), 2, 1 },
		{ so, 0, 1 },			/* empty name */
		{ so, 'A', IPC_RING_NAME_MAX }, /* no NUL in the name */
	};
	unsigned id;
	int cb_fd;

	assert_int_equal(ipc_ring_add_reader(r, 0, &id, &cb_fd), 0);
	for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
		struct ipc_ring_client *c = NULL;
		char msg[256] = "";
		int fd = copy_ring(r, IPC_RING_DATA_SEALS, apply_edit, (void *)&edits[i]);
		int rc = ipc_ring_client_attach(fd, cb_fd, &c, msg, sizeof(msg));

		if (rc != -EBADMSG)
			fail_msg("edit %zu (offset %zu): %d, expected -EBADMSG", i, edits[i].off,
				 rc);
		assert_null(c);
		assert_true(strstr(msg, "ring") != NULL);
		close(fd);
	}
	ipc_ring_destroy(r);
}

/* The daemon-side check of a control block a reader scribbled on. */
static void test_cb_impossible_values(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 8, 0);
	struct ipc_ring_client *c[4];
	struct ipc_ring_cb *cb;
	struct ipc_ring_ent *rel;
	struct ipc_ring_extent e;
	uint64_t bad = 0;
	unsigned id[4];

	for (int i = 0; i < 4; i++)
		c[i] = add(r, 0, &id[i]);
	for (int i = 0; i < 4; i++)
		put(r, PAGE);
	for (int i = 0; i < 4; i++)
		take(c[i], 0);

	/* 0: rel_head far ahead of anything it could have released. */
	cb = ipc_ring_cb_(r, id[0]);
	atomic_store(&cb->rel_head, 1000);
	/* 1: releases a seq it never held (not published). */
	cb = ipc_ring_cb_(r, id[1]);
	rel = (struct ipc_ring_ent *)((uint8_t *)cb + cb->rel_off);
	atomic_store(&rel[0].seq, 77);
	atomic_store(&cb->rel_head, 1);
	/* 2: cursor past the head. */
	atomic_store(&ipc_ring_cb_(r, id[2])->cursor, 99);
	/* 3: releases seq 0 twice (the client library would refuse; a hostile one writes). */
	cb = ipc_ring_cb_(r, id[3]);
	rel = (struct ipc_ring_ent *)((uint8_t *)cb + cb->rel_off);
	atomic_store(&rel[0].seq, 0);
	atomic_store(&rel[1].seq, 0);
	atomic_store(&cb->rel_head, 2);

	ipc_ring_collect(r, &bad);
	assert_int_equal(bad, 0xfu);
	assert_non_null(strstr(ipc_ring_reader_problem(r, id[0]), "rel_head 1000"));
	assert_non_null(strstr(ipc_ring_reader_problem(r, id[1]), "seq 77"));
	assert_non_null(strstr(ipc_ring_reader_problem(r, id[2]), "cursor 99"));
	assert_non_null(strstr(ipc_ring_reader_problem(r, id[3]), "seq 0"));
	/* Until the daemon evicts them, they hold the ring back. */
	assert_int_equal(ipc_ring_reserve(r, 1 << 20, &e), -EAGAIN);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(ipc_ring_remove_reader(r, id[i]), 0);
		ipc_ring_client_detach(c[i]);
	}
	assert_int_equal(ipc_ring_collect(r, &bad), 0);
	assert_int_equal(bad, 0);
	assert_int_equal(ipc_ring_reserve(r, 1 << 20, &e), 0); /* everything was freed */
	ipc_ring_destroy(r);
}

/* The client side of a buggy daemon: impossible slots and control words are -EBADMSG. */
static void test_client_checks_shared_values(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 8, 0);
	struct ipc_ring_client *c = add(r, 0, NULL);
	struct ipc_ring_hdr *h = ipc_ring_hdr_(r);
	struct ipc_ring_slot *slots = (struct ipc_ring_slot *)((uint8_t *)h + h->slots_off);
	_Atomic uint32_t *order = (_Atomic uint32_t *)((uint8_t *)h + h->order_off);
	struct ipc_ring_batch b;
	struct ipc_ring_client *s;
	unsigned id;

	put(r, 100);
	put(r, 100);
	atomic_store(&slots[0].off, (1 << 20) - PAGE);
	atomic_store(&slots[0].len, PAGE + 1);
	assert_int_equal(ipc_ring_client_next(c, 0, &b), -EBADMSG);
	atomic_store(&slots[0].len, 0);
	assert_int_equal(ipc_ring_client_next(c, 0, &b), -EBADMSG);
	atomic_store(&slots[0].off, 100); /* not page-aligned */
	atomic_store(&slots[0].len, 100);
	assert_int_equal(ipc_ring_client_next(c, 0, &b), -EBADMSG);
	atomic_store(&slots[0].off, 0);
	atomic_store(&slots[0].seq, 8); /* another seq's slot */
	assert_int_equal(ipc_ring_client_next(c, 0, &b), -EBADMSG);
	atomic_store(&slots[0].seq, 0);
	atomic_store(&order[0], 4096); /* no such slot */
	assert_int_equal(ipc_ring_client_next(c, 0, &b), -EBADMSG);
	atomic_store(&order[0], 1); /* seq 1's slot */
	assert_int_equal(ipc_ring_client_next(c, 0, &b), -EBADMSG);
	atomic_store(&order[0], 0);
	take(c, 0);
	atomic_store(&h->head, 0); /* head behind the cursor */
	assert_int_equal(ipc_ring_client_next(c, 0, &b), -EBADMSG);
	atomic_store(&h->head, 2);
	atomic_store(&h->error, 1); /* not a negative errno: reported once nothing is left */
	take(c, 1);		    /* a batch published before the error still comes first */
	assert_int_equal(ipc_ring_client_next(c, 0, &b), -EIO);
	atomic_store(&h->error, 0);
	ipc_ring_client_detach(c);
	ipc_ring_destroy(r);

	/* Split: asg_head far ahead of the cursor. */
	r = make_ring(IPC_RING_SPLIT, 1 << 20, 8, 0);
	s = add(r, 0, &id);
	atomic_store(&ipc_ring_cb_(r, id)->asg_head, 1000);
	assert_int_equal(ipc_ring_client_next(s, 0, &b), -EBADMSG);
	ipc_ring_client_detach(s);
	ipc_ring_destroy(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_data_fd_is_readonly),
		cmocka_unit_test(test_unsealed_refused),
		cmocka_unit_test(test_corrupt_header),
		cmocka_unit_test(test_cb_impossible_values),
		cmocka_unit_test(test_client_checks_shared_values),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
