/* SPDX-License-Identifier: Apache-2.0 */
/* Consumer groups: one ring, one sequence, readers in broadcast, split and rank groups at once. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ipc/ring.h"
#include "ring_fixture.h"

#define N 16

/* Take whatever c has now (no wait), record each seq in seen[] and release it. */
static unsigned drain_now(struct ipc_ring *r, struct ipc_ring_client *c, uint8_t *seen,
			  uint64_t *last)
{
	struct ipc_ring_batch b;
	unsigned n = 0;

	while (ipc_ring_client_next(c, 0, &b) == 0) {
		assert_true(b.seq < N);
		assert_true(check(&b, b.seq));
		if (last) { /* a broadcast or rank reader sees its batches in seq order */
			assert_true(*last == UINT64_MAX || b.seq > *last);
			*last = b.seq;
		}
		seen[b.seq]++;
		assert_int_equal(ipc_ring_client_release(c, &b), 0);
		ipc_ring_collect(r, NULL);
		n++;
	}
	return n;
}

/*
 * Two broadcast readers (group 0), a split group of two and a rank group of two on one ring:
 * each broadcast reader gets every batch, the split group each batch once between its members,
 * rank member k the batches k mod 2; once all released, nothing is held or pending.
 */
static void test_groups_mixed(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 64, 0);
	struct ipc_ring_client *bc[2], *sp[2], *rk[2];
	uint8_t seen_b[2][N] = { { 0 } }, seen_s[N] = { 0 }, seen_r[2][N] = { { 0 } };
	uint64_t last_b[2] = { UINT64_MAX, UINT64_MAX }, last_r[2] = { UINT64_MAX, UINT64_MAX };
	unsigned gs, gr, got_s[2] = { 0 };
	uint64_t seq, holders;

	assert_int_equal(ipc_ring_group_open(r, IPC_RING_SPLIT, 0, 2, 0, &gs), 0);
	assert_int_equal(ipc_ring_group_open(r, IPC_RING_RANK, 2, 0, 0, &gr), 0);
	assert_int_not_equal(gs, gr);
	assert_int_equal(ipc_ring_group_mode(r, gs), IPC_RING_SPLIT);
	assert_int_equal(ipc_ring_group_mode(r, gr), IPC_RING_RANK);
	assert_int_equal(ipc_ring_group_mode(r, 0), IPC_RING_BROADCAST);
	for (int i = 0; i < 2; i++) {
		bc[i] = add(r, 0, NULL);
		sp[i] = add_to(r, gs, 0, NULL);
		rk[i] = add_to(r, gr, (uint32_t)i, NULL);
		assert_int_equal(ipc_ring_client_mode(bc[i]), IPC_RING_BROADCAST);
		assert_int_equal(ipc_ring_client_mode(sp[i]), IPC_RING_SPLIT);
		assert_int_equal(ipc_ring_client_mode(rk[i]), IPC_RING_RANK);
	}
	for (int k = 0; k < N; k++) {
		put(r, 300 + (uint64_t)k);
		if (k % 3 == 2) { /* the readers take at their own pace */
			drain_now(r, bc[0], seen_b[0], &last_b[0]);
			got_s[k % 2] += drain_now(r, sp[k % 2], seen_s, NULL);
			drain_now(r, rk[1], seen_r[1], &last_r[1]);
		}
	}
	assert_int_equal(ipc_ring_set_eos(r), 0);
	for (int i = 0; i < 2; i++) {
		drain_now(r, bc[i], seen_b[i], &last_b[i]);
		got_s[i] += drain_now(r, sp[i], seen_s, NULL);
		drain_now(r, rk[i], seen_r[i], &last_r[i]);
	}
	for (int i = 0; i < 2; i++) { /* split readers that took turns: drain what is left */
		got_s[i] += drain_now(r, sp[i], seen_s, NULL);
		got_s[1 - i] += drain_now(r, sp[1 - i], seen_s, NULL);
	}
	for (int s = 0; s < N; s++) {
		assert_int_equal(seen_b[0][s], 1);
		assert_int_equal(seen_b[1][s], 1);
		assert_int_equal(seen_s[s], 1);
		assert_int_equal(seen_r[s % 2][s], 1);
		assert_int_equal(seen_r[1 - s % 2][s], 0);
	}
	assert_int_equal(got_s[0] + got_s[1], N);
	assert_true(got_s[0] > 0 && got_s[1] > 0);
	struct ipc_ring_batch b;
	for (int i = 0; i < 2; i++) {
		assert_int_equal(ipc_ring_client_next(bc[i], 0, &b), -ENODATA);
		assert_int_equal(ipc_ring_client_next(sp[i], 0, &b), -ENODATA);
		assert_int_equal(ipc_ring_client_next(rk[i], 0, &b), -ENODATA);
	}
	ipc_ring_collect(r, NULL);
	assert_int_equal(ipc_ring_oldest(r, &seq, &holders), -ENOENT);
	for (int i = 0; i < 2; i++) {
		ipc_ring_client_detach(bc[i]);
		ipc_ring_client_detach(sp[i]);
		ipc_ring_client_detach(rk[i]);
	}
	ipc_ring_destroy(r);
}

