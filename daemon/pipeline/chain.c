/* SPDX-License-Identifier: Apache-2.0 */
/* The driver's input chain: creates the input stages and connects each to its upstream. */
#include "chain.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cepoch.h"
#include "files.h"
#include "frame.h"
#include "gshuffle.h"
#include "interleave.h"
#include "rowparse.h"
#include "shuffle.h"
#include "window.h"

/* One interleave slot: a file at a time, read, framed and (sequence loaders) windowed. */
struct pl_slot {
	struct pl_chain *c;
	struct pl_read *rd;
	struct pl_frame *fr;
	struct pl_window *win; /* NULL: the independent loader */
	/*
	 * A cached epoch's: the entry of its file (the epoch holds it), the next record's index
	 * and the run of the entry's index it is in (ce_left entries from ce_ix on).
	 */
	struct pl_cache_entry *ce;
	const struct pl_cache_ix *ce_ix;
	uint64_t ce_next, ce_left;
	uint32_t ce_file;
};

struct pl_chain {
	struct pl_chain_opts o;
	const struct pl_plan *plan;
	struct pl_files *files;
	struct pl_slot *slots;
	unsigned n_slots;
	struct pl_interleave *il;
	struct pl_shuffle *sh;
	/*
	 * A cached epoch's (every file in the cache, decoded: cepoch.h): its entries, and the
	 * shuffle over its compact rows. sh_c exists when the plan may run such epochs.
	 */
	struct pl_shuffle *sh_c;
	/* shuffle "global": in place of files, slots, interleave and shuffle (gshuffle.h) */
	struct pl_gshuffle *gs;
	uint64_t skip_next;   /* pl_chain_skip: where the next epoch begun starts */
	struct pl_cepoch *cx; /* this epoch's, or NULL: it runs on records */
	uint64_t cached_epochs;
	struct pl_store store;
	struct pl_worker_scratch *ws; /* records decoded on the driver */
	uint8_t *proj;		      /* a record projected for the cache */
	uint64_t data_bytes;	      /* of the files it reads (its shard's) */
	_Atomic size_t read_chunk;    /* the read size of the next file a slot opens (a tuner's) */
	_Atomic unsigned read_depth;  /* ... and its reads in flight */
	size_t proj_cap;
	/* the cache's decoded level: a projected record's features, flat (pbex_flatten) */
	uint8_t *flat;
	size_t flat_cap;
	uint64_t flat_sum, proj_sum; /* bytes of records flattened, and of their projections */
	uint64_t level_samples;	     /* records in those sums */
	uint64_t level_fills;	     /* cache_filled when the level was last chosen */
	bool flat_off; /* the decoded level does not fit where the projected one does */
	uint64_t epoch;
	atomic_bool stop;
	struct pl_stage_stats st[PL_STAGE_COUNT_];
	struct pl_read_totals read_tot;
	struct pl_frame_totals frame_tot;
	struct pl_cache_user cache_user; /* its framers' */
};

/* ---- the callbacks that connect the stages ---- */

static int slot_read(void *ctx, bool wait, struct pl_chunk *ret, struct io_error *err)
{
	struct pl_slot *s = ctx;
	return pl_read_next(s->rd, wait, ret, err);
}

static void slot_abandon(void *ctx)
{
	struct pl_slot *s = ctx;
	pl_read_abandon(s->rd);
}

/* frame → read the file after all (the cache stopped giving it) */
static int slot_reopen(void *ctx, const char *path, struct io_error *err)
{
	struct pl_slot *s = ctx;
	return pl_read_open(s->rd, path, err);
}

static int slot_frame(void *ctx, bool wait, struct pl_rec *ret, struct io_error *err)
{
	struct pl_slot *s = ctx;
	return pl_frame_next(s->fr, wait, ret, err);
}

#define CE_IX_AHEAD 16 /* index entries (24 bytes) a slot reads ahead */

/*
 * A cached epoch's slot: its file's next record, straight from the entry (ready: nothing to
 * wait for, nothing to check, no reference to take), with only what the compact row takes.
 */
