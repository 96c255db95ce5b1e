/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The engine's stages one by one, through the interface the driver gives them: each is fed by
 * a fake upstream (callbacks over arrays) and checked against the semantics doc
 * (docs/pipeline-semantics.md) and its own counters.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/pipeline/batchmem.h"
#include "daemon/pipeline/deliver.h"
#include "daemon/pipeline/files.h"
#include "daemon/pipeline/interleave.h"
#include "daemon/pipeline/rng.h"
#include "daemon/pipeline/shuffle.h"
#include "daemon/pipeline/state.h"
#include "daemon/pipeline/window.h"
#include "ipc/batch.h"

/* ---- a fake upstream: elements 0..n-1 (index = its number, len = 10 + its number) ---- */

struct fake_up {
	size_t n, next;
	size_t fail_at;		  /* return -EIO once when next reaches it (SIZE_MAX: never) */
	int (*during)(void *ctx); /* called inside every pull (to visit a stage meanwhile) */
	void *during_ctx;
	struct pl_block *blk; /* the elements' bytes (NULL: none, like a window's) */
	bool compact;	      /* struct pl_crow elements (id = its number), else struct pl_rec */
};

static void fake_init(struct fake_up *u, size_t n)
{
	memset(u, 0, sizeof(*u));
	u->n = n;
	u->fail_at = SIZE_MAX;
}

static int fake_next(void *ctx, void *elem, struct io_error *err)
{
	struct fake_up *u = ctx;
	if (u->during)
		u->during(u->during_ctx);
	if (u->next == u->fail_at) {
		u->fail_at = SIZE_MAX;
		io_error_set(err, "fake read error");
		return -EIO;
	}
	if (u->next == u->n)
		return 0;
	if (u->compact) {
		struct pl_crow *c = elem;
		*c = (struct pl_crow){ .len = (uint32_t)(10 + u->next), .id = (uint32_t)u->next };
		u->next++;
		return 1;
	}
	struct pl_rec *ret = elem;
	memset(ret, 0, sizeof(*ret));
	ret->index = u->next;
	ret->len = (uint32_t)(10 + u->next);
	ret->blk = u->blk;
	u->next++;
	return 1;
}

static bool is_permutation(const uint64_t *v, size_t n)
{
	uint8_t *seen = calloc(n ? n : 1, 1);
	bool ok = seen != NULL;
	for (size_t i = 0; ok && i < n; i++) {
		if (v[i] >= n || seen[v[i]])
			ok = false;
		else
			seen[v[i]] = 1;
	}
	free(seen);
	return ok;
}

/* ---- files ---- */

/* The semantics doc's file order, written again here from its words. */
static void ref_file_order(const uint32_t *files, size_t n, size_t b, uint64_t seed, uint64_t epoch,
			   uint32_t *out)
{
	struct pl_rng rng;
	pl_rng_init(&rng, seed, epoch, PL_STREAM_FILES, 0);
	if (b > n)
		b = n;
	uint32_t buf[64];
	size_t len = 0, in = 0, o = 0;
	while (in < b)
		buf[len++] = files[in++];
	while (len > 0) {
		size_t i = (size_t)pl_rng_below(&rng, len);
		out[o++] = buf[i];
		buf[i] = in < n ? files[in++] : buf[--len];
	}
}

static size_t files_epoch(struct pl_files *f, uint64_t epoch, uint32_t *out)
{
	size_t n = 0;
	uint32_t x;
	pl_files_begin_epoch(f, epoch);
	while (pl_files_next(f, &x) == 1)
		out[n++] = x;
	return n;
}

static void test_files_order(void **state)
{
	(void)state;
	const uint32_t files[7] = { 3, 5, 8, 9, 11, 12, 20 };
	struct pl_stage_stats st = { 0 };
	struct pl_prof prof = { 0 };
	struct pl_files_opts o = { .files = files, .n_files = 7, .buffer = 3, .seed = 4 };
	o.st = &st;
	o.prof = &prof;
	struct pl_files *f;
	uint32_t got[7], want[7];

	assert_int_equal(pl_files_create(&o, &f), 0); /* no shuffle: as listed */
	assert_int_equal(files_epoch(f, 0, got), 7);
	assert_memory_equal(got, files, sizeof(files));
	assert_int_equal(st.elems_in, 7);
	assert_int_equal(st.elems_out, 7);
	assert_int_equal(st.buffered, 0);
	pl_files_destroy(f);

	o.shuffle = true;
	assert_int_equal(pl_files_create(&o, &f), 0);
	uint32_t e0[7], e1[7];
	for (uint64_t e = 0; e < 4; e++) {
		assert_int_equal(files_epoch(f, e, got), 7);
		ref_file_order(files, 7, 3, 4, e, want);
		assert_memory_equal(got, want, sizeof(got));
		memcpy(e == 0 ? e0 : e1, got, sizeof(got));
	}
	assert_memory_not_equal(e0, e1, sizeof(e0)); /* epoch 3 differs from epoch 0 */
	assert_int_equal(files_epoch(f, 0, got), 7); /* and epoch 0 comes back the same */
	assert_memory_equal(got, e0, sizeof(got));
	/*
	 * The same orders from tests/crosscheck/plref.py (its own Rng, not rng.h), computed once:
	 * shuffle_buffer([3, 5, 8, 9, 11, 12, 20], 3, Rng(seed, epoch, 1, 0)) for (4, 0), (4, 1).
	 */
	const uint32_t plref_e0[7] = { 8, 5, 11, 12, 20, 9, 3 };
	const uint32_t plref_e1[7] = { 3, 5, 11, 12, 20, 8, 9 };
	assert_memory_equal(e0, plref_e0, sizeof(e0));
	assert_int_equal(files_epoch(f, 1, got), 7);
	assert_memory_equal(got, plref_e1, sizeof(got));

	/* the counters: every epoch's files in, buffered what the epoch has not given yet */
	assert_int_equal(st.elems_in, 7 + 6 * 7); /* 7 in file order, then 6 shuffled epochs */
	pl_files_begin_epoch(f, 2);
	assert_int_equal(pl_files_next(f, &got[0]), 1);
	assert_int_equal(pl_files_next(f, &got[1]), 1);
	assert_int_equal(st.buffered, 5);
	assert_int_equal(st.capacity, 7);
	assert_int_equal(st.elems_out, 7 + 6 * 7 + 2);
	pl_files_destroy(f);

	/* another seed, another order (plref: Rng(5, 0, 1, 0)) */
	o.seed = 5;
	assert_int_equal(pl_files_create(&o, &f), 0);
	const uint32_t plref_seed5[7] = { 5, 9, 8, 11, 12, 3, 20 };
	assert_int_equal(files_epoch(f, 0, got), 7);
	assert_memory_equal(got, plref_seed5, sizeof(got));
	pl_files_destroy(f);

	/* a buffer of one keeps the order; one larger than the shard draws from all of it */
	const uint64_t buffers[2] = { 1, 100 };
	for (int k = 0; k < 2; k++) {
		o.buffer = buffers[k];
		assert_int_equal(pl_files_create(&o, &f), 0);
		assert_int_equal(files_epoch(f, 3, got), 7);
		ref_file_order(files, 7, (size_t)buffers[k], 5, 3, want);
		assert_memory_equal(got, want, sizeof(got));
		if (buffers[k] == 1)
			assert_memory_equal(got, files, sizeof(got));
		pl_files_destroy(f);
	}
}

