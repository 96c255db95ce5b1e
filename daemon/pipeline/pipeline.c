/* SPDX-License-Identifier: Apache-2.0 */
/* The engine's public API: a plan, a driver and a deliver stage put together. */
#include "pipeline.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "batchmem.h"
#include "deliver.h"
#include "driver.h"
#include "mem.h"
#include "plan.h"
#include "read.h"
#include "sched/sched.h"
#include "state.h"

struct pl_pipeline {
	struct pl_plan *plan;
	struct sched_pool *own_pool;
	struct pl_deliver *dl;
	struct pl_driver *drv;
	struct pl_tensor_info *info;
	struct pl_pos start; /* where the stream begins (0, or a restored state) */
	struct pl_batchmem mem;
	struct pl_tune max;	    /* what a tuner may move, and how far (pl_pipeline_tunable) */
	struct pl_tune start_reads; /* the knobs it starts with (tune_bounds) */
};

/*
 * Read buffers a tuner may give a pipeline's readers at most without args.ram_budget: each of
 * the cycle's readers keeps pl_read_buffers() chunks.
 */
#define PL_TUNE_READ_BYTES ((size_t)256 << 20)

/*
 * The most reads in flight per reader, 1 .. PL_READ_MAX_QUEUE_DEPTH, whose buffers of chunk
 * bytes keep the cycle's readers within bytes; 1, the least, when even that does not fit.
 */
static unsigned depth_within(uint64_t bytes, unsigned cycle, size_t chunk)
{
	unsigned d = PL_READ_MAX_QUEUE_DEPTH;
	while (d > 1 && (uint64_t)cycle * pl_read_buffers(d) * chunk > bytes)
		d--;
	return d;
}

/*
 * The largest read size, a power of two from PL_TUNE_CHUNK_MIN to PL_TUNE_CHUNK_MAX, that keeps
 * the cycle's readers, depth reads in flight each, within bytes; PL_TUNE_CHUNK_MIN, the least,
 * when even that does not fit.
 */
static size_t chunk_within(uint64_t bytes, unsigned cycle, unsigned depth)
{
	uint64_t per = bytes / ((uint64_t)cycle * pl_read_buffers(depth));
	size_t m = PL_TUNE_CHUNK_MIN;
	while (m * 2 <= per && m * 2 <= PL_TUNE_CHUNK_MAX)
		m *= 2;
	return m;
}

/*
 * The tunable knobs' bounds, and their starting values into *start (opts.tune). With
 * args.ram_budget B, what the tuner gives stays within B: the cycle's read buffers within B / 2
 * (reads in flight bounded first, at the read size the readers start with, then the read size
 * at that depth), the batch jobs in flight within B / 2 where a batch's size is known. A knob
 * whose least value does not fit keeps its least (1 read in flight, 64 KiB reads, 1 job).
 */
static void tune_bounds(struct pl_pipeline *p, bool tune, struct pl_mem *mem, struct pl_tune *start)
{
	const struct pl_plan *plan = p->plan;
	memset(&p->max, 0, sizeof(p->max));
	p->max.weight = UINT_MAX;
	*start = (struct pl_tune){ .prefetch = plan->prefetch,
				   .read_chunk = plan->read_chunk,
				   .read_depth = plan->read_depth ? plan->read_depth
								  : PL_READ_QUEUE_DEPTH };
	if (!tune)
		return;
	uint64_t half = (uint64_t)plan->cfg.ram_budget / 2; /* 0: no budget */
	/*
	 * The read buffers a tuner may give: within half the budget, else PL_TUNE_READ_BYTES;
	 * under a memory account, within a quarter of the room it has now too (they are reserved
	 * at register: pl_pipeline_mem_need).
	 */
	uint64_t reads = half ? half : PL_TUNE_READ_BYTES;
	if (mem) {
		uint64_t room = pl_mem_room(mem) / 4;
		if (room < reads)
			reads = room;
	}
	if (plan->cfg.num_prefetch == PL_AUTO) {
		unsigned pf;
		uint64_t bb = pl_pipeline_batch_bytes(p, &pf), fit = PL_TUNE_PREFETCH_MAX;
		if (half && bb && half / bb < fit)
			fit = half / bb ? half / bb : 1;
		p->max.prefetch = (unsigned)fit;
		start->prefetch = 1;
	}
	bool chunk_tuned = plan->cfg.num_read_buffer_bytes == PL_AUTO;
	if (chunk_tuned)
		start->read_chunk = PL_TUNE_CHUNK_MIN;
	if (plan->cfg.cycle_length != PL_CYCLE_UNSET && plan->cfg.num_parallel_reads == PL_AUTO) {
		p->max.read_depth = half || mem
					    ? depth_within(reads, plan->cycle, start->read_chunk)
					    : PL_READ_MAX_QUEUE_DEPTH;
		start->read_depth = 1;
	}
	if (chunk_tuned) {
		/* without a budget as before: PL_TUNE_READ_BYTES at the default depth */
		p->max.read_chunk = half || mem
					    ? chunk_within(reads, plan->cycle,
							   p->max.read_depth ? p->max.read_depth
									     : start->read_depth)
					    : chunk_within(PL_TUNE_READ_BYTES, plan->cycle,
							   PL_READ_QUEUE_DEPTH);
	}
}