static int cached_next(struct pl_chain *c, struct pl_slot *s, struct pl_rec *ret)
{
	if (s->ce_left == 0) {
		s->ce_ix = pl_cache_entry_run(s->ce, s->ce_next, &s->ce_left);
		if (s->ce_left == 0)
			return 0; /* the file's end */
	}
	const struct pl_cache_ix *x = s->ce_ix++;
	s->ce_left--;
	if (s->ce_left > CE_IX_AHEAD) /* the index's lines ahead, among the records' misses */
		__builtin_prefetch(x + CE_IX_AHEAD);
	/* into L2 now, in file order: drawn from the shuffle buffer later, at random */
	__builtin_prefetch(x->data, 0, 2);
	if (x->len > 64 - ((uintptr_t)x->data & 63))
		__builtin_prefetch(x->data + 64, 0, 2);
	ret->blk = NULL;
	ret->win = NULL;
	ret->data = x->data;
	ret->len = x->len;
	ret->values = x->flags & PL_CACHE_REC_VALUES;
	ret->file = s->ce_file;
	ret->index = s->ce_next++;
	struct pl_stage_stats *st = &c->st[PL_STAGE_FRAME];
	st->elems_out++;
	st->bytes_out += x->len;
	c->frame_tot.cache_bytes += x->len;
	return 1;
}

/* interleave → slot k's element */
static int slot_next(void *ctx, unsigned k, bool wait, struct pl_rec *ret, struct io_error *err)
{
	struct pl_chain *c = ctx;
	struct pl_slot *s = &c->slots[k];
	if (c->cx)
		return cached_next(c, s, ret);
	if (s->win)
		return pl_window_next(s->win, wait, ret, err);
	return pl_frame_next(s->fr, wait, ret, err);
}

/* interleave → the epoch's next file into slot k */
static int slot_open(void *ctx, unsigned k, struct io_error *err)
{
	struct pl_chain *c = ctx;
	struct pl_slot *s = &c->slots[k];
	uint32_t file;
	if (pl_files_next(c->files, &file) == 0)
		return 0;
	const struct dataset_file *f = &c->plan->ds->files[file];
	if (c->cx) { /* a cached epoch: the file's records come from the entry the epoch holds */
		s->ce = pl_cepoch_entry(c->cx, file);
		s->ce_file = file;
		s->ce_next = 0;
		s->ce_left = 0;
		c->frame_tot.cache_files++;
		return 1;
	}
	int r = pl_frame_open_cached(s->fr, file, f->path, f->size); /* 1: no reading */
	if (r == 0)
		r = pl_read_open(s->rd, f->path, err);
	if (r == 0)
		r = pl_frame_open(s->fr, file, f->path, f->size);
	if (r < 0)
		return r;
	if (s->win)
		pl_window_reset(s->win, c->epoch, file);
	return 1;
}

static int shuffle_up(void *ctx, void *ret, struct io_error *err)
{
	struct pl_chain *c = ctx;
	return pl_interleave_next(c->il, ret, err);
}

/* a cached epoch's shuffle → the next record as a compact row (the epoch holds its entry) */
static int shuffle_up_compact(void *ctx, void *ret, struct io_error *err)
{
	struct pl_chain *c = ctx;
	struct pl_rec x;
	int r = pl_interleave_next(c->il, &x, err);
	if (r == 1)
		*(struct pl_crow *)ret = pl_cepoch_row(c->cx, &x); /* x holds no reference */
	return r;
}

struct evac {
	struct pl_chain *c;
	const void *owner;
	uint64_t below;
};

static int evac_one(void *ctx, struct pl_rec *r)
{
	struct evac *e = ctx;
	if (r->blk->owner != e->owner || r->blk->seq >= e->below)
		return 0;
	return pl_store_own(&e->c->store, r);
}

/* read → move out of the shuffle buffer the records pinning a reader's old chunks */
static int evacuate(void *ctx, const void *owner, uint64_t below)
{
	struct evac e = { .c = ctx, .owner = owner, .below = below };
	return pl_shuffle_visit(e.c->sh, evac_one, &e);
}

static struct pl_worker_scratch *scratch(struct pl_chain *c)
{
	if (!c->ws)
		c->ws = pl_scratch_create(c->plan);
	return c->ws;
}

