/* SPDX-License-Identifier: Apache-2.0 */
/* Stage "deliver": the ready queue, the deliver callback, flow control and the stream's end. */
#include "deliver.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ipc/batch.h"

struct pl_node {
	struct pl_batch b; /* first: pl_deliver_release() gets the node back from it */
	struct pl_node *next;
	struct pl_node *out_prev, *out_next; /* on the list of batches the consumer holds */
};

struct pl_deliver {
	struct pl_deliver_opts o;
	pthread_mutex_t lock;
	pthread_cond_t ready_cond; /* consumer waits: a batch, the end, an error */
	pthread_cond_t space_cond; /* driver waits: room for another batch */

	/* under lock */
	struct pl_node *head, *tail;
	struct pl_node *out; /* batches handed out and not released */
	size_t n_ready;
	size_t n_inflight;
	bool eos;
	bool stop;
	int error;
	struct io_error err;
	struct pl_batch_pos last; /* the last batch handed out */
	bool have_last;
	struct pl_stage_stats st; /* elements: batches */
	uint64_t rows;
};

int pl_deliver_create(const struct pl_deliver_opts *opts, struct pl_deliver **ret)
{
	struct pl_deliver *dl = calloc(1, sizeof(*dl));
	if (!dl)
		return -ENOMEM;
	dl->o = *opts;
	pthread_mutex_init(&dl->lock, NULL);
	pthread_cond_init(&dl->ready_cond, NULL);
	pthread_cond_init(&dl->space_cond, NULL);
	dl->st.capacity = opts->prefetch;
	*ret = dl;
	return 0;
}

static void free_node(struct pl_deliver *dl, struct pl_node *n)
{
	dl->o.free(dl->o.alloc_ctx, (void *)n->b.mem, n->b.len);
	free(n);
}

void pl_deliver_destroy(struct pl_deliver *dl)
{
	if (!dl)
		return;
	for (struct pl_node *n = dl->head, *next; n; n = next) {
		next = n->next;
		free_node(dl, n);
	}
	for (struct pl_node *n = dl->out, *next; n; n = next) { /* held by the consumer */
		next = n->out_next;
		free_node(dl, n);
	}
	pthread_cond_destroy(&dl->ready_cond);
	pthread_cond_destroy(&dl->space_cond);
	pthread_mutex_destroy(&dl->lock);
	free(dl);
}

int pl_deliver_room(struct pl_deliver *dl)
{
	pthread_mutex_lock(&dl->lock);
	int r = dl->stop ? -ECANCELED : dl->n_ready + dl->n_inflight < dl->o.prefetch;
	pthread_mutex_unlock(&dl->lock);
	return r;
}

void pl_deliver_set_prefetch(struct pl_deliver *dl, unsigned prefetch)
{
	pthread_mutex_lock(&dl->lock);
	dl->o.prefetch = prefetch ? prefetch : 1;
	dl->st.capacity = dl->o.prefetch;
	pthread_cond_broadcast(&dl->space_cond); /* more room: a waiting driver goes on */
	pthread_mutex_unlock(&dl->lock);
}

unsigned pl_deliver_prefetch(struct pl_deliver *dl)
{
	pthread_mutex_lock(&dl->lock);
	unsigned n = dl->o.prefetch;
	pthread_mutex_unlock(&dl->lock);
	return n;
}

void pl_deliver_wait_room(struct pl_deliver *dl)
{
	uint64_t t0 = pl_clock_ns(CLOCK_MONOTONIC);
	pthread_mutex_lock(&dl->lock);
	while (!dl->stop && dl->n_ready + dl->n_inflight >= dl->o.prefetch)
		pthread_cond_wait(&dl->space_cond, &dl->lock);
	dl->st.wait_down_ns += pl_clock_ns(CLOCK_MONOTONIC) - t0;
	pthread_mutex_unlock(&dl->lock);
}

void pl_deliver_started(struct pl_deliver *dl)
{
	pthread_mutex_lock(&dl->lock);
	dl->n_inflight++;
	pthread_mutex_unlock(&dl->lock);
}

/* Under lock: n goes to the consumer (the out list), and the position moves past it. */
static void hand_out(struct pl_deliver *dl, struct pl_node *n)
{
	dl->last = (struct pl_batch_pos){
		.epoch = n->b.epoch,
		.index_in_epoch = ((const struct ipc_batch_hdr *)n->b.mem)->index_in_epoch,
		.seq = n->b.seq,
		.flags = n->b.flags,
	};
	dl->have_last = true;
	n->out_prev = NULL;
	n->out_next = dl->out;
	if (dl->out)
		dl->out->out_prev = n;
	dl->out = n;
	dl->st.elems_out++;
	dl->st.bytes_out += n->b.len;
}