void pl_pipeline_opts_init(struct pl_pipeline_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->size = sizeof(*opts);
	opts->engine = IOX_ENGINE_AUTO;
}

static int make_info(struct pl_pipeline *p)
{
	const struct pl_plan *plan = p->plan;
	p->info = calloc(plan->n_out + 1, sizeof(*p->info));
	if (!p->info)
		return -ENOMEM;
	for (size_t i = 0; i < plan->n_out; i++) {
		const struct pl_out *o = &plan->out[i];
		struct pl_tensor_info *t = &p->info[i];
		t->name = o->name;
		t->dtype = o->dtype;
		t->rank = o->row_rank + 1;
		t->shape[0] = -1;
		for (unsigned d = 0; d < o->row_rank; d++)
			t->shape[d + 1] = o->pad ? o->pad_shape[d] : o->row_shape[d];
		t->ragged = o->ragged;
	}
	return 0;
}

static int start_pool(struct pl_pipeline *p, struct io_error *err)
{
	struct sched_pool_opts po;
	sched_pool_opts_init(&po);
	po.workers = p->plan->parses;
	po.pin = false; /* a pool of the pipeline's own shares the process with others */
	int r = sched_pool_create(&po, &p->own_pool);
	if (r < 0)
		io_error_set(err, "cannot start %u parse workers", p->plan->parses);
	return r;
}

int pl_pipeline_create(const struct pl_spec *spec, const struct pl_pipeline_opts *opts,
		       struct pl_pipeline **ret_p, struct io_error *err)
{
	struct pl_pipeline_opts o;
	pl_pipeline_opts_init(&o);
	if (opts)
		memcpy(&o, opts, opts->size < sizeof(o) ? opts->size : sizeof(o));
	if (!o.alloc != !o.free) {
		io_error_set(err, "pipeline options: alloc and free go together");
		return -EINVAL;
	}
	if (!o.deliver != !o.end) {
		io_error_set(err, "pipeline options: deliver and end go together");
		return -EINVAL;
	}
	struct pl_pipeline *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	pl_batchmem_init(&p->mem);
	if (!o.alloc) {
		o.alloc = pl_batchmem_alloc;
		o.free = pl_batchmem_free;
		o.alloc_ctx = &p->mem;
	}
	int r = pl_plan_create(spec, o.creds, &p->plan, err);
	if (r < 0)
		goto fail;
	p->plan->mem = o.mem;
	if (o.alloc_ctx == &p->mem)
		p->mem.acct = o.mem; /* batches of its own memory: charged too */
	if (o.state) {
		r = pl_state_load(p->plan->fingerprint, p->plan->cfg.seed, o.state, o.state_len,
				  &p->start, err);
		if (r < 0)
			goto fail;
	}
	r = make_info(p);
	if (r < 0)
		goto fail;
	struct pl_tune start;
	tune_bounds(p, o.tune, o.mem, &start);
	p->start_reads = start;
	struct pl_deliver_opts dopts = {
		.prefetch = start.prefetch,
		.deliver = o.deliver,
		.end = o.end,
		.deliver_ctx = o.deliver_ctx,
		.free = o.free,
		.alloc_ctx = o.alloc_ctx,
	};
	r = pl_deliver_create(&dopts, &p->dl);
	if (r < 0)
		goto fail;
	if (!o.pool) {
		r = start_pool(p, err);
		if (r < 0)
			goto fail;
	}
	struct pl_driver_opts dro = {
		.plan = p->plan,
		.engine = o.engine,
		.direct = o.direct,
		.cache = o.cache,
		.cache_uncompressed = o.cache_uncompressed,
		.pool = o.pool ? o.pool : p->own_pool,
		.alloc = o.alloc,
		.free = o.free,
		.alloc_ctx = o.alloc_ctx,
		.dl = p->dl,
		.start = p->start,
		.prefetch_max = p->max.prefetch,
	};
	r = pl_driver_create(&dro, &p->drv, err);
	if (r == 0)
		pl_driver_set_reads(p->drv, start.read_chunk, start.read_depth);
	if (r == 0 && !o.defer_start)
		r = pl_driver_start(p->drv, err);
	if (r < 0)
		goto fail;
	*ret_p = p;
	return 0;
fail:
	if (r == -ENOMEM)
		io_error_set(err, "out of memory");
	pl_pipeline_destroy(p);
	return r;
}

