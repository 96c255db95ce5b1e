/* SPDX-License-Identifier: Apache-2.0 */
/* Batch assembly: rows are parsed on the pool straight into their place in the batch extent. */
#include "assemble_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "decode.h"
#include "ipc/batch.h"
#include "mem.h"

static void row_fail(struct pl_bjob *job, size_t row, int code, const struct io_error *e)
{
	job->bad[row] = 1;
	pthread_mutex_lock(&job->err_lock);
	if (row < job->err_row) {
		job->err_row = row;
		job->err_code = code;
		job->err = *e;
	}
	pthread_mutex_unlock(&job->err_lock);
}

/* One writer (the worker): a plain add, published relaxed. */
static void add_relaxed(atomic_uint_fast64_t *c, uint64_t v)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v,
			      memory_order_relaxed);
}

/*
 * The scratch of the thread running a parse task: its pool worker's, or, outside the pool, the
 * driver's (the only other thread that runs this pipeline's tasks: in sched_group_help).
 */
static struct pl_worker_scratch *scratch_get(struct pl_asm_ctx *ax, int w)
{
	if (w < 0) {
		if (!ax->drv_scratch)
			ax->drv_scratch = pl_scratch_create(ax->plan);
		return ax->drv_scratch;
	}
	if ((unsigned)w >= ax->n_workers)
		return NULL;
	if (!ax->scratch[w])
		ax->scratch[w] = pl_scratch_create(ax->plan);
	return ax->scratch[w];
}

/* ---- the tasks ---- */

/*
 * A record's last PL_TAIL_LINES cache lines: what follows a big bytes feature (an image) there,
 * the small features and the feature lists, takes about 150-250 bytes. Two lines missed the
 * first of them; four measured 1.4% less CPU in the measure pass and 3.3% more with the fill
 * pass's (image benchmark, paired runs); six was worse than four.
 */
#define PL_TAIL_LINES 4
#define PREFETCH_ROWS 8 /* how far ahead a parse task starts the next rows' first misses */

static void prefetch_tail(const uint8_t *data, uint32_t len)
{
	for (size_t q = 0; q < PL_TAIL_LINES && 64 * q + 128 < len; q++)
		__builtin_prefetch(data + len - 1 - 64 * q);
}