/*
 * A split group holds what it has not handed out, as a split ring does: with every broadcast
 * reader done, the ring is full until the group's member takes the batches, or the group is
 * closed (its pending batches given up).
 */
static void test_group_holds_until_handed(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 4, 0);
	struct ipc_ring_client *bc = add(r, 0, NULL), *m;
	struct ipc_ring_extent e;
	uint64_t seq, holders;
	unsigned g, id;

	assert_int_equal(ipc_ring_group_open(r, IPC_RING_SPLIT, 0, 2, 0, &g), 0);
	for (int k = 0; k < 4; k++)
		put(r, 100);
	for (int k = 0; k < 4; k++)
		take_release(bc, (uint64_t)k);
	ipc_ring_collect(r, NULL);
	assert_int_equal(ipc_ring_reserve(r, 100, &e), -EAGAIN); /* pending in the group */
	assert_int_equal(ipc_ring_oldest(r, &seq, &holders), 0);
	assert_int_equal(seq, 0);
	assert_int_equal(holders, 0);
	m = add_to(r, g, 0, &id);
	assert_int_equal(ipc_ring_group_close(r, g), -EBUSY);
	take_release(m, 0);
	ipc_ring_collect(r, NULL);
	assert_int_equal(ipc_ring_reserve(r, 100, &e), 0); /* seq 0's slot */
	assert_int_equal(ipc_ring_cancel(r, &e), 0);
	assert_int_equal(ipc_ring_remove_reader(r, id), 0);
	assert_int_equal(ipc_ring_group_close(r, g), 0);
	assert_int_equal(ipc_ring_group_close(r, g), -ENOENT);
	struct ipc_ring_extent all[4]; /* 1 .. 3 given up with the group: every slot is free */
	for (int k = 0; k < 4; k++)
		assert_int_equal(ipc_ring_reserve(r, 100, &all[k]), 0);
	for (int k = 0; k < 4; k++)
		assert_int_equal(ipc_ring_cancel(r, &all[k]), 0);
	ipc_ring_client_detach(m);
	ipc_ring_client_detach(bc);
	ipc_ring_destroy(r);
}

/*
 * A member of a split group removed while holding a batch it took: the batch goes to the
 * group's other member; the broadcast reader and the other group are not affected.
 */
