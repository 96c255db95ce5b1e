/* SPDX-License-Identifier: Apache-2.0 */
/* The shared record cache (daemon/pipeline/cache.h): entries, budget, LRU, invalidation, threads. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/pipeline/cache.h"
#include "daemon/pipeline/mem.h"

static struct pl_cache_key key(uint64_t ino, int64_t mtime)
{
	struct pl_cache_key k = { .dev = 7, .ino = ino, .size = 1000, .mtime_ns = mtime };
	return k;
}

/* A record of len bytes whose bytes (and 4-byte footer) are a function of (tag, i). */
static void rec_bytes(uint8_t *buf, uint32_t len, uint64_t tag, uint64_t i)
{
	for (uint32_t j = 0; j < len + TFR_FOOTER_LEN; j++)
		buf[j] = (uint8_t)(tag * 31 + i * 7 + j);
}

/* Fill key with n records of len bytes each; true when it became an entry. */
static bool fill(struct pl_cache *c, struct pl_cache_key k, uint64_t n, uint32_t len, uint64_t hint,
		 int *ret_add)
{
	uint8_t buf[4096 + TFR_FOOTER_LEN];
	struct pl_cache_entry *e = pl_cache_fill_begin(c, &k, hint, NULL, 0);
	int r = 0;

	if (ret_add)
		*ret_add = 0;
	if (!e)
		return false;
	for (uint64_t i = 0; i < n && r == 0; i++) {
		rec_bytes(buf, len, k.ino, i);
		r = pl_cache_fill_add(e, buf, len, 100 + i * (len + 16), 0, NULL);
	}
	if (ret_add)
		*ret_add = r;
	pl_cache_fill_end(e, r == 0);
	return r == 0;
}

/* Record i of a ready entry. */
/*
 * A ready entry of k (the caller's reference) of two 8-byte records of rb with flags fl0 and
 * fl1, under the 16 bytes of heads (NULL: none set).
 */
static struct pl_cache_entry *two_records(struct pl_cache *c, const struct pl_cache_key *k,
					  const uint8_t *heads, const uint8_t *rb, unsigned fl0,
					  unsigned fl1)
{
	struct pl_cache_entry *f = pl_cache_fill_begin(c, k, 100, NULL, 0);
	assert_non_null(f);
	if (heads)
		assert_int_equal(pl_cache_fill_heads(f, heads, 16), 0);
	assert_int_equal(pl_cache_fill_add(f, rb, 8, 40, fl0, NULL), 0);
	assert_int_equal(pl_cache_fill_add(f, rb, 8, 60, fl1, NULL), 0);
	pl_cache_fill_end(f, true);
	struct pl_cache_entry *e = pl_cache_get(c, k, NULL);
	assert_non_null(e);
	return e;
}

static void get_rec(struct pl_cache_entry *e, uint64_t i, const uint8_t **d, uint32_t *l,
		    uint64_t *off, unsigned *fl)
{
	struct pl_cache_rec r;

	assert_int_equal(pl_cache_entry_record(e, i, NULL, 0, &r), 1);
	*d = r.data;
	*l = r.len;
	*off = r.offset;
	*fl = r.flags;
}

static void check_entry(struct pl_cache_entry *e, uint64_t tag, uint64_t n, uint32_t len)
{
	uint8_t want[4096 + TFR_FOOTER_LEN];

	assert_int_equal(pl_cache_entry_records(e), n);
	struct pl_cache_rec past;
	assert_int_equal(pl_cache_entry_record(e, n, NULL, 0, &past), 0); /* the end */
	for (uint64_t i = 0; i < n; i++) {
		const uint8_t *d;
		uint32_t l;
		uint64_t off;
		unsigned fl;

		get_rec(e, i, &d, &l, &off, &fl);
		assert_int_equal(fl, 0);
		assert_int_equal(l, len);
		assert_int_equal(off, 100 + i * (len + 16));
		rec_bytes(want, len, tag, i);
		assert_memory_equal(d, want, len + TFR_FOOTER_LEN); /* the footer too */
	}
}