/* ---- shuffle ---- */

/* A shuffle stage over the fake upstream u, counting into st. */
static struct pl_shuffle *shuffle_over(struct fake_up *u, bool enabled, size_t buffer,
				       uint64_t seed, struct pl_stage_stats *st,
				       struct pl_prof *prof)
{
	struct pl_shuffle_opts o = { .enabled = enabled, .buffer = buffer, .seed = seed };
	o.compact = u->compact;
	o.next = fake_next;
	o.next_ctx = u;
	o.st = st;
	o.prof = prof;
	struct pl_shuffle *sh = NULL;
	assert_int_equal(pl_shuffle_create(&o, &sh), 0);
	return sh;
}

static size_t shuffle_epoch(struct pl_shuffle *sh, struct fake_up *u, uint64_t epoch, uint64_t *out)
{
	union {
		struct pl_rec r;
		struct pl_crow c;
	} x;
	struct io_error err;
	size_t n = 0;
	u->next = 0;
	pl_shuffle_begin_epoch(sh, epoch);
	while (pl_shuffle_next(sh, &x, &err) == 1)
		out[n++] = u->compact ? x.c.id : x.r.index;
	return n;
}

/* tf.data's shuffle(buffer) as the semantics doc says it, over 0..n-1. */
static void ref_shuffle(size_t n, size_t b, uint64_t seed, uint64_t epoch, uint64_t *out)
{
	struct pl_rng rng;
	pl_rng_init(&rng, seed, epoch, PL_STREAM_SHUFFLE, 0);
	uint64_t *buf = malloc(b * sizeof(*buf));
	size_t len = 0, in = 0, o = 0;
	assert_non_null(buf);
	while (len < b && in < n)
		buf[len++] = in++;
	while (len > 0) {
		size_t i = (size_t)pl_rng_below(&rng, len);
		out[o++] = buf[i];
		if (in < n)
			buf[i] = in++;
		else
			buf[i] = buf[--len];
	}
	free(buf);
}

static void test_shuffle_permutes(void **state)
{
	(void)state;
	enum { N = 500 };
	static uint64_t got[N], want[N];
	struct fake_up u;
	struct pl_stage_stats st;
	struct pl_prof prof = { 0 };
	const size_t buffers[] = { 1, 7, 100, N, 4 * N };
	/* records, then compact rows (a cached epoch's): the same draws, the same order */
	for (size_t k = 0; k < 2 * sizeof(buffers) / sizeof(buffers[0]); k++) {
		memset(&st, 0, sizeof(st));
		fake_init(&u, N);
		const size_t nb = sizeof(buffers) / sizeof(buffers[0]), b = buffers[k % nb];
		u.compact = k >= nb;
		struct pl_shuffle *sh = shuffle_over(&u, true, b, 11, &st, &prof);
		assert_int_equal(shuffle_epoch(sh, &u, 2, got), N);
		assert_true(is_permutation(got, N));
		ref_shuffle(N, b, 11, 2, want);
		assert_memory_equal(got, want, sizeof(got));
		if (b == 1)
			for (size_t i = 0; i < N; i++)
				assert_int_equal(got[i], i); /* a buffer of one keeps the order */
		assert_int_equal(st.elems_in, N);
		assert_int_equal(st.elems_out, N);
		assert_int_equal(st.bytes_in, st.bytes_out);
		assert_int_equal(st.bytes_out, 10 * N + N * (N - 1) / 2);
		assert_int_equal(st.buffered, 0);
		assert_int_equal(st.capacity, b);
		pl_shuffle_destroy(sh);
	}

	/*
	 * tests/crosscheck/plref.py's order (its own Rng, not rng.h), computed once:
	 * shuffle_buffer(range(20), 5, Rng(11, 2, 2, 0)). The same (seed, epoch) gives it again on
	 * the same stage; another epoch or seed gives another order.
	 */
	static const uint64_t plref[20] = { 4, 1, 5,  6,  2,  3,  7,  8,  11, 13,
					    9, 0, 10, 14, 15, 12, 17, 19, 18, 16 };
	memset(&st, 0, sizeof(st));
	fake_init(&u, 20);
	struct pl_shuffle *sh = shuffle_over(&u, true, 5, 11, &st, &prof);
	const uint64_t runs[4][2] = { { 11, 2 }, { 11, 3 }, { 11, 2 }, { 12, 2 } };
	for (size_t k = 0; k < 4; k++) {
		if (runs[k][0] != 11) {
			pl_shuffle_destroy(sh);
			sh = shuffle_over(&u, true, 5, runs[k][0], &st, &prof);
		}
		assert_int_equal(shuffle_epoch(sh, &u, runs[k][1], got), 20);
		assert_true(is_permutation(got, 20));
		if (k == 1 || k == 3)
			assert_memory_not_equal(got, plref, sizeof(plref));
		else
			assert_memory_equal(got, plref, sizeof(plref));
	}
	pl_shuffle_destroy(sh);

	/* not enabled: straight through, uncounted */
	memset(&st, 0, sizeof(st));
	fake_init(&u, N);
	sh = shuffle_over(&u, false, 100, 11, &st, &prof);
	assert_int_equal(shuffle_epoch(sh, &u, 0, got), N);
	for (size_t i = 0; i < N; i++)
		assert_int_equal(got[i], i);
	assert_int_equal(st.elems_out, 0);
	pl_shuffle_destroy(sh);
}

