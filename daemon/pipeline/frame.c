/* SPDX-License-Identifier: Apache-2.0 */
/* Stage "frame": a tfr_reader over the chunks of one file at a time; records kept zero-copy. */
#include "frame.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "index_store.h"
#include "mem.h"
#include "stage.h"

/* Following a file another pipeline is putting in the cache: how long to wait at a time, and
   how long without a new record before reading the file instead. */
#define FOLLOW_POLL_MS	50
#define FOLLOW_STALL_MS 250
#define FELL_BACK	2 /* hit_next: the file is read after all, from where the cache stopped */

/* A cache entry as a block its records point into: the entry's reference goes with it. */
struct cached_blk {
	struct pl_block blk;
	struct pl_cache_entry *e;
};

struct pl_frame {
	struct pl_frame_opts o;
	struct tfr_reader *rd;
	bool open;	  /* framing a file */
	bool finishing;	  /* the file's last chunk was fed */
	uint32_t file;	  /* index into the dataset's files */
	const char *path; /* its path and size */
	uint64_t size;
	uint64_t skip_to;     /* records before this one were framed from the cache already */
	struct pl_block *cur; /* the chunk being framed (one reference held here) */
	/* the cache: the key of the file pl_frame_open_cached looked up */
	struct pl_cache_key key;
	bool have_key;
	struct pl_cache_entry *fill; /* the file being put in the cache, or NULL */
	struct cached_blk *fill_blk; /* the fill as a block: projected records point into it */
	struct cached_blk *hit;	     /* the file being framed from the cache (a reference) */
	uint64_t hit_next;	     /* its next record */
	struct pl_own_collect own;   /* the file's entry in sluiced's own index, as it is framed */
};

/* tfr_reader_opts.reserve: a record to assemble, charged to the pipeline's account. */
static int reserve_record(void *ctx, uint64_t bytes, char *why, size_t why_cap)
{
	struct pl_mem_full f;
	if (pl_mem_charge(ctx, bytes, &f) == 0)
		return 0;
	pl_mem_full_text(&f, why, why_cap);
	return -ENOMEM;
}

static void unreserve_record(void *ctx, uint64_t bytes)
{
	pl_mem_uncharge(ctx, bytes);
}

int pl_frame_create(const struct pl_frame_opts *opts, struct pl_frame **ret)
{
	struct pl_frame *fr = calloc(1, sizeof(*fr));
	if (!fr)
		return -ENOMEM;
	fr->o = *opts;
	struct tfr_reader_opts ro;
	tfr_reader_opts_init(&ro);
	ro.compression = opts->compression;
	ro.defer_data_crc = true; /* checked by the parse task that reads the record */
	if (opts->mem) {
		ro.reserve = reserve_record;
		ro.unreserve = unreserve_record;
		ro.reserve_ctx = opts->mem;
	}
	fr->rd = tfr_reader_create(&ro);
	if (!fr->rd) {
		free(fr);
		return -ENOMEM;
	}
	*ret = fr;
	return 0;
}

static void release_chunk(struct pl_frame *fr)
{
	pl_block_unref(fr->cur);
	fr->cur = NULL;
}

/* A whole file's entry (held bytes), as a sample of what the dataset takes in the cache. */
static void sample(struct pl_frame *fr, uint64_t held)
{
	if (!held)
		return; /* dropped meanwhile */
	fr->o.tot->sample_bytes += held;
	fr->o.tot->sample_file_bytes += fr->size;
}

uint64_t pl_frame_cache_need(const struct pl_frame_totals *tot, uint64_t dataset_bytes)
{
	if (!tot->sample_file_bytes)
		return 0;
	return (uint64_t)((double)tot->sample_bytes / (double)tot->sample_file_bytes *
			  (double)dataset_bytes);
}

/* The fill in progress ends: complete (the file framed to its end) makes it an entry. */
static void fill_end(struct pl_frame *fr, bool complete)
{
	if (fr->fill_blk) /* its records keep the entry */
		pl_block_unref(&fr->fill_blk->blk);
	fr->fill_blk = NULL;
	if (!fr->fill)
		return;
	sample(fr, pl_cache_fill_end(fr->fill, complete));
	fr->fill = NULL;
	if (complete)
		fr->o.tot->cache_filled++;
}