/* A file's records come back as they went in; a second fill of the key is refused. */
static void test_roundtrip(void **state)
{
	struct pl_cache *c;
	struct pl_cache_entry *e, *f;
	struct pl_cache_stats st;
	struct pl_cache_key k = key(1, 5);

	(void)state;
	assert_int_equal(pl_cache_create(1 << 20, &c), 0);
	assert_null(pl_cache_get(c, &k, NULL)); /* a miss */
	assert_true(fill(c, k, 50, 100, 1000, NULL));
	assert_null(pl_cache_fill_begin(c, &k, 1000, NULL, 0)); /* there already */
	e = pl_cache_get(c, &k, NULL);
	assert_non_null(e);
	check_entry(e, 1, 50, 100);
	assert_int_equal(pl_cache_entry_bytes(e), 50 * (100 + TFR_FOOTER_LEN));
	pl_cache_put(e);
	pl_cache_get_stats(c, &st);
	assert_int_equal(st.hits, 1);
	assert_int_equal(st.misses, 1);
	assert_int_equal(st.fills, 1);
	assert_int_equal(st.entries, 1);
	assert_true(st.bytes >= 50 * (100 + TFR_FOOTER_LEN) && st.bytes <= st.budget);
	/* an empty file is an entry too */
	assert_true(fill(c, key(2, 5), 0, 0, 0, NULL));
	e = pl_cache_get(
		c, &(struct pl_cache_key){ .dev = 7, .ino = 2, .size = 1000, .mtime_ns = 5 }, NULL);
	assert_non_null(e);
	assert_int_equal(pl_cache_entry_records(e), 0);
	pl_cache_put(e);
	/*
	 * Projected records (CHECKED) take no footer; whole ones keep theirs; the flags come back.
	 * Another projection key of the same file is another entry.
	 */
	struct pl_cache_key kp = key(1, 5);
	kp.proj = 77;
	assert_null(pl_cache_get(c, &kp, NULL));
	f = pl_cache_fill_begin(c, &kp, 100, NULL, 0);
	assert_non_null(f);
	uint8_t rb[8 + TFR_FOOTER_LEN];
	rec_bytes(rb, 8, 9, 0);
	assert_int_equal(pl_cache_fill_add(f, rb, 8, 40, PL_CACHE_REC_CHECKED, NULL), 0);
	assert_int_equal(pl_cache_fill_add(f, rb, 8, 60, PL_CACHE_REC_DECOMPRESSED, NULL), 0);
	pl_cache_fill_end(f, true);
	e = pl_cache_get(c, &kp, NULL);
	assert_non_null(e);
	assert_int_equal(pl_cache_entry_bytes(e), 8 + 8 + TFR_FOOTER_LEN);
	{
		const uint8_t *d;
		uint32_t l;
		uint64_t off;
		unsigned fl;

		get_rec(e, 0, &d, &l, &off, &fl);
		assert_int_equal(fl, PL_CACHE_REC_CHECKED);
		assert_int_equal(off, 40);
		assert_memory_equal(d, rb, 8);
		get_rec(e, 1, &d, &l, &off, &fl);
		assert_int_equal(fl, PL_CACHE_REC_DECOMPRESSED);
		assert_memory_equal(d, rb, 8 + TFR_FOOTER_LEN);
	}
	assert_false(pl_cache_entry_all_flat(e)); /* no record of it is decoded */
	pl_cache_put(e);

	/* decoded records only (FLAT): all flat once ready, not while being filled */
	struct pl_cache_key kf = key(4, 5);
	kf.proj = 78;
	f = pl_cache_fill_begin(c, &kf, 100, NULL, 0);
	assert_non_null(f);
	const unsigned flat = PL_CACHE_REC_CHECKED | PL_CACHE_REC_FLAT;
	assert_int_equal(pl_cache_fill_add(f, rb, 8, 40, flat, NULL), 0);
	assert_false(pl_cache_entry_all_flat(f));
	assert_int_equal(pl_cache_fill_add(f, rb, 8, 60, flat, NULL), 0);
	pl_cache_fill_end(f, true);
	e = pl_cache_get(c, &kf, NULL);
	assert_non_null(e);
	assert_true(pl_cache_entry_all_flat(e));
	pl_cache_put(e);
	/*
	 * Values only (VALUES) under the heads the filler set once: all flat too; each stored on
	 * an 8-byte boundary whatever came before it (int64 and float arrays), with no footer
	 */
	kf.proj = 80;
	f = pl_cache_fill_begin(c, &kf, 100, NULL, 0);
	assert_non_null(f);
	uint32_t hl = 1;
	assert_null(pl_cache_entry_heads(f, &hl));
	assert_int_equal(hl, 0);
	const uint8_t heads[16] = { 1, 3, 0, 0, 1, 0, 0, 0, 16, 0, 0, 0, 8, 0, 0, 0 };
	assert_int_equal(pl_cache_fill_heads(f, heads, sizeof(heads)), 0);
	assert_int_equal(pl_cache_fill_heads(f, heads, sizeof(heads)), -EEXIST);
	const uint8_t *at[3];
	assert_int_equal(pl_cache_fill_add(f, rb, 5, 10, PL_CACHE_REC_CHECKED, &at[0]), 0);
	assert_int_equal(pl_cache_fill_add(f, rb, 8, 30, PL_CACHE_REC_VALUES, &at[1]), 0);
	assert_int_equal(pl_cache_fill_add(f, rb, 8, 50, PL_CACHE_REC_VALUES, &at[2]), 0);
	assert_int_equal((uintptr_t)at[1] & 7, 0);
	assert_int_equal(at[2] - at[1], 8);
	pl_cache_fill_end(f, true);
	e = pl_cache_get(c, &kf, NULL);
	assert_non_null(e);
	assert_false(pl_cache_entry_all_flat(e)); /* the first is a projection */
	assert_memory_equal(pl_cache_entry_heads(e, &hl), heads, sizeof(heads));
	assert_int_equal(hl, sizeof(heads));
	{
		const uint8_t *d;
		uint32_t l;
		uint64_t off;
		unsigned fl;

		get_rec(e, 1, &d, &l, &off, &fl);
		assert_int_equal(fl, PL_CACHE_REC_VALUES);
		assert_int_equal(l, 8);
		assert_int_equal(off, 30);
		assert_memory_equal(d, rb, 8);
	}
	pl_cache_put(e);
	kf.proj = 81;
	e = two_records(c, &kf, heads, rb, PL_CACHE_REC_VALUES, flat);
	assert_true(pl_cache_entry_all_flat(e)); /* values and whole flat forms */
	assert_int_equal(pl_cache_entry_bytes(e), 16);
	pl_cache_put(e);

	/* one record kept whole among decoded ones: not all flat */
	kf.proj = 79;
	e = two_records(c, &kf, NULL, rb, flat, 0);
	assert_false(pl_cache_entry_all_flat(e));
	pl_cache_put(e);
	e = pl_cache_get(c, &k, NULL); /* the whole records of the same file are still there */
	assert_non_null(e);
	check_entry(e, 1, 50, 100);
	pl_cache_put(e);

	/* a fill given up leaves nothing */
	struct pl_cache_key k3 = key(3, 5);
	f = pl_cache_fill_begin(c, &k3, 100, NULL, 0);
	assert_non_null(f);
	pl_cache_fill_end(f, false);
	assert_null(pl_cache_get(c, &k3, NULL));
	pl_cache_get_stats(c, &st);
	assert_int_equal(st.fill_aborts, 1);
	assert_int_equal(st.entries, 7);
	pl_cache_destroy(c);
}

