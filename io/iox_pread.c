/* SPDX-License-Identifier: Apache-2.0 */
/* iox pread backend: worker threads doing pread(2), a mutex + condvar work and completion queue. */
#include "iox_internal.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/*
 * Who owns what. The consumer's thread (through the front end) owns stage[]; it moves staged
 * reads into work[] under lock at flush. A worker takes one read out of work[] under lock,
 * runs pread(2) into that read's buffer without the lock (no one else touches the buffer
 * until the completion is seen), then appends the result to done[] under lock. The mutex
 * orders the buffer's bytes before the consumer's use of them. Every array holds at most one
 * entry per buffer, so none can overflow.
 */
struct iox_pread {
	pthread_mutex_t lock;
	pthread_cond_t work_cv; /* workers: work[] not empty, or stop */
	pthread_cond_t done_cv; /* the consumer: done[] not empty */
	bool stop;
	bool consumer_waiting;

	struct iox_rd *work; /* ring of reads for the workers */
	uint32_t whead;
	uint32_t wcount;
	struct iox_cqe *done; /* finished reads, in order of completion */
	uint32_t dcount;
	uint32_t cap; /* num_buffers */

	struct iox_rd *stage; /* consumer-only: queued, not yet flushed */
	uint32_t nstage;

	pthread_t *threads;
	uint32_t nthreads;
};

static void *iox_pread_worker(void *arg)
{
	struct iox_pread *p = arg;
	struct iox_rd rd;
	ssize_t n;
	int32_t res;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->stop && p->wcount == 0)
			pthread_cond_wait(&p->work_cv, &p->lock);
		if (p->stop)
			break;
		rd = p->work[p->whead];
		p->whead = (p->whead + 1) % p->cap;
		p->wcount--;
		pthread_mutex_unlock(&p->lock);

		do {
			n = pread(rd.fd, rd.addr, rd.len, (off_t)rd.off);
		} while (n < 0 && errno == EINTR);
		res = n < 0 ? -errno : (int32_t)n;

		pthread_mutex_lock(&p->lock);
		p->done[p->dcount].buf = rd.buf;
		p->done[p->dcount].res = res;
		p->dcount++;
		if (p->consumer_waiting)
			pthread_cond_signal(&p->done_cv);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

static int iox_pread_queue(struct iox *iox, const struct iox_rd *rd)
{
	struct iox_pread *p = iox->be;

	if (p->nstage >= p->cap)
		return -EOVERFLOW; /* the front end broke its promise: one read per buffer */
	p->stage[p->nstage++] = *rd;
	return 0;
}

/* Move the staged reads to the workers; the caller holds p->lock. */
static void iox_pread_flush_locked(struct iox_pread *p)
{
	uint32_t i, n = p->nstage;

	if (!n)
		return;
	for (i = 0; i < n; i++)
		p->work[(p->whead + p->wcount + i) % p->cap] = p->stage[i];
	p->wcount += n;
	p->nstage = 0;
	if (n == 1)
		pthread_cond_signal(&p->work_cv);
	else
		pthread_cond_broadcast(&p->work_cv);
}

static int iox_pread_flush(struct iox *iox)
{
	struct iox_pread *p = iox->be;

	if (!p->nstage)
		return 0;
	pthread_mutex_lock(&p->lock);
	iox_pread_flush_locked(p);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

static void iox_deadline(struct timespec *ts, int timeout_ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += timeout_ms / 1000;
	ts->tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

static int iox_pread_reap(struct iox *iox, int timeout_ms, struct iox_cqe *out, unsigned max)
{
	struct iox_pread *p = iox->be;
	struct timespec dl;
	uint32_t n;
	int ret = 0;

	pthread_mutex_lock(&p->lock);
	iox_pread_flush_locked(p);
	if (p->dcount == 0 && timeout_ms != 0) {
		iox->stats.waits++;
		if (timeout_ms > 0)
			iox_deadline(&dl, timeout_ms);
		p->consumer_waiting = true;
		while (p->dcount == 0 && ret != ETIMEDOUT) {
			if (timeout_ms < 0)
				pthread_cond_wait(&p->done_cv, &p->lock);
			else
				ret = pthread_cond_timedwait(&p->done_cv, &p->lock, &dl);
		}
		p->consumer_waiting = false;
	}
	n = p->dcount < max ? p->dcount : max;
	memcpy(out, p->done, n * sizeof(*out));
	if (n < p->dcount)
		memmove(p->done, p->done + n, (p->dcount - n) * sizeof(*p->done));
	p->dcount -= n;
	pthread_mutex_unlock(&p->lock);
	return (int)n;
}

/* Stop the workers: each finishes the pread it is in, the reads still queued are dropped. */
static void iox_pread_stop(struct iox_pread *p, uint32_t nthreads)
{
	uint32_t i;

	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->work_cv);
	pthread_mutex_unlock(&p->lock);
	for (i = 0; i < nthreads; i++)
		pthread_join(p->threads[i], NULL);
}

static void iox_pread_free(struct iox_pread *p)
{
	pthread_cond_destroy(&p->done_cv);
	pthread_cond_destroy(&p->work_cv);
	pthread_mutex_destroy(&p->lock);
	free(p->threads);
	free(p->stage);
	free(p->done);
	free(p->work);
	free(p);
}

static void iox_pread_destroy(struct iox *iox)
{
	struct iox_pread *p = iox->be;

	if (!p)
		return;
	iox_pread_stop(p, p->nthreads);
	iox_pread_free(p);
	iox->be = NULL;
}

static const struct iox_backend_ops iox_pread_ops = {
	.queue = iox_pread_queue,
	.flush = iox_pread_flush,
	.reap = iox_pread_reap,
	.destroy = iox_pread_destroy,
};

int iox_pread_create(struct iox *iox, struct io_error *err)
{
	uint32_t cap = iox->opts.num_buffers;
	pthread_condattr_t ca;
	sigset_t all, old;
	struct iox_pread *p;
	uint32_t i;
	int ret;

	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->cap = cap;
	p->work = calloc(cap, sizeof(*p->work));
	p->done = calloc(cap, sizeof(*p->done));
	p->stage = calloc(cap, sizeof(*p->stage));
	p->threads = calloc(iox->opts.pread_threads, sizeof(*p->threads));
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work_cv, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->done_cv, &ca);
	pthread_condattr_destroy(&ca);
	if (!p->work || !p->done || !p->stage || !p->threads) {
		iox_pread_free(p);
		return -ENOMEM;
	}

	/* Workers take no signals: the application's threads handle them. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (i = 0; i < iox->opts.pread_threads; i++) {
		ret = pthread_create(&p->threads[i], NULL, iox_pread_worker, p);
		if (ret != 0)
			break;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (i < iox->opts.pread_threads) {
		iox_pread_stop(p, i);
		iox_pread_free(p);
		io_error_set(err, "iox: pthread_create: cannot start %u pread threads",
			     iox->opts.pread_threads);
		return -ret;
	}
	p->nthreads = i;
	iox->be = p;
	iox->ops = &iox_pread_ops;
	return 0;
}
