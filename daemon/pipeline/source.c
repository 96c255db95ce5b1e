/* SPDX-License-Identifier: Apache-2.0 */
/* The source: epoch file order, interleave over per-slot readers, shuffle buffer, record store. */
#include "rowparse.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Everything here runs on the pipeline's driver thread. Each interleave slot owns an iox (which
 * reads one file at a time, a few chunks ahead) and a tfr_reader, so the driver can always wait
 * for the one slot whose turn it is while the other slots' reads go on in the background.
 * Records are copied out of the read buffers into blocks (struct pl_block) as they are framed,
 * so a read buffer goes back to its iox at once however long the record waits in the shuffle
 * buffer; a block is freed when its last record is dropped.
 */

#define PL_BLOCK_BYTES (1u << 20)
/* Read buffers a slot may keep pinned by records beyond the one it is framing. */
#define PL_PIN_CHUNKS	    16
#define PL_SLOT_QUEUE_DEPTH 4
#define PL_POLL_MS	    100

/*
 * A sequence loader's windows over the slot's current file (docs/pipeline-semantics.md). The
 * records that a window may still need are kept; `base` is the position (continuous: step,
 * discrete: record) of recs[0] in the file, `p` the next window's start and `len` its length
 * (drawn when needed, one draw per window from stream (seed, epoch, 3, file)).
 */
struct pl_wingen {
	struct pl_rec *recs;
	int64_t *steps; /* continuous: steps of each record */
	size_t n, cap;
	int64_t base, total; /* total: position after the last kept record */
	int64_t p, len;
	bool have_len, ended;
	struct pl_rng rng;
};

/*
 * An iox shared by a slot and the read buffers still pinned by records. A slot that abandons a
 * file midway retires its iox (and starts a new one); the retired one is destroyed when its
 * last pinned buffer is released.
 */
struct pl_ioxref {
	struct iox *iox;
	size_t chunks; /* pl_blocks alive on its buffers */
	bool retired;
};

struct pl_slot {
	bool open;	/* reading a file */
	bool finishing; /* the file's last chunk was fed */
	uint32_t file;	/* index into ds->files */
	struct pl_ioxref *ix;
	struct tfr_reader *rd;
	struct pl_block *cur; /* the chunk being framed (one reference held by the slot) */
	bool pin;	      /* its records may point into it rather than be copied */
	uint64_t chunk_seq;   /* chunks taken so far */
	struct pl_wingen wg;
};

struct pl_source {
	const struct pl_plan *plan;
	enum iox_engine engine;
	struct pl_slot *slots;
	unsigned n_slots;
	unsigned n_open;
	unsigned k; /* interleave cursor */

	uint32_t *order; /* this epoch's file order */
	size_t next_file;

	struct pl_rec *buf; /* shuffle buffer */
	size_t buf_len, buf_cap;
	bool buf_filled, input_done;
	struct pl_rng rng;

	struct pl_block *cur;
	struct pl_block *free_blocks; /* standard-size blocks kept for reuse */
	struct pl_worker_scratch *ws; /* continuous_sequence: decoding record lengths */
	bool direct;		      /* O_DIRECT reads */
	uint64_t epoch;
	atomic_bool stop;
	int (*idle)(void *ctx); /* see pl_source_set_idle */
	void *idle_ctx;
	struct pl_source_stats st;
	const char *engine_name;
	char fallback[160];
	bool have_fallback;
};

static void ioxref_put(struct pl_ioxref *ix)
{
	if (ix->retired && ix->chunks == 0) {
		iox_destroy(ix->iox);
		free(ix);
	}
}

static void block_put(struct pl_block *b)
{
	if (b->ix) { /* a read buffer: back to its iox */
		struct pl_ioxref *ix = b->ix;
		iox_release(ix->iox, &b->chunk);
		ix->chunks--;
		free(b);
		ioxref_put(ix);
		return;
	}
	if (b->free_list) { /* standard size: keep it (pages stay mapped, no faults next time) */
		b->next_free = *b->free_list;
		*b->free_list = b;
	} else {
		free(b);
	}
}