static void task_run(void *arg)
{
	struct pl_task *t = arg;
	struct pl_bjob *job = t->job;
	struct pl_asm_ctx *ax = job->ax;
	/*
	 * Parse time is the monotonic clock around the task (a vDSO read), not the thread CPU clock
	 * (a system call, twice per task: 3% of the image benchmark's CPU). A task never blocks, so
	 * the two differ only when its thread is preempted.
	 */
	uint64_t c0 = pl_clock_ns(CLOCK_MONOTONIC);
	int wi = sched_worker_index(ax->pool);
	struct pl_worker_scratch *ws = scratch_get(ax, wi);
	struct io_error e;
	if (t->measure) {
		/*
		 * The measuring pass reads each record's protobuf structure: its first lines and,
		 * past a big bytes feature, its last ones. The records are cold (they waited in the
		 * shuffle buffer, or came by DMA): start every row's misses at once instead of one
		 * dependent chain per row.
		 */
		for (size_t row = t->lo; row < t->hi; row++) {
			const uint8_t *d = pl_bjob_data(job, row);
			uint32_t len = pl_bjob_len(job, row);
			__builtin_prefetch(d);
			if (len > 64)
				__builtin_prefetch(d + 64);
			prefetch_tail(d, len);
		}
	}
	if (!t->measure) /* small records: their misses PREFETCH_ROWS ahead (below) */
		for (size_t row = t->lo; row < t->hi && row < t->lo + PREFETCH_ROWS; row++)
			__builtin_prefetch(pl_bjob_data(job, row));
	for (size_t row = t->lo; row < t->hi; row++) {
		if (!t->measure && row + PREFETCH_ROWS < t->hi) {
			/* one row's work is shorter than a miss when records are small (the
			 * record cache's decoded rows): start a few rows' first lines at once */
			const uint8_t *d = pl_bjob_data(job, row + PREFETCH_ROWS);
			__builtin_prefetch(d);
			if (pl_bjob_len(job, row + PREFETCH_ROWS) > 64 - ((uintptr_t)d & 63))
				__builtin_prefetch(d + 64);
		}
		if (!t->measure && row + 1 < t->hi) {
			/* the fill pass copies the next record: start its first 4 KiB's cache
			 * misses now, under this row's work, and its tail's (the measure ran on
			 * another thread, or the lines have gone since) */
			const uint8_t *d = pl_bjob_data(job, row + 1);
			uint32_t nlen = pl_bjob_len(job, row + 1);
			size_t len = nlen < 4096 ? nlen : 4096;
			for (size_t off = 0; off < len; off += 64)
				__builtin_prefetch(d + off);
			if (nlen > 4096)
				prefetch_tail(d, nlen);
		}
		if (job->bad[row])
			continue;
		int r;
		if (!ws) {
			io_error_set(&e, "out of memory for a parse task's scratch");
			r = -ENOMEM;
		} else {
			r = t->measure ? pl_asm_measure_row(job, ws, row, &e)
				       : pl_asm_fill_row(job, ws, row, &e);
		}
		if (r < 0)
			row_fail(job, row, r, &e);
	}
	/* one writer per counter (this worker, or the driver): a plain add, published relaxed */
	struct pl_asm_worker *wk =
		&ax->wk[wi < 0 || (unsigned)wi >= ax->n_workers ? ax->n_workers : (unsigned)wi];
	uint64_t dt = pl_clock_ns(CLOCK_MONOTONIC) - c0;
	uint64_t ns = atomic_load_explicit(&wk->task_ns, memory_order_relaxed);
	atomic_store_explicit(&wk->task_ns, ns + dt, memory_order_relaxed);
	if (!t->measure)
		atomic_fetch_add_explicit(&job->fill_ns, dt, memory_order_relaxed);
	if (ws && ws->img) {
		struct pl_decode_counts dc = { 0 };
		pl_img_work_take(ws->img, &dc);
		if (dc.images) {
			add_relaxed(&wk->dec_images, dc.images);
			add_relaxed(&wk->dec_bad, dc.bad);
			add_relaxed(&wk->dec_bytes_in, dc.bytes_in);
			add_relaxed(&wk->dec_bytes_out, dc.bytes_out);
			add_relaxed(&wk->dec_ns, dc.ns);
		}
	}
}

/*
 * How many batches a fill pass keeps waking a worker for each of its tasks after the pool was
 * found behind (the driver had to wait for a batch); otherwise only its first task wakes one.
 */
#define PL_BEHIND_BATCHES 16

/* Spawn the pass's tasks: the first with flags, the others with rest_flags. */
static int spawn_pass(struct pl_bjob *job, bool measure, unsigned flags, unsigned rest_flags)
{
	for (size_t k = 0; k < job->n_tasks; k++) {
		job->tasks[k].measure = measure;
		int r = sched_spawn_flags(&job->group, task_run, &job->tasks[k],
					  k ? rest_flags : flags);
		if (r < 0)
			return r;
	}
	return 0;
}

/* ---- the job ---- */

static void bjob_free(struct pl_bjob *job)
{
	if (!job)
		return;
	const struct pl_plan *plan = job->ax->plan;
	for (size_t i = 0; job->rows && i < job->n_rows; i++) {
		/* its block's count: a line the worker that parsed the row has, or memory */
		if (i + 8 < job->n_rows && job->rows[i + 8].blk)
			__builtin_prefetch(&job->rows[i + 8].blk->refs, 1);
		pl_rec_unref(&job->rows[i]);
	}
	pl_cepoch_unref(job->cx);
	free(job->crows);
	pl_mem_uncharge(plan->mem, job->rows_charged);
	if (job->lay)
		for (size_t i = 0; i < plan->n_out; i++)
			free(job->lay[i].byte_start);
	if (job->mem)
		job->ax->free(job->ax->alloc_ctx, job->mem, job->len);
	pthread_mutex_destroy(&job->err_lock);
	free(job->rows);
	free(job->dims);
	free(job->sbytes);
	free(job->feats);
	free(job->lists);
	free(job->rdims);
	free(job->bad);
	free(job->outpos);
	free(job->lay);
	free(job->gaps);
	free(job->tasks);
	free(job);
}

