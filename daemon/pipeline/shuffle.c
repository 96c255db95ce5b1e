/* SPDX-License-Identifier: Apache-2.0 */
/* Stage "shuffle": the shuffle buffer. */
#include "shuffle.h"

#include <errno.h>
#include <stdlib.h>

#include "rng.h"

struct pl_shuffle {
	struct pl_shuffle_opts o;
	struct pl_rec *buf;
	size_t len, cap;
	bool filled, input_done;
	struct pl_rng rng;
};

int pl_shuffle_create(const struct pl_shuffle_opts *opts, struct pl_shuffle **ret)
{
	struct pl_shuffle *sh = calloc(1, sizeof(*sh));
	if (!sh)
		return -ENOMEM;
	sh->o = *opts;
	sh->cap = opts->enabled ? (size_t)opts->buffer : 0;
	if (sh->cap > 1u << 20)
		sh->cap = 1u << 20; /* grows on demand beyond this */
	sh->buf = calloc(sh->cap ? sh->cap : 1, sizeof(*sh->buf));
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

/* One element from upstream, counted. */
static int pull(struct pl_shuffle *sh, struct pl_rec *x, struct io_error *err)
{
	int r = sh->o.next(sh->o.next_ctx, x, err);
	if (r == 1) {
		sh->o.st->elems_in++;
		sh->o.st->bytes_in += x->len;
	}
	return r;
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
			struct pl_rec *nb = realloc(sh->buf, ncap * sizeof(*nb));
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
	size_t i = (size_t)pl_rng_below(&sh->rng, sh->len);
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