/*
 * Under a budget: the least recently used entry nobody reads goes first; one being read stays;
 * a fill that cannot fit even so is given up (-ENOSPC) and the bytes go back.
 */
static void test_budget_lru(void **state)
{
	struct pl_cache *c;
	struct pl_cache_entry *a, *b;
	struct pl_cache_stats st;
	int add;

	(void)state;
	assert_int_equal(pl_cache_create(40000, &c), 0);	/* page-granular entries */
	assert_true(fill(c, key(1, 0), 10, 1000, 10100, NULL)); /* ~10 KB each */
	assert_true(fill(c, key(2, 0), 10, 1000, 10100, NULL));
	a = pl_cache_get(c, &(struct pl_cache_key){ .dev = 7, .ino = 1, .size = 1000 }, NULL);
	assert_non_null(a); /* 1 is read now, and more recently used than 2 */
	assert_true(fill(c, key(3, 0), 10, 1000, 10100, NULL)); /* evicts 2 */
	pl_cache_get_stats(c, &st);
	assert_int_equal(st.evictions, 1);
	assert_true(st.bytes <= st.budget);
	assert_null(
		pl_cache_get(c, &(struct pl_cache_key){ .dev = 7, .ino = 2, .size = 1000 }, NULL));
	b = pl_cache_get(c, &(struct pl_cache_key){ .dev = 7, .ino = 3, .size = 1000 }, NULL);
	assert_non_null(b);
	/* both read: a third cannot fit, and its fill is given up midway */
	assert_false(fill(c, key(4, 0), 20, 1000, 1000, &add));
	assert_int_equal(add, -ENOSPC);
	check_entry(a, 1, 10, 1000); /* untouched */
	check_entry(b, 3, 10, 1000);
	pl_cache_put(a);
	pl_cache_put(b);
	pl_cache_get_stats(c, &st);
	assert_true(st.bytes <= st.budget);
	assert_int_equal(st.entries, 2);
	/* now 1 and 3 are unread: a big fill evicts both, the older first */
	assert_true(fill(c, key(6, 0), 25, 1000, 25100, NULL));
	pl_cache_get_stats(c, &st);
	assert_int_equal(st.evictions, 3);
	assert_int_equal(st.entries, 1);
	/* a fill that takes free room only: given up when the room runs out, made where it fits;
	   nothing is evicted */
	struct pl_cache_key k7 = key(7, 0), k8 = key(8, 0);
	struct pl_cache_entry *f = pl_cache_fill_begin(c, &k7, 1000, NULL, PL_CACHE_FILL_NO_EVICT);
	assert_non_null(f);
	uint8_t rb[1000 + TFR_FOOTER_LEN];
	int r = 0;
	for (int i = 0; i < 30 && r == 0; i++) {
		rec_bytes(rb, 1000, 7, (uint64_t)i);
		r = pl_cache_fill_add(f, rb, 1000, 100, 0, NULL);
	}
	assert_int_equal(r, -ENOSPC);
	pl_cache_fill_end(f, false);
	f = pl_cache_fill_begin(c, &k8, 1000, NULL, PL_CACHE_FILL_NO_EVICT);
	assert_non_null(f);
	rec_bytes(rb, 1000, 8, 0);
	assert_int_equal(pl_cache_fill_add(f, rb, 1000, 100, 0, NULL), 0);
	pl_cache_fill_end(f, true);
	pl_cache_get_stats(c, &st);
	assert_int_equal(st.evictions, 3);
	assert_int_equal(st.entries, 2);
	assert_true(st.bytes <= st.budget);
	pl_cache_destroy(c);
}