void pl_rec_unref(struct pl_rec *r)
{
	if (r->win) {
		for (uint32_t i = 0; i < r->n_win; i++)
			pl_rec_unref(&r->win[i]);
		free(r->win);
		r->win = NULL;
	}
	if (r->blk && --r->blk->refs == 0)
		block_put(r->blk);
	r->blk = NULL;
}

void pl_rec_ref(struct pl_rec *r)
{
	r->blk->refs++;
}

static struct pl_block *block_get(struct pl_source *src, size_t need)
{
	struct pl_block *b;
	if (need <= PL_BLOCK_BYTES && src->free_blocks) {
		b = src->free_blocks;
		src->free_blocks = b->next_free;
	} else {
		size_t cap = need > PL_BLOCK_BYTES ? need : PL_BLOCK_BYTES;
		b = malloc(sizeof(*b) + cap);
		if (!b)
			return NULL;
		b->cap = cap;
		b->data = (uint8_t *)(b + 1);
		b->ix = NULL;
		b->free_list = cap == PL_BLOCK_BYTES ? &src->free_blocks : NULL;
	}
	b->refs = 1;
	b->used = 0;
	return b;
}

/* Copy len bytes into the heap block being filled; *ret_blk gets a reference. */
static int copy_bytes(struct pl_source *src, const uint8_t *data, size_t len,
		      struct pl_block **ret_blk, const uint8_t **ret_data)
{
	struct pl_block *b = src->cur;
	if (!b || b->cap - b->used < len) {
		struct pl_block *nb = block_get(src, len);
		if (!nb)
			return -ENOMEM;
		if (b && --b->refs == 0)
			block_put(b);
		src->cur = b = nb;
	}
	memcpy(b->data + b->used, data, len);
	*ret_data = b->data + b->used;
	*ret_blk = b;
	b->used += (len + 7) & ~(size_t)7;
	if (b->used > b->cap)
		b->used = b->cap;
	b->refs++;
	return 0;
}

/*
 * Keep a framed record: in place in the slot's chunk when the chunk may be pinned and the
 * record lies inside it (no copy), else copied into a heap block. Either way its footer (the
 * stored data CRC) follows it, for the parse task that checks the CRC.
 */
static int store_record(struct pl_source *src, struct pl_slot *s, const struct tfr_record *tr,
			struct pl_rec *out)
{
	struct pl_block *c = s->cur;
	if (s->pin && c && tr->data >= c->data &&
	    tr->data + tr->len + TFR_FOOTER_LEN <= c->data + c->cap) {
		c->refs++;
		out->blk = c;
		out->data = tr->data;
	} else {
		int r = copy_bytes(src, tr->data, tr->len + TFR_FOOTER_LEN, &out->blk, &out->data);
		if (r < 0)
			return r;
		src->st.copied_bytes += tr->len;
	}
	out->win = NULL;
	out->n_win = 0;
	out->win_skip = 0;
	out->win_len = -1;
	out->len = (uint32_t)tr->len;
	out->crc_checked = tr->crc_checked;
	out->decompressed = tr->decompressed;
	out->file = s->file;
	out->index = tr->index;
	out->offset = tr->offset;
	src->st.records++;
	src->st.record_bytes += tr->len;
	return 0;
}

static void slot_release_chunk(struct pl_slot *s)
{
	if (s->cur) {
		if (--s->cur->refs == 0)
			block_put(s->cur);
		s->cur = NULL;
	}
}

/*
 * The slot has as many read buffers pinned as it may: copy out to heap blocks the records of
 * the shuffle buffer that hold its older half of them, so that those buffers go back to the
 * iox. A shuffle buffer drains at random, so an old chunk is held by a few stragglers: few
 * bytes to copy. (Records already in batches being parsed keep theirs until done.)
 */
static int evacuate(struct pl_source *src, struct pl_slot *s)
{
	src->st.evacuations++;
	uint64_t old_below = s->chunk_seq - PL_PIN_CHUNKS / 2;
	for (size_t i = 0; i < src->buf_len; i++) {
		struct pl_rec *r = &src->buf[i];
		if (!r->blk || r->blk->ix != s->ix || r->blk->seq >= old_below)
			continue;
		struct pl_block *old = r->blk;
		int e = copy_bytes(src, r->data, r->len + TFR_FOOTER_LEN, &r->blk, &r->data);
		if (e < 0) {
			r->blk = old;
			return e;
		}
		if (--old->refs == 0)
			block_put(old);
		src->st.copied_bytes += r->len;
	}
	return 0;
}

