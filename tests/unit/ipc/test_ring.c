/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for ipc/ring.c and ipc/ring_client.c in one process: the protocol and the three modes. */
#include "ipc/ring.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ipc/ring_internal.h"

#include "ring_fixture.h"

/* ---- basics ---- */

static void test_create_attach(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 16, 0);
	struct ipc_ring_client *c = add(r, 0, NULL);
	const struct ipc_ring_tensor *t;
	struct ipc_ring_batch b;
	size_t n;
	uint64_t len;
	int seals = fcntl(ipc_ring_data_fd(r), F_GET_SEALS);

	assert_int_equal(seals & IPC_RING_DATA_SEALS, IPC_RING_DATA_SEALS);
	t = ipc_ring_client_schema(c, &n);
	assert_int_equal(n, 2);
	assert_string_equal(t[0].name, "image");
	assert_int_equal(t[1].ragged, 1);
	assert_int_equal(t[0].shape[3], 3);
	assert_non_null(ipc_ring_client_data(c, &len));
	assert_int_equal(len, 1 << 20);
	assert_int_equal(ipc_ring_client_mode(c), IPC_RING_BROADCAST);
	assert_int_equal(ipc_ring_client_next(c, 0, &b), -EAGAIN);
	assert_int_equal(ipc_ring_client_next(c, 5 * MS, &b), -ETIMEDOUT);
	ipc_ring_client_detach(c);
	ipc_ring_destroy(r);
}

static void test_bad_opts(void **state)
{
	struct ipc_ring_opts o;
	struct ipc_ring_tensor bad = test_schema[0];
	struct ipc_ring *r = NULL;
	char msg[256];

	ipc_ring_opts_init(&o);
	o.n_slots = 12;
	assert_int_equal(ipc_ring_create(&o, &r, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "n_slots"));
	ipc_ring_opts_init(&o);
	o.mode = IPC_RING_RANK;
	assert_int_equal(ipc_ring_create(&o, &r, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "rank_n"));
	ipc_ring_opts_init(&o);
	bad.dtype = 200;
	o.schema = &bad;
	o.n_schema = 1;
	assert_int_equal(ipc_ring_create(&o, &r, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "schema[0].dtype"));
	memset(bad.name, 'x', sizeof(bad.name));
	bad.dtype = 0;
	assert_int_equal(ipc_ring_create(&o, &r, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "schema[0].name"));
	assert_null(r);
}

static void test_publish_next_release(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 16, 0);
	struct ipc_ring_client *c = add(r, 0, NULL);
	struct ipc_ring_info info;
	struct ipc_ring_batch b0, b1, fake;
	uint64_t bad = 1, lag;

	for (int i = 0; i < 3; i++)
		assert_int_equal(put(r, 100 + 5000 * (uint64_t)i), (uint64_t)i);
	assert_int_equal(ipc_ring_collect(r, &bad), 0);
	assert_int_equal(bad, 0);
	assert_int_equal(ipc_ring_reader_lag(r, 0, &lag), 0);
	assert_int_equal(lag, 3);
	b0 = take(c, 0);
	b1 = take(c, 1);
	/* Releases in any order. */
	assert_int_equal(ipc_ring_client_release(c, &b1), 0);
	assert_int_equal(ipc_ring_client_release(c, &b1), -EINVAL); /* twice */
	fake = b1;
	fake.seq = 2;
	assert_int_equal(ipc_ring_client_release(c, &fake), -EINVAL); /* not taken */
	fake.seq = UINT64_MAX;
	assert_int_equal(ipc_ring_client_release(c, &fake), -EINVAL);
	fake = b0;
	fake.slot_ = 1000;
	assert_int_equal(ipc_ring_client_release(c, &fake), -EINVAL);
	assert_int_equal(ipc_ring_client_release(c, &b0), 0);
	take_release(c, 2);
	assert_int_equal(ipc_ring_collect(r, &bad), 3);
	assert_int_equal(bad, 0);
	assert_int_equal(ipc_ring_reader_lag(r, 0, &lag), 0);
	assert_int_equal(lag, 0);
	ipc_ring_get_info(r, &info);
	assert_int_equal(info.head, 3);
	assert_int_equal(info.low, 0); /* kept until the space is needed */
	assert_int_equal(info.n_free_slots, 13);
	assert_int_equal(info.n_readers, 1);
	ipc_ring_client_detach(c);
	ipc_ring_destroy(r);
}