static void test_group_redelivery(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 8, 0);
	struct ipc_ring_client *bc = add(r, 0, NULL), *a, *b, *other;
	struct ipc_ring_batch x;
	unsigned g1, g2, ida;

	assert_int_equal(ipc_ring_group_open(r, IPC_RING_SPLIT, 0, 1, 0, &g1), 0);
	assert_int_equal(ipc_ring_group_open(r, IPC_RING_SPLIT, 0, 2, 0, &g2), 0);
	a = add_to(r, g1, 0, &ida);
	b = add_to(r, g1, 0, NULL);
	other = add_to(r, g2, 0, NULL);
	put(r, 100); /* g1: a */
	put(r, 100); /* g1: b (split_depth 1) */
	assert_int_equal(ipc_ring_client_next(a, 0, &x), 0);
	assert_int_equal(x.seq, 0);
	assert_int_equal(ipc_ring_remove_reader(r, ida), 0); /* killed holding 0 */
	assert_int_equal(ipc_ring_client_next(a, 0, &x), -ECONNABORTED);
	assert_int_equal(ipc_ring_client_next(b, 0, &x), 0);
	assert_int_equal(x.seq, 1);
	assert_false(x.flags & IPC_RING_BATCH_REDELIVERED); /* handed to b in the first place */
	assert_int_equal(ipc_ring_client_release(b, &x), 0);
	ipc_ring_collect(r, NULL);
	/* given again, to the other member, marked: a took it and may have used it */
	assert_int_equal(ipc_ring_client_next(b, 0, &x), 0);
	assert_int_equal(x.seq, 0);
	assert_true(x.flags & IPC_RING_BATCH_REDELIVERED);
	assert_true(check(&x, 0));
	assert_int_equal(ipc_ring_client_release(b, &x), 0);
	ipc_ring_collect(r, NULL);
	/* a member removed with a batch handed to it but not taken: given again, unmarked */
	put(r, 100);
	put(r, 100);
	{
		unsigned idc;
		struct ipc_ring_client *c2 = add_to(r, g1, 0, &idc);

		ipc_ring_collect(r, NULL);
		assert_int_equal(ipc_ring_remove_reader(r, idc), 0);
		ipc_ring_client_detach(c2);
	}
	for (uint64_t s = 2; s < 4; s++) {
		assert_int_equal(ipc_ring_client_next(b, 0, &x), 0);
		assert_int_equal(x.seq, s);
		assert_false(x.flags & IPC_RING_BATCH_REDELIVERED);
		assert_int_equal(ipc_ring_client_release(b, &x), 0);
		ipc_ring_collect(r, NULL);
	}
	take_release(other, 0);
	take_release(other, 1);
	take_release(bc, 0);
	take_release(bc, 1);
	ipc_ring_collect(r, NULL);
	for (uint64_t s = 2; s < 4; s++) {
		take_release(other, s);
		take_release(bc, s);
	}
	ipc_ring_client_detach(a);
	ipc_ring_client_detach(b);
	ipc_ring_client_detach(other);
	ipc_ring_client_detach(bc);
	ipc_ring_destroy(r);
}

/*
 * Leases: a split member that keeps a batch (taken or only handed to it) past the lease is
 * marked, with the batch and the lease in its problem; removed, its batch goes to the other
 * member marked re-delivered. A member that moves on, a broadcast reader holding a batch as
 * long, and a lease of 0 are left alone.
 */