/* frame (on_corrupt skip_file) → decode and check a record as the parse task will */
static int validate(void *ctx, const struct pl_rec *rec)
{
	struct pl_chain *c = ctx;
	const struct pl_plan *plan = c->plan;
	struct pl_worker_scratch *ws = scratch(c);
	if (!ws)
		return -ENOMEM;
	unsigned prev = pl_prof_enter(c->o.prof, PL_STAGE_PARSE);
	int r = pl_row_decode(plan, ws, rec, true, NULL);
	if (r == 0)
		r = pl_row_shapes(plan, ws, NULL);
	for (size_t i = 0; r == 0 && i < plan->n_out; i++) {
		struct pl_view v;
		r = pl_row_view(plan, ws, i, &v, NULL);
	}
	pl_prof_leave(c->o.prof, prev);
	return r;
}

/*
 * The deepest level of the cache that fits (Plumber's rule): the decoded features of Example
 * records (what the parse task would decode again), unless the dataset would not fit the budget
 * that way and would as projected records. Chosen again as files are cached (their sizes are the
 * samples pl_frame_cache_need goes by).
 */
static bool flat_level(const struct pl_chain *c)
{
	return !c->plan->sequence_example && !c->flat_off;
}

/* The heads of a flat form of the plan's features: uniform records are cached without them. */
static uint32_t flat_heads(const struct pl_plan *plan)
{
	return (uint32_t)(plan->n_ctx * sizeof(struct pbex_flat_head));
}

static bool cache_flat(struct pl_chain *c)
{
	if (!flat_level(c))
		return false;
	if (c->frame_tot.cache_filled != c->level_fills && c->flat_sum) {
		c->level_fills = c->frame_tot.cache_filled;
		uint64_t need = pl_frame_cache_need(&c->frame_tot, c->data_bytes);
		uint64_t budget = pl_cache_budget(c->o.cache);
		double as_proj = (double)need * (double)c->proj_sum / (double)c->flat_sum;
		c->flat_off = need > budget && as_proj <= (double)budget;
	}
	return !c->flat_off;
}

static int grow(uint8_t **buf, size_t *cap, size_t need)
{
	if (*cap >= need)
		return 0;
	size_t n = need + 4096;
	uint8_t *np = realloc(*buf, n);
	if (!np)
		return -ENOMEM;
	*buf = np;
	*cap = n;
	return 0;
}

/* Records whose projection is also measured at level 3: what Plumber's rule weighs it by. */
#define LEVEL_SAMPLES 4096

/*
 * Level 3: an Example's features decoded from the record itself and flattened (2), in one
 * walk of the record: a projection decodes to the very features its record does (fuzz_pbex),
 * so there is no need to make one. 0 to keep it whole (it does not decode), -ENOMEM.
 */
static int flatten_record(struct pl_chain *c, struct pl_worker_scratch *ws, struct pl_rec *rec,
			  const uint8_t **ret_data, uint32_t *ret_len)
{
	const struct pl_plan *plan = c->plan;
	if (pbex_decode_example(plan->ctx, rec->data, rec->len, ws->ctx, NULL) < 0)
		return 0;
	if (grow(&c->flat, &c->flat_cap, pbex_flat_size(ws->ctx, plan->n_ctx)) < 0)
		return -ENOMEM;
	long fl = pbex_flatten(ws->ctx, plan->n_ctx, c->flat, c->flat_cap);
	if (fl < 0)
		return 0; /* over 4 GiB decoded: kept as it is */
	if (c->level_samples < LEVEL_SAMPLES) {
		if (grow(&c->proj, &c->proj_cap, (size_t)rec->len + 12) < 0)
			return -ENOMEM;
		long n = pbex_project(plan->ctx, NULL, false, rec->data, rec->len, c->proj,
				      c->proj_cap);
		if (n >= 0) {
			/* as cached when uniform (PL_CACHE_REC_VALUES, frame.c), the common case: a
			   dataset of varying records weighs level 3 lighter than it is */
			c->flat_sum += (uint64_t)fl - flat_heads(plan);
			c->proj_sum += (uint64_t)n;
			c->level_samples++;
		}
	}
	*ret_data = c->flat;
	*ret_len = (uint32_t)fl;
	return 2;
}