struct visit_ctx {
	struct pl_shuffle *sh;
	const struct pl_stage_stats *st;
	size_t calls, visited, max_visited;
};

static int count_one(void *ctx, struct pl_rec *r)
{
	struct visit_ctx *v = ctx;
	(void)r;
	v->visited++;
	return 0;
}

/* During every pull: visit the buffer (what the read stage's evacuate hook does). */
static int visit_during(void *ctx)
{
	struct visit_ctx *v = ctx;
	v->calls++;
	v->visited = 0;
	assert_int_equal(pl_shuffle_visit(v->sh, count_one, v), 0);
	if (v->visited > v->max_visited)
		v->max_visited = v->visited;
	assert_true(v->st->buffered <= v->st->capacity);
	return 0;
}

static void test_shuffle_visit_and_error(void **state)
{
	(void)state;
	enum { N = 50, B = 10 };
	struct fake_up u;
	struct pl_stage_stats st = { 0 };
	struct pl_prof prof = { 0 };
	struct visit_ctx v = { 0 };
	struct pl_block blk = { .refs = 1u << 30 }; /* never dropped to 0 here */
	fake_init(&u, N);
	u.blk = &blk;
	u.during = visit_during;
	u.during_ctx = &v;
	v.st = &st;
	v.sh = shuffle_over(&u, true, B, 3, &st, &prof);
	uint64_t got[N];
	assert_int_equal(shuffle_epoch(v.sh, &u, 0, got), N);
	/* refilling after a draw: the drawn element is hidden, so at most B - 1 are visited */
	assert_int_equal(v.max_visited, B - 1);
	assert_true(v.calls > N);

	/*
	 * An upstream error while the buffer fills (at 3) and while a drawn element's place is
	 * refilled (at 20): returned with its message, and nothing is lost (the next pulls go on,
	 * and under ASan nothing leaks).
	 */
	u.during = NULL;
	const size_t fail_at[2] = { 3, 20 };
	for (int k = 0; k < 2; k++) {
		u.next = 0;
		u.fail_at = fail_at[k];
		pl_shuffle_begin_epoch(v.sh, 1);
		size_t n = 0;
		struct pl_rec r;
		struct io_error err;
		int rc, errors = 0;
		while ((rc = pl_shuffle_next(v.sh, &r, &err)) != 0) {
			if (rc == -EIO) {
				errors++;
				assert_string_equal(err.msg, "fake read error");
				continue;
			}
			assert_int_equal(rc, 1);
			got[n++] = r.index;
		}
		assert_int_equal(errors, 1);
		assert_int_equal(n, N);
		assert_true(is_permutation(got, N));
		assert_int_equal(st.buffered, 0);
	}
	pl_shuffle_destroy(v.sh);
}

/* ---- interleave ---- */

/* Fake slots over an epoch of files 0, 1, ... with sizes[f] elements each (element (f, i)). */
struct fake_slots {
	const unsigned *sizes;
	unsigned n_files, next_file;
	unsigned file[8];  /* the file each slot reads */
	unsigned left[8];  /* elements left in it */
	unsigned ready[8]; /* sloppy: elements available without waiting (the rest: -EAGAIN) */
	bool sloppy_test;
	bool fail_open; /* opening file fail_file fails with -EIO */
	unsigned fail_file;
};

static int fs_next(void *ctx, unsigned k, bool wait, struct pl_rec *ret, struct io_error *err)
{
	struct fake_slots *f = ctx;
	(void)err;
	if (f->left[k] == 0)
		return 0;
	if (f->sloppy_test && !wait && f->ready[k] == 0)
		return -EAGAIN;
	if (f->ready[k])
		f->ready[k]--;
	memset(ret, 0, sizeof(*ret));
	ret->file = f->file[k];
	ret->index = f->sizes[f->file[k]] - f->left[k];
	ret->len = 1 + f->file[k]; /* bytes: the file's number plus one */
	f->left[k]--;
	return 1;
}

static int fs_open(void *ctx, unsigned k, struct io_error *err)
{
	struct fake_slots *f = ctx;
	if (f->next_file == f->n_files)
		return 0;
	if (f->fail_open && f->next_file == f->fail_file) {
		io_error_set(err, "cannot open file %u", f->fail_file);
		return -EIO;
	}
	f->file[k] = f->next_file++;
	f->left[k] = f->sizes[f->file[k]];
	return 1;
}

/* An interleave of `cycle` slots over the fake slots f, counting into st. */
static struct pl_interleave *interleave_over(struct fake_slots *f, unsigned cycle, bool sloppy,
					     struct pl_stage_stats *st, struct pl_prof *prof)
{
	struct pl_interleave_opts o = { .cycle = cycle, .sloppy = sloppy, .next = fs_next };
	o.open = fs_open;
	o.ctx = f;
	o.st = st;
	o.prof = prof;
	struct pl_interleave *il = NULL;
	assert_int_equal(pl_interleave_create(&o, &il), 0);
	return il;
}

/* The interleave's elements to its end as 1000 * file + index: their number, or its error. */
static int interleave_epoch(struct pl_interleave *il, uint64_t *out, size_t cap,
			    struct io_error *err)
{
	struct pl_rec r;
	int n = 0, rc = pl_interleave_begin_epoch(il, err);
	while (rc == 0 && (rc = pl_interleave_next(il, &r, err)) == 1) {
		assert_true((size_t)n < cap);
		out[n++] = 1000 * r.file + r.index;
		rc = 0;
	}
	return rc < 0 ? rc : n;
}