static void test_group_lease(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 8, 0);
	struct ipc_ring_client *bc = add(r, 0, NULL), *a, *b;
	struct ipc_ring_batch x, y;
	unsigned g, ida, idb, idbc = 0;
	uint64_t bad = 0;
	const uint64_t s = 1000000000, lease = 10 * s;

	assert_int_equal(ipc_ring_group_open(r, IPC_RING_SPLIT, 0, 1, 0, &g), 0);
	a = add_to(r, g, 0, &ida);
	b = add_to(r, g, 0, &idb);
	for (unsigned i = 0; i < IPC_RING_MAX_READERS; i++)
		if (i != ida && i != idb && ipc_ring_reader_problem(r, i))
			idbc = i;
	put(r, 100); /* a */
	put(r, 100); /* b */
	assert_int_equal(ipc_ring_client_next(a, 0, &x), 0);
	assert_int_equal(ipc_ring_client_next(bc, 0, &y), 0); /* held as long: broadcast */
	assert_int_equal(ipc_ring_lease_check(r, 1 * s, lease, &bad), 0);	  /* leases start */
	assert_int_equal(ipc_ring_lease_check(r, 30 * s, 0, &bad), 0);		  /* no lease */
	assert_int_equal(ipc_ring_lease_check(r, 1 * s + lease, lease, &bad), 0); /* not past */
	/* b takes and releases its batch: it moved on */
	take_release(b, 1);
	ipc_ring_collect(r, NULL);
	assert_int_equal(ipc_ring_lease_check(r, 2 * s + lease, lease, &bad), 1);
	assert_int_equal(bad, 1ull << ida);
	assert_non_null(strstr(ipc_ring_reader_problem(r, ida), "held batch 0 for 11 s"));
	assert_non_null(strstr(ipc_ring_reader_problem(r, ida), "lease of 10 s"));
	assert_string_equal(ipc_ring_reader_problem(r, idb), "");
	assert_string_equal(ipc_ring_reader_problem(r, idbc), "");
	assert_int_equal(ipc_ring_remove_reader(r, ida), 0);
	assert_int_equal(ipc_ring_client_next(a, 0, &x), -ETIME); /* not -ECONNABORTED: why */
	assert_int_equal(ipc_ring_client_next(b, 0, &x), 0);
	assert_int_equal(x.seq, 0);
	assert_true(x.flags & IPC_RING_BATCH_REDELIVERED);
	assert_int_equal(ipc_ring_client_release(b, &x), 0);
	assert_int_equal(ipc_ring_client_release(bc, &y), 0);
	take_release(bc, 1);
	ipc_ring_collect(r, NULL);
	/* a batch handed to b and never taken counts too (b does not call next: not polling) */
	put(r, 100);
	ipc_ring_collect(r, NULL);
	assert_int_equal(ipc_ring_lease_check(r, 100 * s, lease, &bad), 0);
	assert_int_equal(ipc_ring_lease_check(r, 111 * s, lease, &bad), 1);
	assert_int_equal(bad, 1ull << idb);
	ipc_ring_client_detach(a);
	ipc_ring_client_detach(b);
	ipc_ring_client_detach(bc);
	ipc_ring_destroy(r);
}

/*
 * A group opened late starts at `from` when the ring still holds it, at low when not: its
 * split member gets batches 2.. (from 2), a broadcast group's member the same; a group from 0
 * after seq 0 and 1 were reclaimed starts at low.
 */
static void test_group_from(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 4, 0);
	struct ipc_ring_client *bc = add(r, 0, NULL), *s, *b, *late;
	struct ipc_ring_batch x;
	unsigned gs, gb, gl;

	for (int k = 0; k < 4; k++)
		put(r, 100);
	assert_int_equal(ipc_ring_group_open(r, IPC_RING_SPLIT, 0, 2, 2, &gs), 0);
	assert_int_equal(ipc_ring_group_open(r, IPC_RING_BROADCAST, 0, 0, 2, &gb), 0);
	s = add_to(r, gs, 0, NULL);
	b = add_to(r, gb, 0, NULL);
	for (uint64_t k = 0; k < 4; k++)
		take_release(bc, k);
	for (uint64_t k = 2; k < 4; k++) {
		take_release(s, k);
		take_release(b, k);
	}
	ipc_ring_collect(r, NULL);
	put(r, 100); /* reclaims seq 0: low is 1 */
	put(r, 100); /* and seq 1 */
	assert_int_equal(ipc_ring_group_open(r, IPC_RING_SPLIT, 0, 2, 0, &gl), 0);
	late = add_to(r, gl, 0, NULL);
	for (uint64_t k = 2; k < 6; k++) {
		take_release(late, k);
		ipc_ring_collect(r, NULL);
	}
	for (uint64_t k = 4; k < 6; k++) {
		take_release(bc, k);
		take_release(s, k);
		take_release(b, k);
	}
	assert_int_equal(ipc_ring_client_next(s, 0, &x), -EAGAIN);
	ipc_ring_client_detach(late);
	ipc_ring_client_detach(b);
	ipc_ring_client_detach(s);
	ipc_ring_client_detach(bc);
	ipc_ring_destroy(r);
}