static void cached_put(struct pl_block *b)
{
	struct cached_blk *cb = (struct cached_blk *)b;
	pl_cache_put(cb->e);
	free(cb);
}

/* Entry e as a block for records (one reference: the caller's), or NULL (out of memory). */
static struct cached_blk *cached_blk_new(struct pl_cache_entry *e)
{
	struct cached_blk *cb = calloc(1, sizeof(*cb));
	if (!cb)
		return NULL;
	cb->e = e;
	cb->blk.put = cached_put;
	cb->blk.pin = true;
	cb->blk.cached = true;
	cb->blk.owner = e; /* the heads of its _VALUES records (pl_row_flat_heads) */
	cb->blk.refs = 1;
	return cb;
}

/*
 * Whether a flat record of the file being cached has the heads of its first (which set them):
 * then only its values go in the cache.
 */
static bool uniform(struct pl_frame *fr, const uint8_t *flat, uint32_t len)
{
	uint32_t hl = fr->o.flat_heads, have;
	if (!hl || len < hl)
		return false;
	const uint8_t *h = pl_cache_entry_heads(fr->fill, &have);
	if (!h)
		return pl_cache_fill_heads(fr->fill, flat, hl) == 0;
	return have == hl && memcmp(h, flat, hl) == 0;
}

/*
 * Put the record just framed in the cache: projected when it can be, else whole. A projected
 * record goes on as its cached copy: downstream decodes the few features it keeps rather than
 * the whole record again, exactly as a later epoch does (the projection was checked to decode).
 */
static int fill_add(struct pl_frame *fr, struct pl_rec *rec)
{
	unsigned flags = rec->decompressed ? PL_CACHE_REC_DECOMPRESSED : 0;
	const uint8_t *data = rec->data, *stored;
	uint32_t len = rec->len;
	int r = 0;
	bool values = false;
	if (fr->o.project) {
		r = fr->o.project(fr->o.project_ctx, rec, &data, &len);
		if (r < 0)
			return r;
		if (r == 1)
			flags |= PL_CACHE_REC_CHECKED;
		else if (r == 2)
			values = uniform(fr, data, len);
		else
			data = rec->data, len = rec->len;
		if (r == 2)
			flags |= values ? PL_CACHE_REC_VALUES : PL_CACHE_REC_FLAT;
	}
	uint32_t skip = values ? fr->o.flat_heads : 0;
	int a = pl_cache_fill_add(fr->fill, data + skip, len - skip, rec->offset, flags, &stored);
	if (a < 0 || r < 1 || !fr->fill_blk)
		return a;
	pl_block_unref(rec->blk);
	fr->fill_blk->blk.refs++;
	rec->blk = &fr->fill_blk->blk;
	rec->data = stored;
	rec->len = len - skip;
	rec->crc_checked = true;
	rec->flat = r == 2;
	rec->values = values; /* its heads: the entry's */
	return 0;
}

/* The file framed from the cache is done with (its records keep the entry until dropped). */
static void hit_end(struct pl_frame *fr)
{
	if (fr->hit)
		pl_block_unref(&fr->hit->blk);
	fr->hit = NULL;
}

void pl_frame_abandon(struct pl_frame *fr)
{
	pl_own_collect_drop(&fr->own);
	fill_end(fr, false);
	if (fr->hit)
		hit_end(fr);
	else
		fr->o.abandon(fr->o.read_ctx);
	release_chunk(fr);
	fr->open = false;
}

void pl_frame_destroy(struct pl_frame *fr)
{
	if (!fr)
		return;
	fill_end(fr, false);
	hit_end(fr);
	release_chunk(fr);
	pl_own_collect_fini(&fr->own);
	tfr_reader_destroy(fr->rd);
	free(fr);
}