static uint64_t reclaim_cb(void *ctx, uint64_t need)
{
	return pl_cache_reclaim(ctx, need);
}

/*
 * The cache charged to an account under a root it shares with a pipeline (sluiced's --memory):
 * what it holds is in the account; a pipeline's charge that the root refuses evicts unread
 * entries, least recently used first and no more than it needs, but never one that is read; a
 * fill the root refuses evicts the cache's own unread entries, then is given up.
 */
static void test_account(void **state)
{
	struct pl_mem root, acct, pipe;
	struct pl_cache *c;
	struct pl_cache_stats st;
	int add;

	(void)state;
	pl_mem_init(&root, NULL, 64 << 10, "--memory");
	pl_mem_init(&acct, &root, 0, "the record cache");
	acct.no_reclaim = true;
	pl_mem_init(&pipe, &root, 0, "a pipeline");
	assert_int_equal(pl_cache_create(1 << 20, &c), 0);
	pl_cache_set_account(c, &acct);
	root.reclaim = reclaim_cb;
	root.reclaim_ctx = c;
	for (uint64_t k = 1; k <= 3; k++) /* 12 KiB each (3 pages) */
		assert_true(fill(c, key(k, 0), 10, 1000, 10100, NULL));
	pl_cache_get_stats(c, &st);
	assert_int_equal(st.entries, 3);
	assert_int_equal(pl_mem_used(&acct), st.bytes);
	assert_int_equal(pl_cache_reclaimable(c), st.bytes);
	uint64_t three = st.bytes;
	/* 1 is read; 36 KiB for the pipeline: 64 less the cache's 40.5 does not hold it, so 2
	   (the least recently used of the unread) goes, and nothing more */
	struct pl_cache_entry *a =
		pl_cache_get(c, &(struct pl_cache_key){ .dev = 7, .ino = 1, .size = 1000 }, NULL);
	assert_non_null(a);
	assert_int_equal(pl_cache_reclaimable(c), three / 3 * 2);
	assert_int_equal(pl_mem_charge(&pipe, 36 << 10, NULL), 0);
	pl_cache_get_stats(c, &st);
	assert_int_equal(st.reclaims, 1);
	assert_int_equal(st.entries, 2);
	assert_int_equal(pl_mem_used(&acct), st.bytes);
	assert_null(
		pl_cache_get(c, &(struct pl_cache_key){ .dev = 7, .ino = 2, .size = 1000 }, NULL));
	/* 12 KiB more: 3 goes too; then 12 more cannot be had: 1 is read */
	assert_int_equal(pl_mem_charge(&pipe, 12 << 10, NULL), 0);
	struct pl_mem_full f;
	assert_int_equal(pl_mem_charge(&pipe, 12 << 10, &f), -ENOMEM);
	assert_ptr_equal(f.at, &root);
	pl_cache_get_stats(c, &st);
	assert_int_equal(st.reclaims, 2);
	assert_int_equal(st.entries, 1);
	check_entry(a, 1, 10, 1000); /* untouched */
	/* the root is full: a fill evicts nothing read and is given up */
	assert_false(fill(c, key(4, 0), 10, 1000, 10100, &add));
	pl_cache_get_stats(c, &st);
	assert_int_equal(st.entries, 1);
	assert_int_equal(pl_mem_used(&acct), st.bytes);
	/* the pipeline gives back: the cache fills again, and its bytes are the account's */
	pl_mem_uncharge(&pipe, 48 << 10);
	assert_true(fill(c, key(4, 0), 10, 1000, 10100, NULL));
	pl_cache_get_stats(c, &st);
	assert_int_equal(pl_mem_used(&acct), st.bytes);
	pl_cache_put(a);
	pl_cache_destroy(c);
	assert_int_equal(pl_mem_fini(&acct), 0);
	assert_int_equal(pl_mem_fini(&pipe), 0);
	assert_int_equal(pl_mem_used(&root), 0);
	pl_mem_fini(&root);
}