/* The semantics doc's interleave (block length 1), written again here from its pseudo-code. */
static size_t ref_interleave(const unsigned *sizes, unsigned n_files, unsigned cycle, uint64_t *out)
{
	unsigned file[8], pos[8], next = 0;
	bool open[8] = { false };
	size_t n = 0;
	for (unsigned k = 0; k < cycle && next < n_files; k++) {
		file[k] = next++;
		pos[k] = 0;
		open[k] = true;
	}
	for (unsigned k = 0;;) {
		bool any = false;
		for (unsigned j = 0; j < cycle; j++)
			any |= open[j];
		if (!any)
			return n;
		if (!open[k]) {
			k = (k + 1) % cycle;
		} else if (pos[k] < sizes[file[k]]) {
			out[n++] = 1000 * file[k] + pos[k]++;
			k = (k + 1) % cycle;
		} else if (next < n_files) {
			file[k] = next++; /* k stays: the new file's first element is next */
			pos[k] = 0;
		} else {
			open[k] = false;
		}
	}
}

static void test_interleave_round_robin(void **state)
{
	(void)state;
	const unsigned two[3] = { 2, 2, 2 };
	struct fake_slots f = { .sizes = two, .n_files = 3 };
	struct pl_stage_stats st = { 0 };
	struct pl_prof prof = { 0 };
	struct pl_interleave *il = interleave_over(&f, 2, false, &st, &prof);
	struct io_error err;
	assert_int_equal(pl_interleave_begin_epoch(il, &err), 0);
	assert_int_equal(st.buffered, 2);
	/* files 0 and 1 in turn; when file 0 ends its slot takes file 2 */
	const unsigned want_file[6] = { 0, 1, 0, 1, 2, 2 };
	const unsigned want_index[6] = { 0, 0, 1, 1, 0, 1 };
	struct pl_rec r;
	for (int i = 0; i < 6; i++) {
		assert_int_equal(pl_interleave_next(il, &r, &err), 1);
		assert_int_equal(r.file, want_file[i]);
		assert_int_equal(r.index, want_index[i]);
	}
	assert_int_equal(pl_interleave_next(il, &r, &err), 0);
	assert_int_equal(st.elems_in, 6);
	assert_int_equal(st.elems_out, 6);
	assert_int_equal(st.bytes_out, 2 * (1 + 2 + 3));
	assert_int_equal(st.buffered, 0);
	assert_int_equal(st.capacity, 2);
	pl_interleave_destroy(il);

	/*
	 * Files of other sizes, empty ones among them, under cycles from 1 to more slots than
	 * files (the extra slots stay closed): the order of the doc's pseudo-code.
	 */
	const unsigned sizes[6] = { 2, 0, 3, 1, 0, 4 };
	uint64_t got[16], want[16];
	for (unsigned cycle = 1; cycle <= 8; cycle++) {
		memset(&f, 0, sizeof(f));
		f.sizes = sizes;
		f.n_files = 6;
		memset(&st, 0, sizeof(st));
		il = interleave_over(&f, cycle, false, &st, &prof);
		size_t n = ref_interleave(sizes, 6, cycle, want);
		assert_int_equal(n, 10);
		assert_int_equal(interleave_epoch(il, got, 16, &err), n);
		assert_memory_equal(got, want, n * sizeof(*got));
		assert_int_equal(st.elems_out, 10);
		assert_int_equal(st.bytes_out, 2 * 1 + 3 * 3 + 1 * 4 + 4 * 6);
		assert_int_equal(st.buffered, 0);
		pl_interleave_destroy(il);
	}

	/* a file that cannot be opened: the error, with its message, when its turn comes */
	memset(&f, 0, sizeof(f));
	f.sizes = sizes;
	f.n_files = 6;
	f.fail_open = true;
	f.fail_file = 3;
	il = interleave_over(&f, 2, false, &st, &prof);
	assert_int_equal(interleave_epoch(il, got, 16, &err), -EIO);
	assert_string_equal(err.msg, "cannot open file 3");
	pl_interleave_destroy(il);
}

static void test_interleave_sloppy(void **state)
{
	(void)state;
	const unsigned two[3] = { 2, 2, 2 };
	struct fake_slots f = { .sizes = two, .n_files = 3, .sloppy_test = true };
	struct pl_stage_stats st = { 0 };
	struct pl_prof prof = { 0 };
	struct pl_interleave *il = interleave_over(&f, 3, true, &st, &prof);
	struct io_error err;
	struct pl_rec r;
	assert_int_equal(pl_interleave_begin_epoch(il, &err), 0);
	f.ready[2] = 1; /* only file 2 has input: it goes first, out of turn */
	assert_int_equal(pl_interleave_next(il, &r, &err), 1);
	assert_int_equal(r.file, 2);
	/* nothing ready: the turn (slot 0) is waited for */
	assert_int_equal(pl_interleave_next(il, &r, &err), 1);
	assert_int_equal(r.file, 0);
	/*
	 * Slot 1's turn now; slot 2 has input ready again and goes first. Then, with nothing
	 * ready, the turns: every element once, each file's in its order (the semantics doc's
	 * guarantee for sloppy).
	 */
	f.ready[2] = 1;
	assert_int_equal(pl_interleave_next(il, &r, &err), 1);
	assert_int_equal(r.file, 2);
	assert_int_equal(r.index, 1);
	unsigned next_index[3] = { 1, 0, 2 };
	size_t n = 3;
	while (pl_interleave_next(il, &r, &err) == 1) {
		assert_true(r.file < 3);
		assert_int_equal(r.index, next_index[r.file]++);
		n++;
	}
	assert_int_equal(n, 6);
	assert_int_equal(next_index[0] + next_index[1] + next_index[2], 6);
	assert_int_equal(st.elems_in, 6);
	assert_int_equal(st.elems_out, 6);
	assert_int_equal(st.buffered, 0);
	pl_interleave_destroy(il);
}

/* ---- window ---- */

/* A fake framer: records 0..n-1 of one file; record i has steps[i] steps (bad: -1). */
struct fake_file {
	size_t n, next;
	const int64_t *steps;
	struct pl_block blk;
	bool flaky, again; /* flaky: every other call without wait is -EAGAIN */
	unsigned agains;
};

