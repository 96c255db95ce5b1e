/* SPDX-License-Identifier: Apache-2.0 */
/* Stage "interleave": whose turn it is among the slots. */
#include "interleave.h"

#include <errno.h>
#include <stdlib.h>

struct pl_interleave {
	struct pl_interleave_opts o;
	bool *open; /* per slot: reading a file */
	unsigned n_open;
	unsigned k; /* whose turn */
};

int pl_interleave_create(const struct pl_interleave_opts *opts, struct pl_interleave **ret)
{
	struct pl_interleave *il = calloc(1, sizeof(*il));
	if (!il)
		return -ENOMEM;
	il->o = *opts;
	il->open = calloc(opts->cycle ? opts->cycle : 1, sizeof(*il->open));
	if (!il->open) {
		free(il);
		return -ENOMEM;
	}
	il->o.st->capacity = opts->cycle;
	*ret = il;
	return 0;
}

void pl_interleave_destroy(struct pl_interleave *il)
{
	if (!il)
		return;
	free(il->open);
	free(il);
}

int pl_interleave_begin_epoch(struct pl_interleave *il, struct io_error *err)
{
	il->n_open = 0;
	il->k = 0;
	for (unsigned i = 0; i < il->o.cycle; i++)
		il->open[i] = false;
	for (unsigned i = 0; i < il->o.cycle; i++) {
		int r = il->o.open(il->o.ctx, i, err);
		if (r < 0)
			return r;
		if (r == 0)
			break;
		il->open[i] = true;
		il->n_open++;
	}
	il->o.st->buffered = il->n_open;
	return 0;
}

/* Slot k's file ended: the next file into it, or the slot closes. */
static int advance(struct pl_interleave *il, unsigned k, struct io_error *err)
{
	int r = il->o.open(il->o.ctx, k, err);
	if (r < 0)
		return r;
	if (r == 0) {
		il->open[k] = false;
		il->n_open--;
		il->o.st->buffered = il->n_open;
	}
	return 0;
}

static int took(struct pl_interleave *il, unsigned k, const struct pl_rec *x)
{
	il->k = (k + 1) % il->o.cycle;
	il->o.st->elems_in++;
	il->o.st->elems_out++;
	il->o.st->bytes_out += x->len;
	return 1;
}

static int interleave_next(struct pl_interleave *il, struct pl_rec *out, struct io_error *err)
{
	const unsigned c = il->o.cycle;
	while (il->n_open > 0) {
		unsigned k = il->k;
		if (!il->open[k]) {
			il->k = (k + 1) % c;
			continue;
		}
		int r;
		if (il->o.sloppy) {
			/* take from the first open slot, from k on, that has input ready */
			bool moved = false;
			for (unsigned j = 0; j < c && !moved; j++) {
				unsigned kk = (k + j) % c;
				if (!il->open[kk])
					continue;
				r = il->o.next(il->o.ctx, kk, false, out, err);
				if (r == -EAGAIN)
					continue;
				if (r < 0)
					return r;
				if (r == 1)
					return took(il, kk, out);
				r = advance(il, kk, err);
				if (r < 0)
					return r;
				moved = true;
			}
			if (moved)
				continue;
		}
		r = il->o.next(il->o.ctx, k, true, out, err);
		if (r < 0)
			return r;
		if (r == 1)
			return took(il, k, out);
		r = advance(il, k, err);
		if (r < 0)
			return r;
	}
	return 0;
}

int pl_interleave_next(struct pl_interleave *il, struct pl_rec *ret, struct io_error *err)
{
	unsigned prev = pl_prof_enter(il->o.prof, PL_STAGE_INTERLEAVE);
	int r = interleave_next(il, ret, err);
	pl_prof_leave(il->o.prof, prev);
	return r;
}