static int bjob_tasks(struct pl_bjob *job)
{
	struct pl_asm_ctx *ax = job->ax;
	uint64_t bytes = 0;
	for (size_t i = 0; i < job->n_rows; i++)
		bytes += pl_bjob_len(job, i);
	/*
	 * Two tasks per worker, or about 1 MiB of records per task if that makes more: every task
	 * spawned from the driver may cost a wake-up (a futex call on each side), so a batch is
	 * cut in as few tasks as keep the workers busy (several batches are in flight).
	 */
	size_t by_bytes = (size_t)(bytes >> 20) + 1;
	size_t want = ax->n_workers * 2 > by_bytes ? ax->n_workers * 2 : by_bytes;
	if (job->small)
		want = 1; /* the driver's, whole */
	if (want > job->n_rows)
		want = job->n_rows ? job->n_rows : 1;
	job->n_tasks = want;
	job->tasks = calloc(want, sizeof(*job->tasks));
	if (!job->tasks)
		return -ENOMEM;
	for (size_t k = 0; k < want; k++) {
		job->tasks[k].job = job;
		job->tasks[k].lo = job->n_rows * k / want;
		job->tasks[k].hi = job->n_rows * (k + 1) / want;
	}
	return 0;
}

int pl_asm_idle(void *ctx)
{
	struct pl_asm_ctx *ax = ctx;
	unsigned prev = pl_prof_enter(ax->prof, PL_STAGE_PARSE);
	int r = sched_queue_help_one(ax->q);
	pl_prof_leave(ax->prof, prev);
	return r;
}

int pl_asm_ctx_init(struct pl_asm_ctx *ax)
{
	ax->scratch = calloc(ax->n_workers + 1, sizeof(*ax->scratch));
	ax->wk = aligned_alloc(64, (ax->n_workers + 1) * sizeof(*ax->wk));
	if (!ax->scratch || !ax->wk)
		return -ENOMEM;
	for (unsigned i = 0; i <= ax->n_workers; i++) {
		struct pl_asm_worker *wk = &ax->wk[i];
		atomic_init(&wk->task_ns, 0);
		atomic_init(&wk->dec_images, 0);
		atomic_init(&wk->dec_bad, 0);
		atomic_init(&wk->dec_bytes_in, 0);
		atomic_init(&wk->dec_bytes_out, 0);
		atomic_init(&wk->dec_ns, 0);
	}
	return 0;
}

void pl_asm_decode_stats(const struct pl_asm_ctx *ax, struct pl_stage_stats *st,
			 uint64_t *driver_ns)
{
	*driver_ns = 0;
	if (!ax->wk)
		return;
	for (unsigned i = 0; i <= ax->n_workers; i++) {
		const struct pl_asm_worker *wk = &ax->wk[i];
		uint64_t n = atomic_load_explicit(&wk->dec_images, memory_order_relaxed);
		uint64_t bad = atomic_load_explicit(&wk->dec_bad, memory_order_relaxed);
		uint64_t ns = atomic_load_explicit(&wk->dec_ns, memory_order_relaxed);
		st->elems_in += n;
		st->elems_out += n - bad;
		st->dropped += bad;
		st->bytes_in += atomic_load_explicit(&wk->dec_bytes_in, memory_order_relaxed);
		st->bytes_out += atomic_load_explicit(&wk->dec_bytes_out, memory_order_relaxed);
		st->cpu_ns += ns;
		if (i == ax->n_workers)
			*driver_ns = ns;
	}
}

uint64_t pl_asm_task_ns(const struct pl_asm_ctx *ax, bool with_driver)
{
	uint64_t ns = 0;
	if (!ax->wk)
		return 0;
	for (unsigned i = 0; i < ax->n_workers + (with_driver ? 1u : 0u); i++)
		ns += atomic_load_explicit(&ax->wk[i].task_ns, memory_order_relaxed);
	return ns;
}