static void test_wrap_slots_and_data(void **state)
{
	/* 4 slots, 5 pages: sizes of 1..3 pages force wrap padding and slot reuse. */
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 5 * PAGE, 4, 0);
	struct ipc_ring_client *c = add(r, 0, NULL);
	uint64_t next_take = 0, seen_wrap = 0;

	for (uint64_t seq = 0; seq < 300; seq++) {
		uint64_t len = 64 + (seq * 2654435761u) % (3 * PAGE - 64);
		struct ipc_ring_extent e;
		int rc;

		while ((rc = ipc_ring_reserve(r, len, &e)) == -EAGAIN) {
			take_release(c, next_take++);
			ipc_ring_collect(r, NULL);
		}
		assert_int_equal(rc, 0);
		assert_true(e.off + e.cap <= 5 * PAGE);
		seen_wrap += e.off == 0 && seq > 0;
		fill(e.mem, len, seq);
		assert_int_equal(ipc_ring_publish(r, &e, len, 7, 0, NULL), 0);
	}
	while (next_take < 300)
		take_release(c, next_take++);
	assert_true(seen_wrap > 10);
	ipc_ring_client_detach(c);
	ipc_ring_destroy(r);
}

static void test_full(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 4 * PAGE, 8, 0);
	struct ipc_ring_client *c = add(r, 0, NULL);
	struct ipc_ring_extent e, e2;
	struct ipc_ring_batch b;
	uint64_t seq, holders;

	assert_int_equal(ipc_ring_reserve(r, 4 * PAGE + 1, &e), -E2BIG);
	assert_int_equal(ipc_ring_reserve(r, 0, &e), -EINVAL);
	for (int i = 0; i < 4; i++)
		put(r, PAGE);
	assert_int_equal(ipc_ring_reserve(r, 1, &e), -EAGAIN);
	assert_int_equal(ipc_ring_oldest(r, &seq, &holders), 0);
	assert_int_equal(seq, 0);
	assert_int_equal(holders, 1);
	b = take(c, 0);
	assert_int_equal(ipc_ring_reserve(r, 1, &e), -EAGAIN); /* taken, not released */
	assert_int_equal(ipc_ring_client_release(c, &b), 0);
	assert_int_equal(ipc_ring_reserve(r, 1, &e), -EAGAIN); /* not collected */
	assert_int_equal(ipc_ring_collect(r, NULL), 1);
	assert_int_equal(ipc_ring_reserve(r, 1, &e), 0);
	assert_int_equal(e.off, 0); /* the released extent, reused */
	assert_int_equal(ipc_ring_oldest(r, &seq, &holders), 0);
	assert_int_equal(seq, 1);
	/* Out-of-order publish and cancel. */
	assert_int_equal(ipc_ring_publish(r, &e, PAGE + 1, 0, 0, NULL), -EINVAL); /* too long */
	assert_int_equal(ipc_ring_cancel(r, &e), 0);
	assert_int_equal(ipc_ring_cancel(r, &e), -EINVAL);
	assert_int_equal(ipc_ring_reserve(r, 1, &e), 0);
	assert_int_equal(e.off, 0); /* the cancelled space came back */
	take_release(c, 1);
	ipc_ring_collect(r, NULL);
	assert_int_equal(ipc_ring_reserve(r, 1, &e2), 0);
	assert_int_equal(e2.off, PAGE);		     /* seq 1's extent */
	assert_int_equal(ipc_ring_cancel(r, &e), 0); /* not the newest: any order */
	assert_int_equal(ipc_ring_publish(r, &e, 100, 0, 0, NULL), -EINVAL); /* cancelled */
	fill(e2.mem, 100, 4);
	assert_int_equal(ipc_ring_publish(r, &e2, 100, 7, 0, &seq), 0);
	assert_int_equal(seq, 4);
	take(c, 2);
	take(c, 3);
	take(c, 4);
	ipc_ring_client_detach(c);
	ipc_ring_destroy(r);

	/* Slots run out before bytes do. */
	r = make_ring(IPC_RING_BROADCAST, 1 << 20, 4, 0);
	c = add(r, 0, NULL);
	for (int i = 0; i < 4; i++)
		put(r, 100);
	assert_int_equal(ipc_ring_reserve(r, 100, &e), -EAGAIN);
	take_release(c, 0);
	ipc_ring_collect(r, NULL);
	assert_int_equal(put(r, 100), 4);
	ipc_ring_client_detach(c);
	ipc_ring_destroy(r);
}

