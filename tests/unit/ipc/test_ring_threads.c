/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for ipc/ring.c and ipc/ring_client.c: futex waits, threads, the lag policy and its race. */
#include "ipc/ring.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ipc/batch.h"
#include "ipc/futex.h"
#include "ipc/ring_internal.h"

#include "ring_fixture.h"
#include "tests/unit/task_state.h"

/* ---- waiting ---- */

/*
 * Whether thread tid of this process sleeps in futex() (sl_task_in_futex), with the word it
 * waits on in *ret_addr (0 where that cannot be known).
 */
static bool futex_sleeping(pid_t tid, uintptr_t *ret_addr)
{
	uintptr_t timeout;

	return sl_task_in_futex(tid, ret_addr, &timeout);
}

/* FUTEX_WAIT on a word of the read-only mapping, woken through the daemon's writable one. */
struct fwait {
	const _Atomic uint32_t *word;
	atomic_int tid;	 /* the waiter's thread id, once it runs */
	atomic_bool out; /* it returned */
	int rc;
};

static void *futex_waiter(void *arg)
{
	struct fwait *w = arg;
	/* longer than until_asleep's bound: the test gives up first, not the waiter */
	struct timespec dl = ipc_futex_deadline(30000 * MS);

	atomic_store(&w->tid, (int)syscall(SYS_gettid));
	do
		w->rc = ipc_futex_wait(w->word, 0, &dl);
	while (w->rc == 0 && atomic_load(w->word) == 0);
	atomic_store(&w->out, true);
	return NULL;
}

/* Until the waiter sleeps in futex() on its word; the test fails after 10 s or if it returned. */
static void until_asleep(struct fwait *w)
{
	const struct timespec ms = { 0, 1000000 };

	for (int i = 0; i < 10000; i++) {
		int tid = atomic_load(&w->tid);
		uintptr_t addr;

		if (atomic_load(&w->out))
			fail_msg("the waiter returned %d before the wake", w->rc);
		if (tid && futex_sleeping(tid, &addr) && (!addr || addr == (uintptr_t)w->word))
			return;
		nanosleep(&ms, NULL); /* polls the condition itself */
	}
	fail_msg("the waiter was not seen asleep in futex() on its word within 10 s");
}

static void test_futex_on_readonly_mapping(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 8, 0);
	struct ipc_ring_hdr *h = ipc_ring_hdr_(r);
	const struct ipc_ring_hdr *ro;
	struct timespec dl;
	struct fwait w = { .rc = 1 };
	pthread_t t;

	ro = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, ipc_ring_data_fd(r), 0);
	assert_true(ro != MAP_FAILED);
	assert_int_equal(ipc_futex_wait(&ro->state, 1, NULL), -EAGAIN);
	dl = ipc_futex_deadline(10 * MS);
	assert_int_equal(ipc_futex_wait(&ro->state, 0, &dl), -ETIMEDOUT);
	w.word = &ro->state;
	assert_int_equal(pthread_create(&t, NULL, futex_waiter, &w), 0);
	/* asleep for certain: a wake that missed it could not pass for one that found it */
	until_asleep(&w);
	atomic_store(&h->state, 5);
	/* another address, the same memfd page: it reaches the one sleeper */
	assert_int_equal(ipc_futex_wake(&h->state, INT_MAX), 1);
	pthread_join(t, NULL);
	assert_int_equal(w.rc, 0);
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
	int reader;		      /* the reader's thread id */
	const struct ipc_ring_cb *cb; /* its control block, as the daemon maps it */
	int awake;		      /* publishes that did not find it asleep within 10 s */
};

/*
 * Until the reader sleeps in next(): it says so in its control block (waiting), and it is asleep
 * in futex() on a word at the offset of its wake word in the page (it maps the block at another
 * address). Bounded: after 10 s the publish goes on and is counted in awake.
 */
static void until_reader_asleep(struct delayed *d)
{
	const struct timespec ms = { 0, 1000000 };
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t off = (uintptr_t)&d->cb->wake & (page - 1);

	for (int i = 0; i < 10000; i++) {
		uintptr_t addr;

		if (atomic_load(&d->cb->waiting) && futex_sleeping(d->reader, &addr) &&
		    (!addr || (addr & (page - 1)) == off))
			return;
		nanosleep(&ms, NULL); /* polls the condition itself */
	}
	d->awake++;
}