/*
 * A file that changed (size or mtime) is a new key: the old entry is dropped at its next
 * lookup, at once when nobody reads it, else when its last reader puts it (ASan: no leak, no
 * use after free); a fill in progress for the old contents never becomes an entry.
 */
static void test_invalidation(void **state)
{
	struct pl_cache *c;
	struct pl_cache_entry *old, *f;
	struct pl_cache_stats st;
	uint8_t buf[64];

	(void)state;
	assert_int_equal(pl_cache_create(1 << 20, &c), 0);
	assert_true(fill(c, key(1, 10), 5, 10, 100, NULL));
	old = pl_cache_get(
		c, &(struct pl_cache_key){ .dev = 7, .ino = 1, .size = 1000, .mtime_ns = 10 },
		NULL);
	assert_non_null(old);
	struct pl_cache_key k11 = key(1, 11);
	assert_null(pl_cache_get(c, &k11, NULL)); /* touched: a miss, and the old entry goes */
	check_entry(old, 1, 5, 10);		  /* still readable by whoever reads it */
	pl_cache_put(old);			  /* freed now */
	pl_cache_get_stats(c, &st);
	assert_int_equal(st.invalidations, 1);
	assert_int_equal(st.entries, 0);
	/* a fill of version 11, then the file changes again before it ends */
	f = pl_cache_fill_begin(c, &k11, 100, NULL, 0);
	assert_non_null(f);
	rec_bytes(buf, 10, 1, 0);
	assert_int_equal(pl_cache_fill_add(f, buf, 10, 100, 0, NULL), 0);
	struct pl_cache_key k12 = key(1, 12);
	assert_null(pl_cache_get(c, &k12, NULL));
	pl_cache_fill_end(f, true); /* complete, but stale: not an entry */
	assert_null(pl_cache_get(c, &k11, NULL));
	pl_cache_get_stats(c, &st);
	assert_int_equal(st.entries, 0);
	assert_int_equal(st.bytes, 0);
	pl_cache_destroy(c);
}

/* Threads read entries while another fills and evicts: every record read is right (TSan). */
struct reader_arg {
	struct pl_cache *c;
	unsigned seed;
	uint64_t hits;
};

