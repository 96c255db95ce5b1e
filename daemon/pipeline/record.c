/* SPDX-License-Identifier: Apache-2.0 */
/* Record bytes: block references and the heap block store. */
#include "record.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "io/tfr.h"
#include "mem.h"

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
		pl_mem_uncharge(b->owner, sizeof(*b) + b->cap);
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
		if (pl_mem_take(s->mem, sizeof(*b) + cap, "a block of %zu bytes of records", cap) <
		    0)
			return NULL;
		b = malloc(sizeof(*b) + cap);
		if (!b) {
			pl_mem_uncharge(s->mem, sizeof(*b) + cap);
			return NULL;
		}
		memset(b, 0, sizeof(*b));
		b->cap = cap;
		b->data = (uint8_t *)(b + 1);
		b->free_list = cap == PL_BLOCK_BYTES ? &s->free_blocks : NULL;
		b->owner = b->free_list ? NULL : s->mem;
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

/*
 * Slabs stay on 4 KiB pages: on huge pages (MADV_HUGEPAGE) the first touch of each 2 MiB costs
 * more than the TLB saves on the random draws (this VM: 100,000-record CTR and 10,000-record
 * image buffers, 1 and 3 epochs, docs/pipeline.md); the slots of a big buffer, 80 bytes each
 * and drawn at random, are on huge pages instead (shuffle.c).
 */
#define PL_SLAB_BYTES (2u << 20)

/* A block for a record of len bytes, from its size class or (big) from malloc. */
static struct pl_block *own_get(struct pl_store *s, size_t len)
{
	size_t need = sizeof(struct pl_block) + len;
	size_t c = (need - 1) / PL_OWN_UNIT;
	if (c >= PL_OWN_CLASSES) { /* a big record: a malloc is cheap beside its copy */
		if (pl_mem_take(s->mem, need, "a record of %zu bytes held on its own", len) < 0)
			return NULL;
		struct pl_block *b = malloc(need);
		if (b) {
			memset(b, 0, sizeof(*b));
			b->cap = len;
			b->owner = s->mem;
		} else {
			pl_mem_uncharge(s->mem, need);
		}
		return b;
	}
	struct pl_block *b = s->own_free[c];
	if (b) {
		s->own_free[c] = b->next_free;
		if (b->next_free) /* the next one's line, while this block is filled */
			__builtin_prefetch(&b->next_free->refs, 1);
		return b;
	}
	size_t size = (c + 1) * PL_OWN_UNIT;
	if (s->slab_left < size) { /* the rest of the slab stays unused */
		if (pl_mem_take(s->mem, PL_SLAB_BYTES, "a slab of records held on their own") < 0)
			return NULL;
		uint8_t *slab = aligned_alloc(PL_OWN_UNIT, PL_SLAB_BYTES);
		if (!slab) {
			pl_mem_uncharge(s->mem, PL_SLAB_BYTES);
			return NULL;
		}
		*(void **)(void *)slab = s->slabs;
		s->slabs = slab;
		s->slab = slab + PL_OWN_UNIT;
		s->slab_left = PL_SLAB_BYTES - PL_OWN_UNIT;
	}
	b = (struct pl_block *)(void *)s->slab;
	s->slab += size;
	s->slab_left -= size;
	memset(b, 0, sizeof(*b));
	b->cap = size - sizeof(*b);
	b->free_list = &s->own_free[c];
	return b;
}

int pl_store_own(struct pl_store *s, struct pl_rec *r)
{
	size_t len = (size_t)r->len + TFR_FOOTER_LEN;
	struct pl_block *b = own_get(s, len);
	if (!b)
		return -ENOMEM;
	b->refs = 1;
	b->used = len;
	b->own = true;
	b->data = (uint8_t *)(b + 1);
	memcpy(b->data, r->data, len);
	pl_block_unref(r->blk);
	r->blk = b;
	r->data = b->data;
	s->copied_bytes += r->len;
	return 0;
}

void pl_store_fini(struct pl_store *s)
{
	pl_block_unref(s->cur);
	s->cur = NULL;
	while (s->free_blocks) {
		struct pl_block *b = s->free_blocks;
		s->free_blocks = b->next_free;
		pl_mem_uncharge(s->mem, sizeof(*b) + b->cap);
		free(b);
	}
	memset(s->own_free, 0, sizeof(s->own_free));
	while (s->slabs) {
		void *slab = s->slabs;
		s->slabs = *(void **)slab;
		pl_mem_uncharge(s->mem, PL_SLAB_BYTES);
		free(slab);
	}
	s->slab = NULL;
	s->slab_left = 0;
}
