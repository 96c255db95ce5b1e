/* SPDX-License-Identifier: Apache-2.0 */
/* Stage "shuffle": the shuffle buffer. */
#include "shuffle.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "rng.h"

/*
 * How many draws ahead a slot is fetched. A draw is a number of the stream modulo the buffer's
 * length; the numbers are taken from the stream this far ahead (the stream is the same), their
 * slots prefetched with the length as it is then (it only shrinks, at the end of the input: a
 * wrong guess costs a wasted prefetch). One ahead hid half of a slot's miss in a 100,000
 * element buffer.
 */
#define PL_SHUFFLE_AHEAD 8

struct pl_shuffle {
	struct pl_shuffle_opts o;
	struct pl_rec *buf;
	size_t len, cap;
	bool filled, input_done;
	bool own; /* records enter in blocks of their own (opts.own_over_bytes) */
	/* the stream's next PL_SHUFFLE_AHEAD numbers, oldest at ahead[pos] (once have_ahead) */
	uint64_t ahead[PL_SHUFFLE_AHEAD];
	unsigned pos;
	bool have_ahead;
	struct pl_rng rng;
};

/*
 * The slots, zeroed. A big buffer (100,000 elements: 8 MB) lies on transparent huge pages
 * where the kernel gives them: its slots are drawn at random, and with 4 KiB pages each draw
 * was a TLB miss (a prefetch of its slot waits for the page walk).
 */
static struct pl_rec *slots_alloc(size_t n)
{
	const size_t huge = 2u << 20;
	size_t bytes = n * sizeof(struct pl_rec);
	if (bytes < huge) {
		void *p = aligned_alloc(PL_REC_ALIGN, bytes);
		return p ? memset(p, 0, bytes) : NULL;
	}
	bytes = (bytes + huge - 1) & ~(huge - 1);
	void *p = aligned_alloc(huge, bytes);
	if (!p)
		return NULL;
	(void)madvise(p, bytes, MADV_HUGEPAGE); /* a hint: fine if refused */
	return memset(p, 0, bytes);
}

int pl_shuffle_create(const struct pl_shuffle_opts *opts, struct pl_shuffle **ret)
{
	struct pl_shuffle *sh = calloc(1, sizeof(*sh));
	if (!sh)
		return -ENOMEM;
	sh->o = *opts;
	sh->cap = opts->enabled ? (size_t)opts->buffer : 0;
	if (sh->cap > 1u << 20)
		sh->cap = 1u << 20; /* grows on demand beyond this */
	sh->buf = slots_alloc(sh->cap ? sh->cap : 1);
	if (!sh->buf) {
		free(sh);
		return -ENOMEM;
	}
	sh->o.st->capacity = opts->enabled ? opts->buffer : 0;
	*ret = sh;
	return 0;
}

static void drop_buffer(struct pl_shuffle *sh)
{
	for (size_t i = 0; i < sh->len; i++)
		pl_rec_unref(&sh->buf[i]);
	sh->len = 0;
	sh->o.st->buffered = 0;
}

void pl_shuffle_destroy(struct pl_shuffle *sh)
{
	if (!sh)
		return;
	drop_buffer(sh);
	free(sh->buf);
	free(sh);
}

void pl_shuffle_begin_epoch(struct pl_shuffle *sh, uint64_t epoch)
{
	drop_buffer(sh);
	sh->filled = false;
	sh->input_done = false;
	sh->have_ahead = false;
	pl_rng_init(&sh->rng, sh->o.seed, epoch, PL_STREAM_SHUFFLE, 0);
}

int pl_shuffle_visit(struct pl_shuffle *sh, int (*fn)(void *ctx, struct pl_rec *r), void *ctx)
{
	for (size_t i = 0; i < sh->len; i++) {
		if (!sh->buf[i].blk)
			continue;
		int r = fn(ctx, &sh->buf[i]);
		if (r < 0)
			return r;
	}
	return 0;
}

