/* SPDX-License-Identifier: Apache-2.0 */
/* Stage "shuffle": the shuffle buffer. */
#include "shuffle.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "mem.h"
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
	uint8_t *buf; /* cap elements of esz bytes */
	size_t esz;
	size_t len, cap;
	bool filled, input_done;
	bool own; /* records enter in blocks of their own (opts.own_over_bytes) */
	/* the stream's next PL_SHUFFLE_AHEAD numbers, oldest at ahead[pos] (once have_ahead) */
	uint64_t ahead[PL_SHUFFLE_AHEAD];
	unsigned pos;
	bool have_ahead;
	struct pl_rng rng;
};

/* Element i: a struct pl_rec, or a struct pl_crow when compact. */
static inline void *slot_at(const struct pl_shuffle *sh, size_t i)
{
	return sh->buf + i * sh->esz;
}

static inline struct pl_rec *rec_at(const struct pl_shuffle *sh, size_t i)
{
	return (struct pl_rec *)slot_at(sh, i);
}

/* An element's copy, of a size known where it is inlined (compact is a constant there). */
static inline __attribute__((always_inline)) void elem_copy(void *dst, const void *src,
							    bool compact)
{
	if (compact)
		memcpy(dst, src, sizeof(struct pl_crow));
	else
		memcpy(dst, src, sizeof(struct pl_rec));
}

static inline uint32_t elem_len(const void *x, bool compact)
{
	return compact ? ((const struct pl_crow *)x)->len : ((const struct pl_rec *)x)->len;
}

/*
 * The slots, zeroed. A big buffer (100,000 elements: 8 MB) lies on transparent huge pages
 * where the kernel gives them: its slots are drawn at random, and with 4 KiB pages each draw
 * was a TLB miss (a prefetch of its slot waits for the page walk).
 */
static size_t slots_bytes(size_t n, size_t esz)
{
	const size_t huge = 2u << 20;
	size_t bytes = (n * esz + PL_REC_ALIGN - 1) & ~(size_t)(PL_REC_ALIGN - 1); /* whole lines */
	return bytes < huge ? bytes : (bytes + huge - 1) & ~(huge - 1);
}

static uint8_t *slots_alloc(struct pl_mem *mem, uint64_t buffer, size_t n, size_t esz)
{
	const size_t huge = 2u << 20;
	size_t bytes = slots_bytes(n, esz);
	if (pl_mem_take(mem, bytes,
			"%zu shuffle slots (num_shuffle_buffer_elements %llu), %zu bytes", n,
			(unsigned long long)buffer, bytes) < 0)
		return NULL;
	void *p = aligned_alloc(bytes < huge ? PL_REC_ALIGN : huge, bytes);
	if (!p) {
		pl_mem_uncharge(mem, bytes);
		return NULL;
	}
	if (bytes >= huge)
		(void)madvise(p, bytes, MADV_HUGEPAGE); /* a hint: fine if refused */
	return memset(p, 0, bytes);
}

static void slots_free(struct pl_shuffle *sh, uint8_t *buf, size_t n)
{
	pl_mem_uncharge(sh->o.mem, slots_bytes(n, sh->esz));
	free(buf);
}

int pl_shuffle_create(const struct pl_shuffle_opts *opts, struct pl_shuffle **ret)
{
	struct pl_shuffle *sh = calloc(1, sizeof(*sh));
	if (!sh)
		return -ENOMEM;
	sh->o = *opts;
	sh->esz = opts->compact ? sizeof(struct pl_crow) : sizeof(struct pl_rec);
	sh->cap = opts->enabled ? (size_t)opts->buffer : 0;
	if (sh->cap > 1u << 20)
		sh->cap = 1u << 20; /* grows on demand beyond this */
	sh->buf = slots_alloc(sh->o.mem, opts->buffer, sh->cap ? sh->cap : 1, sh->esz);
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
	for (size_t i = 0; i < sh->len && !sh->o.compact; i++)
		pl_rec_unref(rec_at(sh, i));
	sh->len = 0;
	sh->o.st->buffered = 0;
}