/*
 * The driver's slack: the share of its time, since the last batch, that it spent blocked (for
 * reads, for room, in alloc), smoothed over about PL_SLACK_BATCHES batches. Above PL_LAZY_ON a
 * fill pass wakes no worker (the driver has the time to run it, and a wake-up is two system
 * calls and, in a VM, an interrupt between processors: in the image benchmark, reading with
 * O_DIRECT from a disk slower than one thread, 12% of the CPU); below PL_LAZY_OFF the driver is
 * busy, and workers are woken as before. With a ring of unread batches (sluiced) or a consumer
 * slower than the pipeline, the driver waits for room and the pool stays asleep; a consumer
 * that the pipeline cannot keep up with takes the workers.
 */
#define PL_SLACK_BATCHES 32
#define PL_LAZY_ON	 0.15
#define PL_LAZY_OFF	 0.05

static void note_slack(struct pl_asm_ctx *ax)
{
	uint64_t now = pl_clock_ns(CLOCK_MONOTONIC);
	uint64_t blocked = ax->blocked_ns + ax->alloc_ns;
	if (ax->last_t_ns && now > ax->last_t_ns) {
		/*
		 * Weighted by time, not by batch: the waits come few and long (a read of several
		 * MiB behind), so an average of per-batch shares would see almost none of them.
		 */
		ax->slack_blocked += ((double)(blocked - ax->last_blocked_ns) - ax->slack_blocked) /
				     PL_SLACK_BATCHES;
		ax->slack_total +=
			((double)(now - ax->last_t_ns) - ax->slack_total) / PL_SLACK_BATCHES;
		double spare = ax->slack_blocked / ax->slack_total;
		if (spare > PL_LAZY_ON)
			ax->lazy = true;
		else if (spare < PL_LAZY_OFF)
			ax->lazy = false;
	}
	ax->last_t_ns = now;
	ax->last_blocked_ns = blocked;
}

void pl_rows_drop(struct pl_rows *rows)
{
	for (size_t i = 0; rows->rec && i < rows->n; i++)
		pl_rec_unref(&rows->rec[i]);
	free(rows->rec);
	free(rows->crow);
	pl_mem_uncharge(rows->mem, rows->charged);
	pl_cepoch_unref(rows->cx);
	*rows = (struct pl_rows){ 0 };
}

/*
 * A fill pass's time per row, smoothed: the driver fills a batch itself when that says its pass
 * takes less than PL_SMALL_FILL_NS, what the wake-up alone costs the driver (the futex call in
 * sched_spawn_flags: about 7 us a batch on the 2-vCPU VM, where it is a hypervisor's interrupt;
 * the woken worker and the driver's own wake-up cost as much again). So the driver spends no
 * more on such a batch than it did, and a pipeline its driver bounds goes no slower; what the
 * two threads save is the rest. Such batches are a cached epoch's compact rows or small
 * records' few features: a few ns a row.
 */
#define PL_SMALL_FILL_NS 8000.0
#define PL_FILL_BATCHES	 8

static void note_fill(struct pl_asm_ctx *ax, struct pl_bjob *job)
{
	double x = (double)atomic_load_explicit(&job->fill_ns, memory_order_relaxed) /
		   (double)job->n_rows;
	if (ax->fill_ns_row <= 0)
		ax->fill_ns_row = x > 0 ? x : 1;
	else
		ax->fill_ns_row += (x - ax->fill_ns_row) / PL_FILL_BATCHES;
}