int pl_pipeline_start(struct pl_pipeline *p, struct io_error *err)
{
	return pl_driver_start(p->drv, err);
}

void pl_pipeline_destroy(struct pl_pipeline *p)
{
	if (!p)
		return;
	pl_driver_destroy(p->drv); /* stops it: no more batches */
	pl_deliver_destroy(p->dl);
	sched_pool_destroy(p->own_pool, SCHED_SHUTDOWN_DRAIN);
	free(p->info);
	pl_plan_destroy(p->plan);
	pl_batchmem_fini(&p->mem);
	free(p);
}

uint64_t pl_pipeline_batch_bytes(const struct pl_pipeline *p, unsigned *ret_prefetch)
{
	const struct pl_plan *plan = p->plan;
	uint64_t rows = (uint64_t)plan->cfg.target_batch_size, bytes = 4096; /* header, table */
	*ret_prefetch = plan->prefetch;
	for (size_t i = 0; i < plan->n_out; i++) {
		const struct pl_out *o = &plan->out[i];
		if (o->measure || o->ragged || o->dtype == MANIFEST_DTYPE_STRING)
			return 0;
		uint64_t n = o->elem_size;
		for (unsigned d = 0; d < o->row_rank; d++) {
			int64_t k = o->pad ? o->pad_shape[d] : o->row_shape[d];
			if (k < 0)
				return 0;
			n *= (uint64_t)k;
		}
		bytes += rows * n + 4096; /* each tensor's data aligned */
	}
	return bytes;
}

void pl_pipeline_mem_need(const struct pl_pipeline *p, struct pl_mem_need *ret)
{
	const struct pl_plan *plan = p->plan;
	memset(ret, 0, sizeof(*ret));
	ret->cycle = plan->cycle ? plan->cycle : 1;
	unsigned depth = p->max.read_depth ? p->max.read_depth : p->start_reads.read_depth;
	ret->buffers = pl_read_buffers(depth ? depth : PL_READ_QUEUE_DEPTH);
	ret->chunk = p->max.read_chunk ? p->max.read_chunk : p->start_reads.read_chunk;
	if (!ret->chunk)
		ret->chunk = plan->read_chunk;
	ret->read_bytes = (uint64_t)ret->cycle * ret->buffers * ret->chunk;
	if (plan->cfg.shuffle && !plan->cfg.global_shuffle) {
		/* the slots it starts with (shuffle.c; more are charged as it grows) */
		uint64_t n = (uint64_t)plan->cfg.num_shuffle_buffer_elements;
		ret->slot_bytes = (n < (1u << 20) ? n : (1u << 20)) * sizeof(struct pl_rec);
	}
	/*
	 * The store's first block (records that straddle reads are copied there) and a slab when
	 * a shuffle buffer holds records of their own; the row slots of the batches in flight.
	 */
	ret->store_bytes = ((uint64_t)1 << 20) + 4096;
	if (plan->cfg.shuffle)
		ret->store_bytes += (uint64_t)2 << 20;
	uint64_t rows = (uint64_t)plan->cfg.target_batch_size;
	ret->store_bytes +=
		(rows < 1024 ? rows : 1024) * sizeof(struct pl_rec) * (plan->prefetch + 2);
	ret->total = ret->read_bytes + ret->slot_bytes + ret->store_bytes;
}