void pl_shuffle_destroy(struct pl_shuffle *sh)
{
	if (!sh)
		return;
	drop_buffer(sh);
	slots_free(sh, sh->buf, sh->cap ? sh->cap : 1);
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
	for (size_t i = 0; i < sh->len && !sh->o.compact; i++) {
		if (!rec_at(sh, i)->blk)
			continue;
		int r = fn(ctx, rec_at(sh, i));
		if (r < 0)
			return r;
	}
	return 0;
}

/* One element from upstream, counted; a record in a block of its own once the buffer is big. */
static inline __attribute__((always_inline)) int pull(struct pl_shuffle *sh, void *elem,
						      struct io_error *err, bool compact)
{
	int r = sh->o.next(sh->o.next_ctx, elem, err);
	if (r != 1)
		return r;
	struct pl_stage_stats *st = sh->o.st;
	st->elems_in++;
	st->bytes_in += elem_len(elem, compact);
	if (compact)
		return 1;
	struct pl_rec *x = elem;
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
	const char *slot = slot_at(sh, pl_rng_reduce(v, sh->len));
	__builtin_prefetch(slot);
	__builtin_prefetch(slot + sh->esz - 1);
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

static inline __attribute__((always_inline)) int shuffle_next(struct pl_shuffle *sh, void *ret,
							      struct io_error *err, bool compact)
{
	size_t want = (size_t)sh->o.buffer;
	union {
		struct pl_rec rec;
		struct pl_crow crow;
	} x;
	int r;
	while (!sh->filled) {
		if (sh->len == want) {
			sh->filled = true;
			break;
		}
		r = pull(sh, &x, err, compact);
		if (r < 0)
			return r;
		if (r == 0) {
			sh->filled = true;
			sh->input_done = true;
			break;
		}
		if (sh->len == sh->cap) {
			size_t ncap = sh->cap ? sh->cap * 2 : 64;
			uint8_t *nb = slots_alloc(sh->o.mem, sh->o.buffer, ncap,
						  sh->esz); /* aligned: not realloc */
			if (nb) {
				memcpy(nb, sh->buf, sh->len * sh->esz);
				slots_free(sh, sh->buf, sh->cap ? sh->cap : 1);
			}
			if (!nb) {
				if (!compact)
					pl_rec_unref(&x.rec);
				return -ENOMEM;
			}
			sh->buf = nb;
			sh->cap = ncap;
		}
		elem_copy(slot_at(sh, sh->len++), &x, compact);
		sh->o.st->buffered = sh->len;
	}
	if (sh->len == 0)
		return 0;
	size_t i = draw(sh);
	void *at = slot_at(sh, i);
	elem_copy(ret, at, compact);
	if (!sh->input_done) {
		/* taken: hide it from pl_shuffle_visit, which may run while the buffer is refilled */
		if (!compact)
			rec_at(sh, i)->blk = NULL;
		r = pull(sh, &x, err, compact);
		if (r < 0) {
			elem_copy(at, ret,
				  compact); /* the buffer still owns it: nothing was taken */
			return r;
		}
		if (r == 1) {
			elem_copy(at, &x, compact);
			return 1;
		}
		sh->input_done = true;
	}
	elem_copy(at, slot_at(sh, --sh->len), compact);
	sh->o.st->buffered = sh->len;
	return 1;
}

int pl_shuffle_next(struct pl_shuffle *sh, void *ret, struct io_error *err)
{
	if (!sh->o.enabled)
		return sh->o.next(sh->o.next_ctx, ret, err);
	unsigned prev = pl_prof_enter(sh->o.prof, PL_STAGE_SHUFFLE);
	bool compact = sh->o.compact;
	int r = compact ? shuffle_next(sh, ret, err, true) : shuffle_next(sh, ret, err, false);
	if (r == 1) {
		sh->o.st->elems_out++;
		sh->o.st->bytes_out += elem_len(ret, compact);
	}
	pl_prof_leave(sh->o.prof, prev);
	return r;
}
