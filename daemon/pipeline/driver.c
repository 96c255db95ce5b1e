/* SPDX-License-Identifier: Apache-2.0 */
/* The driver thread: the input chain's elements into batch jobs, finished jobs into deliver. */
#include "driver.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "assemble.h"
#include "cepoch.h"
#include "chain.h"
#include "ipc/batch.h"
#include "mem.h"
#include "sched/sched.h"

/*
 * The driver owns the input chain and the order of batches: it collects each batch's rows
 * (docs/pipeline-semantics.md), starts its job on the pool (the parse stage), and finishes
 * jobs oldest first into deliver, keeping at most `prefetch` batches ready or in flight. It
 * owns the clock: its thread's CPU time is split between the stages it runs by sampled rounds
 * (struct pl_prof), and it publishes every stage's counters after each batch.
 */
struct pl_driver {
	struct pl_driver_opts o;
	const struct pl_plan *plan;
	struct pl_chain *chain;
	struct sched_queue *q;
	struct pl_asm_ctx ax;
	struct pl_prof prof;
	pthread_t thread;
	bool started;

	/* the driver thread's */
	struct pl_bjob **inflight; /* FIFO of jobs in flight */
	uint64_t *started_ns;	   /* when each was started (CLOCK_MONOTONIC) */
	size_t head, count, cap;   /* cap: the most a tuner may allow (deliver's prefetch) */
	uint64_t job_wait_ns;	   /* waiting for (or helping) the oldest job, not yet done */
	uint64_t job_ns;	   /* started to finished, summed over the jobs finished */
	struct io_error err;
	bool job_failed; /* a batch failed: nothing after it may be delivered */
	uint64_t rounds; /* batches collected (a sampled round every PL_PROF_EVERY) */

	/* published by the driver, under lock */
	pthread_mutex_t lock;
	struct pl_stage_stats st[PL_STAGE_COUNT_];
	struct pl_chain_totals tot;
	uint64_t prof_cpu[PL_STAGE_COUNT_], prof_last[PL_STAGE_COUNT_], prof_cpu_at;
	uint64_t lazy_fills, small_fills, alloc_ns;
	uint64_t pub_job_wait_ns, pub_job_ns;
	char fallback[160]; /* why not io_uring, copied once: readers keep a pointer to it */
	bool have_fallback;
	uint64_t epoch_batches; /* of the first epoch that ended; 0 before */
	uint64_t cpu_ns;	/* at the driver's end; while it runs, its clock: */
	clockid_t clock;
	bool clock_ok; /* the driver runs and clock is its clock */
};

/* Copy the stages' counters for readers on other threads. `last`: the driver is ending. */
static void publish_stats(struct pl_driver *d, bool last)
{
	struct pl_stage_stats st[PL_STAGE_COUNT_];
	struct pl_chain_totals tot;
	pl_chain_get_stats(d->chain, st, &tot);
	st[PL_STAGE_PARSE] = d->ax.st;
	st[PL_STAGE_PARSE].buffered = d->count;
	uint64_t cpu = last ? pl_clock_ns(CLOCK_THREAD_CPUTIME_ID) : 0;
	pthread_mutex_lock(&d->lock);
	memcpy(d->st, st, sizeof(st));
	d->tot = tot;
	if (tot.read.have_fallback && !d->have_fallback) {
		memcpy(d->fallback, tot.read.fallback, sizeof(d->fallback));
		d->have_fallback = true;
	}
	memcpy(d->prof_cpu, d->prof.cpu, sizeof(d->prof_cpu));
	memcpy(d->prof_last, d->prof.last, sizeof(d->prof_last));
	d->prof_cpu_at = d->prof.cpu_at;
	d->lazy_fills = d->ax.lazy_fills;
	d->small_fills = d->ax.small_fills;
	d->alloc_ns = d->ax.alloc_ns;
	d->pub_job_wait_ns = d->job_wait_ns;
	d->pub_job_ns = d->job_ns;
	if (last) {
		d->cpu_ns = cpu;
		d->clock_ok = false;
	}
	pthread_mutex_unlock(&d->lock);
}