static int ff_next(void *ctx, bool wait, struct pl_rec *ret, struct io_error *err)
{
	struct fake_file *f = ctx;
	(void)err;
	if (!wait && f->flaky && (f->again = !f->again)) {
		f->agains++;
		return -EAGAIN;
	}
	if (f->next == f->n)
		return 0;
	memset(ret, 0, sizeof(*ret));
	ret->index = f->next++;
	ret->len = 1;
	ret->blk = &f->blk;
	f->blk.refs++;
	return 1;
}

static int ff_steps(void *ctx, struct pl_rec *rec, int64_t *ret_steps, struct io_error *err)
{
	struct fake_file *f = ctx;
	if (f->steps[rec->index] < 0) {
		io_error_set(err, "record %llu is bad", (unsigned long long)rec->index);
		return -EBADMSG;
	}
	*ret_steps = f->steps[rec->index];
	return 0;
}

/* Window options over the fake file f (the test sets the loader's own). */
static struct pl_window_opts window_over(struct fake_file *f, struct pl_stage_stats *st,
					 struct pl_prof *prof)
{
	struct pl_window_opts o = { .stride = PL_NULL, .next = ff_next, .next_ctx = f };
	o.steps = ff_steps;
	o.steps_ctx = f;
	o.st = st;
	o.prof = prof;
	return o;
}

static void test_window_continuous(void **state)
{
	(void)state;
	/* 6 records of 3, 1, 4, -1 (bad), 2, 5 steps; windows of 4 steps, stride 3 */
	const int64_t steps[6] = { 3, 1, 4, -1, 2, 5 };
	struct fake_file f = { .n = 6, .steps = steps, .blk = { .refs = 1 } };
	struct pl_stage_stats st = { 0 };
	struct pl_prof prof = { 0 };
	struct pl_window_opts o = window_over(&f, &st, &prof);
	o.continuous = true;
	o.min_window = o.max_window = 4;
	o.stride = 3;
	o.on_corrupt = PL_ON_CORRUPT_SKIP_RECORD;
	struct pl_window *w;
	struct io_error err;
	struct pl_rec win;
	assert_int_equal(pl_window_create(&o, &w), 0);
	pl_window_reset(w, 0, 0);
	/* the good records hold steps r0 [0, 3), r1 [3, 4), r2 [4, 8), r4 [8, 10), r5 [10, 15);
	 * windows start at 0, 3, 6, 9 (9 + 4 <= 15) and 12 + 4 > 15 ends it. Window p covers the
	 * records holding steps [p, p + 4). */
	const int64_t want_first[4] = { 0, 1, 2, 4 }; /* index of the first record */
	const int64_t want_skip[4] = { 0, 0, 2, 1 };  /* steps to skip in it */
	const uint32_t want_n[4] = { 2, 2, 2, 2 };
	for (int k = 0; k < 4; k++) {
		assert_int_equal(pl_window_next(w, true, &win, &err), 1);
		assert_int_equal(win.n_win, want_n[k]);
		assert_int_equal(win.win[0].index, want_first[k]);
		assert_int_equal(win.win_skip, want_skip[k]);
		assert_int_equal(win.win_len, 4);
		pl_rec_unref(&win);
	}
	assert_int_equal(pl_window_next(w, true, &win, &err), 0);
	assert_int_equal(st.elems_in, 6);
	assert_int_equal(st.elems_out, 4);
	assert_int_equal(st.dropped, 1); /* the bad record, under skip_record */
	assert_int_equal(st.buffered, 0);
	assert_int_equal(f.blk.refs, 1); /* every record given back */

	/* under fail the bad record is the stream's error */
	f.next = 0;
	o.on_corrupt = PL_ON_CORRUPT_FAIL;
	pl_window_destroy(w);
	assert_int_equal(pl_window_create(&o, &w), 0);
	pl_window_reset(w, 0, 0);
	int r;
	while ((r = pl_window_next(w, true, &win, &err)) == 1)
		pl_rec_unref(&win);
	assert_int_equal(r, -EBADMSG);
	assert_string_equal(err.msg, "record 3 is bad");
	pl_window_destroy(w);
	assert_int_equal(f.blk.refs, 1);
}

/* The next window; without wait, asked again while the input is not ready (-EAGAIN). */
static int window_next_retry(struct pl_window *w, bool wait, struct pl_rec *win,
			     struct io_error *err)
{
	int rc;
	while ((rc = pl_window_next(w, wait, win, err)) == -EAGAIN)
		assert_false(wait);
	return rc;
}

/*
 * Continuous windows with lengths drawn from the stream (seed, epoch, 3, file): the doc's loop
 * written again here (p = 0; L = uniform(min, max); while p + L <= T: emit [p, p + L), p +=
 * stride or L, draw L), each window checked against the records that hold its steps. Without
 * wait, an -EAGAIN in the middle of a window must not draw its length again.
 */
static void check_drawn_windows(struct pl_window *w, const int64_t *steps, size_t n,
				const struct pl_window_opts *o, uint64_t epoch, uint32_t file,
				bool wait)
{
	int64_t start[16] = { 0 }, total = 0;
	for (size_t i = 0; i < n; i++) {
		start[i] = total;
		total += steps[i];
	}
	struct pl_rng rng;
	pl_rng_init(&rng, o->seed, epoch, PL_STREAM_WINDOWS, file);
	struct pl_rec win;
	struct io_error err;
	uint64_t windows = 0;
	pl_window_reset(w, epoch, file);
	for (int64_t p = 0;;) {
		int64_t len =
			o->min_window +
			(int64_t)pl_rng_below(&rng, (uint64_t)(o->max_window - o->min_window + 1));
		if (p + len > total)
			break;
		size_t first = 0, last = 0; /* the records holding steps p and p + len - 1 */
		while (start[first] + steps[first] <= p)
			first++;
		while (start[last] + steps[last] < p + len)
			last++;
		assert_int_equal(window_next_retry(w, wait, &win, &err), 1);
		assert_int_equal(win.n_win, last - first + 1);
		for (uint32_t k = 0; k < win.n_win; k++)
			assert_int_equal(win.win[k].index, first + k);
		assert_int_equal(win.win_skip, p - start[first]);
		assert_int_equal(win.win_len, len);
		pl_rec_unref(&win);
		windows++;
		p += o->stride == PL_NULL ? len : o->stride;
	}
	assert_int_equal(window_next_retry(w, wait, &win, &err), 0);
	assert_true(windows >= 3);
	assert_int_equal(o->st->buffered, 0); /* the file's records all given back */
}