static void *reader(void *p)
{
	struct reader_arg *a = p;
	uint8_t want[200 + TFR_FOOTER_LEN];

	for (int it = 0; it < 4000; it++) {
		a->seed = a->seed * 1103515245u + 12345u;
		struct pl_cache_key k = key(1 + (a->seed >> 16) % 8, 0);
		struct pl_cache_entry *e = pl_cache_get(a->c, &k, NULL);

		if (!e)
			continue;
		a->hits++;
		uint64_t n = pl_cache_entry_records(e);
		if (n != 20)
			fail_msg("entry %llu has %llu records", (unsigned long long)k.ino,
				 (unsigned long long)n);
		for (uint64_t i = 0; i < n; i++) {
			const uint8_t *d;
			uint32_t l;
			uint64_t off;
			unsigned fl;

			get_rec(e, i, &d, &l, &off, &fl);
			rec_bytes(want, 200, k.ino, i);
			if (l != 200 || memcmp(d, want, 200 + TFR_FOOTER_LEN) != 0)
				fail_msg("entry %llu record %llu differs",
					 (unsigned long long)k.ino, (unsigned long long)i);
		}
		pl_cache_put(e);
	}
	return NULL;
}

static void test_threads(void **state)
{
	struct pl_cache *c;
	pthread_t t[3];
	struct reader_arg a[3];
	struct pl_cache_stats st;
	uint64_t hits = 0;

	(void)state;
	/* room for about 4 of the 8 files: fills keep evicting */
	assert_int_equal(pl_cache_create(4 * 20 * (200 + TFR_FOOTER_LEN) + 4096 * 4, &c), 0);
	for (int i = 0; i < 3; i++) {
		a[i] = (struct reader_arg){ .c = c, .seed = (unsigned)i * 77 + 1 };
		assert_int_equal(pthread_create(&t[i], NULL, reader, &a[i]), 0);
	}
	for (int round = 0; round < 300; round++)
		fill(c, key(1 + (uint64_t)round % 8, 0), 20, 200, 20 * 204, NULL);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		hits += a[i].hits;
	}
	pl_cache_get_stats(c, &st);
	assert_true(st.bytes <= st.budget);
	assert_true(st.evictions > 0);
	print_message("threads: %llu hits, %llu evictions\n", (unsigned long long)hits,
		      (unsigned long long)st.evictions);
	pl_cache_destroy(c);
}

/* A reader of a file being filled: reads each record once published, to the end or the give-up. */
struct follower {
	struct pl_cache_entry *e;
	struct pl_cache_user u;
	uint64_t tag;
	uint64_t n; /* records read */
	int end;    /* what came after the last: 0 (the file's end) or -ECANCELED */
};

static uint32_t follow_len(uint64_t i)
{
	return 50 + (uint32_t)(i % 200);
}

static void *follow_thread(void *p)
{
	struct follower *f = p;
	uint8_t want[300 + TFR_FOOTER_LEN];

	for (uint64_t i = 0;; i++) {
		struct pl_cache_rec r;
		int x;

		while ((x = pl_cache_entry_record(f->e, i, &f->u, 100, &r)) == -EAGAIN)
			;
		if (x != 1) {
			f->n = i;
			f->end = x;
			return NULL;
		}
		rec_bytes(want, follow_len(i), f->tag, i);
		if (r.len != follow_len(i) || r.offset != i ||
		    memcmp(r.data, want, r.len + TFR_FOOTER_LEN) != 0)
			fail_msg("record %llu differs", (unsigned long long)i);
	}
}

static int fill_n(struct pl_cache_entry *e, uint64_t tag, uint64_t from, uint64_t to)
{
	uint8_t buf[300 + TFR_FOOTER_LEN];

	for (uint64_t i = from; i < to; i++) {
		rec_bytes(buf, follow_len(i), tag, i);
		int r = pl_cache_fill_add(e, buf, follow_len(i), i, 0, NULL);
		if (r < 0)
			return r;
	}
	return 0;
}

/*
 * Another pipeline reads a file while it is being filled: every record as it comes, across
 * segments and index blocks, then the end; or, when the fill is given up, -ECANCELED at the
 * record where it stopped. The filler's own lookup is a miss; a lookup without a user sees only
 * ready entries; a reader that cannot wait is told at once.
 */