/* ---- modes ---- */

static void test_broadcast_three(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 3 * PAGE, 4, 0);
	struct ipc_ring_client *c[3];
	struct ipc_ring_extent e;
	struct ipc_ring_batch b[3][3];
	uint64_t seq, holders;

	for (int i = 0; i < 3; i++)
		c[i] = add(r, 0, NULL);
	for (int i = 0; i < 3; i++)
		put(r, PAGE);
	for (int i = 0; i < 3; i++)
		for (uint64_t s = 0; s < 3; s++)
			b[i][s] = take(c[i], s);
	assert_int_equal(ipc_ring_reserve(r, PAGE, &e), -EAGAIN);
	assert_int_equal(ipc_ring_client_release(c[0], &b[0][0]), 0);
	assert_int_equal(ipc_ring_client_release(c[2], &b[2][0]), 0);
	ipc_ring_collect(r, NULL);
	assert_int_equal(ipc_ring_reserve(r, PAGE, &e), -EAGAIN); /* c[1] holds seq 0 */
	assert_int_equal(ipc_ring_oldest(r, &seq, &holders), 0);
	assert_int_equal(seq, 0);
	assert_int_equal(holders, 1u << 1);
	assert_int_equal(ipc_ring_client_release(c[1], &b[1][0]), 0);
	ipc_ring_collect(r, NULL);
	assert_int_equal(ipc_ring_reserve(r, PAGE, &e), 0);
	assert_int_equal(e.off, 0);
	fill(e.mem, PAGE, 3);
	assert_int_equal(ipc_ring_publish(r, &e, PAGE, 7, 0, NULL), 0);
	for (int i = 0; i < 3; i++)
		take(c[i], 3);
	for (int i = 0; i < 3; i++)
		ipc_ring_client_detach(c[i]);
	ipc_ring_destroy(r);
}