static void test_window_continuous_drawn(void **state)
{
	(void)state;
	const int64_t steps[9] = { 2, 3, 1, 4, 2, 5, 3, 1, 2 }; /* 23 steps */
	struct fake_file f = { .n = 9, .steps = steps, .blk = { .refs = 1 } };
	struct pl_stage_stats st = { 0 };
	struct pl_prof prof = { 0 };
	struct pl_window_opts o = window_over(&f, &st, &prof);
	o.continuous = true;
	o.min_window = 2;
	o.max_window = 5;
	o.seed = 5;
	const int64_t strides[3] = { PL_NULL, 1, 6 }; /* back to back, overlapping, with gaps */
	for (int k = 0; k < 3; k++) {
		o.stride = strides[k];
		struct pl_window *w;
		assert_int_equal(pl_window_create(&o, &w), 0);
		for (uint32_t file = 0; file < 3; file++) { /* one stream per (epoch, file) */
			f.next = 0;
			f.flaky = file == 1; /* its input not always ready */
			f.agains = 0;
			check_drawn_windows(w, steps, 9, &o, 1 + k, file, !f.flaky);
			assert_true(f.flaky ? f.agains >= 9 : f.agains == 0);
		}
		pl_window_destroy(w);
		assert_int_equal(f.blk.refs, 1);
	}
	assert_int_equal(st.elems_in, 3 * 3 * 9);
	assert_int_equal(st.dropped, 0);
}

static void test_window_discrete(void **state)
{
	(void)state;
	const int64_t steps[7] = { 1, 1, 1, 1, 1, 1, 1 };
	struct fake_file f = { .n = 7, .steps = steps, .blk = { .refs = 1 } };
	struct pl_stage_stats st = { 0 };
	struct pl_prof prof = { 0 };
	struct pl_window_opts o = window_over(&f, &st, &prof);
	o.min_window = 2;
	o.max_window = 3;
	o.seed = 9;
	struct pl_window *w;
	struct io_error err;
	struct pl_rec win;
	assert_int_equal(pl_window_create(&o, &w), 0);
	pl_window_reset(w, 1, 4);
	/* windows of k in [2, 3] whole records back to back, drawn from (seed, epoch 1, 3, file 4);
	 * the last window that does not fit is dropped */
	struct pl_rng rng;
	pl_rng_init(&rng, 9, 1, PL_STREAM_WINDOWS, 4);
	uint64_t at = 0;
	for (;;) {
		int64_t k = 2 + (int64_t)pl_rng_below(&rng, 2);
		if (at + (uint64_t)k > 7)
			break;
		assert_int_equal(pl_window_next(w, true, &win, &err), 1);
		assert_int_equal(win.n_win, k);
		assert_int_equal(win.win[0].index, at);
		assert_int_equal(win.win_len, -1);
		pl_rec_unref(&win);
		at += (uint64_t)k;
	}
	assert_int_equal(pl_window_next(w, true, &win, &err), 0);
	assert_int_equal(st.buffered, 0);
	pl_window_destroy(w);
	assert_int_equal(f.blk.refs, 1);
}

/* ---- deliver ---- */

static struct pl_batch make_batch(struct pl_batchmem *mem, uint64_t seq, uint64_t index,
				  uint32_t flags)
{
	struct pl_batch b = { .len = 4096, .seq = seq, .epoch = 0, .rows = 3, .flags = flags };
	void *m = pl_batchmem_alloc(mem, b.len);
	assert_non_null(m);
	memset(m, 0, b.len);
	((struct ipc_batch_hdr *)m)->index_in_epoch = index;
	b.mem = m;
	return b;
}

static void test_deliver_queue(void **state)
{
	(void)state;
	struct pl_batchmem mem;
	pl_batchmem_init(&mem);
	struct pl_deliver_opts o = { .prefetch = 2, .free = pl_batchmem_free, .alloc_ctx = &mem };
	struct pl_deliver *dl;
	struct io_error err;
	assert_int_equal(pl_deliver_create(&o, &dl), 0);
	assert_int_equal(pl_deliver_room(dl), 1);
	pl_deliver_started(dl);
	pl_deliver_started(dl);
	assert_int_equal(pl_deliver_room(dl), 0); /* prefetch 2: two in flight */
	struct pl_batch b0 = make_batch(&mem, 0, 0, 0), b1 = make_batch(&mem, 1, 1, 0);
	assert_int_equal(pl_deliver_put(dl, &b0, &err), 0);
	assert_int_equal(pl_deliver_put(dl, &b1, &err), 0);
	assert_int_equal(pl_deliver_room(dl), 0); /* two ready */
	struct pl_batch_pos last;
	assert_int_equal(pl_deliver_last(dl, &last), 0);
	struct pl_batch *got;
	assert_int_equal(pl_deliver_next(dl, 0, &got, &err), 1);
	assert_int_equal(got->seq, 0);
	assert_int_equal(pl_deliver_room(dl), 1);
	assert_int_equal(pl_deliver_last(dl, &last), 1);
	assert_int_equal(last.seq, 0);
	assert_int_equal(last.index_in_epoch, 0);
	pl_deliver_release(dl, got);

	/* an error comes after the batches before it, then again and again */
	struct io_error e = { { 0 } };
	io_error_set(&e, "first");
	pl_deliver_fail(dl, -EBADMSG, &e);
	io_error_set(&e, "second");
	pl_deliver_fail(dl, -EIO, &e);
	assert_int_equal(pl_deliver_next(dl, 0, &got, &err), 1);
	assert_int_equal(got->seq, 1);
	assert_int_equal(pl_deliver_next(dl, 0, &got, &err), -EBADMSG);
	assert_string_equal(err.msg, "first");
	assert_int_equal(pl_deliver_next(dl, 0, &got, &err), -EBADMSG);

	struct pl_stage_stats st;
	uint64_t rows;
	pl_deliver_get_stats(dl, &st, &rows);
	assert_int_equal(st.elems_in, 2);
	assert_int_equal(st.elems_out, 2);
	assert_int_equal(st.completions, 1); /* one released; the other is still held */
	assert_int_equal(rows, 6);
	assert_int_equal(st.capacity, 2);
	pl_deliver_destroy(dl); /* frees the batch the consumer still holds */
	pl_batchmem_fini(&mem);
}

