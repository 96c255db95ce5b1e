/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for ipc/ring.c and ipc/ring_client.c in one process: protocol, modes, refusals, threads. */
#include "ipc/ring.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ipc/batch.h"
#include "ipc/futex.h"
#include "ipc/ring_internal.h"

#define PAGE 4096u
#define MS 1000000ll

/* ---- helpers ---- */

static const struct ipc_ring_tensor test_schema[2] = {
	{.name = "image", .dtype = IPC_DTYPE_UINT8, .rank = 4, .shape = {-1, 32, 32, 3}},
	{.name = "tokens", .dtype = IPC_DTYPE_INT64, .rank = 2, .ragged = 1, .shape = {-1, -1}},
};

static struct ipc_ring *make_ring(enum ipc_ring_mode mode, uint64_t data, uint32_t slots,
				  uint32_t rank_n)
{
	struct ipc_ring_opts o;
	struct ipc_ring *r = NULL;
	char msg[256] = "";

	ipc_ring_opts_init(&o);
	o.mode = mode;
	o.data_bytes = data;
	o.n_slots = slots;
	o.rank_n = rank_n;
	o.schema = test_schema;
	o.n_schema = 2;
	o.name = "test-ring";
	if (ipc_ring_create(&o, &r, msg, sizeof(msg)))
		fail_msg("ipc_ring_create: %s", msg);
	return r;
}

/* A reader; max_lag > 0 sets its lag limit, as the daemon does, before its client attaches. */
static struct ipc_ring_client *add_lag(struct ipc_ring *r, uint32_t rank, uint64_t max_lag,
				       unsigned *ret_id)
{
	struct ipc_ring_client *c = NULL;
	char msg[256] = "";
	unsigned id;
	int cb_fd;

	assert_int_equal(ipc_ring_add_reader(r, rank, &id, &cb_fd), 0);
	if (max_lag)
		assert_int_equal(ipc_ring_set_max_lag(r, id, max_lag), 0);
	if (ipc_ring_client_attach(ipc_ring_data_fd(r), cb_fd, &c, msg, sizeof(msg)))
		fail_msg("attach: %s", msg);
	assert_int_equal(ipc_ring_client_id(c), id);
	if (ret_id)
		*ret_id = id;
	return c;
}

static struct ipc_ring_client *add(struct ipc_ring *r, uint32_t rank, unsigned *ret_id)
{
	return add_lag(r, rank, 0, ret_id);
}

static uint8_t pat(uint64_t seq, uint64_t i)
{
	return (uint8_t)(seq * 131u + i * 7u + (i >> 9));
}

/* A batch of len bytes: an ipc_batch header with no tensors, then the seq's pattern. */
static void fill(void *mem, uint64_t len, uint64_t seq)
{
	struct ipc_batch_hdr h = {.magic = IPC_BATCH_MAGIC, .version = IPC_BATCH_VERSION,
				  .seq = seq, .total_bytes = len};
	uint8_t *p = mem;

	assert_true(len >= sizeof(h));
	memcpy(p, &h, sizeof(h));
	for (uint64_t i = sizeof(h); i < len; i++)
		p[i] = pat(seq, i);
}

static bool check(const struct ipc_ring_batch *b, uint64_t seq)
{
	const uint8_t *p = b->mem;
	struct ipc_batch_view v;

	if (b->seq != seq || ipc_batch_view(b->mem, b->len, &v, NULL, 0) || v.seq != seq)
		return false;
	for (uint64_t i = sizeof(struct ipc_batch_hdr); i < b->len; i++)
		if (p[i] != pat(seq, i))
			return false;
	return true;
}

/* Reserve, fill and publish a batch of len bytes; returns its seq. */
static uint64_t put(struct ipc_ring *r, uint64_t len)
{
	struct ipc_ring_extent e;
	struct ipc_ring_info info;
	uint64_t seq;

	ipc_ring_get_info(r, &info);
	assert_int_equal(ipc_ring_reserve(r, len, &e), 0);
	assert_true(e.cap >= len && e.cap % PAGE == 0 && e.off % PAGE == 0);
	assert_true(((uintptr_t)e.mem % PAGE) == 0);
	fill(e.mem, len, info.head);
	assert_int_equal(ipc_ring_publish(r, &e, len, 7, 0, &seq), 0);
	assert_int_equal(seq, info.head);
	return seq;
}

/* Take the next batch (must be seq) and check every byte. */
static struct ipc_ring_batch take(struct ipc_ring_client *c, uint64_t seq)
{
	struct ipc_ring_batch b;
	int rc = ipc_ring_client_next(c, 0, &b);

