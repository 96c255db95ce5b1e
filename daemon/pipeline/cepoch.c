/* SPDX-License-Identifier: Apache-2.0 */
/* A cached epoch: the entries of every file held, and a compact row's id resolved. */
#include "cepoch.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct pl_cepoch {
	atomic_uint refs;
	size_t n_entries;
	struct pl_cache_entry **entries; /* by dataset file index: the plan's files' */
	unsigned shift;			 /* id = file << shift | index (| PL_CROW_VALUES) */
	uint32_t mask;
	uint8_t *heads; /* what every entry's _VALUES records share, or NULL (none has one) */
	uint32_t heads_len;
};

/* e's heads, where it has any, are those of the entries before it (the first sets cx's). */
static bool same_heads(struct pl_cepoch *cx, const struct pl_cache_entry *e)
{
	uint32_t hl;
	const uint8_t *h = pl_cache_entry_heads(e, &hl);
	if (!h)
		return true;
	if (cx->heads)
		return hl == cx->heads_len && memcmp(h, cx->heads, hl) == 0;
	cx->heads = malloc(hl ? hl : 1);
	if (!cx->heads)
		return false; /* the records go as they are */
	memcpy(cx->heads, h, hl);
	cx->heads_len = hl;
	return true;
}

static void cepoch_free(struct pl_cepoch *cx)
{
	for (size_t i = 0; i < cx->n_entries; i++)
		pl_cache_put(cx->entries[i]);
	free(cx->entries);
	free(cx->heads);
	free(cx);
}

int pl_cepoch_create(struct pl_cache *cache, const struct pl_plan *plan, uint64_t proj_key,
		     struct pl_cepoch **ret)
{
	*ret = NULL;
	if (!cache || plan->n_files == 0)
		return 0;
	struct pl_cepoch *cx = calloc(1, sizeof(*cx));
	if (!cx)
		return -ENOMEM;
	atomic_init(&cx->refs, 1);
	uint32_t top = 0; /* the highest file index */
	for (size_t i = 0; i < plan->n_files; i++)
		top = plan->files[i] > top ? plan->files[i] : top;
	cx->n_entries = (size_t)top + 1;
	cx->entries = calloc(cx->n_entries, sizeof(*cx->entries));
	if (!cx->entries) {
		free(cx);
		return -ENOMEM;
	}
	uint64_t most = 0; /* the most records in a file */
	int r = 1;
	for (size_t i = 0; i < plan->n_files && r == 1; i++) {
		uint32_t f = plan->files[i];
		const struct dataset_file *df = &plan->ds->files[f];
		struct pl_cache_key key;
		if (cx->entries[f])
			continue;
		if (pl_cache_key_of(plan->creds, df->path, plan->ds->manifest->compression, &key) <
		    0) {
			r = 0; /* the reader will say what is wrong with the file */
			break;
		}
		key.proj = proj_key;
		struct pl_cache_entry *e = pl_cache_get(cache, &key, NULL); /* ready ones only */
		cx->entries[f] = e;
		if (!e || !pl_cache_entry_all_flat(e) || !same_heads(cx, e))
			r = 0;
		else if (pl_cache_entry_records(e) > most)
			most = pl_cache_entry_records(e);
	}
	while (r == 1 && cx->shift < 32 && (1ull << cx->shift) < most)
		cx->shift++;
	if (r == 1 && (cx->shift > 30 || ((uint64_t)top << cx->shift) >> 31 != 0))
		r = 0; /* over 2^31 ids: the records go as they are */
	if (r == 0) {
		cepoch_free(cx);
		return 0;
	}
	cx->mask = (uint32_t)((1ull << cx->shift) - 1);
	*ret = cx;
	return 1;
}

void pl_cepoch_ref(struct pl_cepoch *cx)
{
	atomic_fetch_add_explicit(&cx->refs, 1, memory_order_relaxed);
}

void pl_cepoch_unref(struct pl_cepoch *cx)
{
	if (cx && atomic_fetch_sub_explicit(&cx->refs, 1, memory_order_acq_rel) == 1)
		cepoch_free(cx);
}

struct pl_cache_entry *pl_cepoch_entry(const struct pl_cepoch *cx, uint32_t file)
{
	return file < cx->n_entries ? cx->entries[file] : NULL;
}

struct pl_crow pl_cepoch_row(const struct pl_cepoch *cx, const struct pl_rec *rec)
{
	return (struct pl_crow){
		.data = rec->data,
		.len = rec->len,
		.id = rec->file << cx->shift | (uint32_t)rec->index |
		      (rec->values ? PL_CROW_VALUES : 0),
	};
}

const uint8_t *pl_cepoch_heads(const struct pl_cepoch *cx, uint32_t *ret_len)
{
	*ret_len = cx->heads_len;
	return cx->heads;
}

int pl_cepoch_rec(const struct pl_cepoch *cx, const struct pl_crow *row, struct pl_rec *ret,
		  uint8_t **buf, size_t *cap)
{
	uint32_t id = row->id & ~PL_CROW_VALUES;
	uint32_t file = id >> cx->shift;
	uint32_t index = id & cx->mask;
	struct pl_cache_rec cr = { .offset = 0, .flags = 0 };
	(void)pl_cache_entry_record(cx->entries[file], index, NULL, 0, &cr); /* ready: 1 */
	*ret = (struct pl_rec){
		.data = row->data,
		.len = row->len,
		.win_len = -1,
		.crc_checked = true,
		.flat = true,
		.decompressed = cr.flags & PL_CACHE_REC_DECOMPRESSED,
		.file = file,
		.index = index,
		.offset = cr.offset,
	};
	if (!(row->id & PL_CROW_VALUES) || !buf)
		return 0;
	size_t n = (size_t)cx->heads_len + row->len; /* its heads put back in front */
	if (*cap < n) {
		uint8_t *b = realloc(*buf, n);
		if (!b)
			return -ENOMEM;
		*buf = b;
		*cap = n;
	}
	memcpy(*buf, cx->heads, cx->heads_len);
	memcpy(*buf + cx->heads_len, row->data, row->len);
	ret->data = *buf;
	ret->len = (uint32_t)n;
	return 0;
}