/*
 * Level 2: the record with only the features this pipeline reads (pbex_project), once the
 * projection decodes (1). 0 to keep it whole, -ENOMEM.
 */
static int project_record(struct pl_chain *c, struct pl_worker_scratch *ws, struct pl_rec *rec,
			  const uint8_t **ret_data, uint32_t *ret_len)
{
	const struct pl_plan *plan = c->plan;
	if (grow(&c->proj, &c->proj_cap, (size_t)rec->len + 12) < 0)
		return -ENOMEM;
	long n = pbex_project(plan->ctx, plan->lists, plan->sequence_example, rec->data, rec->len,
			      c->proj, c->proj_cap);
	if (n < 0)
		return 0;
	struct pl_rec pr = *rec;
	pr.data = c->proj;
	pr.len = (uint32_t)n;
	pr.crc_checked = true;
	if (pl_row_decode(plan, ws, &pr, false, NULL) < 0)
		return 0;
	*ret_data = c->proj;
	*ret_len = (uint32_t)n;
	return 1;
}

/*
 * frame (filling the record cache) → what the cache keeps of the record, once its data CRC is
 * right: its decoded features (level 3, an Example's) or its projection (level 2). A record
 * that does not decode is kept whole, so that reading it from the cache fails the way reading
 * it from the file does. (The projection decodes exactly when the record does, to the same
 * features: the entries it keeps are copied whole, and both walks read every entry's key the
 * same way. fuzz_pbex checks both directions, and that the flat form gives the features the
 * decode gave, value for value.)
 */
static int project(void *ctx, struct pl_rec *rec, const uint8_t **ret_data, uint32_t *ret_len)
{
	struct pl_chain *c = ctx;
	struct pl_worker_scratch *ws = scratch(c);
	if (!ws)
		return -ENOMEM;
	unsigned prev = pl_prof_enter(c->o.prof, PL_STAGE_PARSE);
	int r = pl_row_check_crc(c->plan, rec);
	if (r == 0) {
		rec->crc_checked = true; /* the parse task need not check it again */
		r = cache_flat(c) ? flatten_record(c, ws, rec, ret_data, ret_len)
				  : project_record(c, ws, rec, ret_data, ret_len);
	} else {
		r = 0; /* kept whole: its CRC error is the parse task's to report */
	}
	pl_prof_leave(c->o.prof, prev);
	return r;
}

/*
 * window (continuous_sequence) → a record's length along axis 0, the same for every output
 * tensor (after its processing steps). Decoded here, on the driver, because windows depend on
 * it; the data CRC is checked at the same time and not again by the parse task.
 */
static int record_steps(void *ctx, struct pl_rec *rec, int64_t *ret_steps, struct io_error *err)
{
	struct pl_chain *c = ctx;
	const struct pl_plan *plan = c->plan;
	struct pl_worker_scratch *ws = scratch(c);
	if (!ws)
		return -ENOMEM;
	unsigned prev = pl_prof_enter(c->o.prof, PL_STAGE_PARSE);
	int r = pl_row_decode(plan, ws, rec, true, err);
	if (r < 0)
		goto out;
	rec->crc_checked = true;
	r = pl_row_shapes(plan, ws, err);
	int64_t steps = -1;
	size_t first = 0;
	for (size_t i = 0; r == 0 && i < plan->n_out; i++) {
		struct pl_view v;
		r = pl_row_view(plan, ws, i, &v, err);
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
		goto out;
	}
	*ret_steps = steps < 0 ? 0 : steps;
out:
	pl_prof_leave(c->o.prof, prev);
	return r;
}

/* The bytes of the files the pipeline reads (its shard's). */
static uint64_t dataset_bytes(const struct pl_plan *plan)
{
	uint64_t n = 0;
	for (size_t i = 0; i < plan->n_files; i++)
		n += plan->ds->files[plan->files[i]].size;
	return n;
}

/*
 * Whether the frame stages keep records in the record cache: files of compressed datasets, and
 * of uncompressed ones unless told not to (cache_uncompressed false, the old rule).
 */
static bool use_cache(const struct pl_chain *c)
{
	return c->o.cache && !c->gs &&
	       (c->o.cache_uncompressed ||
		c->plan->ds->manifest->compression != TFR_COMPRESSION_NONE);
}