static int bjob_start(struct pl_asm_ctx *ax, struct pl_rows *rows, uint64_t seq, uint64_t epoch,
		      uint64_t index_in_epoch, uint32_t flags, struct pl_bjob **ret_job,
		      struct io_error *err)
{
	const struct pl_plan *plan = ax->plan;
	struct pl_bjob *job = calloc(1, sizeof(*job));
	if (!job) {
		pl_rows_drop(rows);
		return -ENOMEM;
	}
	size_t n_rows = rows->n;
	job->ax = ax;
	job->rows = rows->rec;
	job->crows = rows->crow;
	job->cx = rows->cx;
	job->rows_charged = rows->charged;
	*rows = (struct pl_rows){ 0 };
	job->n_rows = n_rows;
	job->seq = seq;
	job->epoch = epoch;
	job->index_in_epoch = index_in_epoch;
	job->flags = flags;
	job->err_row = SIZE_MAX;
	pthread_mutex_init(&job->err_lock, NULL);
	sched_group_init(&job->group, ax->q);
	job->small = !plan->measure && ax->fill_ns_row > 0 &&
		     ax->fill_ns_row * (double)n_rows < PL_SMALL_FILL_NS;
	job->bad = calloc(n_rows + 1, 1);
	job->outpos = calloc(n_rows + 1, sizeof(*job->outpos));
	job->lay = calloc(plan->n_out + 1, sizeof(*job->lay));
	int r = -ENOMEM;
	if (!job->bad || !job->outpos || !job->lay || bjob_tasks(job) < 0)
		goto fail;
	if (plan->measure) {
		job->dims = calloc(n_rows * plan->n_out * PL_MAX_RANK + 1, sizeof(int64_t));
		job->sbytes = calloc(n_rows * plan->n_out + 1, sizeof(uint64_t));
		if (plan->cfg.type == PL_LOADER_INDEPENDENT) { /* windows decode per record */
			job->feats = calloc(n_rows * plan->n_ctx + 1, sizeof(*job->feats));
			job->lists = calloc(n_rows * plan->n_lists + 1, sizeof(*job->lists));
			job->rdims = calloc(n_rows * plan->n_out + 1, sizeof(*job->rdims));
			if (!job->feats || !job->lists || !job->rdims)
				goto fail;
		}
		if (!job->dims || !job->sbytes)
			goto fail;
		/*
		 * Measuring a record is decoding its message, not reading its values: cheaper than
		 * the wake-ups of parked workers and of this thread. So the driver runs the pass
		 * itself, and a worker takes part only if it is awake anyway (NO_WAKE; the help
		 * runs whatever no worker took). A window's measure decodes and joins all its
		 * records: that is spread over the pool as usual.
		 */
		unsigned fl = plan->cfg.type == PL_LOADER_INDEPENDENT ? SCHED_SPAWN_NO_WAKE : 0;
		r = spawn_pass(job, true, fl, fl);
		int w = sched_group_help(&job->group);
		if (r < 0 || w < 0) {
			io_error_set(err, "the parse pool is stopping");
			r = r < 0 ? r : w;
			goto fail;
		}
		if (job->err_row != SIZE_MAX && plan->cfg.on_corrupt == PL_ON_CORRUPT_FAIL) {
			job->failed = true; /* reported by finish, in order */
			*ret_job = job;
			return 0;
		}
	}
	r = pl_asm_layout(job, err);
	if (r < 0) {
		job->failed = true;
		job->err_code = r;
		job->err_row = 0;
		job->err = *err;
		*ret_job = job;
		return 0;
	}
	/*
	 * While the pool keeps up (every batch was done when the driver came to finish it), one
	 * woken worker is enough: the other tasks wait for it, or for workers awake anyway, and a
	 * parked worker is not woken (the driver runs what is left if it has to wait). Once it
	 * falls behind, each task wakes a worker, for PL_BEHIND_BATCHES batches. And while the
	 * driver has time to spare (it waits for reads, for room, in alloc), none is woken: it
	 * runs the tasks itself, while it waits or when it next helps (see note_slack).
	 */
	note_slack(ax);
	unsigned first = (ax->lazy && !ax->behind) || job->small ? SCHED_SPAWN_NO_WAKE : 0;
	job->lazy = first != 0;
	if (first)
		ax->lazy_fills++;
	ax->small_fills += job->small;
	r = spawn_pass(job, false, first, ax->behind ? 0 : SCHED_SPAWN_NO_WAKE);
	if (r < 0) {
		sched_group_help(&job->group);
		io_error_set(err, "the parse pool is stopping");
		goto fail;
	}
	*ret_job = job;
	return 0;
fail:
	bjob_free(job);
	return r;
}

int pl_bjob_start(struct pl_asm_ctx *ax, struct pl_rows *rows, uint64_t seq, uint64_t epoch,
		  uint64_t index_in_epoch, uint32_t flags, struct pl_bjob **ret_job,
		  struct io_error *err)
{
	unsigned prev = pl_prof_enter(ax->prof, PL_STAGE_PARSE);
	ax->st.elems_in += rows->n;
	for (size_t i = 0; i < rows->n; i++)
		ax->st.bytes_in += rows->rec ? rows->rec[i].len : rows->crow[i].len;
	int r = bjob_start(ax, rows, seq, epoch, index_in_epoch, flags, ret_job, err);
	pl_prof_leave(ax->prof, prev);
	return r;
}