int pl_frame_open_cached(struct pl_frame *fr, uint32_t file, const char *path, uint64_t size)
{
	fr->have_key = false;
	pl_own_collect_drop(&fr->own);
	fr->path = path;
	fr->size = size;
	if (!fr->o.cache || pl_cache_key_of(fr->o.creds, path, fr->o.compression, &fr->key) < 0)
		return 0; /* no cache, or the reader will say what is wrong with the file */
	fr->key.proj = fr->o.project ? fr->o.proj_key : 0;
	fr->have_key = true;
	struct pl_cache_entry *e = pl_cache_get(fr->o.cache, &fr->key, fr->o.cache_user);
	if (!e)
		return 0;
	struct cached_blk *cb = cached_blk_new(e); /* the frame's reference, until the file's
						     last record was handed on */
	if (!cb) {
		pl_cache_put(e);
		return 0; /* read it instead */
	}
	if (!pl_cache_entry_ready(e))
		fr->o.tot->cache_followed++;
	else
		sample(fr, pl_cache_entry_held(e));
	fr->hit = cb;
	fr->hit_next = 0;
	fr->open = true;
	fr->file = file;
	fr->o.tot->cache_files++;
	return 1;
}

/* Start framing the file from the reader's chunks; fill: put it in the cache if it may go. */
static int start(struct pl_frame *fr, uint32_t file, const char *path, uint64_t size, bool fill)
{
	int r = tfr_reader_reset(fr->rd, path);
	if (r < 0)
		return r;
	if (fr->o.compression == TFR_COMPRESSION_NONE)
		tfr_reader_set_input_size(fr->rd, size);
	fr->open = true;
	fr->finishing = false;
	fr->file = file;
	fr->path = path;
	fr->size = size;
	fr->skip_to = 0;
	/* read from its start: its entry is collected (not so the rest of a file the cache gave) */
	if (fill)
		pl_own_collect_begin(&fr->own, fr->o.creds, path, fr->o.compression);
	else
		pl_own_collect_drop(&fr->own);
	if (fill && fr->o.cache && fr->have_key) {
		/* a dataset that does not fit keeps what fits (Plumber's rule, per file) */
		bool fits = pl_frame_cache_need(fr->o.tot, fr->o.dataset_bytes) <=
			    pl_cache_budget(fr->o.cache);
		fr->fill = pl_cache_fill_begin(fr->o.cache, &fr->key, size, fr->o.cache_user,
					       fits ? 0 : PL_CACHE_FILL_NO_EVICT);
		if (fr->fill && fr->o.project && (fr->fill_blk = cached_blk_new(fr->fill)) != NULL)
			pl_cache_entry_ref(fr->fill);
	}
	return 0;
}

int pl_frame_open(struct pl_frame *fr, uint32_t file, const char *path, uint64_t size)
{
	return start(fr, file, path, size, true);
}

/*
 * The cache cannot give the rest of the file (its fill was given up, or stalled, or waiting
 * for it could deadlock): read the file, from the record after the last one it gave.
 * FELL_BACK or -errno.
 */
static int fall_back(struct pl_frame *fr, struct io_error *err)
{
	uint64_t skip = fr->hit_next;
	hit_end(fr);
	fr->open = false;
	fr->o.tot->cache_fallbacks++;
	int r = fr->o.open(fr->o.read_ctx, fr->path, err);
	if (r == 0)
		r = start(fr, fr->file, fr->path, fr->size, false);
	fr->skip_to = skip;
	return r < 0 ? r : FELL_BACK;
}

static bool stopped(const struct pl_frame *fr)
{
	return fr->o.stop && atomic_load_explicit(fr->o.stop, memory_order_relaxed);
}

/*
 * The next record of the entry: 1, 0 (the file's end), -EAGAIN (not there, and wait is
 * false), -EDEADLK (read the file instead: the fill was given up, or stalled, or waiting for it
 * could deadlock), -ECANCELED (the pipeline stops). Waits (wait) for a fill in progress as long
 * as it moves on.
 */