/*
 * Whether an epoch may run on compact rows (cepoch.h) once the cache holds every file decoded:
 * independent records (no windows) whose outputs are all native and laid out statically, so
 * that a cached row goes straight into the batch (pl_asm_fill_row), under an on_corrupt that
 * needs no record checked on the driver (skip_file does).
 */
static bool compact_ok(const struct pl_chain *c)
{
	const struct pl_plan *plan = c->plan;
	return use_cache(c) && plan->cfg.type == PL_LOADER_INDEPENDENT && plan->all_native &&
	       !plan->measure && plan->cfg.on_corrupt != PL_ON_CORRUPT_SKIP_FILE;
}

/* ---- life ---- */

static int slot_create(struct pl_chain *c, struct pl_slot *s)
{
	const struct pl_plan *plan = c->plan;
	const struct pl_spec *cfg = &plan->cfg;
	s->c = c;
	struct pl_read_opts ro = {
		.engine = c->o.engine,
		.direct = c->o.direct,
		.chunk_len = plan->read_chunk,
		.chunk_live = &c->read_chunk,
		.depth_live = &c->read_depth,
		.queue_depth = plan->read_depth,
		/* sequence loaders keep records in their window generators: always copied */
		.pin = cfg->type == PL_LOADER_INDEPENDENT,
		.idle = c->o.idle,
		.idle_ctx = c->o.idle_ctx,
		.evacuate = evacuate,
		.evacuate_ctx = c,
		.stop = &c->stop,
		.creds = plan->creds,
		.st = &c->st[PL_STAGE_READ],
		.tot = &c->read_tot,
		.prof = c->o.prof,
	};
	int r = pl_read_create(&ro, &s->rd);
	if (r < 0)
		return r;
	struct pl_frame_opts fo = {
		.compression = plan->ds->manifest->compression,
		.on_corrupt = cfg->on_corrupt,
		.read = slot_read,
		.abandon = slot_abandon,
		.open = slot_reopen,
		.read_ctx = s,
		.stop = &c->stop,
		.validate = validate,
		.validate_ctx = c,
		.store = &c->store,
		.mem = plan->mem,
		.cache = use_cache(c) ? c->o.cache : NULL,
		.cache_user = &c->cache_user,
		.creds = plan->creds,
		.project = project,
		.project_ctx = c,
		.proj_key = c->plan->proj_fp,
		.flat_heads = flat_heads(plan),
		.dataset_bytes = c->data_bytes,
		.st = &c->st[PL_STAGE_FRAME],
		.tot = &c->frame_tot,
		.prof = c->o.prof,
	};
	r = pl_frame_create(&fo, &s->fr);
	if (r < 0 || cfg->type == PL_LOADER_INDEPENDENT)
		return r;
	struct pl_window_opts wo = {
		.continuous = cfg->type == PL_LOADER_CONTINUOUS_SEQUENCE,
		.min_window = cfg->min_window,
		.max_window = cfg->max_window,
		.stride = cfg->stride,
		.seed = cfg->seed,
		.on_corrupt = cfg->on_corrupt,
		.next = slot_frame,
		.next_ctx = s,
		.steps = record_steps,
		.steps_ctx = c,
		.st = &c->st[PL_STAGE_WINDOW],
		.prof = c->o.prof,
	};
	return pl_window_create(&wo, &s->win);
}