/* A thread on one side of the deliver stage: the driver waiting for room, or the consumer. */
struct side {
	pthread_t t;
	struct pl_deliver *dl;
	int rc;		      /* the driver: room after its wait; the consumer: next()'s result */
	struct pl_batch *got; /* the consumer's batch */
	atomic_int tid;	      /* the thread's id, once it runs */
	atomic_bool done;
};

static void *driver_waits(void *arg)
{
	struct side *d = arg;
	atomic_store(&d->tid, (int)syscall(SYS_gettid));
	pl_deliver_wait_room(d->dl);
	d->rc = pl_deliver_room(d->dl);
	atomic_store(&d->done, true);
	return NULL;
}

static void *consumer_waits(void *arg)
{
	struct side *c = arg;
	struct io_error err;
	atomic_store(&c->tid, (int)syscall(SYS_gettid));
	c->rc = pl_deliver_next(c->dl, -1, &c->got, &err);
	atomic_store(&c->done, true);
	return NULL;
}

/* Whether thread tid of this process sleeps (state S: here, in the deliver stage's wait). */
static bool sleeping(int tid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *paren = strrchr(buf, ')'); /* "tid (comm) S ..." */
	return paren && paren[1] == ' ' && paren[2] == 'S';
}

/*
 * Start fn on a thread and return once it sleeps in its wait (or returned: a wait that did not
 * wait, which the caller's checks then see), so that the other side's wake-up is what ends it.
 */
static void side_run(struct side *s, struct pl_deliver *dl, void *(*fn)(void *))
{
	s->dl = dl;
	s->got = NULL;
	atomic_store(&s->tid, 0);
	atomic_store(&s->done, false);
	assert_int_equal(pthread_create(&s->t, NULL, fn, s), 0);
	for (;;) {
		int tid = atomic_load(&s->tid);
		if (atomic_load(&s->done) || (tid && sleeping(tid)))
			return;
		sched_yield();
	}
}

/*
 * The two waits, each on another thread that sleeps in it and is woken by the other side:
 * a driver with no room returns when the consumer takes a batch or the stage stops, a consumer
 * with nothing ready returns when a batch is put or the stream ends.
 */
static void test_deliver_waits(void **state)
{
	(void)state;
	struct pl_batchmem mem;
	pl_batchmem_init(&mem);
	struct pl_deliver_opts o = { .prefetch = 1, .free = pl_batchmem_free, .alloc_ctx = &mem };
	struct pl_deliver *dl;
	struct io_error err;
	struct pl_batch *got;
	struct side s;
	assert_int_equal(pl_deliver_create(&o, &dl), 0);

	/* the consumer waits for the first batch */
	side_run(&s, dl, consumer_waits);
	pl_deliver_started(dl);
	struct pl_batch b = make_batch(&mem, 0, 0, 0);
	assert_int_equal(pl_deliver_put(dl, &b, &err), 0);
	assert_int_equal(pthread_join(s.t, NULL), 0);
	assert_int_equal(s.rc, 1);
	assert_int_equal(s.got->seq, 0);
	pl_deliver_release(dl, s.got);

	/* prefetch 1 and one ready: the driver waits until the consumer takes it */
	pl_deliver_started(dl);
	b = make_batch(&mem, 1, 1, IPC_BATCH_F_END_EPOCH);
	assert_int_equal(pl_deliver_put(dl, &b, &err), 0);
	assert_int_equal(pl_deliver_room(dl), 0);
	side_run(&s, dl, driver_waits);
	assert_int_equal(pl_deliver_next(dl, -1, &got, &err), 1);
	assert_int_equal(got->seq, 1);
	assert_int_equal(pthread_join(s.t, NULL), 0);
	assert_int_equal(s.rc, 1);
	pl_deliver_release(dl, got);

	/* nothing ready: a bounded next() times out and says so */
	assert_int_equal(pl_deliver_next(dl, 0, &got, &err), -ETIMEDOUT);
	assert_string_equal(err.msg, "no batch within 0 ms");

	/* the stream ends: the waiting consumer gets 0, and so does every later next() */
	side_run(&s, dl, consumer_waits);
	pl_deliver_finish(dl);
	assert_int_equal(pthread_join(s.t, NULL), 0);
	assert_int_equal(s.rc, 0);
	assert_null(s.got);
	assert_int_equal(pl_deliver_next(dl, -1, &got, &err), 0);

	/* a driver with no room is released by stop, and sees -ECANCELED */
	pl_deliver_started(dl);
	assert_int_equal(pl_deliver_room(dl), 0);
	side_run(&s, dl, driver_waits);
	pl_deliver_stop(dl);
	assert_int_equal(pthread_join(s.t, NULL), 0);
	assert_int_equal(s.rc, -ECANCELED);
	assert_true(pl_deliver_stopped(dl));

	struct pl_stage_stats st;
	uint64_t rows;
	pl_deliver_get_stats(dl, &st, &rows);
	assert_int_equal(st.elems_in, 2);
	assert_int_equal(st.elems_out, 2);
	assert_int_equal(st.completions, 2);
	assert_int_equal(st.buffered, 0);
	assert_int_equal(rows, 6);
	pl_deliver_destroy(dl);
	pl_batchmem_fini(&mem);
}

static int delivered;
static void on_batch(void *ctx, struct pl_batch *b)
{
	(void)ctx;
	(void)b;
	delivered++;
}
static void on_end(void *ctx, int rc, const struct io_error *err)
{
	(void)ctx;
	(void)err;
	delivered = 1000 + rc;
}