	if (rc)
		fail_msg("next: %d (%s), expected seq %llu", rc, strerror(-rc),
			 (unsigned long long)seq);
	assert_int_equal(b.seq, seq);
	assert_int_equal(b.epoch, 7);
	assert_true(check(&b, seq));
	return b;
}

static void take_release(struct ipc_ring_client *c, uint64_t seq)
{
	struct ipc_ring_batch b = take(c, seq);

	assert_int_equal(ipc_ring_client_release(c, &b), 0);
}

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
	assert_int_equal(e2.off, PAGE); /* seq 1's extent */
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

/* ---- broadcast lag policy ---- */

static void test_lag_policy(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 8, 0);
	unsigned a_id, b_id;
	struct ipc_ring_client *a = add_lag(r, 0, 3, &a_id);
	struct ipc_ring_client *b = add(r, 0, &b_id);
	struct ipc_ring_batch held, x;
	uint64_t lag, end, seq, holders;

	(void)state;
	assert_int_equal(ipc_ring_set_max_lag(r, 63, 1), -ENOENT);
	for (int i = 0; i < 3; i++)
		put(r, 5000);
	held = take(a, 0); /* a keeps seq 0 and reads no more */
	put(r, 5000);
	for (uint64_t s = 0; s < 4; s++)
		take_release(b, s);
	ipc_ring_collect(r, NULL);
	assert_int_equal(ipc_ring_reader_moved(r, a_id), 0); /* lag 3: within its limit */
	put(r, 5000); /* lag 4 > 3: a is moved off where it is */
	assert_int_equal(ipc_ring_reader_moved(r, a_id), 1);
	assert_int_equal(ipc_ring_reader_moved(r, b_id), 0);
	assert_int_equal(ipc_ring_reader_lag(r, a_id, &lag), 0);
	assert_int_equal(lag, 4); /* its position: head 5 - 4 = 1, right after what it took */
	assert_int_equal(ipc_ring_move_reader(r, a_id, &end), 0); /* again: the same end */
	assert_int_equal(end, 1);
	assert_int_equal(ipc_ring_client_next(a, 0, &x), -EXDEV);
	assert_int_equal(ipc_ring_client_next(a, 1000000, &x), -EXDEV);
	/* b runs on: far past the ring's size, while a still holds seq 0 (never torn) */
	for (uint64_t s = 4; s < 40; s++) {
		take_release(b, s);
		ipc_ring_collect(r, NULL);
		if (s + 1 < 40)
			assert_int_equal(put(r, 5000), s + 1);
	}
	assert_true(check(&held, 0));
	assert_int_equal(ipc_ring_oldest(r, &seq, &holders), 0);
	assert_int_equal(seq, 0);
	assert_int_equal(holders, 1ull << a_id);
	assert_int_equal(ipc_ring_client_release(a, &held), 0);
	assert_int_equal(ipc_ring_collect(r, NULL), 1);
	assert_int_equal(ipc_ring_oldest(r, &seq, &holders), -ENOENT);
	/* after EOS the moved reader still ends with -EXDEV, b with its end of stream */
	assert_int_equal(ipc_ring_set_eos(r), 0);
	assert_int_equal(ipc_ring_client_next(a, 0, &x), -EXDEV);
	assert_int_equal(ipc_ring_client_next(b, 0, &x), -ENODATA);
	assert_int_equal(ipc_ring_remove_reader(r, a_id), 0);
	ipc_ring_client_detach(a);
	ipc_ring_client_detach(b);
	ipc_ring_destroy(r);

	/* split and rank rings have no lag policy */
	r = make_ring(IPC_RING_SPLIT, 1 << 20, 8, 0);
	a = add(r, 0, &a_id);
	assert_int_equal(ipc_ring_set_max_lag(r, a_id, 2), -EINVAL);
	assert_int_equal(ipc_ring_move_reader(r, a_id, &end), -EINVAL);
	ipc_ring_client_detach(a);
	ipc_ring_destroy(r);
}

/*
 * The move races the reader's takes: whatever it took before it learnt it was moved is still
 * held for it (its bytes never change while it reads them), and nothing after the end.
 */
struct lag_reader {
	struct ipc_ring_client *c;
	atomic_bool moved;
	_Atomic uint64_t taken;
	uint64_t bad;
	unsigned seed;
};