static void test_split(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_SPLIT, 1 << 20, 32, 0);
	struct ipc_ring_client *c[3];
	struct ipc_ring_batch b;
	uint8_t seen[24] = { 0 };
	unsigned got[3] = { 0 };
	uint64_t lag;

	for (int i = 0; i < 3; i++)
		c[i] = add(r, 0, NULL);
	for (int i = 0; i < 24; i++)
		put(r, 300);
	/* split_depth 2: each reader has two, the rest wait for room. */
	for (int i = 0; i < 3; i++) {
		assert_int_equal(ipc_ring_reader_lag(r, (unsigned)i, &lag), 0);
		assert_int_equal(lag, 2);
	}
	/* Reader 0 is fast: it gets more, first come first served. */
	for (int round = 0; round < 30; round++) {
		int i = round % 4 == 3 ? round / 4 % 3 : 0;

		if (ipc_ring_client_next(c[i], 0, &b) == 0) {
			assert_true(b.seq < 24 && !seen[b.seq]);
			assert_true(check(&b, b.seq));
			seen[b.seq] = 1;
			got[i]++;
			assert_int_equal(ipc_ring_client_release(c[i], &b), 0);
		}
		ipc_ring_collect(r, NULL);
	}
	for (int i = 0; i < 3; i++)
		while (ipc_ring_client_next(c[i], 0, &b) == 0) {
			assert_true(b.seq < 24 && !seen[b.seq]);
			seen[b.seq] = 1;
			got[i]++;
			assert_int_equal(ipc_ring_client_release(c[i], &b), 0);
			ipc_ring_collect(r, NULL);
		}
	for (int s = 0; s < 24; s++)
		assert_int_equal(seen[s], 1);
	assert_true(got[0] > got[1] && got[0] > got[2]);
	assert_int_equal(got[0] + got[1] + got[2], 24);
	for (int i = 0; i < 3; i++)
		ipc_ring_client_detach(c[i]);
	ipc_ring_destroy(r);
}

/*
 * Regression: with slots and space tied to seq order, a split reader that held one batch while
 * waiting for its next stalled the ring once the others had consumed n_slots - 1 batches.
 */
static void test_split_holder_does_not_stall(void **state)
{
	struct ipc_ring_opts o;
	struct ipc_ring *r = NULL;
	struct ipc_ring_client *a, *b;
	struct ipc_ring_batch held, x;
	uint64_t expect = 1;

	ipc_ring_opts_init(&o);
	o.mode = IPC_RING_SPLIT;
	o.data_bytes = 4 * PAGE;
	o.n_slots = 4;
	o.split_depth = 1;
	assert_int_equal(ipc_ring_create(&o, &r, NULL, 0), 0);
	a = add(r, 0, NULL);
	b = add(r, 0, NULL);
	put(r, PAGE); /* 0: a */
	put(r, PAGE); /* 1: b */
	held = take(a, 0);
	put(r, PAGE); /* 2: a (room again), not taken */
	put(r, PAGE); /* 3: pending */
	for (int i = 0; i < 40; i++) {
		x = take(b, expect);
		assert_int_equal(ipc_ring_client_release(b, &x), 0);
		ipc_ring_collect(r, NULL);
		put(r, PAGE);
		expect = expect == 1 ? 3 : expect + 1;
	}
	x = take(a, 2);
	assert_int_equal(ipc_ring_client_release(a, &held), 0);
	assert_int_equal(ipc_ring_client_release(a, &x), 0);
	ipc_ring_client_detach(a);
	ipc_ring_client_detach(b);
	ipc_ring_destroy(r);
}

static void test_rank(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_RANK, 1 << 20, 16, 3);
	struct ipc_ring_client *c[3];
	unsigned id, cb_dummy_id;
	int cb_fd;
	uint64_t lag;

	/* Ranks attach in another order than ids. */
	c[2] = add(r, 2, &id);
	assert_int_equal(id, 0);
	c[0] = add(r, 0, NULL);
	assert_int_equal(ipc_ring_add_reader(r, 0, &cb_dummy_id, &cb_fd), -EBUSY);
	assert_int_equal(ipc_ring_add_reader(r, 3, &cb_dummy_id, &cb_fd), -EINVAL);
	for (int i = 0; i < 9; i++)
		put(r, 200);
	/* Rank 1 is not there yet: its batches wait for it. */
	c[1] = add(r, 1, &id);
	assert_int_equal(ipc_ring_reader_lag(r, id, &lag), 0);
	assert_int_equal(lag, 3);
	for (int i = 0; i < 3; i++)
		for (uint64_t k = (uint64_t)i; k < 9; k += 3)
			take_release(c[i], k);
	for (int i = 0; i < 3; i++) {
		struct ipc_ring_batch b;

		assert_int_equal(ipc_ring_client_next(c[i], 0, &b), -EAGAIN);
		ipc_ring_client_detach(c[i]);
	}
	ipc_ring_destroy(r);
}