static void *delayed_publisher(void *arg)
{
	struct delayed *d = arg;

	for (int i = 0; i < d->n; i++) {
		struct ipc_ring_extent e;

		until_reader_asleep(d); /* so that this publish must wake it */
		while (ipc_ring_reserve(d->r, 500, &e) == -EAGAIN) {
			ipc_ring_collect(d->r, NULL);
			ipc_ring_wait(d->r, 100 * MS);
		}
		fill(e.mem, 500, (uint64_t)i);
		ipc_ring_publish(d->r, &e, 500, 7, 0, NULL);
	}
	if (d->eos) {
		until_reader_asleep(d); /* and the end of the stream too */
		ipc_ring_set_eos(d->r);
	}
	drain_daemon(d->r);
	return NULL;
}

/* next() sleeps on the futex and is woken by publish, and by the end of the stream. */
static void test_next_sleeps_and_wakes(void **state)
{
	for (int mode = IPC_RING_BROADCAST; mode <= IPC_RING_SPLIT; mode++) {
		struct ipc_ring *r = make_ring((enum ipc_ring_mode)mode, 1 << 20, 4, 0);
		unsigned id;
		struct ipc_ring_client *c = add(r, 0, &id);
		struct delayed d = { r, 20, true, (int)syscall(SYS_gettid), r->rd[id].cb, 0 };
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
		assert_int_equal(d.awake, 0); /* every batch, and the end, woke it from its sleep */
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
	struct ipc_ring_batch b, hold = { .seq = UINT64_MAX };
	int rc;

	t->ok = true;
	while ((rc = ipc_ring_client_next(t->c, 20000 * MS, &b)) == 0) {
		if ((t->mode == IPC_RING_BROADCAST ? b.seq != expect : b.seq < expect) ||
		    b.len != tlen(b.seq) || !check(&b, b.seq)) {
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

/*
 * Consumer groups: one ring, a broadcast reader (group 0), a split group of two and a rank
 * group of two, each reader a thread: the broadcast reader gets every batch in order, the split
 * group each batch once, rank member k the batches k mod 2 in order.
 */
static void test_threads_groups(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 64 * PAGE, 16, 0);
	struct treader t[5];
	pthread_t th[5];
	uint8_t *seen = calloc(T_BATCHES, 1);
	unsigned gs, gr;

	assert_non_null(seen);
	assert_int_equal(ipc_ring_group_open(r, IPC_RING_SPLIT, 0, 2, 0, &gs), 0);
	assert_int_equal(ipc_ring_group_open(r, IPC_RING_RANK, 2, 0, 0, &gr), 0);
	for (int i = 0; i < 5; i++) {
		memset(&t[i], 0, sizeof(t[i]));
		if (i == 0) {
			t[i].c = add(r, 0, NULL);
			t[i].mode = IPC_RING_BROADCAST;
		} else if (i < 3) {
			t[i].c = add_to(r, gs, 0, NULL);
			t[i].mode = IPC_RING_SPLIT;
			t[i].seen = seen;
		} else {
			t[i].c = add_to(r, gr, (uint32_t)(i - 3), NULL);
			t[i].mode = IPC_RING_RANK;
		}
		assert_int_equal(pthread_create(&th[i], NULL, treader_main, &t[i]), 0);
	}
	produce(r, T_BATCHES);
	for (int i = 0; i < 5; i++) {
		pthread_join(th[i], NULL);
		assert_true(t[i].ok);
		ipc_ring_client_detach(t[i].c);
	}
	assert_int_equal(t[0].got, T_BATCHES);
	assert_int_equal(t[1].got + t[2].got, T_BATCHES);
	assert_int_equal(t[3].got, T_BATCHES / 2);
	assert_int_equal(t[4].got, T_BATCHES / 2);
	for (int s = 0; s < T_BATCHES; s++)
		assert_int_equal(seen[s], 1);
	free(seen);
	ipc_ring_destroy(r);
}

/* ---- a full ring waits for several releases ---- */

struct refill {
	struct ipc_ring *r;
	uint32_t want;
	atomic_int rc; /* 1 while it waits */
};

static void *refill_waiter(void *arg)
{
	struct refill *f = arg;

	atomic_store(&f->rc, ipc_ring_wait_releases(f->r, 10000 * MS, f->want));
	return NULL;
}

/* Until the daemon's thread sleeps on the reader's doorbell (or gave up). */
static void until_waiting(struct ipc_ring_cb *cb, struct refill *f)
{
	while (!atomic_load(&cb->daemon_waiting) && atomic_load(&f->rc) == 1)
		sched_yield();
}

/*
 * ipc_ring_wait_releases(want 4) on a full ring: three releases do not ring the doorbell (the
 * daemon sleeps on), the fourth does; a reader that goes to sleep for a batch rings it whatever
 * it released (it may hold the batches the daemon waits for); want 1 rings at every release;
 * a member of a split group is asked for its share of want.
 */
static void test_wait_releases(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 8, 0);
	unsigned id;
	struct ipc_ring_client *c = add(r, 0, &id);
	struct ipc_ring_cb *cb = r->rd[id].cb;
	struct ipc_ring_batch b[12], x;
	struct ipc_ring_extent e;
	struct refill f = { r, 4, 1 };
	pthread_t t;

	for (uint64_t s = 0; s < 8; s++) {
		put(r, 500);
		b[s] = take(c, s);
	}
	ipc_ring_collect(r, NULL);
	assert_int_equal(ipc_ring_reserve(r, 500, &e), -EAGAIN);
	assert_int_equal(pthread_create(&t, NULL, refill_waiter, &f), 0);
	until_waiting(cb, &f);
	assert_int_equal(atomic_load(&f.rc), 1);
	assert_int_equal(atomic_load(&cb->wake_rel), 4);
	uint32_t bell = atomic_load(&cb->doorbell);
	for (int k = 0; k < 3; k++) {
		assert_int_equal(ipc_ring_client_release(c, &b[k]), 0);
		assert_int_equal(atomic_load(&cb->doorbell), bell); /* not rung */
	}
	assert_int_equal(atomic_load(&f.rc), 1);
	assert_int_equal(ipc_ring_client_release(c, &b[3]), 0);
	assert_int_equal(atomic_load(&cb->doorbell), bell + 1);
	pthread_join(t, NULL);
	assert_int_equal(atomic_load(&f.rc), 0);
	ipc_ring_collect(r, NULL);
	for (uint64_t s = 8; s < 12; s++) /* room for the four at once */
		put(r, 500);

	/* full again; the reader holds its 8 and wants a ninth: it rings as it goes to sleep */
	atomic_store(&f.rc, 1);
	assert_int_equal(pthread_create(&t, NULL, refill_waiter, &f), 0);
	until_waiting(cb, &f);
	bell = atomic_load(&cb->doorbell);
	for (uint64_t s = 8; s < 12; s++)
		b[s] = take(c, s);
	assert_int_equal(ipc_ring_client_next(c, 1 * MS, &x), -ETIMEDOUT);
	assert_true(atomic_load(&cb->doorbell) != bell);
	pthread_join(t, NULL);
	assert_int_equal(atomic_load(&f.rc), 0);

	/* want 1: every release rings, as ipc_ring_wait */
	ipc_ring_collect(r, NULL);
	f.want = 1;
	atomic_store(&f.rc, 1);
	assert_int_equal(pthread_create(&t, NULL, refill_waiter, &f), 0);
	until_waiting(cb, &f);
	assert_int_equal(atomic_load(&cb->wake_rel), 0);
	bell = atomic_load(&cb->doorbell);
	assert_int_equal(ipc_ring_client_release(c, &b[4]), 0);
	assert_int_equal(atomic_load(&cb->doorbell), bell + 1);
	pthread_join(t, NULL);
	assert_int_equal(atomic_load(&f.rc), 0);
	ipc_ring_client_detach(c);
	ipc_ring_destroy(r);

	/* two members of a split group each release about half: each is asked for its share */
	r = make_ring(IPC_RING_SPLIT, 1 << 20, 8, 0);
	unsigned ids[2];
	struct ipc_ring_client *m[2] = { add(r, 0, &ids[0]), add(r, 0, &ids[1]) };
	assert_int_equal(ipc_ring_wait_releases(r, 1 * MS, 8), -ETIMEDOUT);
	for (int k = 0; k < 2; k++)
		assert_int_equal(atomic_load(&r->rd[ids[k]].cb->wake_rel), 4);
	assert_int_equal(ipc_ring_wait_releases(r, 1 * MS, 3), -ETIMEDOUT);
	for (int k = 0; k < 2; k++) {
		assert_int_equal(atomic_load(&r->rd[ids[k]].cb->wake_rel), 0); /* 1: each rings */
		ipc_ring_client_detach(m[k]);
	}
	ipc_ring_destroy(r);
}

/* ---- the caller's lock is free while the daemon sleeps ---- */

struct locked_wait {
	struct ipc_ring *r;
	pthread_mutex_t lock;
	atomic_int rc; /* 1 while it waits */
};

static void *locked_waiter(void *arg)
{
	struct locked_wait *f = arg;

	pthread_mutex_lock(&f->lock);
	int rc = ipc_ring_wait_releases_unlocking(f->r, 10000 * MS, 1, &f->lock);
	/* it holds the lock again when it returns */
	assert_int_equal(pthread_mutex_trylock(&f->lock), EBUSY);
	pthread_mutex_unlock(&f->lock);
	atomic_store(&f->rc, rc);
	return NULL;
}

/*
 * ipc_ring_wait_releases_unlocking: while it sleeps on a full ring, another thread takes the
 * lock (the server answering the reader's SAVE_STATE under pl->lock before that reader
 * releases) and, holding it, the reader releases: the sleep ends by the release, not by its
 * 10 s timeout. Waiting with the lock held, the trylock would fail for as long as it sleeps.
 */
static void test_wait_releases_unlocks(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 8, 0);
	unsigned id;
	struct ipc_ring_client *c = add(r, 0, &id);
	struct ipc_ring_cb *cb = r->rd[id].cb;
	struct ipc_ring_batch b[8];
	struct ipc_ring_extent e;
	struct locked_wait f = { .r = r, .rc = 1 };
	pthread_t t;

	(void)state;
	pthread_mutex_init(&f.lock, NULL);
	for (uint64_t s = 0; s < 8; s++) {
		put(r, 500);
		b[s] = take(c, s);
	}
	ipc_ring_collect(r, NULL);
	assert_int_equal(ipc_ring_reserve(r, 500, &e), -EAGAIN);
	assert_int_equal(pthread_create(&t, NULL, locked_waiter, &f), 0);
	while (!atomic_load(&cb->daemon_waiting) && atomic_load(&f.rc) == 1)
		sched_yield(); /* polls: until it sleeps on the doorbell */
	assert_int_equal(atomic_load(&f.rc), 1);
	int got = EBUSY;
	while (atomic_load(&f.rc) == 1 && (got = pthread_mutex_trylock(&f.lock)) == EBUSY)
		sched_yield(); /* polls: the waiter releases the lock once it sleeps */
	assert_int_equal(got, 0);
	assert_int_equal(atomic_load(&f.rc), 1); /* still asleep, and the lock is ours */
	assert_int_equal(ipc_ring_client_release(c, &b[0]), 0);
	pthread_mutex_unlock(&f.lock);
	pthread_join(t, NULL);
	assert_int_equal(atomic_load(&f.rc), 0); /* woken by the release */
	for (uint64_t s = 1; s < 8; s++)
		assert_int_equal(ipc_ring_client_release(c, &b[s]), 0);
	ipc_ring_client_detach(c);
	ipc_ring_destroy(r);
	pthread_mutex_destroy(&f.lock);
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
 * A catch-up reader that attaches to a full ring, already past its limit: no publish can come
 * (every slot is held for it) to run the lag pass after it, so the reserve that finds no room
 * moves it off, and the others go on.
 */
static void test_lag_late_reader_full_ring(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 8, 0);
	unsigned a_id, b_id;
	struct ipc_ring_client *b = add(r, 0, &b_id);
	struct ipc_ring_batch x;
	uint64_t end;

	(void)state;
	for (int i = 0; i < 8; i++)
		put(r, 5000);
	struct ipc_ring_client *a = add_lag(r, 0, 2, &a_id); /* starts at the oldest: 8 behind */
	for (uint64_t s = 0; s < 8; s++)
		take_release(b, s);
	ipc_ring_collect(r, NULL);
	assert_int_equal(ipc_ring_reader_moved(r, a_id), 0);
	assert_int_equal(put(r, 5000), 8); /* no room but what a holds: a is moved off */
	assert_int_equal(ipc_ring_reader_moved(r, a_id), 1);
	assert_int_equal(ipc_ring_move_reader(r, a_id, &end), 0);
	assert_int_equal(end, 0); /* it took nothing */
	assert_int_equal(ipc_ring_client_next(a, 0, &x), -EXDEV);
	take_release(b, 8);
	ipc_ring_collect(r, NULL);
	assert_int_equal(put(r, 5000), 9);
	assert_int_equal(ipc_ring_remove_reader(r, a_id), 0);
	ipc_ring_client_detach(a);
	ipc_ring_client_detach(b);
	ipc_ring_destroy(r);
}

/*
 * The default policy counts a reader's lag from the leading other reader, not from head: the
 * writer running ahead of a reader alone (or of the leader) is no lag; a reader more than
 * max_lag behind the leader is moved off, with IPC_RING_MOVED_LAG.
 */
static void test_lag_behind_others(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 8, 0);
	const struct ipc_ring_lag pol = { .max_lag = 2, .behind_others = true };
	unsigned a_id, b_id;
	struct ipc_ring_client *a = add_policy(r, &pol, &a_id);
	struct ipc_ring_batch x;
	uint64_t end;

	(void)state;
	for (int i = 0; i < 6; i++)
		put(r, 5000); /* 6 > 2 behind head: alone, it holds nobody back */
	assert_int_equal(ipc_ring_reader_moved(r, a_id), 0);
	struct ipc_ring_client *b = add_policy(r, &pol, &b_id); /* starts at low, seq 0 */
	take_release(b, 0);
	take_release(b, 1);
	ipc_ring_collect(r, NULL);
	put(r, 5000); /* b 2 ahead of a: within the limit; b, the leader, 5 behind head */
	assert_int_equal(ipc_ring_reader_moved(r, a_id), 0);
	assert_int_equal(ipc_ring_reader_moved(r, b_id), 0);
	take_release(b, 2);
	ipc_ring_collect(r, NULL);
	assert_int_equal(ipc_ring_reader_moved_why(r, a_id), 0);
	put(r, 5000); /* 3 behind b: moved off */
	assert_int_equal(ipc_ring_reader_moved(r, a_id), 1);
	assert_int_equal(ipc_ring_reader_moved_why(r, a_id), IPC_RING_MOVED_LAG);
	assert_int_equal(ipc_ring_reader_moved(r, b_id), 0);
	assert_int_equal(ipc_ring_move_reader(r, a_id, &end), 0);
	assert_int_equal(end, 0);
	assert_int_equal(ipc_ring_client_next(a, 0, &x), -EXDEV);
	/* b, alone on the stream now, is never moved however far the writer runs ahead */
	for (uint64_t s = 3; s < 30; s++) {
		take_release(b, s);
		ipc_ring_collect(r, NULL);
		put(r, 5000);
	}
	assert_int_equal(ipc_ring_reader_moved(r, b_id), 0);
	assert_int_equal(ipc_ring_set_lag(r, 63, &pol), -ENOENT);
	ipc_ring_client_detach(a);
	ipc_ring_client_detach(b);
	ipc_ring_destroy(r);
}

