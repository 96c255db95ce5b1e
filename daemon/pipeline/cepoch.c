/* SPDX-License-Identifier: Apache-2.0 */
/* A cached epoch: the entries of every file held, and a compact row's id resolved. */
#include "cepoch.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

struct pl_cepoch {
	atomic_uint refs;
	size_t n_entries;
	struct pl_cache_entry **entries; /* by dataset file index: the plan's files' */
	unsigned shift;			 /* id = file << shift | index */
	uint32_t mask;
};

static void cepoch_free(struct pl_cepoch *cx)
{
	for (size_t i = 0; i < cx->n_entries; i++)
		pl_cache_put(cx->entries[i]);
	free(cx->entries);
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
	uint32_t top = 0; /* the highest file index, then the most records in a file */
	for (size_t i = 0; i < plan->n_files; i++)
		top = plan->files[i] > top ? plan->files[i] : top;
	cx->n_entries = (size_t)top + 1;
	cx->entries = calloc(cx->n_entries, sizeof(*cx->entries));
	if (!cx->entries) {
		free(cx);
		return -ENOMEM;
	}
	uint64_t most = 0;
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
		if (!e || !pl_cache_entry_all_flat(e))
			r = 0;
		else if (pl_cache_entry_records(e) > most)
			most = pl_cache_entry_records(e);
	}
	while (r == 1 && cx->shift < 32 && (1ull << cx->shift) < most)
		cx->shift++;
	if (r == 1 && (cx->shift > 31 || ((uint64_t)top << cx->shift) >> 32 != 0))
		r = 0; /* over 2^32 ids: the records go as they are */
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
		.id = rec->file << cx->shift | (uint32_t)rec->index,
	};
}

void pl_cepoch_rec(const struct pl_cepoch *cx, const struct pl_crow *row, struct pl_rec *ret)
{
	uint32_t file = row->id >> cx->shift;
	uint32_t index = row->id & cx->mask;
	struct pl_cache_rec cr = { .offset = 0, .flags = PL_CACHE_REC_FLAT };
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
}