static void wg_clear(struct pl_wingen *w)
{
	for (size_t i = 0; i < w->n; i++)
		pl_rec_unref(&w->recs[i]);
	w->n = 0;
}

static void wg_reset(struct pl_source *src, struct pl_slot *s)
{
	struct pl_wingen *w = &s->wg;
	wg_clear(w);
	w->base = w->total = w->p = 0;
	w->have_len = w->ended = false;
	pl_rng_init(&w->rng, src->plan->cfg.seed, src->epoch, PL_STREAM_WINDOWS, s->file);
}

/* Give up on the slot's file midway: a fresh iox, so none of its chunks reach the next file. */
static void slot_abandon(struct pl_slot *s)
{
	slot_release_chunk(s);
	if (s->ix) {
		s->ix->retired = true;
		ioxref_put(s->ix);
		s->ix = NULL;
	}
	s->open = false;
}

static int slot_open(struct pl_source *src, struct pl_slot *s, uint32_t file, struct io_error *err)
{
	const struct dataset_file *f = &src->plan->ds->files[file];
	int r;
	if (!s->ix) {
		struct iox_opts o;
		iox_opts_init(&o);
		o.engine = src->engine;
		o.queue_depth = PL_SLOT_QUEUE_DEPTH;
		o.max_open_files = 1;
		o.chunk_len = src->plan->read_chunk;
		/* reads in flight, the chunk being framed, and the pinned ones */
		o.num_buffers = PL_SLOT_QUEUE_DEPTH + 1 + PL_PIN_CHUNKS;
		o.pread_threads = 1;
		o.direct = src->direct;
		s->ix = calloc(1, sizeof(*s->ix));
		if (!s->ix)
			return -ENOMEM;
		r = iox_create(&o, &s->ix->iox, err);
		if (r < 0) {
			free(s->ix);
			s->ix = NULL;
			return r;
		}
		if (!src->engine_name) {
			src->engine_name = iox_engine_name(iox_engine_used(s->ix->iox));
			const char *why = iox_fallback_reason(s->ix->iox);
			if (why) {
				snprintf(src->fallback, sizeof(src->fallback), "%s", why);
				src->have_fallback = true;
			}
		}
	}
	if (!s->rd) {
		struct tfr_reader_opts ro;
		tfr_reader_opts_init(&ro);
		ro.compression = src->plan->ds->manifest->compression;
		ro.defer_data_crc = true; /* checked by the parse task that reads the record */
		s->rd = tfr_reader_create(&ro);
		if (!s->rd)
			return -ENOMEM;
	}
	r = tfr_reader_reset(s->rd, f->path);
	if (r < 0)
		return r;
	if (src->plan->ds->manifest->compression == TFR_COMPRESSION_NONE)
		tfr_reader_set_input_size(s->rd, f->size);
	r = iox_add_file(s->ix->iox, f->path, NULL);
	if (r < 0)
		return r;
	s->open = true;
	s->finishing = false;
	s->file = file;
	src->st.files_opened++;
	wg_reset(src, s);
	return 0;
}

/* Decode and check a record as the parse task will (on_corrupt skip_file). */
static int validate_record(struct pl_source *src, struct pl_rec *rec)
{
	const struct pl_plan *plan = src->plan;
	if (!src->ws && !(src->ws = pl_scratch_create(plan)))
		return -ENOMEM;
	int r = pl_row_decode(plan, src->ws, rec, true, NULL);
	if (r == 0)
		r = pl_row_shapes(plan, src->ws, NULL);
	for (size_t i = 0; r == 0 && i < plan->n_out; i++) {
		struct pl_view v;
		r = pl_row_view(plan, src->ws, i, &v, NULL);
	}
	return r;
}