static void *lag_reader_main(void *arg)
{
	struct lag_reader *t = arg;
	struct ipc_ring_batch b;

	for (;;) {
		int rc = ipc_ring_client_next(t->c, 100000000, &b);

		if (rc == -EXDEV)
			break;
		if (rc == -ETIMEDOUT)
			continue;
		if (rc) {
			print_message("lag race: next: %d\n", rc);
			t->bad++;
			break;
		}
		atomic_fetch_add(&t->taken, 1);
		/* hold it for a while, reading it twice */
		if (!check(&b, b.seq)) {
			print_message("lag race: seq %llu torn at the take\n",
				      (unsigned long long)b.seq);
			t->bad++;
		}
		for (unsigned k = rand_r(&t->seed) % 2000; k; k--)
			__asm__ volatile("" ::: "memory");
		if (!check(&b, b.seq)) {
			print_message("lag race: seq %llu torn while held\n",
				      (unsigned long long)b.seq);
			t->bad++;
		}
		ipc_ring_client_release(t->c, &b);
	}
	atomic_store(&t->moved, true);
	return NULL;
}

static void test_lag_race(void **state)
{
	uint64_t total = 0, moved_early = 0;

	(void)state;
	for (unsigned iter = 0; iter < 200; iter++) {
		struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 64 * PAGE, 4, 0);
		struct lag_reader t = {.seed = iter};
		unsigned id;
		pthread_t th;
		uint64_t published = 0;

		unsigned seed = iter * 7919u;

		t.c = add_lag(r, 0, 1 + iter % 3, &id);
		atomic_init(&t.moved, false);
		atomic_init(&t.taken, 0);
		assert_int_equal(pthread_create(&th, NULL, lag_reader_main, &t), 0);
		/* publish as fast as the ring allows; once it is moved, on through every slot */
		for (uint64_t after = 0; after < 16;) {
			struct ipc_ring_extent e;
			uint64_t seq;

			ipc_ring_collect(r, NULL);
			if (ipc_ring_reserve(r, 3 * PAGE, &e) == -EAGAIN) {
				sched_yield();
				continue;
			}
			fill(e.mem, 3 * PAGE, published);
			assert_int_equal(ipc_ring_publish(r, &e, 3 * PAGE, 7, 0, &seq), 0);
			published++;
			if (published == 400) { /* it kept up: move it anyway */
				uint64_t end;
				assert_int_equal(ipc_ring_move_reader(r, id, &end), 0);
			}
			if (ipc_ring_reader_moved(r, id) == 1) {
				after++;
				continue;
			}
			/* about the reader's pace, so that it is moved at a random point */
			if (published == 1)
				while (!atomic_load(&t.taken) && !atomic_load(&t.moved))
					sched_yield();
			for (unsigned k = rand_r(&seed) % 2600; k; k--)
				__asm__ volatile("" ::: "memory");
		}
		pthread_join(th, NULL);
		assert_true(atomic_load(&t.moved));
		assert_int_equal(t.bad, 0);
		total += atomic_load(&t.taken);
		moved_early += atomic_load(&t.taken) == 0;
		ipc_ring_client_detach(t.c);
		ipc_ring_destroy(r);
	}
	print_message("lag race: 200 moves, %llu batches taken before them (%llu moved at once)\n",
		      (unsigned long long)total, (unsigned long long)moved_early);
	assert_true(total > 0);
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
	uint8_t seen[24] = {0};
	unsigned got[3] = {0};
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
		{offsetof(struct ipc_ring_hdr, magic), 0x12345678, 4},
		{offsetof(struct ipc_ring_hdr, version), 9, 2},
		{offsetof(struct ipc_ring_hdr, hdr_size), 64, 2},
		{offsetof(struct ipc_ring_hdr, mode), 3, 4},
		{offsetof(struct ipc_ring_hdr, rank_n), 3, 4},
		{offsetof(struct ipc_ring_hdr, total_size), 1ull << 40, 8},
		{offsetof(struct ipc_ring_hdr, n_slots), 6, 4},
		{offsetof(struct ipc_ring_hdr, n_slots), 1u << 20, 4},
		{offsetof(struct ipc_ring_hdr, n_schema), 100000, 4},
		{offsetof(struct ipc_ring_hdr, n_schema), 1000, 4}, /* runs into the slots */
		{offsetof(struct ipc_ring_hdr, schema_off), 8, 8},
		{offsetof(struct ipc_ring_hdr, slots_off), UINT64_MAX - 63, 8},
		{offsetof(struct ipc_ring_hdr, order_off), 64, 8},
		{offsetof(struct ipc_ring_hdr, order_off), 1ull << 50, 8},
		{offsetof(struct ipc_ring_hdr, data_off), 1ull << 62, 8},
		{offsetof(struct ipc_ring_hdr, data_off), 8192, 8}, /* data ends past the end */
		{offsetof(struct ipc_ring_hdr, data_size), UINT64_MAX & ~4095ull, 8},
		{offsetof(struct ipc_ring_hdr, data_size), 0, 8},
		{so + offsetof(struct ipc_ring_tensor, dtype), 99, 1},
		{so + offsetof(struct ipc_ring_tensor, rank), 9, 1},
		{so + offsetof(struct ipc_ring_tensor, ragged), 2, 1},
		{so, 0, 1},                       /* empty name */
		{so, 'A', IPC_RING_NAME_MAX},     /* no NUL in the name */
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
	take(c, 1); /* a batch published before the error still comes first */
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