/* One element from upstream, counted, in a block of its own once the buffer is big. */
static int pull(struct pl_shuffle *sh, struct pl_rec *x, struct io_error *err)
{
	int r = sh->o.next(sh->o.next_ctx, x, err);
	if (r != 1)
		return r;
	struct pl_stage_stats *st = sh->o.st;
	st->elems_in++;
	st->bytes_in += x->len;
	if (!sh->own && st->elems_in >= 16 && sh->o.store &&
	    sh->o.buffer * (st->bytes_in / st->elems_in) > sh->o.own_over_bytes)
		sh->own = true;
	if (sh->own && pl_rec_shared(x)) {
		int e = pl_store_own(sh->o.store, x);
		if (e < 0) {
			pl_rec_unref(x);
			return e;
		}
	}
	return 1;
}

static void prefetch_slot(const struct pl_shuffle *sh, uint64_t v)
{
	const char *slot = (const char *)&sh->buf[pl_rng_reduce(v, sh->len)];
	__builtin_prefetch(slot);
	__builtin_prefetch(slot + sizeof(struct pl_rec) - 1);
}

/* The next draw: an index below sh->len. */
static size_t draw(struct pl_shuffle *sh)
{
	if (!sh->have_ahead) {
		for (unsigned k = 0; k < PL_SHUFFLE_AHEAD; k++) {
			sh->ahead[k] = pl_rng_next(&sh->rng);
			prefetch_slot(sh, sh->ahead[k]);
		}
		sh->have_ahead = true;
		sh->pos = 0;
	}
	uint64_t v = sh->ahead[sh->pos];
	uint64_t nv = pl_rng_next(&sh->rng);
	sh->ahead[sh->pos] = nv;
	sh->pos = (sh->pos + 1) % PL_SHUFFLE_AHEAD;
	prefetch_slot(sh, nv);
	return (size_t)pl_rng_reduce(v, sh->len);
}

static int shuffle_next(struct pl_shuffle *sh, struct pl_rec *ret, struct io_error *err)
{
	size_t want = (size_t)sh->o.buffer;
	int r;
	while (!sh->filled) {
		if (sh->len == want) {
			sh->filled = true;
			break;
		}
		struct pl_rec x;
		r = pull(sh, &x, err);
		if (r < 0)
			return r;
		if (r == 0) {
			sh->filled = true;
			sh->input_done = true;
			break;
		}
		if (sh->len == sh->cap) {
			size_t ncap = sh->cap ? sh->cap * 2 : 64;
			struct pl_rec *nb = slots_alloc(ncap); /* aligned: not realloc */
			if (nb) {
				memcpy(nb, sh->buf, sh->len * sizeof(*nb));
				free(sh->buf);
			}
			if (!nb) {
				pl_rec_unref(&x);
				return -ENOMEM;
			}
			sh->buf = nb;
			sh->cap = ncap;
		}
		sh->buf[sh->len++] = x;
		sh->o.st->buffered = sh->len;
	}
	if (sh->len == 0)
		return 0;
	size_t i = draw(sh);
	*ret = sh->buf[i];
	if (!sh->input_done) {
		struct pl_rec x;
		/* taken: hide it from pl_shuffle_visit, which may run while the buffer is refilled */
		sh->buf[i].blk = NULL;
		r = pull(sh, &x, err);
		if (r < 0) {
			sh->buf[i] = *ret; /* the buffer still owns it: nothing was taken */
			return r;
		}
		if (r == 1) {
			sh->buf[i] = x;
			return 1;
		}
		sh->input_done = true;
	}
	sh->buf[i] = sh->buf[--sh->len];
	sh->o.st->buffered = sh->len;
	return 1;
}

int pl_shuffle_next(struct pl_shuffle *sh, struct pl_rec *ret, struct io_error *err)
{
	if (!sh->o.enabled)
		return sh->o.next(sh->o.next_ctx, ret, err);
	unsigned prev = pl_prof_enter(sh->o.prof, PL_STAGE_SHUFFLE);
	int r = shuffle_next(sh, ret, err);
	if (r == 1) {
		sh->o.st->elems_out++;
		sh->o.st->bytes_out += ret->len;
	}
	pl_prof_leave(sh->o.prof, prev);
	return r;
}