static _Atomic uint64_t fake_ns;

static uint64_t fake_clock(void)
{
	return atomic_load(&fake_ns);
}

/* A reserve that finds no room; fails the test if it did. */
static void no_room(struct ipc_ring *r)
{
	struct ipc_ring_extent e;

	ipc_ring_collect(r, NULL);
	assert_int_equal(ipc_ring_reserve(r, 5000, &e), -EAGAIN);
}

static uint64_t holding(struct ipc_ring *r, unsigned id)
{
	uint64_t ns = UINT64_MAX;

	assert_int_equal(ipc_ring_reader_holding(r, id, &ns), 0);
	return ns;
}

/*
 * The time bound (on a clock of the test's): a reader that holds the oldest batch, which the
 * other reader released, while the writer finds no room, is moved off once it made no progress
 * (no take, no release) for timeout_ns; progress starts its clock again. A reader without a
 * policy (an explicit hold) is timed too (holding_ns) and never moved; a reader alone holds
 * nobody back.
 */
static void test_lag_time_bound(void **state)
{
	const struct ipc_ring_lag pol = { .max_lag = 100,
					  .behind_others = true,
					  .timeout_ns = 1000 * MS };
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 4, 0);
	unsigned a_id, b_id, h_id;
	struct ipc_ring_client *a = add_policy(r, &pol, &a_id);
	struct ipc_ring_client *b = add_policy(r, &pol, &b_id);
	struct ipc_ring_batch held0, held1, x;
	struct ipc_ring_extent e;

	(void)state;
	r->clock_ns_ = fake_clock;
	atomic_store(&fake_ns, 1000000 * MS);
	for (int i = 0; i < 4; i++)
		put(r, 5000);
	for (uint64_t s = 0; s < 4; s++)
		take_release(b, s);
	held0 = take(a, 0); /* a keeps seq 0, the oldest, and stops */
	no_room(r);	    /* the clock starts */
	assert_int_equal(holding(r, a_id), 0);
	assert_int_equal(holding(r, b_id), 0);
	atomic_fetch_add(&fake_ns, 600 * MS);
	no_room(r);
	assert_int_equal(holding(r, a_id), 600 * MS);
	held1 = take(a, 1); /* progress: the clock starts again at the next look */
	atomic_fetch_add(&fake_ns, 300 * MS);
	no_room(r);
	atomic_fetch_add(&fake_ns, 999 * MS);
	no_room(r); /* 999 ms since its progress: within the bound */
	assert_int_equal(ipc_ring_reader_moved(r, a_id), 0);
	assert_int_equal(holding(r, a_id), 999 * MS);
	atomic_fetch_add(&fake_ns, 1 * MS);
	ipc_ring_collect(r, NULL);
	assert_int_equal(ipc_ring_reserve(r, 5000, &e), 0); /* a moved off: its room is free */
	assert_int_equal(ipc_ring_reader_moved_why(r, a_id), IPC_RING_MOVED_TIME);
	assert_int_equal(ipc_ring_reader_moved(r, b_id), 0);
	assert_int_equal(holding(r, a_id), 0);
	assert_int_equal(ipc_ring_cancel(r, &e), 0);
	assert_true(check(&held0, 0) && check(&held1, 1)); /* what it took stays held for it */
	assert_int_equal(ipc_ring_client_next(a, 0, &x), -EXDEV);
	assert_int_equal(ipc_ring_client_release(a, &held0), 0);
	assert_int_equal(ipc_ring_client_release(a, &held1), 0);
	assert_int_equal(ipc_ring_remove_reader(r, a_id), 0);
	ipc_ring_client_detach(a);

	/* an explicit hold (no policy) is timed, never moved */
	struct ipc_ring_client *h = add(r, 0, &h_id); /* starts at low: holds every batch */
	while (ipc_ring_collect(r, NULL), ipc_ring_reserve(r, 5000, &e) == 0) {
		fill(e.mem, 5000, r->head);
		assert_int_equal(ipc_ring_publish(r, &e, 5000, 7, 0, NULL), 0);
		take_release(b, r->head - 1);
	}
	no_room(r);
	atomic_fetch_add(&fake_ns, 3600000 * MS);
	no_room(r);
	assert_int_equal(holding(r, h_id), 3600000 * MS);
	assert_int_equal(ipc_ring_reader_moved(r, h_id), 0);
	assert_int_equal(ipc_ring_remove_reader(r, h_id), 0);
	ipc_ring_client_detach(h);
	ipc_ring_client_detach(b);
	ipc_ring_destroy(r);

	/* a reader alone holds nobody back: the writer waits for it, however long */
	r = make_ring(IPC_RING_BROADCAST, 1 << 20, 4, 0);
	r->clock_ns_ = fake_clock;
	a = add_policy(r, &pol, &a_id);
	for (int i = 0; i < 4; i++)
		put(r, 5000);
	no_room(r);
	atomic_fetch_add(&fake_ns, 3600000 * MS);
	no_room(r);
	assert_int_equal(ipc_ring_reader_moved(r, a_id), 0);
	assert_int_equal(holding(r, a_id), 0);
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
		struct lag_reader t = { .seed = iter };
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