static void test_follow(void **state)
{
	struct pl_cache *c;
	struct pl_cache_user filler = { 0 };
	struct pl_cache_stats st;
	struct pl_cache_rec r;
	pthread_t t;

	(void)state;
	assert_int_equal(pl_cache_create(1 << 24, &c), 0);
	struct pl_cache_key k = key(1, 0);
	struct pl_cache_entry *e = pl_cache_fill_begin(c, &k, 1000, &filler, 0);
	assert_non_null(e);
	assert_null(pl_cache_get(c, &k, &filler)); /* it would wait for itself */
	assert_null(pl_cache_get(c, &k, NULL));
	struct follower f = { .tag = 1 };
	f.e = pl_cache_get(c, &k, &f.u);
	assert_non_null(f.e);
	assert_false(pl_cache_entry_ready(f.e));
	assert_int_equal(pl_cache_entry_record(f.e, 0, &f.u, 0, &r), -EAGAIN);
	assert_int_equal(pl_cache_entry_record(f.e, 0, NULL, 10, &r), -EDEADLK);
	assert_int_equal(pthread_create(&t, NULL, follow_thread, &f), 0);
	assert_int_equal(fill_n(e, 1, 0, 5000), 0); /* about 750 KB: many segments */
	pl_cache_fill_end(e, true);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(f.end, 0);
	assert_int_equal(f.n, 5000);
	assert_true(pl_cache_entry_ready(f.e));
	pl_cache_put(f.e);
	pl_cache_get_stats(c, &st);
	assert_int_equal(st.follows, 1);
	assert_int_equal(st.fills, 1);

	/* given up midway: its reader learns where, and the entry goes with it (ASan) */
	struct pl_cache_key k2 = key(2, 0);
	e = pl_cache_fill_begin(c, &k2, 1000, &filler, 0);
	assert_non_null(e);
	struct follower g = { .tag = 2 };
	g.e = pl_cache_get(c, &k2, &g.u);
	assert_non_null(g.e);
	assert_int_equal(pthread_create(&t, NULL, follow_thread, &g), 0);
	assert_int_equal(fill_n(e, 2, 0, 300), 0);
	pl_cache_fill_end(e, false);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(g.end, -ECANCELED);
	assert_int_equal(g.n, 300);
	pl_cache_put(g.e);
	assert_null(pl_cache_get(c, &k2, &g.u));
	pl_cache_get_stats(c, &st);
	assert_int_equal(st.fill_aborts, 1);
	pl_cache_destroy(c);
}

/* Two pipelines each filling a file the other reads: one waits, the other is refused at once. */
struct waiter {
	struct pl_cache_entry *e;
	struct pl_cache_user *u;
	int r;
};

static void *wait_thread(void *p)
{
	struct waiter *w = p;
	struct pl_cache_rec r;

	w->r = pl_cache_entry_record(w->e, 0, w->u, 20000, &r);
	return NULL;
}

static void test_follow_cycle(void **state)
{
	struct pl_cache *c;
	struct pl_cache_user a = { 0 }, b = { 0 };
	struct pl_cache_rec r;
	pthread_t t;
	int x = -EAGAIN;

	(void)state;
	assert_int_equal(pl_cache_create(1 << 24, &c), 0);
	struct pl_cache_key kx = key(1, 0), ky = key(2, 0);
	struct pl_cache_entry *fx = pl_cache_fill_begin(c, &kx, 1000, &a, 0);
	struct pl_cache_entry *fy = pl_cache_fill_begin(c, &ky, 1000, &b, 0);
	struct pl_cache_entry *bx = pl_cache_get(c, &kx, &b), *ay = pl_cache_get(c, &ky, &a);
	assert_non_null(bx);
	assert_non_null(ay);
	struct waiter w = { .e = bx, .u = &b };
	assert_int_equal(pthread_create(&t, NULL, wait_thread, &w), 0);
	/* once b waits for a's file, a may not wait for b's (synchronized on the refusal) */
	for (long i = 0; i < 100000000 && x == -EAGAIN; i++) {
		x = pl_cache_entry_record(ay, 0, &a, 0, &r); /* a polls: it waits for nobody */
		sched_yield();
	}
	assert_int_equal(x, -EDEADLK);
	assert_int_equal(fill_n(fx, 1, 0, 1), 0); /* b's wait ends */
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(w.r, 1);
	pl_cache_fill_end(fx, true);
	pl_cache_fill_end(fy, true);
	pl_cache_put(bx);
	pl_cache_put(ay);
	pl_cache_destroy(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),    cmocka_unit_test(test_budget_lru),
		cmocka_unit_test(test_invalidation), cmocka_unit_test(test_threads),
		cmocka_unit_test(test_follow),	     cmocka_unit_test(test_follow_cycle),
		cmocka_unit_test(test_account),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