/* Finish the oldest job in flight: its batch to deliver, or its error. */
static int finish_oldest(struct pl_driver *d)
{
	struct pl_bjob *job = d->inflight[d->head];
	uint64_t started = d->started_ns[d->head];
	d->head = (d->head + 1) % d->cap;
	d->count--;
	struct pl_batch b;
	bool done = pl_bjob_done(job);
	uint64_t t0 = done ? 0 : pl_clock_ns(CLOCK_MONOTONIC);
	int r = pl_bjob_finish(&d->ax, job, &b, &d->err);
	uint64_t t1 = pl_clock_ns(CLOCK_MONOTONIC);
	if (!done)
		d->job_wait_ns += t1 - t0;
	d->job_ns += t1 - started;
	unsigned prev = pl_prof_enter(&d->prof, PL_STAGE_DELIVER);
	int e = pl_deliver_put(d->o.dl, r == 0 ? &b : NULL, &d->err);
	pl_prof_leave(&d->prof, prev);
	if (r == 0)
		r = e;
	if (r < 0) {
		d->job_failed = true;
		pl_deliver_fail(d->o.dl, r, &d->err);
	}
	return r;
}

/* Wait until another job may start: finish jobs that are done, or wait for the consumer. */
static int make_room(struct pl_driver *d)
{
	for (;;) {
		while (d->count > 0 && pl_bjob_done(d->inflight[d->head])) {
			int r = finish_oldest(d);
			if (r < 0)
				return r;
		}
		int room = pl_deliver_room(d->o.dl);
		if (room != 0)
			return room < 0 ? room : 0;
		if (d->count > 0) {
			int r = finish_oldest(d);
			if (r < 0)
				return r;
			continue;
		}
		unsigned prev = pl_prof_enter(&d->prof, PL_STAGE_IDLE_);
		pl_deliver_wait_room(d->o.dl);
		pl_prof_leave(&d->prof, prev);
	}
}

/* Start a batch of rows (or skip it while replaying up to a restored position). */
static int dispatch(struct pl_driver *d, struct pl_rows *rows, uint64_t epoch, uint64_t *index,
		    uint64_t *seq, bool last, bool skip)
{
	const struct pl_spec *c = &d->plan->cfg;
	if (skip) {
		pl_rows_drop(rows);
		(*index)++;
		return 0;
	}
	int r = make_room(d);
	if (r < 0) {
		pl_rows_drop(rows);
		return r;
	}
	uint32_t flags = 0;
	if (last) {
		flags |= IPC_BATCH_F_END_EPOCH;
		if (c->epochs != PL_NULL && epoch + 1 >= (uint64_t)c->epochs)
			flags |= IPC_BATCH_F_END_STREAM;
		pthread_mutex_lock(&d->lock);
		if (!d->epoch_batches) /* every epoch has as many: the index of its last + 1 */
			d->epoch_batches = *index + 1;
		pthread_mutex_unlock(&d->lock);
	}
	struct pl_stage_stats dst;
	uint64_t rows_out;
	pl_deliver_get_stats(d->o.dl, &dst, &rows_out);
	/* with ax.alloc_ns: the driver's slack */
	d->ax.blocked_ns = pl_chain_read_wait_ns(d->chain) + dst.wait_down_ns;
	struct pl_bjob *job;
	r = pl_bjob_start(&d->ax, rows, *seq, epoch, *index, flags, &job, &d->err);
	if (r < 0) {
		pl_deliver_fail(d->o.dl, r, &d->err);
		return r;
	}
	d->started_ns[(d->head + d->count) % d->cap] = pl_clock_ns(CLOCK_MONOTONIC);
	d->inflight[(d->head + d->count) % d->cap] = job;
	d->count++;
	pl_deliver_started(d->o.dl);
	(*index)++;
	(*seq)++;
	publish_stats(d, false);
	return 0;
}

/*
 * Make room for row n of an array of rows of size sz (*cap of them now, at most b): doubling
 * from 1024, so that a target_batch_size far above the epoch's records (2^31 - 1 is allowed)
 * takes what the rows take, not b slots up front. 0, or -ENOMEM with d->err saying so.
 */
