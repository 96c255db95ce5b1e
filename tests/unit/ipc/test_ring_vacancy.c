/* SPDX-License-Identifier: Apache-2.0 */
/* A rank group's vacant rank (ipc_ring_group_vacant) and its members told why (mark_orphan). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ipc/ring.h"
#include "ring_fixture.h"

#define WHY "pipeline \"p\", group \"g\": rank 1 of 2 has had no reader for 3.0 s"

/*
 * A broadcast reader and a rank group of two. While both ranks have a reader nothing is vacant;
 * rank 1 killed holding a batch: that batch and those published later wait for rank 1, which
 * the ring reports (the lowest vacant rank, and how many wait). Rank 0 marked as an orphan and
 * removed gets -ENOLINK and the daemon's text; the broadcast reader reads on.
 */
static void test_vacant_rank_then_orphan(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 64, 0);
	struct ipc_ring_client *bc = add(r, 0, NULL), *rk[2];
	struct ipc_ring_batch b, held;
	unsigned gr, id[2];
	uint32_t rank = 99, pending = 99;
	char why[2048];

	(void)state;
	assert_int_equal(ipc_ring_group_open(r, IPC_RING_RANK, 2, 0, 0, &gr), 0);
	assert_int_equal(ipc_ring_group_vacant(r, 0, &rank, &pending), -EINVAL); /* broadcast */
	assert_int_equal(ipc_ring_group_vacant(r, gr + 1, &rank, &pending), -ENOENT);
	for (int i = 0; i < 2; i++)
		rk[i] = add_to(r, gr, (uint32_t)i, &id[i]);
	for (int k = 0; k < 4; k++)
		put(r, 200);
	assert_int_equal(ipc_ring_group_vacant(r, gr, &rank, &pending), -ENOENT);
	take_release(rk[0], 0);
	take_release(rk[1], 1);
	held = take(rk[1], 3); /* killed holding it */
	(void)held;
	ipc_ring_collect(r, NULL);
	assert_int_equal(ipc_ring_group_vacant(r, gr, &rank, &pending), -ENOENT);
	assert_int_equal(ipc_ring_remove_reader(r, id[1]), 0);
	ipc_ring_client_detach(rk[1]);
	assert_int_equal(ipc_ring_group_vacant(r, gr, &rank, &pending), 0);
	assert_int_equal(rank, 1);
	assert_int_equal(pending, 1); /* seq 3, back in the group */
	put(r, 200);		      /* 4: rank 0's */
	put(r, 200);		      /* 5: waits for rank 1 */
	assert_int_equal(ipc_ring_group_vacant(r, gr, &rank, &pending), 0);
	assert_int_equal(rank, 1);
	assert_int_equal(pending, 2);

	/* marked, not yet removed: it reads on and has nothing to be told */
	assert_int_equal(ipc_ring_mark_orphan(r, id[0], WHY), 0);
	assert_int_equal(ipc_ring_mark_orphan(r, id[1], WHY), -ENOENT); /* gone */
	assert_int_equal(ipc_ring_client_why(rk[0], why, sizeof(why)), 0);
	assert_string_equal(why, "");
	take_release(rk[0], 2);
	assert_int_equal(ipc_ring_remove_reader(r, id[0]), 0);
	assert_int_equal(ipc_ring_client_next(rk[0], 0, &b), -ENOLINK);
	assert_int_equal(ipc_ring_client_next(rk[0], -1, &b), -ENOLINK); /* no wait for ever */
	assert_int_equal(ipc_ring_client_why(rk[0], why, sizeof(why)), strlen(WHY));
	assert_string_equal(why, WHY);
	assert_int_equal(ipc_ring_client_why(rk[0], why, 8), 7); /* cut, still a string */
	assert_string_equal(why, "pipelin");
	ipc_ring_client_detach(rk[0]);

	/* the broadcast reader is not the group's: every batch, in order */
	for (uint64_t s = 0; s < 6; s++)
		take_release(bc, s);
	ipc_ring_client_detach(bc);
	ipc_ring_destroy(r);
}

/*
 * Nothing vacant where nothing waits: a rank that left at the end of the stream (it took its
 * batches) leaves no batch behind; a rank that comes back takes its place, and the batches that
 * waited for it.
 */