int pl_deliver_put(struct pl_deliver *dl, const struct pl_batch *b, struct io_error *err)
{
	struct pl_node *n = NULL;
	int r = 0;
	if (b) {
		n = calloc(1, sizeof(*n));
		if (!n) {
			dl->o.free(dl->o.alloc_ctx, (void *)b->mem, b->len);
			io_error_set(err, "out of memory");
			r = -ENOMEM;
		} else {
			n->b = *b;
		}
	}
	pthread_mutex_lock(&dl->lock);
	dl->n_inflight--;
	if (n) {
		if (dl->o.deliver) {
			hand_out(dl, n);
		} else {
			if (dl->tail)
				dl->tail->next = n;
			else
				dl->head = n;
			dl->tail = n;
			dl->n_ready++;
			dl->st.buffered = dl->n_ready;
		}
		dl->st.elems_in++;
		dl->st.bytes_in += n->b.len;
		dl->rows += n->b.rows;
	}
	pthread_mutex_unlock(&dl->lock);
	/*
	 * After the unlock: a consumer woken under the lock would only go back to sleep on it
	 * (two wake-ups, and the second preempts the driver).
	 */
	if (n && dl->o.deliver)
		dl->o.deliver(dl->o.deliver_ctx, &n->b);
	else if (n)
		pthread_cond_broadcast(&dl->ready_cond);
	return r;
}

void pl_deliver_fail(struct pl_deliver *dl, int code, const struct io_error *e)
{
	pthread_mutex_lock(&dl->lock);
	if (!dl->error) {
		dl->error = code;
		dl->err = *e;
		/* every failure reaches the readers with text: a stage that said nothing gets
		   its errno's */
		if (!dl->err.msg[0])
			io_error_set(&dl->err, "%s", strerror(code < 0 ? -code : code));
	}
	pthread_cond_broadcast(&dl->ready_cond);
	pthread_mutex_unlock(&dl->lock);
}

void pl_deliver_finish(struct pl_deliver *dl)
{
	pthread_mutex_lock(&dl->lock);
	dl->eos = true;
	pthread_cond_broadcast(&dl->ready_cond);
	int rc = dl->stop ? -ECANCELED : dl->error;
	struct io_error e = dl->err;
	pthread_mutex_unlock(&dl->lock);
	if (dl->o.end)
		dl->o.end(dl->o.deliver_ctx, rc, &e);
}

void pl_deliver_stop(struct pl_deliver *dl)
{
	pthread_mutex_lock(&dl->lock);
	dl->stop = true;
	pthread_cond_broadcast(&dl->space_cond);
	pthread_mutex_unlock(&dl->lock);
}

bool pl_deliver_stopped(struct pl_deliver *dl)
{
	pthread_mutex_lock(&dl->lock);
	bool s = dl->stop;
	pthread_mutex_unlock(&dl->lock);
	return s;
}

int pl_deliver_next(struct pl_deliver *dl, int timeout_ms, struct pl_batch **ret_batch,
		    struct io_error *err)
{
	if (dl->o.deliver) {
		if (err)
			io_error_set(err, "this pipeline delivers its batches to a callback");
		return -EINVAL;
	}
	uint64_t t0 = pl_clock_ns(CLOCK_MONOTONIC);
	struct timespec dlt;
	if (timeout_ms >= 0) {
		clock_gettime(CLOCK_REALTIME, &dlt);
		dlt.tv_sec += timeout_ms / 1000;
		dlt.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
		if (dlt.tv_nsec >= 1000000000L) {
			dlt.tv_sec++;
			dlt.tv_nsec -= 1000000000L;
		}
	}
	int r = 0;
	pthread_mutex_lock(&dl->lock);
	while (!dl->head && !dl->error && !dl->eos) {
		if (timeout_ms < 0) {
			pthread_cond_wait(&dl->ready_cond, &dl->lock);
		} else if (pthread_cond_timedwait(&dl->ready_cond, &dl->lock, &dlt) == ETIMEDOUT) {
			r = -ETIMEDOUT;
			break;
		}
	}
	if (dl->head) {
		struct pl_node *n = dl->head;
		dl->head = n->next;
		if (!dl->head)
			dl->tail = NULL;
		dl->n_ready--;
		dl->st.buffered = dl->n_ready;
		hand_out(dl, n);
		pthread_cond_broadcast(&dl->space_cond);
		*ret_batch = &n->b;
		r = 1;
	} else if (r == 0 && dl->error) {
		r = dl->error;
		if (err)
			*err = dl->err;
	} else if (r == 0) {
		r = 0; /* end of stream */
	} else if (err) {
		io_error_set(err, "no batch within %d ms", timeout_ms);
	}
	dl->st.wait_up_ns += pl_clock_ns(CLOCK_MONOTONIC) - t0;
	pthread_mutex_unlock(&dl->lock);
	return r;
}

void pl_deliver_release(struct pl_deliver *dl, struct pl_batch *b)
{
	if (!b)
		return;
	struct pl_node *n = (struct pl_node *)b;
	pthread_mutex_lock(&dl->lock);
	if (n->out_prev)
		n->out_prev->out_next = n->out_next;
	else
		dl->out = n->out_next;
	if (n->out_next)
		n->out_next->out_prev = n->out_prev;
	dl->st.completions++;
	pthread_mutex_unlock(&dl->lock);
	free_node(dl, n);
}

int pl_deliver_last(struct pl_deliver *dl, struct pl_batch_pos *ret)
{
	pthread_mutex_lock(&dl->lock);
	int r = dl->have_last;
	if (r)
		*ret = dl->last;
	pthread_mutex_unlock(&dl->lock);
	return r;
}

void pl_deliver_get_stats(struct pl_deliver *dl, struct pl_stage_stats *ret, uint64_t *ret_rows)
{
	pthread_mutex_lock(&dl->lock);
	*ret = dl->st;
	*ret_rows = dl->rows;
	pthread_mutex_unlock(&dl->lock);
}
