/* SPDX-License-Identifier: Apache-2.0 */
/* Stage "deliver": finished batches to the consumer, in order, with flow control. */
#ifndef SLUICE_PIPELINE_DELIVER_H
#define SLUICE_PIPELINE_DELIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/ioerr.h"
#include "pipeline.h"
#include "stage.h"

/*
 * The hand-over between the driver and the consumer: a ready queue that pl_pipeline_next()
 * takes from, or (opts.deliver) a callback the driver calls with each batch; at most
 * `prefetch` batches ready or in flight; the pipeline's first error and its end; the batches
 * the consumer holds; the position after the last batch handed out. Its lock guards all of it.
 */
struct pl_deliver_opts {
	unsigned prefetch;
	void (*deliver)(void *ctx, struct pl_batch *b); /* NULL: the ready queue */
	void (*end)(void *ctx, int rc, const struct io_error *err);
	void *deliver_ctx;
	void (*free)(void *ctx, void *mem, size_t len); /* batch memory */
	void *alloc_ctx;
};

struct pl_deliver;

int pl_deliver_create(const struct pl_deliver_opts *opts, struct pl_deliver **ret);
/* Frees every batch still queued or held by the consumer. */
void pl_deliver_destroy(struct pl_deliver *dl);

/* ---- the driver's side ---- */

/* 1 when another batch may start, 0 when prefetch batches are ready or in flight, -ECANCELED. */
int pl_deliver_room(struct pl_deliver *dl);
/*
 * Change the bound on batches ready or in flight (>= 1; a tuner's, from any thread): the
 * driver starts no new batch while as many are out; it never takes back one started.
 */
void pl_deliver_set_prefetch(struct pl_deliver *dl, unsigned prefetch);
unsigned pl_deliver_prefetch(struct pl_deliver *dl);
/* Wait until the consumer takes a batch or the pipeline stops (the wait counts as wait_down). */
void pl_deliver_wait_room(struct pl_deliver *dl);
/* A batch was started (in flight until pl_deliver_put). */
void pl_deliver_started(struct pl_deliver *dl);
/*
 * The oldest batch in flight is done: b to the queue or the callback (0), or, with b NULL, it
 * failed or was dropped (0). -ENOMEM: no room to keep b (freed; err says so).
 */
int pl_deliver_put(struct pl_deliver *dl, const struct pl_batch *b, struct io_error *err);
/* The pipeline's error (the first one is kept); the consumer sees it after earlier batches. */
void pl_deliver_fail(struct pl_deliver *dl, int code, const struct io_error *err);
/* The stream ended (after the last put): wake the consumer, call end. */
void pl_deliver_finish(struct pl_deliver *dl);
/* Stop: the driver's waits return, the stream's end says -ECANCELED. */
void pl_deliver_stop(struct pl_deliver *dl);
bool pl_deliver_stopped(struct pl_deliver *dl);

/* ---- the consumer's side ---- */

int pl_deliver_next(struct pl_deliver *dl, int timeout_ms, struct pl_batch **ret_batch,
		    struct io_error *err);
void pl_deliver_release(struct pl_deliver *dl, struct pl_batch *b);
/* The last batch handed out: 1 and *ret, or 0 when none was. */
int pl_deliver_last(struct pl_deliver *dl, struct pl_batch_pos *ret);

/* Counters: batches in (done) and out (handed out), bytes, the waits (any thread). */
void pl_deliver_get_stats(struct pl_deliver *dl, struct pl_stage_stats *ret, uint64_t *ret_rows);

#endif