static int follow(struct pl_frame *fr, bool wait, struct pl_cache_rec *ret)
{
	struct pl_cache_entry *e = fr->hit->e;
	struct pl_cache_user *u = fr->o.cache_user;
	int r = pl_cache_entry_record(e, fr->hit_next, u, 0, ret);
	if (r == -EAGAIN && wait) {
		unsigned prev = pl_prof_enter(fr->o.prof, PL_STAGE_IDLE_);
		uint64_t t0 = pl_clock_ns(CLOCK_MONOTONIC);
		uint64_t seen = pl_cache_entry_records(e);
		unsigned still = 0; /* polls without a new record */
		while ((r = pl_cache_entry_record(e, fr->hit_next, u, FOLLOW_POLL_MS, ret)) ==
		       -EAGAIN) {
			if (stopped(fr))
				break;
			uint64_t now = pl_cache_entry_records(e);
			still = now == seen ? still + 1 : 0;
			seen = now;
			if (still * FOLLOW_POLL_MS >= FOLLOW_STALL_MS) {
				r = -EDEADLK; /* its filler does not go on */
				break;
			}
		}
		fr->o.st->wait_up_ns += pl_clock_ns(CLOCK_MONOTONIC) - t0;
		pl_prof_leave(fr->o.prof, prev);
		if (r == -EAGAIN)
			return -ECANCELED; /* stopped */
	}
	return r == -ECANCELED ? -EDEADLK : r; /* given up: read the rest */
}

/* The next record of a file the cache holds or is being given: pl_frame_next's, or FELL_BACK. */
static int hit_next(struct pl_frame *fr, bool wait, struct pl_rec *out, struct io_error *err)
{
	struct pl_cache_rec cr;
	int r = follow(fr, wait, &cr);
	if (r == 0) {
		hit_end(fr);
		fr->open = false;
		return 0;
	}
	if (r == -EDEADLK)
		return fall_back(fr, err);
	if (r < 0)
		return r;
	fr->hit->blk.refs++;
	*out = (struct pl_rec){
		.blk = &fr->hit->blk,
		.data = cr.data,
		.len = cr.len,
		.win_len = -1,
		/* a projection was checked when it was cached; a whole record by the parse task,
		   as when it is read from the file */
		.crc_checked =
			cr.flags & (PL_CACHE_REC_CHECKED | PL_CACHE_REC_FLAT | PL_CACHE_REC_VALUES),
		.flat = cr.flags & (PL_CACHE_REC_FLAT | PL_CACHE_REC_VALUES),
		.values = cr.flags & PL_CACHE_REC_VALUES, /* its heads: the entry's */
		.decompressed = cr.flags & PL_CACHE_REC_DECOMPRESSED,
		.file = fr->file,
		.index = fr->hit_next++,
		.offset = cr.offset,
	};
	fr->o.st->elems_out++;
	fr->o.st->bytes_out += cr.len;
	fr->o.tot->cache_bytes += cr.len;
	return 1;
}

bool pl_frame_is_open(const struct pl_frame *fr)
{
	return fr->open;
}

uint32_t pl_frame_file(const struct pl_frame *fr)
{
	return fr->file;
}

/*
 * Keep a framed record: in place in its chunk when the chunk may be pinned and the record lies
 * inside it (no copy), else copied into the store. Either way its footer (the stored data CRC)
 * follows it, for the parse task that checks the CRC.
 */
static int store_record(struct pl_frame *fr, const struct tfr_record *tr, struct pl_rec *out)
{
	struct pl_block *c = fr->cur, *blk;
	const uint8_t *data;
	if (c && c->pin && tr->data >= c->data &&
	    tr->data + tr->len + TFR_FOOTER_LEN <= c->data + c->cap) {
		c->refs++;
		blk = c;
		data = tr->data;
	} else {
		int r = pl_store_copy(fr->o.store, tr->data, tr->len + TFR_FOOTER_LEN, tr->len,
				      &blk, &data);
		if (r < 0)
			return r;
	}
	*out = (struct pl_rec){
		.blk = blk,
		.data = data,
		.win_len = -1,
		.len = (uint32_t)tr->len,
		.crc_checked = tr->crc_checked,
		.decompressed = tr->decompressed,
		.file = fr->file,
		.index = tr->index,
		.offset = tr->offset,
	};
	fr->o.st->elems_out++;
	fr->o.st->bytes_out += tr->len;
	if (fr->fill && fill_add(fr, out) < 0)
		fill_end(fr, false); /* over the budget: this file is not cached */
	return 0;
}