static void test_late_reader(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 4 * PAGE, 8, 0);
	struct ipc_ring_client *a = add(r, 0, NULL), *b, *c;
	struct ipc_ring_extent e;

	for (int i = 0; i < 3; i++)
		put(r, PAGE);
	take_release(a, 0);
	ipc_ring_collect(r, NULL);
	/* Released by everyone but not reclaimed: a late reader starts at the oldest, seq 0. */
	b = add(r, 0, NULL);
	for (uint64_t s = 0; s < 3; s++)
		take_release(b, s);
	take_release(a, 1);
	take_release(a, 2);
	ipc_ring_collect(r, NULL);
	/* Needing two pages reclaims 0 and 1 (and wraps): the oldest in the ring is 2. */
	assert_int_equal(ipc_ring_reserve(r, 2 * PAGE, &e), 0);
	fill(e.mem, 2 * PAGE, 3);
	assert_int_equal(ipc_ring_publish(r, &e, 2 * PAGE, 7, 0, NULL), 0);
	c = add(r, 0, NULL);
	take_release(c, 2);
	take_release(c, 3);
	take_release(a, 3);
	take_release(b, 3);
	ipc_ring_client_detach(a);
	ipc_ring_client_detach(b);
	ipc_ring_client_detach(c);
	ipc_ring_destroy(r);
}

static void test_eos_and_error(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 8, 0);
	struct ipc_ring_client *c = add(r, 0, NULL), *late;
	struct ipc_ring_batch b;
	struct ipc_ring_extent e;

	put(r, 100);
	put(r, 100);
	assert_int_equal(ipc_ring_reserve(r, 100, &e), 0);
	assert_int_equal(ipc_ring_set_eos(r), 0);
	assert_int_equal(ipc_ring_set_eos(r), -EPIPE);
	assert_int_equal(ipc_ring_publish(r, &e, 100, 0, 0, NULL), -EPIPE);
	assert_int_equal(ipc_ring_reserve(r, 100, &e), -EPIPE);
	take_release(c, 0);
	take_release(c, 1);
	assert_int_equal(ipc_ring_client_next(c, 0, &b), -ENODATA);
	assert_int_equal(ipc_ring_client_next(c, -1, &b), -ENODATA);
	late = add(r, 0, NULL); /* after the end: it still gets what is in the ring */
	take(late, 0);
	take(late, 1);
	assert_int_equal(ipc_ring_client_next(late, 0, &b), -ENODATA);
	assert_int_equal(ipc_ring_set_error(r, 5), -EINVAL);
	assert_int_equal(ipc_ring_set_error(r, -EIO), 0);
	assert_int_equal(ipc_ring_client_next(c, -1, &b), -EIO);
	ipc_ring_client_detach(late);
	ipc_ring_client_detach(c);
	ipc_ring_destroy(r);

	/* Split: the end reaches each reader once nothing pending can reach it. */
	r = make_ring(IPC_RING_SPLIT, 1 << 20, 8, 0);
	c = add(r, 0, NULL);
	late = add(r, 0, NULL);
	for (int i = 0; i < 5; i++)
		put(r, 100);
	assert_int_equal(ipc_ring_set_eos(r), 0);
	for (int n = 0; n < 5;) {
		struct ipc_ring_client *x = n % 2 ? late : c;

		assert_int_equal(ipc_ring_client_next(x, 0, &b), 0);
		assert_int_equal(ipc_ring_client_release(x, &b), 0);
		ipc_ring_collect(r, NULL);
		n++;
	}
	assert_int_equal(ipc_ring_client_next(c, 0, &b), -ENODATA);
	assert_int_equal(ipc_ring_client_next(late, 0, &b), -ENODATA);
	ipc_ring_client_detach(late);
	ipc_ring_client_detach(c);
	ipc_ring_destroy(r);
}

