/* SPDX-License-Identifier: Apache-2.0 */
/* Stage "parse": a batch job parses its rows on the pool straight into the batch extent. */
#ifndef SLUICE_PIPELINE_ASSEMBLE_H
#define SLUICE_PIPELINE_ASSEMBLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/ioerr.h"
#include "pipeline.h"
#include "plan.h"
#include "record.h"
#include "sched/sched.h"
#include "stage.h"

struct pl_bjob;
struct pl_cepoch; /* cepoch.h */

/*
 * A batch's rows: records (rec, each with its reference), or a cached epoch's compact rows
 * (crow, with a reference to their epoch cx). Both arrays are malloc'd.
 */
struct pl_rows {
	struct pl_rec *rec;
	struct pl_crow *crow;
	struct pl_cepoch *cx;
	size_t n;
	/* the arrays' bytes charged to mem (mem.h; NULL: none), given back with them */
	struct pl_mem *mem;
	uint64_t charged;
};

/* Drop rows: their references and array (then all zero). */
void pl_rows_drop(struct pl_rows *rows);

/*
 * A pool worker's task time and the decode stage's counters of its tasks (one writer: the
 * worker), on a line of their own.
 */
struct pl_asm_worker {
	_Alignas(64) atomic_uint_fast64_t task_ns;
	atomic_uint_fast64_t dec_images, dec_bad, dec_bytes_in, dec_bytes_out, dec_ns;
};

/*
 * The parse stage of one pipeline. The driver fills the first fields before the first job;
 * the rest is the stage's own. Its counters (st, lazy_fills) are the driver's, like the job
 * calls; the tasks' time is per worker (pl_asm_task_ns).
 */
struct pl_asm_ctx {
	const struct pl_plan *plan;
	struct sched_pool *pool;
	struct sched_queue *q;
	unsigned n_workers;
	void *(*alloc)(void *ctx, size_t len);
	void (*free)(void *ctx, void *mem, size_t len);
	void *alloc_ctx;
	struct pl_worker_scratch **scratch;    /* per pool worker, created on first use */
	struct pl_worker_scratch *drv_scratch; /* the driver's, for the tasks it runs itself */
	unsigned behind; /* driver only: batches left in which every fill task wakes a worker */
	/*
	 * Driver only: how much of its time the driver spends blocked (for reads, for room, in
	 * alloc), which decides whether a fill pass wakes a worker (pl_asm_idle, pl_bjob_start).
	 * blocked_ns is kept up to date by the driver (the source's wait_ns, its waits for room)
	 * and by the layout (alloc); slack_blocked / slack_total, both smoothed, is its share.
	 */
	uint64_t blocked_ns, alloc_ns, last_blocked_ns, last_t_ns;
	double slack_blocked, slack_total;
	bool lazy;
	/*
	 * Driver only: a fill pass's time per row, smoothed over the batches (0: none measured
	 * yet). A batch whose pass would take less than a worker's wake-up costs is filled by the
	 * driver itself (pl_bjob_start).
	 */
	double fill_ns_row;
	struct pl_prof *prof;	  /* the driver's */
	struct pl_asm_worker *wk; /* n_workers + 1 ([n_workers]: tasks the driver ran) */
	struct pl_stage_stats st; /* elements: rows; completions: batches; driver only */
	uint64_t lazy_fills;	  /* fill passes that woke no worker (lazy); driver only */
	uint64_t small_fills;	  /* of them, those too small to be worth a wake-up; driver only */
};

/* Set up the parts of ax the stage owns (after the driver filled its fields). 0 or -ENOMEM. */
int pl_asm_ctx_init(struct pl_asm_ctx *ax);
/* Time spent running parse tasks, by the pool's workers and (with_driver) the driver. Any thread. */
uint64_t pl_asm_task_ns(const struct pl_asm_ctx *ax, bool with_driver);
/*
 * The decode stage's counters (images run by the tasks: elems, bytes, cpu_ns, dropped) into
 * *st, and in *driver_ns the part of cpu_ns the driver spent running tasks itself. Any thread.
 */
void pl_asm_decode_stats(const struct pl_asm_ctx *ax, struct pl_stage_stats *st,
			 uint64_t *driver_ns);

/*
 * Start assembling a batch of rows (the job takes them: *rows is zeroed). The measuring pass, if
 * the plan needs one, runs before this returns (the calling driver runs its tasks itself unless
 * a worker is free to take some); the fill pass runs on the pool afterwards. The driver thread
 * only: start and finish run parse tasks on it (sched_group_help, with ax->drv_scratch).
 */
/* The driver's idle work while it waits for reads (ctx: the struct pl_asm_ctx): one queued task. */
int pl_asm_idle(void *ctx);
int pl_bjob_start(struct pl_asm_ctx *ax, struct pl_rows *rows, uint64_t seq, uint64_t epoch,
		  uint64_t index_in_epoch, uint32_t flags, struct pl_bjob **ret_job,
		  struct io_error *err);
bool pl_bjob_done(const struct pl_bjob *job);
/*
 * Wait for the fill pass (running its tasks still queued, and those of later jobs, on the
 * calling driver meanwhile), write the header, drop the rows. 0 and the batch (mem, len; the
 * caller frees it with ax->free), or the rows' error (on_corrupt fail) with its message.
 * Frees the job either way.
 */
int pl_bjob_finish(struct pl_asm_ctx *ax, struct pl_bjob *job, struct pl_batch *ret_batch,
		   struct io_error *err);
void pl_asm_ctx_fini(struct pl_asm_ctx *ax);

#endif