static int grow_rows(struct pl_driver *d, void **rows, size_t *cap, size_t n, size_t b, size_t sz,
		     bool aligned, uint64_t *charged)
{
	if (n < *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 1024;
	if (nc > b)
		nc = b;
	uint64_t more = (uint64_t)(nc - *cap) * sz;
	if (pl_mem_take(d->plan->mem, more,
			"%zu row slots of a batch (target_batch_size %zu), %zu bytes", nc, b,
			nc * sz) < 0) {
		io_error_set(&d->err, "out of memory");
		return -ENOMEM;
	}
	void *nr = aligned ? aligned_alloc(PL_REC_ALIGN, nc * sz) : malloc(nc * sz);
	if (!nr) {
		pl_mem_uncharge(d->plan->mem, more);
		io_error_set(&d->err,
			     "out of memory for a batch of %zu rows (%zu bytes of row slots; "
			     "target_batch_size %zu)",
			     nc, nc * sz, b);
		return -ENOMEM;
	}
	*charged += more;
	if (*rows)
		memcpy(nr, *rows, n * sz);
	free(*rows);
	*rows = nr;
	*cap = nc;
	return 0;
}

/*
 * Up to b elements of the epoch into new arrays: records, or a cached epoch's compact rows
 * (with a reference to it). 0 (ret->n may be less than b at the end of the epoch), or -errno.
 */
static int collect(struct pl_driver *d, size_t b, struct pl_rows *ret)
{
	pl_prof_sample(&d->prof, d->rounds++ % PL_PROF_EVERY == 0);
	struct pl_cepoch *cx = pl_chain_cached_epoch(d->chain);
	*ret = (struct pl_rows){ .mem = d->plan->mem };
	int r = 0;
	size_t n = 0, cap = 0;
	if (cx) {
		pl_cepoch_ref(cx);
		ret->cx = cx;
		while (n < b &&
		       (r = grow_rows(d, (void **)&ret->crow, &cap, n, b, sizeof(*ret->crow), false,
				      &ret->charged)) == 0 &&
		       (r = pl_chain_next_row(d->chain, &ret->crow[n], &d->err)) == 1)
			ret->n = ++n;
	} else {
		while (n < b &&
		       (r = grow_rows(d, (void **)&ret->rec, &cap, n, b, sizeof(*ret->rec), true,
				      &ret->charged)) == 0 &&
		       (r = pl_chain_next(d->chain, &ret->rec[n], &d->err)) == 1)
			ret->n = ++n;
	}
	if (r < 0) {
		pl_rows_drop(ret);
		return r;
	}
	return 0;
}

/* One epoch: batches of target_batch_size, the last one flagged (semantics doc, 5). */
static int run_epoch(struct pl_driver *d, uint64_t epoch, uint64_t skip, uint64_t *seq)
{
	const struct pl_spec *c = &d->plan->cfg;
	size_t b = (size_t)c->target_batch_size;
	/* a restored position: where the chain can start there, nothing before it is replayed */
	bool jumped = skip && pl_chain_skip(d->chain, skip * b) != 0;
	int r = pl_chain_begin_epoch(d->chain, epoch, &d->err);
	if (r < 0)
		return r;
	uint64_t index = jumped ? skip : 0;
	struct pl_rows held = {
		0
	}; /* a complete batch, held until the next shows it is not last */
	bool have_held = false;
	for (;;) {
		struct pl_rows rows;
		r = collect(d, b, &rows); /* on error, it dropped the partial rows: n is 0 */
		size_t n = rows.n;
		bool complete = n == b;
		bool usable = n > 0 && (complete || !c->drop_remainder);
		if (r < 0) {
			/* the batch held back is complete and came before the error: deliver it */
			if (have_held) {
				struct io_error keep = d->err;
				int e = dispatch(d, &held, epoch, &index, seq, false, index < skip);
				have_held = false;
				d->err = keep;
				if (e < 0 && e != -ECANCELED)
					r = e;
			}
			break;
		}
		if (have_held) {
			r = dispatch(d, &held, epoch, &index, seq, !usable, index < skip);
			have_held = false;
			if (r < 0) {
				pl_rows_drop(&rows);
				break;
			}
		}
		if (!usable) {
			pl_rows_drop(&rows);
			break;
		}
		if (complete) {
			held = rows;
			have_held = true;
			continue;
		}
		r = dispatch(d, &rows, epoch, &index, seq, true, index < skip);
		break;
	}
	if (have_held)
		pl_rows_drop(&held);
	if (r < 0)
		return r;
	if (index == 0 && c->epochs == PL_NULL) {
		io_error_set(&d->err,
			     "epoch %llu produced no batch (target_batch_size %lld%s): with "
			     "epochs null this would loop forever",
			     (unsigned long long)epoch, (long long)c->target_batch_size,
			     c->drop_remainder ? ", drop_remainder true" : "");
		return -ENODATA;
	}
	return 0;
}

/*
 * An -ENOMEM whose cause was a refused charge (the pipeline's memory account, mem.h): say what
 * it was for, the figures, and the knobs, in place of a bare "out of memory". A stage's own
 * message with its figures (a record too long to read: io/tfr.c) stays.
 */
static void spent_message(struct pl_driver *d, struct io_error *why)
{
	char ref[400];
	if (!pl_mem_refusal(d->plan->mem, ref, sizeof(ref)))
		return;
	if (why->msg[0] && strcmp(why->msg, "out of memory") != 0)
		return;
	io_error_set(why,
		     "this pipeline may not hold more memory: %s (what it holds grows with "
		     "num_shuffle_buffer_elements, num_parallel_reads x num_read_buffer_bytes, "
		     "target_batch_size and its records' size; what it may have with "
		     "args.ram_budget, "
		     "--user-memory and --memory)",
		     ref);
}

static void *driver_main(void *arg)
{
	struct pl_driver *d = arg;
	const struct pl_spec *c = &d->plan->cfg;
	clockid_t clk;
	if (pthread_getcpuclockid(pthread_self(), &clk) == 0) {
		pthread_mutex_lock(&d->lock);
		d->clock = clk;
		d->clock_ok = true;
		pthread_mutex_unlock(&d->lock);
	}
	pthread_setname_np(pthread_self(), "sluice-driver"); /* for top and perf */
	int r = 0;
	uint64_t seq = d->o.start.seq;
	for (uint64_t e = d->o.start.epoch; r == 0; e++) {
		if (c->epochs != PL_NULL && e >= (uint64_t)c->epochs)
			break;
		r = run_epoch(d, e, e == d->o.start.epoch ? d->o.start.index : 0, &seq);
	}
	pl_prof_sample(&d->prof, false);
	/*
	 * Batches in flight came before whatever ended the stream, an error included: deliver
	 * them in order (a job's own error comes first, as pl_deliver_fail keeps the first).
	 */
	struct io_error why = d->err;
	if (r == -ENOMEM)
		spent_message(d, &why);
	while (r != -ECANCELED && !d->job_failed && d->count > 0)
		if (finish_oldest(d) < 0)
			break;
	if (r < 0 && r != -ECANCELED)
		pl_deliver_fail(d->o.dl, r, &why);
	/* stopped or failed: whatever is still in flight is not delivered */
	while (d->count > 0) {
		struct pl_bjob *job = d->inflight[d->head];
		struct pl_batch b;
		struct io_error e;
		d->head = (d->head + 1) % d->cap;
		d->count--;
		if (pl_bjob_finish(&d->ax, job, &b, &e) == 0)
			d->o.free(d->o.alloc_ctx, (void *)b.mem, b.len);
		pl_deliver_put(d->o.dl, NULL, &e);
	}
	publish_stats(d, true);
	pl_deliver_finish(d->o.dl);
	return NULL;
}

int pl_driver_create(const struct pl_driver_opts *opts, struct pl_driver **ret,
		     struct io_error *err)
{
	struct pl_driver *d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->o = *opts;
	d->plan = opts->plan;
	pthread_mutex_init(&d->lock, NULL);
	d->prof.cur = PL_STAGE_PARSE; /* the driver's own work: collecting batches */
	/* tuned, the jobs in flight start at 1 and stay within prefetch_max (which may be below the
	   plan's fixed prefetch: args.ram_budget); else they are the plan's */
	d->cap = opts->prefetch_max ? opts->prefetch_max : d->plan->prefetch;
	d->inflight = calloc(d->cap, sizeof(*d->inflight));
	d->started_ns = calloc(d->cap, sizeof(*d->started_ns));
	int r = d->inflight && d->started_ns ? 0 : -ENOMEM;
	if (r == 0)
		r = sched_queue_create(opts->pool, 1, -1, &d->q);
	if (r < 0)
		goto fail;
	struct pl_asm_ctx *ax = &d->ax;
	ax->plan = d->plan;
	ax->pool = opts->pool;
	ax->q = d->q;
	ax->n_workers = sched_pool_workers(opts->pool);
	ax->alloc = opts->alloc;
	ax->free = opts->free;
	ax->alloc_ctx = opts->alloc_ctx;
	ax->prof = &d->prof;
	r = pl_asm_ctx_init(ax);
	if (r < 0)
		goto fail;
	struct pl_chain_opts co = {
		.plan = d->plan,
		.engine = opts->engine,
		.direct = opts->direct,
		.cache = opts->cache,
		.cache_uncompressed = opts->cache_uncompressed,
		.idle = pl_asm_idle,
		.idle_ctx = ax,
		.prof = &d->prof,
	};
	r = pl_chain_create(&co, &d->chain, err);
	if (r < 0)
		goto fail_quiet;
	*ret = d;
	return 0;
fail:
	io_error_set(err, "out of memory");
fail_quiet:
	pl_driver_destroy(d);
	return r;
}

int pl_driver_start(struct pl_driver *d, struct io_error *err)
{
	if (d->started) {
		io_error_set(err, "the pipeline's driver has started already");
		return -EALREADY;
	}
	int r = -pthread_create(&d->thread, NULL, driver_main, d);
	if (r < 0) {
		io_error_set(err, "cannot start the pipeline's driver thread");
		return r;
	}
	d->started = true;
	return 0;
}

void pl_driver_destroy(struct pl_driver *d)
{
	if (!d)
		return;
	if (d->started) {
		pl_deliver_stop(d->o.dl);
		pl_chain_stop(d->chain);
		pthread_join(d->thread, NULL);
	}
	sched_queue_destroy(d->q);
	pl_asm_ctx_fini(&d->ax);
	pl_chain_destroy(d->chain);
	free(d->inflight);
	free(d->started_ns);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

void pl_driver_get_stats(struct pl_driver *d, struct pl_stats *ret)
{
	struct pl_stage_stats dst;
	uint64_t rows;
	pl_deliver_get_stats(d->o.dl, &dst, &rows);
	pthread_mutex_lock(&d->lock);
	memcpy(ret->stages, d->st, sizeof(d->st));
	struct pl_chain_totals tot = d->tot;
	uint64_t prof_cpu[PL_STAGE_COUNT_], prof_last[PL_STAGE_COUNT_];
	memcpy(prof_cpu, d->prof_cpu, sizeof(prof_cpu));
	memcpy(prof_last, d->prof_last, sizeof(prof_last));
	uint64_t prof_cpu_at = d->prof_cpu_at;
	ret->lazy_fills = d->lazy_fills;
	ret->small_fills = d->small_fills;
	ret->job_wait_ns = d->pub_job_wait_ns;
	ret->job_ns = d->pub_job_ns;
	ret->epoch_batches = d->epoch_batches;
	uint64_t alloc_ns = d->alloc_ns;
	ret->driver_cpu_ns = d->cpu_ns;
	if (d->clock_ok) /* under lock: the driver has not ended, its clock is its own */
		ret->driver_cpu_ns = pl_clock_ns(d->clock);
	pthread_mutex_unlock(&d->lock);

	struct pl_stage_stats *st = ret->stages;
	st[PL_STAGE_DELIVER] = dst;
	st[PL_STAGE_DELIVER].wait_down_ns += alloc_ns; /* a ring full of unread batches */
	st[PL_STAGE_PARSE].capacity = dst.capacity;    /* jobs in flight: deliver's bound */
	pl_prof_share(prof_cpu, prof_last,
		      ret->driver_cpu_ns > prof_cpu_at ? ret->driver_cpu_ns - prof_cpu_at : 0, st);
	/*
	 * The image steps run inside the parse tasks: their time is the decode stage's, taken
	 * out of the workers' task time and out of the driver's sampled share of parse.
	 */
	uint64_t drv_dec_ns, task_ns = pl_asm_task_ns(&d->ax, false);
	memset(&st[PL_STAGE_DECODE], 0, sizeof(st[PL_STAGE_DECODE]));
	pl_asm_decode_stats(&d->ax, &st[PL_STAGE_DECODE], &drv_dec_ns);
	uint64_t wk_dec_ns = st[PL_STAGE_DECODE].cpu_ns - drv_dec_ns;
	st[PL_STAGE_PARSE].cpu_ns -=
		drv_dec_ns < st[PL_STAGE_PARSE].cpu_ns ? drv_dec_ns : st[PL_STAGE_PARSE].cpu_ns;
	st[PL_STAGE_PARSE].cpu_ns += task_ns > wk_dec_ns ? task_ns - wk_dec_ns : 0;
	/* the driver's stages pull synchronously: while a read blocks, every stage above waits */
	uint64_t rw = st[PL_STAGE_READ].wait_up_ns;
	for (unsigned i = PL_STAGE_FRAME; i <= PL_STAGE_PARSE; i++)
		if (st[i].elems_in || i == PL_STAGE_FRAME || i == PL_STAGE_PARSE)
			st[i].wait_up_ns = rw;
	st[PL_STAGE_PARSE].wait_down_ns = st[PL_STAGE_DELIVER].wait_down_ns;

	ret->files_opened = st[PL_STAGE_READ].elems_in;
	ret->records = st[PL_STAGE_FRAME].elems_out;
	ret->record_bytes = st[PL_STAGE_FRAME].bytes_out;
	ret->file_bytes = st[PL_STAGE_READ].bytes_out;
	ret->direct_bytes = tot.read.direct_bytes;
	ret->batches = dst.elems_in;
	ret->rows = rows;
	ret->skipped_records = st[PL_STAGE_FRAME].dropped + st[PL_STAGE_WINDOW].dropped +
			       st[PL_STAGE_PARSE].dropped;
	ret->skipped_files = tot.skipped_files;
	ret->copied_bytes = tot.copied_bytes;
	ret->cache_level = tot.cache_level;
	ret->cache_files = tot.cache_files;
	ret->cache_bytes = tot.cache_bytes;
	ret->cache_followed = tot.cache_followed;
	ret->cache_fallbacks = tot.cache_fallbacks;
	ret->cached_epochs = tot.cached_epochs;
	ret->cache_need = tot.cache_need;
	ret->cache_fits = tot.cache_fits;
	ret->cache_filled = tot.cache_filled;
	ret->evacuations = tot.read.evacuations;
	ret->parse_ns = pl_asm_task_ns(&d->ax, true);
	ret->pool_task_ns = task_ns;
	ret->read_wait_ns = rw;
	ret->prefetch = (unsigned)dst.capacity;
	ret->prefetch_max = (unsigned)d->cap;
	pl_chain_reads(d->chain, &ret->read_chunk, &ret->read_depth);
	ret->pool_weight = sched_queue_weight(d->q);
	ret->next_wait_ns = dst.wait_up_ns;
	ret->io_engine = tot.read.engine;
	ret->io_fallback = tot.read.have_fallback ? d->fallback : NULL; /* written once, before */
}

void pl_driver_set_weight(struct pl_driver *d, unsigned weight)
{
	sched_queue_set_weight(d->q, weight ? weight : 1);
}

void pl_driver_set_reads(struct pl_driver *d, size_t chunk, unsigned depth)
{
	pl_chain_set_reads(d->chain, chunk, depth);
}