static void test_remove_reader(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 2 * PAGE, 4, 0);
	struct ipc_ring_client *a, *b;
	struct ipc_ring_batch bt;
	struct ipc_ring_extent e;
	unsigned ida, idb;

	a = add(r, 0, &ida);
	b = add(r, 0, &idb);
	put(r, PAGE);
	put(r, PAGE);
	take(a, 0); /* a holds 0 and 1 and will never release */
	take_release(b, 0);
	take_release(b, 1);
	ipc_ring_collect(r, NULL);
	assert_int_equal(ipc_ring_reserve(r, PAGE, &e), -EAGAIN);
	assert_int_equal(ipc_ring_remove_reader(r, ida), 0);
	assert_int_equal(ipc_ring_remove_reader(r, ida), -ENOENT);
	assert_null(ipc_ring_reader_problem(r, ida));
	assert_int_equal(ipc_ring_client_next(a, 0, &bt), -ECONNABORTED);
	assert_int_equal(ipc_ring_reserve(r, PAGE, &e), 0);
	assert_int_equal(ipc_ring_cancel(r, &e), 0);
	ipc_ring_client_detach(a);
	ipc_ring_client_detach(b);
	ipc_ring_destroy(r);

	/*
	 * Split: batches handed to a removed reader that it never released — taken (0) or not
	 * (2) — go to the other one: nothing is lost when a reader dies holding batches.
	 */
	r = make_ring(IPC_RING_SPLIT, 1 << 20, 8, 0);
	a = add(r, 0, &ida);
	b = add(r, 0, &idb);
	for (int i = 0; i < 4; i++)
		put(r, 100); /* a: 0, 2; b: 1, 3 (fewest first) */
	assert_int_equal(ipc_ring_client_next(a, 0, &bt), 0);
	assert_int_equal(bt.seq, 0);
	assert_int_equal(ipc_ring_remove_reader(r, ida), 0);
	take_release(b, 1);
	take_release(b, 3);
	ipc_ring_collect(r, NULL);
	take_release(b, 0);
	take_release(b, 2);
	ipc_ring_client_detach(a);
	ipc_ring_client_detach(b);
	ipc_ring_destroy(r);
}

/*
 * Regression: a split reader that released its batches and detached before the daemon
 * collected the releases had them handed to another reader again (a batch delivered twice).
 */
static void test_split_detach_after_release_no_duplicate(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_SPLIT, 1 << 20, 8, 0);
	struct ipc_ring_client *a, *b;
	struct ipc_ring_batch bt;
	unsigned ida, idb;

	a = add(r, 0, &ida);
	b = add(r, 0, &idb);
	for (int i = 0; i < 4; i++)
		put(r, 100); /* a: 0, 2; b: 1, 3 */
	take_release(a, 0);
	take_release(a, 2); /* released, not collected */
	assert_int_equal(ipc_ring_remove_reader(r, ida), 0);
	take_release(b, 1);
	take_release(b, 3);
	assert_int_equal(ipc_ring_set_eos(r), 0);
	ipc_ring_collect(r, NULL);
	assert_int_equal(ipc_ring_client_next(b, 0, &bt), -ENODATA); /* nothing twice */
	ipc_ring_client_detach(a);
	ipc_ring_client_detach(b);
	ipc_ring_destroy(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_attach),
		cmocka_unit_test(test_bad_opts),
		cmocka_unit_test(test_publish_next_release),
		cmocka_unit_test(test_wrap_slots_and_data),
		cmocka_unit_test(test_full),
		cmocka_unit_test(test_broadcast_three),
		cmocka_unit_test(test_split),
		cmocka_unit_test(test_split_holder_does_not_stall),
		cmocka_unit_test(test_rank),
		cmocka_unit_test(test_late_reader),
		cmocka_unit_test(test_eos_and_error),
		cmocka_unit_test(test_remove_reader),
		cmocka_unit_test(test_split_detach_after_release_no_duplicate),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