int pl_chain_create(const struct pl_chain_opts *opts, struct pl_chain **ret, struct io_error *err)
{
	const struct pl_plan *plan = opts->plan;
	const struct pl_spec *cfg = &plan->cfg;
	struct pl_chain *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->o = *opts;
	c->plan = plan;
	c->store.mem = plan->mem;
	c->data_bytes = dataset_bytes(plan);
	atomic_init(&c->read_chunk, plan->read_chunk);
	atomic_init(&c->read_depth, plan->read_depth ? plan->read_depth : PL_READ_QUEUE_DEPTH);
	atomic_init(&c->stop, false);
	if (cfg->global_shuffle) {
		/*
		 * Reads of one record each, at random: as many in flight as the cycle's readers
		 * would have, four times over (a disk's queue wants many), within the buffers
		 * those readers would hold.
		 */
		unsigned per = plan->read_depth ? plan->read_depth : PL_READ_QUEUE_DEPTH;
		struct pl_gshuffle_opts go = {
			.plan = plan,
			.engine = opts->engine,
			.depth = 4 * plan->cycle * per,
			.read_bytes =
				(uint64_t)plan->cycle * pl_read_buffers(per) * plan->read_chunk,
			.store = &c->store,
			.stop = &c->stop,
			.st_read = &c->st[PL_STAGE_READ],
			.st_frame = &c->st[PL_STAGE_FRAME],
			.st_shuffle = &c->st[PL_STAGE_SHUFFLE],
			.read_tot = &c->read_tot,
			.skipped_files = &c->frame_tot.skipped_files,
			.prof = opts->prof,
		};
		int r = pl_gshuffle_create(&go, &c->gs, err);
		if (r < 0) {
			pl_chain_destroy(c);
			return r;
		}
		*ret = c;
		return 0;
	}
	struct pl_files_opts fo = {
		.files = plan->files,
		.n_files = plan->n_files,
		.shuffle = cfg->shuffle,
		.buffer = (uint64_t)cfg->num_filenames_shuffle_buffer,
		.seed = cfg->seed,
		.st = &c->st[PL_STAGE_FILES],
		.prof = opts->prof,
	};
	int r = pl_files_create(&fo, &c->files);
	c->n_slots = plan->cycle;
	c->slots = calloc(c->n_slots, sizeof(*c->slots));
	if (r < 0 || !c->slots)
		goto fail;
	for (unsigned i = 0; i < c->n_slots; i++) {
		r = slot_create(c, &c->slots[i]);
		if (r < 0)
			goto fail;
	}
	struct pl_interleave_opts io = {
		.cycle = c->n_slots,
		.sloppy = cfg->sloppy_interleave,
		.next = slot_next,
		.open = slot_open,
		.ctx = c,
		.st = &c->st[PL_STAGE_INTERLEAVE],
		.prof = opts->prof,
	};
	r = pl_interleave_create(&io, &c->il);
	if (r < 0)
		goto fail;
	struct pl_shuffle_opts so = {
		.enabled = cfg->shuffle,
		.buffer = (uint64_t)cfg->num_shuffle_buffer_elements,
		.seed = cfg->seed,
		.next = shuffle_up,
		.next_ctx = c,
		.store = &c->store,
		/* what the readers can keep pinned before they evacuate: half their pins */
		.own_over_bytes = (uint64_t)c->n_slots * (PL_PIN_CHUNKS / 2) * plan->read_chunk,
		.mem = plan->mem,
		.st = &c->st[PL_STAGE_SHUFFLE],
		.prof = opts->prof,
	};
	r = pl_shuffle_create(&so, &c->sh);
	if (r == 0 && compact_ok(c)) {
		so.compact = true;
		so.next = shuffle_up_compact;
		so.store = NULL;
		r = pl_shuffle_create(&so, &c->sh_c);
	}
	if (r < 0)
		goto fail;
	*ret = c;
	return 0;
fail:
	pl_chain_destroy(c);
	if (r == 0 || r == -ENOMEM) {
		io_error_set(err, "out of memory");
		r = -ENOMEM;
	}
	return r;
}

void pl_chain_destroy(struct pl_chain *c)
{
	if (!c)
		return;
	pl_gshuffle_destroy(c->gs);
	pl_shuffle_destroy(c->sh);
	pl_shuffle_destroy(c->sh_c);
	for (unsigned i = 0; c->slots && i < c->n_slots; i++) {
		struct pl_slot *s = &c->slots[i];
		pl_window_destroy(s->win);
		if (s->fr)
			pl_frame_abandon(s->fr); /* the iox goes with its last pinned buffer */
		pl_frame_destroy(s->fr);
		pl_read_destroy(s->rd);
	}
	pl_interleave_destroy(c->il);
	pl_files_destroy(c->files);
	pl_cepoch_unref(c->cx);
	pl_scratch_destroy(c->ws);
	free(c->proj);
	free(c->flat);
	pl_store_fini(&c->store);
	free(c->slots);
	free(c);
}