/*
 * The slot's next record: 1 (stored into *out), 0 when its file ended (cleanly, or by a framing
 * error skipped under on_corrupt), -EAGAIN when wait is false and no input is ready, or -errno.
 */
static int slot_next(struct pl_source *src, struct pl_slot *s, bool wait, struct pl_rec *out,
		     struct io_error *err)
{
	for (;;) {
		struct tfr_record tr;
		int r = tfr_reader_next(s->rd, &tr, err);
		if (r == TFR_RECORD) {
			if (store_record(src, s, &tr, out) < 0)
				return -ENOMEM;
			if (src->plan->cfg.on_corrupt != PL_ON_CORRUPT_SKIP_FILE)
				return 1;
			/* skip_file: a bad record ends its file, so find out now */
			r = validate_record(src, out);
			if (r == 0)
				return 1;
			pl_rec_unref(out);
			if (r == -ENOMEM)
				return r;
			src->st.skipped_records++;
			src->st.skipped_files++;
			slot_abandon(s);
			return 0;
		}
		if (r == TFR_END) {
			slot_release_chunk(s);
			s->open = false;
			return 0;
		}
		if (r < 0) {
			slot_release_chunk(s);
			if (src->plan->cfg.on_corrupt == PL_ON_CORRUPT_FAIL || r == -ENOMEM)
				return r;
			/* the frame is lost: the rest of the file cannot be read */
			src->st.skipped_files++;
			slot_abandon(s);
			return 0;
		}
		/* TFR_NEED_INPUT */
		slot_release_chunk(s);
		if (s->finishing) {
			tfr_reader_finish(s->rd);
			continue;
		}
		/*
		 * Pin the next chunk only while the slot has pinned buffers to spare (see
		 * PL_PIN_CHUNKS and evacuate()); otherwise its records are copied, so reading
		 * always has buffers left. Sequence loaders keep records in their window generators
		 * and always copy.
		 */
		bool pin = src->plan->cfg.type == PL_LOADER_INDEPENDENT;
		if (pin && s->ix->chunks >= PL_PIN_CHUNKS) {
			r = evacuate(src, s);
			if (r < 0)
				return r;
			pin = s->ix->chunks < PL_PIN_CHUNKS;
		}
		struct iox_chunk ch;
		bool idle_done = !src->idle; /* poll between idle work; block once there is none */
		for (;;) {
			if (atomic_load_explicit(&src->stop, memory_order_relaxed))
				return -ECANCELED;
			bool block = wait && idle_done;
			uint64_t t0 = block ? pl_clock_ns(CLOCK_MONOTONIC) : 0;
			r = iox_next(s->ix->iox, block ? PL_POLL_MS : 0, &ch, err);
			if (block)
				src->st.wait_ns += pl_clock_ns(CLOCK_MONOTONIC) - t0;
			if (r == -ETIMEDOUT) {
				if (!wait)
					return -EAGAIN;
				if (!idle_done && src->idle(src->idle_ctx) <= 0)
					idle_done = true;
				continue;
			}
			break;
		}
		if (r < 0)
			return r;
		if (r == 0) { /* nothing more from this iox: the file was delivered */
			s->finishing = true;
			continue;
		}
		if (ch.error) {
			iox_release(s->ix->iox, &ch);
			if (src->plan->cfg.on_corrupt == PL_ON_CORRUPT_FAIL)
				return ch.error;
			src->st.skipped_files++;
			slot_abandon(s);
			return 0;
		}
		struct pl_block *b = malloc(sizeof(*b));
		if (!b) {
			iox_release(s->ix->iox, &ch);
			return -ENOMEM;
		}
		memset(b, 0, sizeof(*b));
		b->refs = 1;
		b->ix = s->ix;
		b->chunk = ch;
		b->data = (uint8_t *)ch.data;
		b->cap = ch.len;
		b->seq = s->chunk_seq++;
		s->ix->chunks++;
		s->cur = b;
		s->pin = pin;
		src->st.file_bytes += ch.len;
		if (ch.direct)
			src->st.direct_bytes += ch.len;
		tfr_reader_feed(s->rd, ch.data, ch.len);
		if (ch.last)
			s->finishing = true;
	}
}