/* ---- waiting ---- */

/* FUTEX_WAIT on a word of the read-only mapping, woken through the daemon's writable one. */
struct fwait {
	const _Atomic uint32_t *word;
	int rc;
};

static void *futex_waiter(void *arg)
{
	struct fwait *w = arg;
	struct timespec dl = ipc_futex_deadline(5000 * MS);

	do
		w->rc = ipc_futex_wait(w->word, 0, &dl);
	while (w->rc == 0 && atomic_load(w->word) == 0);
	return NULL;
}

static void test_futex_on_readonly_mapping(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 8, 0);
	struct ipc_ring_hdr *h = ipc_ring_hdr_(r);
	const struct ipc_ring_hdr *ro;
	struct timespec dl;
	struct fwait w;
	pthread_t t;

	ro = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, ipc_ring_data_fd(r), 0);
	assert_true(ro != MAP_FAILED);
	assert_int_equal(ipc_futex_wait(&ro->state, 1, NULL), -EAGAIN);
	dl = ipc_futex_deadline(10 * MS);
	assert_int_equal(ipc_futex_wait(&ro->state, 0, &dl), -ETIMEDOUT);
	w.word = &ro->state;
	w.rc = 1;
	assert_int_equal(pthread_create(&t, NULL, futex_waiter, &w), 0);
	usleep(20000);
	atomic_store(&h->state, 5);
	ipc_futex_wake(&h->state, INT_MAX); /* another address, the same memfd page */
	pthread_join(t, NULL);
	assert_true(w.rc == 0 || w.rc == -EAGAIN);
	munmap((void *)ro, PAGE);
	atomic_store(&h->state, 0);
	ipc_ring_destroy(r);
}

/* The daemon's loop after the end: collect (split readers get the rest) until all is released. */
static void drain_daemon(struct ipc_ring *r)
{
	for (int i = 0; i < 100000; i++) {
		uint64_t seq, holders;

		ipc_ring_collect(r, NULL);
		if (ipc_ring_oldest(r, &seq, &holders) == -ENOENT)
			break;
		ipc_ring_wait(r, 10 * MS);
	}
}

struct delayed {
	struct ipc_ring *r;
	int n;
	bool eos;
};

static void *delayed_publisher(void *arg)
{
	struct delayed *d = arg;

	for (int i = 0; i < d->n; i++) {
		struct ipc_ring_extent e;

		usleep(2000);
		while (ipc_ring_reserve(d->r, 500, &e) == -EAGAIN) {
			ipc_ring_collect(d->r, NULL);
			ipc_ring_wait(d->r, 100 * MS);
		}
		fill(e.mem, 500, (uint64_t)i);
		ipc_ring_publish(d->r, &e, 500, 7, 0, NULL);
	}
	if (d->eos)
		ipc_ring_set_eos(d->r);
	drain_daemon(d->r);
	return NULL;
}

/* next() sleeps on the futex and is woken by publish, and by the end of the stream. */
static void test_next_sleeps_and_wakes(void **state)
{
	for (int mode = IPC_RING_BROADCAST; mode <= IPC_RING_SPLIT; mode++) {
		struct ipc_ring *r = make_ring((enum ipc_ring_mode)mode, 1 << 20, 4, 0);
		struct ipc_ring_client *c = add(r, 0, NULL);
		struct delayed d = {r, 20, true};
		struct ipc_ring_batch b;
		pthread_t t;
		int rc;

		assert_int_equal(pthread_create(&t, NULL, delayed_publisher, &d), 0);
		for (uint64_t s = 0;; s++) {
			rc = ipc_ring_client_next(c, 10000 * MS, &b);
			if (rc == -ENODATA)
				break;
			assert_int_equal(rc, 0);
			assert_int_equal(b.seq, s);
			assert_true(check(&b, s));
			assert_int_equal(ipc_ring_client_release(c, &b), 0);
		}
		pthread_join(t, NULL);
		assert_int_equal(ipc_ring_client_next(c, 0, &b), -ENODATA);
		ipc_ring_client_detach(c);
		ipc_ring_destroy(r);
	}
}

