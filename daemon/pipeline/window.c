/* SPDX-License-Identifier: Apache-2.0 */
/* Stage "window": keeps the records a window may still need and cuts windows out of them. */
#include "window.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

/*
 * The records of the current file that a window may still need are kept; `base` is the
 * position (continuous: step, discrete: record) of recs[0] in the file, `p` the next window's
 * start and `len` its length (drawn when needed, one draw per window).
 */
struct pl_window {
	struct pl_window_opts o;
	struct pl_rec *recs;
	int64_t *steps; /* continuous: steps of each record */
	size_t n, cap;
	int64_t base, total; /* total: position after the last kept record */
	int64_t p, len;
	bool have_len, ended;
	struct pl_rng rng;
};

int pl_window_create(const struct pl_window_opts *opts, struct pl_window **ret)
{
	struct pl_window *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->o = *opts;
	*ret = w;
	return 0;
}

static void clear(struct pl_window *w)
{
	for (size_t i = 0; i < w->n; i++)
		pl_rec_unref(&w->recs[i]);
	w->o.st->buffered -= w->n;
	w->n = 0;
}

void pl_window_destroy(struct pl_window *w)
{
	if (!w)
		return;
	clear(w);
	free(w->recs);
	free(w->steps);
	free(w);
}

void pl_window_reset(struct pl_window *w, uint64_t epoch, uint32_t file)
{
	clear(w);
	w->base = w->total = w->p = 0;
	w->have_len = w->ended = false;
	pl_rng_init(&w->rng, w->o.seed, epoch, PL_STREAM_WINDOWS, file);
}

/* Take one more record of the file: 1, 0 (file ended), -errno. */
static int push(struct pl_window *w, bool wait, struct io_error *err)
{
	struct pl_rec rec;
	int r = w->o.next(w->o.next_ctx, wait, &rec, err);
	if (r <= 0) {
		if (r == 0)
			w->ended = true;
		return r;
	}
	w->o.st->elems_in++;
	w->o.st->bytes_in += rec.len;
	int64_t steps = 1;
	if (w->o.continuous) {
		r = w->o.steps(w->o.steps_ctx, &rec, &steps, err);
		if (r < 0) {
			pl_rec_unref(&rec);
			if (r == -ENOMEM || w->o.on_corrupt == PL_ON_CORRUPT_FAIL)
				return r;
			w->o.st->dropped++;
			return 1;
		}
	}
	if (w->n == w->cap) {
		size_t ncap = w->cap ? w->cap * 2 : 16;
		struct pl_rec *nr = realloc(w->recs, ncap * sizeof(*nr));
		if (nr)
			w->recs = nr;
		int64_t *ns = realloc(w->steps, ncap * sizeof(*ns));
		if (ns)
			w->steps = ns;
		if (!nr || !ns) {
			pl_rec_unref(&rec);
			return -ENOMEM;
		}
		w->cap = ncap;
	}
	w->recs[w->n] = rec;
	w->steps[w->n] = steps;
	w->n++;
	w->o.st->buffered++;
	if (w->o.st->buffered > w->o.st->capacity)
		w->o.st->capacity = w->o.st->buffered; /* the most it held */
	w->total += steps;
	return 1;
}

/* Forget the records that end at or before position p. */
static void drop_before(struct pl_window *w, int64_t p)
{
	size_t k = 0;
	while (k < w->n && w->base + w->steps[k] <= p) {
		w->base += w->steps[k];
		pl_rec_unref(&w->recs[k]);
		k++;
	}
	if (k) {
		memmove(w->recs, w->recs + k, (w->n - k) * sizeof(*w->recs));
		memmove(w->steps, w->steps + k, (w->n - k) * sizeof(*w->steps));
		w->n -= k;
		w->o.st->buffered -= k;
	}
}

static int window_next(struct pl_window *w, bool wait, struct pl_rec *out, struct io_error *err)
{
	const struct pl_window_opts *c = &w->o;
	bool cont = c->continuous;
	if (!w->have_len) {
		w->len = c->min_window +
			 (int64_t)pl_rng_below(&w->rng,
					       (uint64_t)(c->max_window - c->min_window + 1));
		w->have_len = true;
	}
	while (w->total < w->p + w->len) {
		if (w->ended) {
			clear(w);
			return 0;
		}
		int r = push(w, wait, err);
		if (r < 0)
			return r;
	}
	/* the records covering [p, p + len) */
	size_t i = 0;
	int64_t at = w->base;
	while (i < w->n && at + w->steps[i] <= w->p) {
		at += w->steps[i];
		i++;
	}
	int64_t skip = w->p - at;
	size_t j = i;
	for (int64_t end = at; j < w->n && end < w->p + w->len; j++)
		end += w->steps[j];
	if (!cont)
		j = i + (size_t)w->len; /* whole records, even those of length 0 */
	struct pl_rec *win = malloc((j - i) * sizeof(*win));
	if (!win)
		return -ENOMEM;
	for (size_t k = i; k < j; k++) {
		win[k - i] = w->recs[k];
		pl_rec_ref(&win[k - i]);
	}
	*out = win[0];
	out->blk = NULL;
	out->win = win;
	out->n_win = (uint32_t)(j - i);
	out->win_skip = cont ? (int32_t)skip : 0;
	out->win_len = cont ? (int32_t)w->len : -1;
	w->p += cont && c->stride != PL_NULL ? c->stride : w->len;
	w->have_len = false;
	drop_before(w, w->p);
	w->o.st->elems_out++;
	return 1;
}

int pl_window_next(struct pl_window *w, bool wait, struct pl_rec *ret, struct io_error *err)
{
	unsigned prev = pl_prof_enter(w->o.prof, PL_STAGE_WINDOW);
	int r = window_next(w, wait, ret, err);
	pl_prof_leave(w->o.prof, prev);
	return r;
}