void pl_source_set_idle(struct pl_source *src, int (*idle)(void *ctx), void *ctx)
{
	src->idle = idle;
	src->idle_ctx = ctx;
}

int pl_source_create(const struct pl_plan *plan, enum iox_engine engine, bool direct,
		     struct pl_source **ret_src, struct io_error *err)
{
	struct pl_source *src = calloc(1, sizeof(*src));
	if (!src)
		return -ENOMEM;
	src->plan = plan;
	src->engine = engine;
	src->direct = direct;
	src->n_slots = plan->cycle;
	src->slots = calloc(src->n_slots, sizeof(*src->slots));
	src->order = calloc(plan->n_files, sizeof(*src->order));
	src->buf_cap = plan->cfg.shuffle ? (size_t)plan->cfg.num_shuffle_buffer_elements : 0;
	if (src->buf_cap > 1u << 20)
		src->buf_cap = 1u << 20; /* grows on demand beyond this */
	src->buf = calloc(src->buf_cap ? src->buf_cap : 1, sizeof(*src->buf));
	if (!src->slots || !src->order || !src->buf) {
		pl_source_destroy(src);
		return -ENOMEM;
	}
	atomic_init(&src->stop, false);
	*ret_src = src;
	return 0;
}

static void drop_buffer(struct pl_source *src)
{
	for (size_t i = 0; i < src->buf_len; i++)
		pl_rec_unref(&src->buf[i]);
	src->buf_len = 0;
}

void pl_source_destroy(struct pl_source *src)
{
	if (!src)
		return;
	drop_buffer(src);
	for (unsigned i = 0; i < src->n_slots; i++) {
		struct pl_slot *s = &src->slots[i];
		slot_abandon(s); /* the iox goes with its last pinned buffer */
		tfr_reader_destroy(s->rd);
		wg_clear(&s->wg);
		free(s->wg.recs);
		free(s->wg.steps);
	}
	pl_scratch_destroy(src->ws);
	if (src->cur && --src->cur->refs == 0)
		block_put(src->cur);
	while (src->free_blocks) {
		struct pl_block *b = src->free_blocks;
		src->free_blocks = b->next_free;
		free(b);
	}
	free(src->slots);
	free(src->order);
	free(src->buf);
	free(src);
}

/* The file order of an epoch: a shuffle buffer over the shard's files (semantics doc). */
static void epoch_order(struct pl_source *src, uint64_t epoch)
{
	const struct pl_plan *plan = src->plan;
	size_t n = plan->n_files;
	if (!plan->cfg.shuffle) {
		memcpy(src->order, plan->files, n * sizeof(*src->order));
		return;
	}
	struct pl_rng rng;
	pl_rng_init(&rng, plan->cfg.seed, epoch, PL_STREAM_FILES, 0);
	size_t b = (size_t)plan->cfg.num_filenames_shuffle_buffer;
	if (b > n)
		b = n;
	uint32_t *buf = malloc((b ? b : 1) * sizeof(*buf));
	size_t len = 0, in = 0, out = 0;
	if (!buf) { /* keep going in file order rather than fail: only the order differs */
		memcpy(src->order, plan->files, n * sizeof(*src->order));
		return;
	}
	while (in < b)
		buf[len++] = plan->files[in++];
	while (len > 0) {
		size_t i = (size_t)pl_rng_below(&rng, len);
		src->order[out++] = buf[i];
		if (in < n)
			buf[i] = plan->files[in++];
		else
			buf[i] = buf[--len];
	}
	free(buf);
}

int pl_source_begin_epoch(struct pl_source *src, uint64_t epoch, struct io_error *err)
{
	drop_buffer(src);
	for (unsigned i = 0; i < src->n_slots; i++) {
		if (src->slots[i].open) /* a file left half read: start over clean */
			slot_abandon(&src->slots[i]);
	}
	src->epoch = epoch;
	epoch_order(src, epoch);
	src->next_file = 0;
	src->n_open = 0;
	src->k = 0;
	src->buf_filled = false;
	src->input_done = false;
	pl_rng_init(&src->rng, src->plan->cfg.seed, epoch, PL_STREAM_SHUFFLE, 0);
	for (unsigned i = 0; i < src->n_slots && src->next_file < src->plan->n_files; i++) {
		int r = slot_open(src, &src->slots[i], src->order[src->next_file++], err);
		if (r < 0)
			return r;
		src->n_open++;
	}
	return 0;
}