/*
 * The record just framed (from the file or the cache) under on_corrupt skip_file: a bad record
 * ends its file, so find out now. 1 (out is good), 0 (the file was given up), -ENOMEM.
 */
static int checked(struct pl_frame *fr, struct pl_rec *out)
{
	if (fr->o.on_corrupt != PL_ON_CORRUPT_SKIP_FILE)
		return 1;
	int r = fr->o.validate(fr->o.validate_ctx, out);
	if (r == 0)
		return 1;
	pl_rec_unref(out);
	if (r == -ENOMEM)
		return r;
	fr->o.st->dropped++;
	fr->o.tot->skipped_files++;
	pl_frame_abandon(fr);
	return 0;
}

static int frame_next(struct pl_frame *fr, bool wait, struct pl_rec *out, struct io_error *err)
{
	for (;;) {
		struct tfr_record tr;
		int r;
		if (fr->hit) {
			r = hit_next(fr, wait, out, err);
			if (r != FELL_BACK)
				return r <= 0 ? r : checked(fr, out); /* as for the file itself */
		}
		r = tfr_reader_next(fr->rd, &tr, err);
		if (r == TFR_RECORD && tr.index < fr->skip_to)
			continue; /* the cache gave it */
		if (r == TFR_RECORD) {
			pl_own_collect_rec(&fr->own, tr.index, tr.offset, tr.len);
			if (store_record(fr, &tr, out) < 0)
				return -ENOMEM;
			return checked(fr, out);
		}
		if (r == TFR_END) {
			release_chunk(fr);
			pl_own_collect_end(&fr->own, fr->o.creds, fr->path, fr->o.compression);
			fill_end(fr, true);
			fr->open = false;
			return 0;
		}
		if (r < 0) {
			release_chunk(fr);
			pl_own_collect_drop(&fr->own);
			fill_end(fr, false);
			if (fr->o.on_corrupt == PL_ON_CORRUPT_FAIL || r == -ENOMEM)
				return r;
			/* the frame is lost: the rest of the file cannot be read */
			fr->o.tot->skipped_files++;
			pl_frame_abandon(fr);
			return 0;
		}
		/* TFR_NEED_INPUT */
		release_chunk(fr);
		if (fr->finishing) {
			tfr_reader_finish(fr->rd);
			continue;
		}
		struct pl_chunk ch;
		r = fr->o.read(fr->o.read_ctx, wait, &ch, err);
		if (r < 0 && r != -EAGAIN)
			pl_own_collect_drop(&fr->own);
		if (r < 0)
			return r;
		if (r == 0) { /* nothing more: the file was delivered */
			fr->finishing = true;
			continue;
		}
		if (ch.error) {
			pl_own_collect_drop(&fr->own);
			if (fr->o.on_corrupt == PL_ON_CORRUPT_FAIL)
				return ch.error;
			fr->o.tot->skipped_files++;
			pl_frame_abandon(fr);
			return 0;
		}
		fr->cur = ch.blk;
		fr->o.st->elems_in++;
		fr->o.st->bytes_in += ch.blk->cap;
		tfr_reader_feed(fr->rd, ch.blk->data, ch.blk->cap);
		if (ch.last)
			fr->finishing = true;
	}
}

int pl_frame_next(struct pl_frame *fr, bool wait, struct pl_rec *ret_rec, struct io_error *err)
{
	unsigned prev = pl_prof_enter(fr->o.prof, PL_STAGE_FRAME);
	int r = frame_next(fr, wait, ret_rec, err);
	pl_prof_leave(fr->o.prof, prev);
	return r;
}