bool pl_bjob_done(const struct pl_bjob *job)
{
	/* acquire: pairs with the release decrement of the last task (sched's group protocol) */
	return atomic_load_explicit(&job->group.pending, memory_order_acquire) == 0;
}

static size_t count_bad(const struct pl_bjob *job)
{
	size_t n = 0;
	for (size_t row = 0; row < job->n_rows; row++)
		n += job->bad[row];
	return n;
}

/*
 * A measured batch whose fill pass found more bad rows (a data CRC is checked only there):
 * lay it out again without them and fill it again. Rare: it takes a corrupt record.
 */
static int relayout(struct pl_bjob *job, struct io_error *err)
{
	struct pl_asm_ctx *ax = job->ax;
	ax->free(ax->alloc_ctx, job->mem, job->len);
	job->mem = NULL;
	for (size_t i = 0; i < ax->plan->n_out; i++) {
		free(job->lay[i].byte_start);
		memset(&job->lay[i], 0, sizeof(job->lay[i]));
	}
	job->n_gaps = 0;
	int r = pl_asm_layout(job, err);
	if (r == 0)
		r = spawn_pass(job, false, 0, 0);
	int w = sched_group_help(&job->group);
	return r < 0 ? r : w;
}

static int bjob_finish(struct pl_asm_ctx *ax, struct pl_bjob *job, struct pl_batch *ret_batch,
		       struct io_error *err)
{
	const struct pl_plan *plan = ax->plan;
	/* a lazy batch is the driver's to run: not done yet is no sign the pool falls behind */
	if (!pl_bjob_done(job) && !job->lazy)
		ax->behind = PL_BEHIND_BATCHES;
	else if (ax->behind)
		ax->behind--;
	int w = sched_group_help(&job->group);
	int r = 0;
	if (w == 0 && !job->failed && job->n_rows)
		note_fill(ax, job);
	if (w == 0 && plan->measure && !job->failed && plan->cfg.on_corrupt != PL_ON_CORRUPT_FAIL &&
	    count_bad(job) > job->n_rows - job->n_good) {
		w = relayout(job, err);
		if (w < 0 && w != -ECANCELED) {
			job->failed = true;
			job->err_code = w;
			job->err_row = 0;
			job->err = *err;
			w = 0;
		}
	}
	if (w < 0) {
		io_error_set(err, "the parse pool is stopping");
		r = w;
	} else if (job->err_row != SIZE_MAX &&
		   (job->failed || plan->cfg.on_corrupt == PL_ON_CORRUPT_FAIL)) {
		*err = job->err;
		r = job->err_code;
	}
	if (r < 0) {
		bjob_free(job);
		return r;
	}
	size_t skipped = count_bad(job);
	if (skipped) {
		ax->st.dropped += skipped;
		if (!plan->measure)
			pl_asm_squeeze(job);
	}
	pl_asm_write_header(job);
	ret_batch->mem = job->mem;
	ret_batch->len = job->len;
	ret_batch->seq = job->seq;
	ret_batch->epoch = job->epoch;
	ret_batch->rows = job->n_good;
	ret_batch->flags = job->flags;
	job->mem = NULL; /* the caller's now */
	ax->st.elems_out += job->n_good;
	ax->st.bytes_out += job->len;
	ax->st.completions++;
	bjob_free(job);
	return 0;
}

int pl_bjob_finish(struct pl_asm_ctx *ax, struct pl_bjob *job, struct pl_batch *ret_batch,
		   struct io_error *err)
{
	unsigned prev = pl_prof_enter(ax->prof, PL_STAGE_PARSE);
	int r = bjob_finish(ax, job, ret_batch, err);
	pl_prof_leave(ax->prof, prev);
	return r;
}

void pl_asm_ctx_fini(struct pl_asm_ctx *ax)
{
	if (ax->scratch)
		for (unsigned i = 0; i < ax->n_workers; i++)
			pl_scratch_destroy(ax->scratch[i]);
	free(ax->scratch);
	ax->scratch = NULL;
	pl_scratch_destroy(ax->drv_scratch);
	ax->drv_scratch = NULL;
	free(ax->wk);
	ax->wk = NULL;
}