static void test_no_vacancy_at_the_end_or_when_back(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_RANK, 1 << 20, 8, 2);
	struct ipc_ring_client *rk[2];
	struct ipc_ring_batch b;
	unsigned id[2];
	uint32_t rank, pending;

	(void)state;
	for (int i = 0; i < 2; i++)
		rk[i] = add(r, (uint32_t)i, &id[i]);
	put(r, 100);
	put(r, 100);
	/* rank 1 killed before it took its batch; it comes back (same count): no vacancy */
	assert_int_equal(ipc_ring_remove_reader(r, id[1]), 0);
	ipc_ring_client_detach(rk[1]);
	assert_int_equal(ipc_ring_group_vacant(r, 0, &rank, &pending), 0);
	assert_int_equal(rank, 1);
	assert_int_equal(pending, 1);
	rk[1] = add(r, 1, &id[1]);
	assert_int_equal(ipc_ring_group_vacant(r, 0, &rank, &pending), -ENOENT);
	take_release(rk[1], 1);
	take_release(rk[0], 0);
	put(r, 100);
	put(r, 100);
	take_release(rk[0], 2);
	take_release(rk[1], 3);
	assert_int_equal(ipc_ring_set_eos(r), 0);
	ipc_ring_collect(r, NULL);
	assert_int_equal(ipc_ring_client_next(rk[1], 0, &b), -ENODATA);
	/* rank 1 went first, at the end: nothing of its waits, so nothing is vacant */
	assert_int_equal(ipc_ring_remove_reader(r, id[1]), 0);
	ipc_ring_client_detach(rk[1]);
	assert_int_equal(ipc_ring_group_vacant(r, 0, &rank, &pending), -ENOENT);
	assert_int_equal(ipc_ring_client_next(rk[0], 0, &b), -ENODATA);
	ipc_ring_client_detach(rk[0]);
	ipc_ring_destroy(r);
}

/*
 * The message area's bounds: a text longer than it holds is cut (at 1023 bytes, in the smallest
 * block, 64 slots, and in a large one), no text says nothing, and a reader removed for another
 * reason (ECONNABORTED) has nothing to read there.
 */
static void test_orphan_message_bounds(void **state)
{
	static const uint32_t slots[] = { 2, 64, 128, 4096 };
	static char longtext[3000], why[4096];

	(void)state;
	memset(longtext, 'x', sizeof(longtext) - 1);
	for (size_t i = 0; i < sizeof(slots) / sizeof(slots[0]); i++) {
		struct ipc_ring *r = make_ring(IPC_RING_RANK, 1 << 20, slots[i], 3);
		struct ipc_ring_client *c[3];
		struct ipc_ring_batch b;
		unsigned id[3];

		for (int k = 0; k < 3; k++)
			c[k] = add(r, (uint32_t)k, &id[k]);
		assert_int_equal(ipc_ring_mark_orphan(r, id[0], longtext), 0);
		assert_int_equal(ipc_ring_mark_orphan(r, id[1], NULL), 0);
		for (int k = 0; k < 3; k++)
			assert_int_equal(ipc_ring_remove_reader(r, id[k]), 0);
		assert_int_equal(ipc_ring_client_next(c[0], 0, &b), -ENOLINK);
		assert_int_equal(ipc_ring_client_why(c[0], why, sizeof(why)), 1023);
		assert_int_equal(strspn(why, "x"), 1023);
		assert_int_equal(ipc_ring_client_next(c[1], 0, &b), -ENOLINK);
		assert_int_equal(ipc_ring_client_why(c[1], why, sizeof(why)), 0);
		assert_int_equal(ipc_ring_client_next(c[2], 0, &b), -ECONNABORTED);
		assert_int_equal(ipc_ring_client_why(c[2], why, sizeof(why)), 0);
		assert_int_equal(ipc_ring_client_why(c[0], why, 0), 0);
		for (int k = 0; k < 3; k++)
			ipc_ring_client_detach(c[k]);
		ipc_ring_destroy(r);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_vacant_rank_then_orphan),
		cmocka_unit_test(test_no_vacancy_at_the_end_or_when_back),
		cmocka_unit_test(test_orphan_message_bounds),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