uint64_t pl_chain_skip(struct pl_chain *c, uint64_t n)
{
	if (!c->gs)
		return 0;
	c->skip_next = n;
	return n;
}

int pl_chain_begin_epoch(struct pl_chain *c, uint64_t epoch, struct io_error *err)
{
	if (c->gs) {
		uint64_t skip = c->skip_next;
		c->skip_next = 0;
		c->epoch = epoch;
		return pl_gshuffle_begin_epoch(c->gs, epoch, skip, err);
	}
	pl_shuffle_begin_epoch(c->sh, epoch);
	for (unsigned i = 0; i < c->n_slots; i++)
		if (pl_frame_is_open(c->slots[i].fr)) /* a file left half read: start over clean */
			pl_frame_abandon(c->slots[i].fr);
	pl_cepoch_unref(c->cx); /* batches in flight hold their own reference */
	c->cx = NULL;
	if (c->sh_c) {
		pl_shuffle_begin_epoch(c->sh_c, epoch); /* empties it either way */
		if (flat_level(c) &&
		    pl_cepoch_create(c->o.cache, c->plan, c->plan->proj_fp, &c->cx) < 0) {
			io_error_set(err, "out of memory");
			return -ENOMEM;
		}
		c->cached_epochs += c->cx != NULL;
	}
	c->epoch = epoch;
	pl_files_begin_epoch(c->files, epoch);
	return pl_interleave_begin_epoch(c->il, err);
}

int pl_chain_next(struct pl_chain *c, struct pl_rec *ret, struct io_error *err)
{
	if (c->gs)
		return pl_gshuffle_next(c->gs, ret, err);
	return pl_shuffle_next(c->sh, ret, err);
}

struct pl_cepoch *pl_chain_cached_epoch(const struct pl_chain *c)
{
	return c->cx;
}

int pl_chain_next_row(struct pl_chain *c, struct pl_crow *ret, struct io_error *err)
{
	return pl_shuffle_next(c->sh_c, ret, err);
}

void pl_chain_stop(struct pl_chain *c)
{
	atomic_store_explicit(&c->stop, true, memory_order_relaxed);
}

void pl_chain_get_stats(const struct pl_chain *c, struct pl_stage_stats st[PL_STAGE_COUNT_],
			struct pl_chain_totals *ret)
{
	for (unsigned i = PL_STAGE_FILES; i <= PL_STAGE_SHUFFLE; i++)
		st[i] = c->st[i];
	ret->read = c->read_tot;
	ret->skipped_files = c->frame_tot.skipped_files;
	/* 3: decoded features, 2: records projected to what it reads */
	ret->cache_level = !use_cache(c) ? 0 : flat_level(c) ? 3 : 2;
	ret->cache_files = c->frame_tot.cache_files;
	ret->cache_bytes = c->frame_tot.cache_bytes;
	ret->cache_filled = c->frame_tot.cache_filled;
	ret->cache_followed = c->frame_tot.cache_followed;
	ret->cache_fallbacks = c->frame_tot.cache_fallbacks;
	ret->cache_need = use_cache(c) ? pl_frame_cache_need(&c->frame_tot, c->data_bytes) : 0;
	ret->cache_fits = !use_cache(c) || ret->cache_need <= pl_cache_budget(c->o.cache);
	ret->copied_bytes = c->store.copied_bytes;
	ret->cached_epochs = c->cached_epochs;
}

void pl_chain_set_reads(struct pl_chain *c, size_t chunk, unsigned depth)
{
	if (chunk)
		atomic_store_explicit(&c->read_chunk, (chunk + 4095) & ~(size_t)4095,
				      memory_order_relaxed);
	if (depth)
		atomic_store_explicit(&c->read_depth, depth, memory_order_relaxed);
}

void pl_chain_reads(struct pl_chain *c, size_t *ret_chunk, unsigned *ret_depth)
{
	*ret_chunk = atomic_load_explicit(&c->read_chunk, memory_order_relaxed);
	*ret_depth = atomic_load_explicit(&c->read_depth, memory_order_relaxed);
}

uint64_t pl_chain_read_wait_ns(const struct pl_chain *c)
{
	return c->st[PL_STAGE_READ].wait_up_ns;
}