int64_t pl_pipeline_ram_budget(const struct pl_pipeline *p)
{
	return p->plan->cfg.ram_budget > 0 ? p->plan->cfg.ram_budget : 0;
}

size_t pl_pipeline_n_tensors(const struct pl_pipeline *p)
{
	return p->plan->n_out;
}

const struct pl_tensor_info *pl_pipeline_tensor(const struct pl_pipeline *p, size_t i)
{
	return i < p->plan->n_out ? &p->info[i] : NULL;
}

int pl_pipeline_next(struct pl_pipeline *p, int timeout_ms, struct pl_batch **ret_batch,
		     struct io_error *err)
{
	return pl_deliver_next(p->dl, timeout_ms, ret_batch, err);
}

void pl_batch_release(struct pl_pipeline *p, struct pl_batch *b)
{
	pl_deliver_release(p->dl, b);
}

int pl_pipeline_state_after(const struct pl_pipeline *p, const struct pl_batch_pos *b, void *buf,
			    size_t cap)
{
	struct pl_pos pos = b ? pl_state_pos_after(b) : p->start;
	return pl_state_write(p->plan->fingerprint, p->plan->cfg.seed, &pos, buf, cap);
}

int pl_pipeline_state_of(const struct pl_pipeline *p, uint64_t epoch, uint64_t index, uint64_t seq,
			 void *buf, size_t cap)
{
	struct pl_pos pos = { .epoch = epoch, .index = index, .seq = seq };
	return pl_state_write(p->plan->fingerprint, p->plan->cfg.seed, &pos, buf, cap);
}

int pl_pipeline_save(const struct pl_pipeline *p, void *buf, size_t cap)
{
	struct pl_batch_pos last;
	bool any = pl_deliver_last(p->dl, &last) == 1;
	return pl_pipeline_state_after(p, any ? &last : NULL, buf, cap);
}

void pl_pipeline_tunable(const struct pl_pipeline *p, struct pl_tune *ret_max)
{
	*ret_max = p->max;
}

void pl_pipeline_tune(struct pl_pipeline *p, const struct pl_tune *t)
{
	if (t->prefetch && p->max.prefetch)
		pl_deliver_set_prefetch(p->dl, t->prefetch < p->max.prefetch ? t->prefetch
									     : p->max.prefetch);
	if (t->read_chunk && p->max.read_chunk) {
		size_t c = t->read_chunk < PL_TUNE_CHUNK_MIN ? PL_TUNE_CHUNK_MIN : t->read_chunk;
		pl_driver_set_reads(p->drv, c < p->max.read_chunk ? c : p->max.read_chunk, 0);
	}
	if (t->read_depth && p->max.read_depth)
		pl_driver_set_reads(p->drv, 0,
				    t->read_depth < p->max.read_depth ? t->read_depth
								      : p->max.read_depth);
	if (t->weight)
		pl_driver_set_weight(p->drv, t->weight);
}

void pl_pipeline_get_stats(const struct pl_pipeline *p, struct pl_stats *ret)
{
	memset(ret, 0, sizeof(*ret));
	pl_driver_get_stats(p->drv, ret);
	ret->epoch_batches_ahead = p->plan->ahead_known ? p->plan->ahead_batches : 0;
	if (!ret->epoch_batches) /* before the first epoch ended: as counted ahead */
		ret->epoch_batches = ret->epoch_batches_ahead;
}

void pl_pipeline_fingerprint(const struct pl_pipeline *p, uint8_t ret_fp[16])
{
	memcpy(ret_fp, &p->plan->fingerprint, 8);
	memcpy(ret_fp + 8, &p->plan->fingerprint2, 8);
}

int pl_spec_fingerprint(const struct pl_spec *spec, const struct io_creds *creds,
			uint8_t ret_fp[16], struct io_error *err)
{
	struct pl_plan *plan;
	int r = pl_plan_create(spec, creds, &plan, err);
	if (r < 0)
		return r;
	memcpy(ret_fp, &plan->fingerprint, 8);
	memcpy(ret_fp + 8, &plan->fingerprint2, 8);
	pl_plan_destroy(plan);
	return 0;
}