/* Refill slot k after its file ended. */
static int slot_advance(struct pl_source *src, unsigned k, struct io_error *err)
{
	if (src->next_file < src->plan->n_files)
		return slot_open(src, &src->slots[k], src->order[src->next_file++], err);
	src->n_open--;
	return 0;
}

/*
 * continuous_sequence: a record's length along axis 0, the same for every output tensor (after
 * its processing steps). Decoded here, on the driver, because windows depend on it; the data
 * CRC is checked at the same time and not again by the parse task.
 */
static int record_steps(struct pl_source *src, struct pl_rec *rec, int64_t *ret_steps,
			struct io_error *err)
{
	const struct pl_plan *plan = src->plan;
	if (!src->ws && !(src->ws = pl_scratch_create(plan)))
		return -ENOMEM;
	int r = pl_row_decode(plan, src->ws, rec, true, err);
	if (r < 0)
		return r;
	rec->crc_checked = true;
	r = pl_row_shapes(plan, src->ws, err);
	int64_t steps = -1;
	size_t first = 0;
	for (size_t i = 0; r == 0 && i < plan->n_out; i++) {
		struct pl_view v;
		r = pl_row_view(plan, src->ws, i, &v, err);
		if (r < 0)
			break;
		if (steps < 0) {
			steps = v.shape[0];
			first = i;
		} else if (v.shape[0] != steps) {
			io_error_set(err,
				     "tensors \"%s\" and \"%s\" have different lengths along axis "
				     "0 "
				     "(%lld and %lld); continuous_sequence needs them equal",
				     plan->out[first].name, plan->out[i].name, (long long)steps,
				     (long long)v.shape[0]);
			r = -EBADMSG;
		}
	}
	if (r < 0) {
		if (r != -ENOMEM)
			pl_row_error_prefix(plan, rec, err);
		return r;
	}
	*ret_steps = steps < 0 ? 0 : steps;
	return 0;
}

/* Take one more record of the slot's file into its window generator: 1, 0 (file ended), -errno. */
static int wg_push(struct pl_source *src, struct pl_slot *s, bool wait, struct io_error *err)
{
	struct pl_wingen *w = &s->wg;
	struct pl_rec rec;
	int r = slot_next(src, s, wait, &rec, err);
	if (r <= 0) {
		if (r == 0)
			w->ended = true;
		return r;
	}
	int64_t steps = 1;
	if (src->plan->cfg.type == PL_LOADER_CONTINUOUS_SEQUENCE) {
		r = record_steps(src, &rec, &steps, err);
		if (r < 0) {
			pl_rec_unref(&rec);
			if (r == -ENOMEM || src->plan->cfg.on_corrupt == PL_ON_CORRUPT_FAIL)
				return r;
			src->st.skipped_records++;
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
	w->total += steps;
	return 1;
}

/* Forget the generator's records that end at or before position p. */
static void wg_drop_before(struct pl_wingen *w, int64_t p)
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
	}
}