/* Threads: one producer, readers that check every byte; under TSan in CI. */
#define T_READERS 3
#define T_BATCHES 20000

struct treader {
	struct ipc_ring_client *c;
	enum ipc_ring_mode mode;
	uint64_t got;
	uint8_t *seen; /* split: shared count per seq */
	bool ok;
};

static uint64_t tlen(uint64_t seq)
{
	return sizeof(struct ipc_batch_hdr) + (seq * 7919u) % 5000;
}

static void *treader_main(void *arg)
{
	struct treader *t = arg;
	uint64_t expect = 0;
	struct ipc_ring_batch b, hold = {.seq = UINT64_MAX};
	int rc;

	t->ok = true;
	while ((rc = ipc_ring_client_next(t->c, 20000 * MS, &b)) == 0) {
		if ((t->mode == IPC_RING_BROADCAST ? b.seq != expect : b.seq < expect) ||
		    b.len != tlen(b.seq) ||
		    !check(&b, b.seq)) {
			t->ok = false;
			break;
		}
		if (t->seen)
			atomic_fetch_add((_Atomic uint8_t *)&t->seen[b.seq], 1);
		expect = b.seq + 1;
		t->got++;
		/* Hold one batch back and release it after the next one: out of order. */
		if (hold.seq != UINT64_MAX && ipc_ring_client_release(t->c, &hold)) {
			t->ok = false;
			break;
		}
		hold = b;
	}
	if (rc != -ENODATA)
		t->ok = false;
	if (hold.seq != UINT64_MAX)
		ipc_ring_client_release(t->c, &hold);
	return NULL;
}

static void produce(struct ipc_ring *r, uint64_t n)
{
	for (uint64_t s = 0; s < n; s++) {
		struct ipc_ring_extent e;
		uint64_t bad = 0;
		int rc;

		while ((rc = ipc_ring_reserve(r, tlen(s), &e)) == -EAGAIN) {
			if (ipc_ring_collect(r, &bad) == 0)
				ipc_ring_wait(r, 50 * MS);
			assert_int_equal(bad, 0);
		}
		assert_int_equal(rc, 0);
		fill(e.mem, tlen(s), s);
		assert_int_equal(ipc_ring_publish(r, &e, tlen(s), 7, 0, NULL), 0);
	}
	assert_int_equal(ipc_ring_set_eos(r), 0);
	drain_daemon(r);
}

static void run_threads(enum ipc_ring_mode mode)
{
	struct ipc_ring *r = make_ring(mode, 64 * PAGE, 16, 0);
	struct treader t[T_READERS];
	pthread_t th[T_READERS];
	uint8_t *seen = calloc(T_BATCHES, 1);
	uint64_t total = 0;

	assert_non_null(seen);
	for (int i = 0; i < T_READERS; i++) {
		memset(&t[i], 0, sizeof(t[i]));
		t[i].c = add(r, 0, NULL);
		t[i].mode = mode;
		t[i].seen = mode == IPC_RING_SPLIT ? seen : NULL;
		assert_int_equal(pthread_create(&th[i], NULL, treader_main, &t[i]), 0);
	}
	produce(r, T_BATCHES);
	for (int i = 0; i < T_READERS; i++) {
		pthread_join(th[i], NULL);
		assert_true(t[i].ok);
		total += t[i].got;
		if (mode == IPC_RING_BROADCAST)
			assert_int_equal(t[i].got, T_BATCHES);
		ipc_ring_client_detach(t[i].c);
	}
	if (mode == IPC_RING_SPLIT) {
		assert_int_equal(total, T_BATCHES);
		for (int s = 0; s < T_BATCHES; s++)
			assert_int_equal(seen[s], 1);
	}
	free(seen);
	ipc_ring_destroy(r);
}

static void test_threads_broadcast(void **state)
{
	run_threads(IPC_RING_BROADCAST);
}

static void test_threads_split(void **state)
{
	run_threads(IPC_RING_SPLIT);
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
		cmocka_unit_test(test_data_fd_is_readonly),
		cmocka_unit_test(test_unsealed_refused),
		cmocka_unit_test(test_corrupt_header),
		cmocka_unit_test(test_cb_impossible_values),
		cmocka_unit_test(test_client_checks_shared_values),
		cmocka_unit_test(test_futex_on_readonly_mapping),
		cmocka_unit_test(test_next_sleeps_and_wakes),
		cmocka_unit_test(test_threads_broadcast),
		cmocka_unit_test(test_threads_split),
		cmocka_unit_test(test_lag_policy),
		cmocka_unit_test(test_lag_race),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
