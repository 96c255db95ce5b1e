/* SPDX-License-Identifier: Apache-2.0 */
/* Record bytes: block references and the heap block store. */
#include "record.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "io/tfr.h"

#define PL_BLOCK_BYTES (1u << 20)

static void block_put(struct pl_block *b)
{
	if (b->put) { /* a read buffer: back to its reader */
		b->put(b);
		return;
	}
	if (b->free_list) { /* standard size: keep it (pages stay mapped, no faults next time) */
		b->next_free = *b->free_list;
		*b->free_list = b;
	} else {
		free(b);
	}
}

void pl_block_unref(struct pl_block *b)
{
	if (b && --b->refs == 0)
		block_put(b);
}

void pl_rec_unref(struct pl_rec *r)
{
	if (r->win) {
		for (uint32_t i = 0; i < r->n_win; i++)
			pl_rec_unref(&r->win[i]);
		free(r->win);
		r->win = NULL;
	}
	pl_block_unref(r->blk);
	r->blk = NULL;
}

void pl_rec_ref(struct pl_rec *r)
{
	r->blk->refs++;
}

static struct pl_block *block_get(struct pl_store *s, size_t need)
{
	struct pl_block *b;
	if (need <= PL_BLOCK_BYTES && s->free_blocks) {
		b = s->free_blocks;
		s->free_blocks = b->next_free;
	} else {
		size_t cap = need > PL_BLOCK_BYTES ? need : PL_BLOCK_BYTES;
		b = malloc(sizeof(*b) + cap);
		if (!b)
			return NULL;
		memset(b, 0, sizeof(*b));
		b->cap = cap;
		b->data = (uint8_t *)(b + 1);
		b->free_list = cap == PL_BLOCK_BYTES ? &s->free_blocks : NULL;
	}
	b->refs = 1;
	b->used = 0;
	return b;
}

int pl_store_copy(struct pl_store *s, const uint8_t *data, size_t len, size_t counted,
		  struct pl_block **ret_blk, const uint8_t **ret_data)
{
	struct pl_block *b = s->cur;
	if (!b || b->cap - b->used < len) {
		struct pl_block *nb = block_get(s, len);
		if (!nb)
			return -ENOMEM;
		pl_block_unref(b);
		s->cur = b = nb;
	}
	memcpy(b->data + b->used, data, len);
	*ret_data = b->data + b->used;
	*ret_blk = b;
	b->used += (len + 7) & ~(size_t)7;
	if (b->used > b->cap)
		b->used = b->cap;
	b->refs++;
	s->copied_bytes += counted;
	return 0;
}

int pl_store_move(struct pl_store *s, struct pl_rec *r)
{
	struct pl_block *old = r->blk;
	int e = pl_store_copy(s, r->data, r->len + TFR_FOOTER_LEN, r->len, &r->blk, &r->data);
	if (e < 0) {
		r->blk = old;
		return e;
	}
	pl_block_unref(old);
	return 0;
}

void pl_store_fini(struct pl_store *s)
{
	pl_block_unref(s->cur);
	s->cur = NULL;
	while (s->free_blocks) {
		struct pl_block *b = s->free_blocks;
		s->free_blocks = b->next_free;
		free(b);
	}
}