/* ---- joining at a seq (a reader that comes back to the shared stream) ---- */

/* A broadcast reader of group 0 that starts at seq; fails the test if the ring refuses. */
static struct ipc_ring_client *add_at(struct ipc_ring *r, uint64_t seq, unsigned *ret_id)
{
	struct ipc_ring_client *c = NULL;
	char msg[256] = "";
	int cb_fd;

	assert_int_equal(ipc_ring_add_reader_at(r, 0, seq, ret_id, &cb_fd), 0);
	if (ipc_ring_client_attach(ipc_ring_data_fd(r), cb_fd, &c, msg, sizeof(msg)))
		fail_msg("attach: %s", msg);
	return c;
}

/*
 * A reader added at a seq the ring holds starts exactly there and holds every batch from there
 * on (the ring reclaims none of them for the others); a seq the ring no longer holds (below
 * low) or has not published (past head) is refused with -ERANGE, and only broadcast readers
 * start at a seq of their own.
 */
static void test_join_at_seq(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 8, 0);
	unsigned a_id, b_id, c_id, id;
	struct ipc_ring_client *b = add(r, 0, &b_id), *a, *c;
	struct ipc_ring_batch held, x;
	struct ipc_ring_info info;
	uint64_t seq, holders, lead;
	int cb_fd;

	(void)state;
	for (int i = 0; i < 6; i++)
		put(r, 5000);
	for (uint64_t s = 0; s < 6; s++)
		take_release(b, s);
	ipc_ring_collect(r, NULL);
	assert_int_equal(ipc_ring_lead_cursor(r, IPC_RING_MAX_READERS, &lead), 0);
	assert_int_equal(lead, 6);
	assert_int_equal(ipc_ring_lead_cursor(r, b_id, &lead), -ENOENT);	 /* nobody else */
	assert_int_equal(ipc_ring_add_reader_at(r, 0, 7, &id, &cb_fd), -ERANGE); /* past head */
	a = add_at(r, 3, &a_id);
	/* b released everything: the oldest batch anything holds is a's first */
	assert_int_equal(ipc_ring_oldest(r, &seq, &holders), 0);
	assert_int_equal(seq, 3);
	assert_int_equal(holders, 1ull << a_id);
	take_release(a, 3);
	held = take(a, 4); /* kept */
	take_release(a, 5);
	/* 7 more: the ring reclaims what nobody holds, never 4, nor what a has not taken */
	for (uint64_t s = 6; s < 13; s++) {
		assert_int_equal(put(r, 5000), s);
		take_release(b, s);
		ipc_ring_collect(r, NULL);
	}
	assert_true(check(&held, 4));
	assert_int_equal(ipc_ring_client_next(b, 0, &x), -EAGAIN);
	ipc_ring_get_info(r, &info);
	assert_true(info.low > 4 && info.low <= 6); /* 5 was reclaimed: from 4 on is not whole */
	assert_int_equal(ipc_ring_add_reader_at(r, 0, 4, &id, &cb_fd), -ERANGE);
	assert_int_equal(ipc_ring_add_reader_at(r, 0, info.low - 1, &id, &cb_fd), -ERANGE);
	c = add_at(r, info.low, &c_id);
	for (uint64_t s = info.low; s < 13; s++) {
		take_release(c, s);
		take_release(a, s);
	}
	assert_int_equal(ipc_ring_client_next(c, 0, &x), -EAGAIN);
	assert_int_equal(ipc_ring_client_release(a, &held), 0);
	/* at head: its first batch is the next one published */
	ipc_ring_client_detach(c);
	assert_int_equal(ipc_ring_remove_reader(r, c_id), 0);
	c = add_at(r, 13, &c_id);
	assert_int_equal(ipc_ring_client_next(c, 0, &x), -EAGAIN);
	ipc_ring_collect(r, NULL);
	assert_int_equal(put(r, 5000), 13);
	take_release(c, 13);
	ipc_ring_client_detach(a);
	ipc_ring_client_detach(b);
	ipc_ring_client_detach(c);
	ipc_ring_destroy(r);

	/* split: no seq of its own */
	r = make_ring(IPC_RING_SPLIT, 1 << 20, 8, 0);
	assert_int_equal(ipc_ring_add_reader_at(r, 0, 0, &id, &cb_fd), -EINVAL);
	ipc_ring_destroy(r);
}