/* The slot's next window (semantics doc, "Sequence loaders"): 1, 0 (file done), -errno. */
static int window_next(struct pl_source *src, struct pl_slot *s, bool wait, struct pl_rec *out,
		       struct io_error *err)
{
	const struct pl_spec *c = &src->plan->cfg;
	struct pl_wingen *w = &s->wg;
	bool cont = c->type == PL_LOADER_CONTINUOUS_SEQUENCE;
	if (!w->have_len) {
		w->len = c->min_window +
			 (int64_t)pl_rng_below(&w->rng,
					       (uint64_t)(c->max_window - c->min_window + 1));
		w->have_len = true;
	}
	while (w->total < w->p + w->len) {
		if (w->ended) {
			wg_clear(w);
			return 0;
		}
		int r = wg_push(src, s, wait, err);
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
	out->win_skip = cont ? skip : 0;
	out->win_len = cont ? w->len : -1;
	w->p += cont && c->stride != PL_NULL ? c->stride : w->len;
	w->have_len = false;
	wg_drop_before(w, w->p);
	return 1;
}

static int slot_elem(struct pl_source *src, struct pl_slot *s, bool wait, struct pl_rec *out,
		     struct io_error *err)
{
	if (src->plan->cfg.type == PL_LOADER_INDEPENDENT)
		return slot_next(src, s, wait, out, err);
	return window_next(src, s, wait, out, err);
}

/* The next element of the interleave (semantics doc), or 0 at the end of the epoch. */
static int interleave_next(struct pl_source *src, struct pl_rec *out, struct io_error *err)
{
	const unsigned c = src->n_slots;
	bool sloppy = src->plan->cfg.sloppy_interleave;
	while (src->n_open > 0) {
		struct pl_slot *s = &src->slots[src->k];
		if (!s->open) {
			src->k = (src->k + 1) % c;
			continue;
		}
		int r;
		if (sloppy) {
			/* take from the first open slot, from k on, that has input ready */
			for (unsigned j = 0; j < c; j++) {
				unsigned kk = (src->k + j) % c;
				if (!src->slots[kk].open)
					continue;
				r = slot_elem(src, &src->slots[kk], false, out, err);
				if (r == -EAGAIN)
					continue;
				if (r < 0)
					return r;
				if (r == 1) {
					src->k = (kk + 1) % c;
					return 1;
				}
				r = slot_advance(src, kk, err);
				if (r < 0)
					return r;
				goto again;
			}
		}
		r = slot_elem(src, s, true, out, err);
		if (r < 0)
			return r;
		if (r == 1) {
			src->k = (src->k + 1) % c;
			return 1;
		}
		r = slot_advance(src, src->k, err);
		if (r < 0)
			return r;
	again:;
	}
	return 0;
}

int pl_source_next(struct pl_source *src, struct pl_rec *ret_rec, struct io_error *err)
{
	const struct pl_plan *plan = src->plan;
	if (!plan->cfg.shuffle)
		return interleave_next(src, ret_rec, err);
	size_t want = (size_t)plan->cfg.num_shuffle_buffer_elements;
	int r;
	while (!src->buf_filled) {
		if (src->buf_len == want) {
			src->buf_filled = true;
			break;
		}
		struct pl_rec x;
		r = interleave_next(src, &x, err);
		if (r < 0)
			return r;
		if (r == 0) {
			src->buf_filled = true;
			src->input_done = true;
			break;
		}
		if (src->buf_len == src->buf_cap) {
			size_t ncap = src->buf_cap ? src->buf_cap * 2 : 64;
			struct pl_rec *nb = realloc(src->buf, ncap * sizeof(*nb));
			if (!nb) {
				pl_rec_unref(&x);
				return -ENOMEM;
			}
			src->buf = nb;
			src->buf_cap = ncap;
		}
		src->buf[src->buf_len++] = x;
	}
	if (src->buf_len == 0)
		return 0;
	size_t i = (size_t)pl_rng_below(&src->rng, src->buf_len);
	*ret_rec = src->buf[i];
	if (!src->input_done) {
		struct pl_rec x;
		/* taken: hide it from evacuate(), which may run while the buffer is refilled */
		src->buf[i].blk = NULL;
		r = interleave_next(src, &x, err);
		if (r < 0) {
			src->buf[i] = *ret_rec; /* the buffer still owns it: nothing was taken */
			return r;
		}
		if (r == 1) {
			src->buf[i] = x;
			return 1;
		}
		src->input_done = true;
	}
	src->buf[i] = src->buf[--src->buf_len];
	return 1;
}

void pl_source_stop(struct pl_source *src)
{
	atomic_store_explicit(&src->stop, true, memory_order_relaxed);
}

void pl_source_get_stats(const struct pl_source *src, struct pl_source_stats *ret)
{
	*ret = src->st;
}

const char *pl_source_engine(const struct pl_source *src)
{
	return src->engine_name;
}

const char *pl_source_fallback(const struct pl_source *src)
{
	return src->have_fallback ? src->fallback : NULL;
}