static void test_deliver_callback(void **state)
{
	(void)state;
	struct pl_batchmem mem;
	pl_batchmem_init(&mem);
	struct pl_deliver_opts o = { .prefetch = 4, .deliver = on_batch, .end = on_end };
	o.free = pl_batchmem_free;
	o.alloc_ctx = &mem;
	struct pl_deliver *dl;
	struct io_error err;
	struct pl_batch *got;
	assert_int_equal(pl_deliver_create(&o, &dl), 0);
	assert_int_equal(pl_deliver_next(dl, 0, &got, &err), -EINVAL);
	pl_deliver_started(dl);
	struct pl_batch b = make_batch(&mem, 0, 0, IPC_BATCH_F_END_EPOCH);
	delivered = 0;
	assert_int_equal(pl_deliver_put(dl, &b, &err), 0);
	assert_int_equal(delivered, 1);
	pl_deliver_stop(dl);
	assert_int_equal(pl_deliver_room(dl), -ECANCELED);
	pl_deliver_finish(dl);
	assert_int_equal(delivered, 1000 - ECANCELED);
	pl_deliver_destroy(dl);
	pl_batchmem_fini(&mem);
}

/* ---- state ---- */

static void test_state_blob(void **state)
{
	(void)state;
	uint8_t buf[PL_STATE_MAX];
	struct pl_pos pos = { .epoch = 3, .index = 7, .seq = 99 }, back;
	struct io_error err;
	int n = pl_state_write(0x1234, 5, &pos, buf, sizeof(buf));
	assert_int_equal(n, 48);
	assert_int_equal(pl_state_write(0x1234, 5, &pos, buf, 47), -ENOSPC);
	assert_int_equal(pl_state_load(0x1234, 5, buf, (size_t)n, &back, &err), 0);
	assert_memory_equal(&pos, &back, sizeof(pos));
	assert_int_equal(pl_state_load(0x1234, 5, buf, (size_t)n - 1, &back, &err), -EBADMSG);
	assert_string_equal(err.msg, "state: 47 bytes, expected 48");
	assert_int_equal(pl_state_load(0x1235, 5, buf, (size_t)n, &back, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "different pipeline"));
	err.msg[0] = 0;
	assert_int_equal(pl_state_load(0x1234, 6, buf, (size_t)n, &back, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "different pipeline")); /* another seed */
	buf[0] ^= 1;
	assert_int_equal(pl_state_load(0x1234, 5, buf, (size_t)n, &back, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "not a sluice pipeline state"));

	struct pl_batch_pos mid = { .epoch = 2, .index_in_epoch = 4, .seq = 30 };
	struct pl_pos p = pl_state_pos_after(&mid);
	assert_int_equal(p.epoch, 2);
	assert_int_equal(p.index, 5);
	assert_int_equal(p.seq, 31);
	mid.flags = IPC_BATCH_F_END_EPOCH;
	p = pl_state_pos_after(&mid);
	assert_int_equal(p.epoch, 3);
	assert_int_equal(p.index, 0);
	assert_int_equal(p.seq, 31);
}

/* ---- the counters by name ---- */

static void test_stage_counters(void **state)
{
	(void)state;
	struct pl_stage_stats st = { .elems_in = 1, .cpu_ns = 6, .dropped = 11 };
	uint64_t v;
	unsigned k = 0;
	const char *name;
	while ((name = pl_stage_counter(&st, k, &v)) != NULL) {
		if (!strcmp(name, "elems_in"))
			assert_int_equal(v, 1);
		if (!strcmp(name, "cpu_ns"))
			assert_int_equal(v, 6);
		if (!strcmp(name, "dropped"))
			assert_int_equal(v, 11);
		k++;
	}
	assert_int_equal(k, sizeof(st) / sizeof(uint64_t));
	assert_string_equal(pl_stage_name(PL_STAGE_FILES), "files");
	assert_string_equal(pl_stage_name(PL_STAGE_DELIVER), "deliver");
	assert_null(pl_stage_name(PL_STAGE_COUNT_));

	/* the driver's CPU split round by round by sampled time: 3:1, blocked time nobody's */
	struct pl_prof p = { .cur = PL_STAGE_PARSE };
	p.round[PL_STAGE_READ] = 300;
	p.round[PL_STAGE_PARSE] = 100;
	p.round[PL_STAGE_IDLE_] = 5000;
	pl_prof_split(&p, 1000);
	assert_int_equal(p.cpu[PL_STAGE_READ], 750);
	assert_int_equal(p.cpu[PL_STAGE_PARSE], 250);
	assert_int_equal(p.cpu[PL_STAGE_FRAME], 0);
	assert_int_equal(p.round[PL_STAGE_READ], 0); /* the next round starts from nothing */
	/* a round all blocked splits nothing: its CPU goes with the next round's proportions */
	p.round[PL_STAGE_IDLE_] = 700;
	pl_prof_split(&p, 1200);
	assert_int_equal(p.cpu_at, 1000);
	p.round[PL_STAGE_PARSE] = 40;
	pl_prof_split(&p, 1400);
	assert_int_equal(p.cpu[PL_STAGE_READ], 750); /* a one-off read weighs only its stretch */
	assert_int_equal(p.cpu[PL_STAGE_PARSE], 650);
	/* what ran since the last split, in the last round's proportions */
	struct pl_stage_stats all[PL_STAGE_COUNT_] = { { 0 } };
	pl_prof_share(p.cpu, p.last, 100, all);
	assert_int_equal(all[PL_STAGE_READ].cpu_ns, 750);
	assert_int_equal(all[PL_STAGE_PARSE].cpu_ns, 750);
	assert_int_equal(all[PL_STAGE_FRAME].cpu_ns, 0);
	/* before any round closed: nothing to split by */
	struct pl_prof q = { 0 };
	memset(all, 0, sizeof(all));
	pl_prof_share(q.cpu, q.last, 500, all);
	assert_int_equal(all[PL_STAGE_PARSE].cpu_ns, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_files_order),
		cmocka_unit_test(test_shuffle_permutes),
		cmocka_unit_test(test_shuffle_visit_and_error),
		cmocka_unit_test(test_interleave_round_robin),
		cmocka_unit_test(test_interleave_sloppy),
		cmocka_unit_test(test_window_continuous),
		cmocka_unit_test(test_window_continuous_drawn),
		cmocka_unit_test(test_window_discrete),
		cmocka_unit_test(test_deliver_queue),
		cmocka_unit_test(test_deliver_waits),
		cmocka_unit_test(test_deliver_callback),
		cmocka_unit_test(test_state_blob),
		cmocka_unit_test(test_stage_counters),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