/*
 * What the daemon does when a reader moved off the shared stream has caught up: the moved
 * reader's end is the first seq it did not get here; a reader added at that seq, while the
 * ring still holds it, takes exactly the batches the moved one would have, in order, none
 * twice, none left out, while the others go on.
 */
static void test_join_after_move(void **state)
{
	struct ipc_ring *r = make_ring(IPC_RING_BROADCAST, 1 << 20, 8, 0);
	const struct ipc_ring_lag pol = { .max_lag = 2, .behind_others = true };
	unsigned a_id, b_id, c_id;
	struct ipc_ring_client *b = add(r, 0, &b_id);
	struct ipc_ring_client *a = add_policy(r, &pol, &a_id), *c;
	struct ipc_ring_batch x;
	uint64_t end, lead;

	(void)state;
	for (int i = 0; i < 4; i++)
		put(r, 5000);
	take_release(a, 0);
	for (uint64_t s = 0; s < 4; s++)
		take_release(b, s);
	ipc_ring_collect(r, NULL);
	put(r, 5000); /* a: 3 behind b, past its 2: moved off after seq 0 */
	assert_int_equal(ipc_ring_reader_moved(r, a_id), 1);
	assert_int_equal(ipc_ring_move_reader(r, a_id, &end), 0);
	assert_int_equal(end, 1);
	assert_int_equal(ipc_ring_client_next(a, 0, &x), -EXDEV);
	/* the moved reader is nobody's leader: the lead is b's */
	assert_int_equal(ipc_ring_lead_cursor(r, IPC_RING_MAX_READERS, &lead), 0);
	assert_int_equal(lead, 4);
	ipc_ring_client_detach(a);
	assert_int_equal(ipc_ring_remove_reader(r, a_id), 0);
	/* back where it left: the ring still holds seq 1 (nothing needed room since) */
	c = add_at(r, end, &c_id);
	assert_int_equal(ipc_ring_set_lag(r, c_id, &pol), 0);
	for (uint64_t s = end; s < 5; s++)
		take_release(c, s);
	take_release(b, 4);
	for (uint64_t s = 5; s < 30; s++) { /* both go on, c not moved again */
		assert_int_equal(put(r, 5000), s);
		take_release(b, s);
		take_release(c, s);
		ipc_ring_collect(r, NULL);
	}
	assert_int_equal(ipc_ring_reader_moved(r, c_id), 0);
	assert_int_equal(ipc_ring_client_next(c, 0, &x), -EAGAIN);
	ipc_ring_client_detach(b);
	ipc_ring_client_detach(c);
	ipc_ring_destroy(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_futex_on_readonly_mapping),
		cmocka_unit_test(test_next_sleeps_and_wakes),
		cmocka_unit_test(test_wait_releases),
		cmocka_unit_test(test_wait_releases_unlocks),
		cmocka_unit_test(test_threads_broadcast),
		cmocka_unit_test(test_threads_split),
		cmocka_unit_test(test_threads_groups),
		cmocka_unit_test(test_lag_policy),
		cmocka_unit_test(test_lag_late_reader_full_ring),
		cmocka_unit_test(test_lag_behind_others),
		cmocka_unit_test(test_lag_time_bound),
		cmocka_unit_test(test_lag_race),
		cmocka_unit_test(test_join_at_seq),
		cmocka_unit_test(test_join_after_move),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