/* Refusals: bad groups, unknown ids, a rank taken in its own group but not in another. */
static void test_group_refusals(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_RANK, 1 << 20, 8, 2);
	struct ipc_ring_client *x, *y;
	unsigned g, id, gids[IPC_RING_MAX_GROUPS];
	int fd, n = 0;

	assert_int_equal(ipc_ring_group_open(r, (enum ipc_ring_mode)7, 0, 2, 0, &g), -EINVAL);
	assert_int_equal(ipc_ring_group_open(r, IPC_RING_RANK, 0, 0, 0, &g), -EINVAL);
	assert_int_equal(ipc_ring_group_open(r, IPC_RING_RANK, IPC_RING_MAX_READERS + 1, 0, 0, &g),
			 -EINVAL);
	assert_int_equal(ipc_ring_group_open(r, IPC_RING_SPLIT, 0, 0, 0, &g), -EINVAL);
	assert_int_equal(ipc_ring_group_open(r, IPC_RING_SPLIT, 0, 9, 0, &g), -EINVAL);
	assert_int_equal(ipc_ring_group_close(r, IPC_RING_MAX_GROUPS), -ENOENT);
	assert_int_equal(ipc_ring_add_reader_to(r, 5, 0, &id, &fd), -ENOENT);
	assert_int_equal(ipc_ring_group_mode(r, 5), -ENOENT);
	assert_int_equal(ipc_ring_group_open(r, IPC_RING_RANK, 3, 0, 0, &g), 0);
	x = add(r, 1, NULL);	   /* group 0, rank 1 of 2 */
	y = add_to(r, g, 1, NULL); /* group g, rank 1 of 3: another group */
	assert_int_equal(ipc_ring_add_reader(r, 1, &id, &fd), -EBUSY);
	assert_int_equal(ipc_ring_group_close(r, 0), -EBUSY); /* x is in it */
	assert_int_equal(ipc_ring_add_reader_to(r, g, 1, &id, &fd), -EBUSY);
	assert_int_equal(ipc_ring_add_reader_to(r, g, 3, &id, &fd), -EINVAL);
	assert_int_equal(ipc_ring_set_max_lag(r, ipc_ring_client_id(y), 4), -EINVAL);
	while (ipc_ring_group_open(r, IPC_RING_BROADCAST, 0, 0, 0, &gids[n]) == 0)
		n++;
	assert_int_equal(n, IPC_RING_MAX_GROUPS - 2); /* 0 and g were open */
	assert_int_equal(ipc_ring_group_open(r, IPC_RING_BROADCAST, 0, 0, 0, &id), -ENOSPC);
	for (int i = 0; i < n; i++)
		assert_int_equal(ipc_ring_group_close(r, gids[i]), 0);
	/* group 0 closes too once empty; nobody is added to it then */
	assert_int_equal(ipc_ring_remove_reader(r, ipc_ring_client_id(x)), 0);
	assert_int_equal(ipc_ring_group_close(r, 0), 0);
	assert_int_equal(ipc_ring_add_reader(r, 0, &id, &fd), -ENOENT);
	assert_int_equal(ipc_ring_group_mode(r, 0), -ENOENT);
	ipc_ring_client_detach(x);
	ipc_ring_client_detach(y);
	ipc_ring_destroy(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_groups_mixed),
		cmocka_unit_test(test_group_holds_until_handed),
		cmocka_unit_test(test_group_redelivery),
		cmocka_unit_test(test_group_lease),
		cmocka_unit_test(test_group_from),
		cmocka_unit_test(test_group_refusals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
