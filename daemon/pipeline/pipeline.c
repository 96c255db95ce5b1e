/* SPDX-License-Identifier: Apache-2.0 */
/* The pipeline: a driver thread that turns the source into batch jobs, and the consumer API. */
#include "pipeline_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ipc/batch.h"

/*
 * Threads. The driver thread owns the source and the order of batches: it collects each
 * batch's rows (docs/pipeline-semantics.md), starts its job on the pool, and finishes jobs
 * oldest first into the ready queue, keeping at most `prefetch` batches ready or in flight.
 * The consumer takes batches from the ready queue. p->lock guards the queue, the counters the
 * two sides share, the error and the position.
 */

#define PL_STATE_MAGIC	 0x54534c53u /* "SLST" */
#define PL_STATE_VERSION 1

/*
 * The default batch memory: aligned_alloc in size classes (2^k times 1, 1.25, 1.5, 1.75), with
 * a few freed extents per pipeline kept for reuse, so that a steady stream of batches does not
 * map and fault in fresh pages for every batch.
 */
#define PL_CACHE_SLOTS 8

struct pl_mem_cache {
	pthread_mutex_t lock;
	void *mem[PL_CACHE_SLOTS];
	size_t cls[PL_CACHE_SLOTS];
	unsigned n;
};

struct pl_node {
	struct pl_batch b; /* first: pl_batch_release() gets the node back from it */
	struct pl_node *next;
	struct pl_node *out_prev, *out_next; /* on the list of batches the caller holds */
};

struct pl_pos {
	uint64_t epoch, index, seq;
};

struct pl_pipeline {
	struct pl_plan *plan;
	struct pl_source *src;
	struct sched_pool *own_pool;
	struct sched_queue *q;
	struct pl_asm_ctx ax;
	struct pl_tensor_info *info;

	pthread_t driver;
	bool driver_started;
	pthread_mutex_t lock;
	pthread_cond_t ready_cond; /* consumer waits: a batch, the end, an error */
	pthread_cond_t space_cond; /* driver waits: room for another batch */

	/* under lock */
	struct pl_node *head, *tail;
	struct pl_node *out; /* batches next() gave and release() has not taken back */
	size_t n_ready;
	size_t n_inflight;
	bool eos;
	bool stop;
	int error;
	struct io_error err;
	struct pl_pos pos; /* after the last batch next() returned */
	struct pl_source_stats src_stats;
	uint64_t driver_cpu_ns; /* at the driver's end; while it runs, its clock: */
	clockid_t driver_clock;
	bool driver_clock_ok; /* under lock: the driver runs and driver_clock is its clock */
	uint64_t batches, rows;
	uint64_t next_wait_ns;
	const char *io_engine, *io_fallback;

	struct pl_pos start; /* where the driver begins (0, or a restored state) */
	void *(*alloc)(void *ctx, size_t len);
	void (*free)(void *ctx, void *mem, size_t len);
	void *alloc_ctx;
	struct pl_mem_cache cache;
	void (*deliver)(void *ctx, struct pl_batch *b); /* or NULL: the queue for next() */
	void (*end)(void *ctx, int rc, const struct io_error *err);
	void *deliver_ctx;
};

static size_t size_class(size_t len)
{
	size_t p = IPC_BATCH_EXTENT_ALIGN;
	while (p * 2 <= len)
		p *= 2;
	for (size_t q = 4; q <= 8; q++)
		if (p / 4 * q >= len)
			return p / 4 * q;
	return p * 2;
}

/*
 * The default allocator keeps up to PL_CACHE_SLOTS freed batches for reuse. A block carries its
 * size class in a header page before the batch, so that any request it fits takes it, not only one
 * of the same class: batches of records of varying size (images) change class from one batch to
 * the next, and a class-exact cache missed on them and went to malloc, whose large blocks are
 * fresh mappings, faulted in page by page. Of the blocks that fit, the most recently freed is
 * taken: part of it may still be cached, and a store to an uncached line reads it from memory
 * first (4% less CPU on the image benchmark than the smallest fitting block).
 */
#define PL_BLOCK_HDR IPC_BATCH_EXTENT_ALIGN

static void block_free(void *mem)
{
	if (mem)
		free((char *)mem - PL_BLOCK_HDR);
}

/* Take entry i out of the cache, keeping the others in the order they were freed. */
static void *cache_take(struct pl_mem_cache *c, unsigned i)
{
	void *m = c->mem[i];
	c->n--;
	memmove(&c->mem[i], &c->mem[i + 1], (c->n - i) * sizeof(c->mem[0]));
	memmove(&c->cls[i], &c->cls[i + 1], (c->n - i) * sizeof(c->cls[0]));
	return m;
}

static void *default_alloc(void *ctx, size_t len)
{
	struct pl_mem_cache *c = ctx;
	size_t cls = size_class(len);
	pthread_mutex_lock(&c->lock);
	unsigned best = c->n;
	for (unsigned i = c->n;
	     i-- > 0;) /* the most recently freed first: its lines may be cached */
		if (c->cls[i] >= cls) {
			best = i;
			break;
		}
	if (best < c->n) {
		void *m = cache_take(c, best);
		pthread_mutex_unlock(&c->lock);
		return m;
	}
	pthread_mutex_unlock(&c->lock);
	char *base = aligned_alloc(IPC_BATCH_EXTENT_ALIGN, PL_BLOCK_HDR + cls);
	if (!base)
		return NULL;
	memcpy(base, &cls, sizeof(cls));
	return base + PL_BLOCK_HDR;
}

/*
 * Back to the cache, as its most recent entry; when it is full, the smallest block goes (this
 * one, or a cached one).
 */
static void default_free(void *ctx, void *mem, size_t len)
{
	struct pl_mem_cache *c = ctx;
	size_t cls;
	(void)len;
	memcpy(&cls, (char *)mem - PL_BLOCK_HDR, sizeof(cls));
	pthread_mutex_lock(&c->lock);
	if (c->n == PL_CACHE_SLOTS) {
		unsigned small = 0;
		for (unsigned i = 1; i < c->n; i++)
			if (c->cls[i] < c->cls[small])
				small = i;
		if (c->cls[small] < cls) {
			void *evict = cache_take(c, small);
			c->mem[c->n] = mem;
			c->cls[c->n++] = cls;
			mem = evict;
		}
	} else {
		c->mem[c->n] = mem;
		c->cls[c->n++] = cls;
		mem = NULL;
	}
	pthread_mutex_unlock(&c->lock);
	block_free(mem);
}

void pl_pipeline_opts_init(struct pl_pipeline_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->size = sizeof(*opts);
	opts->engine = IOX_ENGINE_AUTO;
}

/* ---- driver ---- */

struct pl_driver {
	struct pl_pipeline *p;
	struct pl_bjob **inflight; /* FIFO of prefetch entries */
	size_t head, count, cap;
	struct io_error err;
	bool job_failed;       /* a batch failed: nothing after it may be delivered */
	uint64_t room_wait_ns; /* blocked in make_room, for the consumer */
};

static void set_error(struct pl_pipeline *p, int code, const struct io_error *e)
{
	pthread_mutex_lock(&p->lock);
	if (!p->error) {
		p->error = code;
		p->err = *e;
	}
	pthread_cond_broadcast(&p->ready_cond);
	pthread_mutex_unlock(&p->lock);
}

/*
 * The driver's CPU time is read from its clock by pl_pipeline_get_stats, not sampled per batch
 * here (a thread CPU clock read is a system call); `last`: the driver's final sample, as it ends.
 */
static void publish_stats(struct pl_pipeline *p, bool last)
{
	struct pl_source_stats st;
	pl_source_get_stats(p->src, &st);
	uint64_t cpu = last ? pl_clock_ns(CLOCK_THREAD_CPUTIME_ID) : 0;
	pthread_mutex_lock(&p->lock);
	p->src_stats = st;
	if (last) {
		p->driver_cpu_ns = cpu;
		p->driver_clock_ok = false;
	}
	p->io_engine = pl_source_engine(p->src);
	p->io_fallback = pl_source_fallback(p->src);
	pthread_mutex_unlock(&p->lock);
}

static struct pl_pos pos_after(const struct pl_batch_pos *b);

/* Under lock: n goes to the caller (the out list), and the position moves past it. */
static void hand_out(struct pl_pipeline *p, struct pl_node *n)
{
	struct pl_batch_pos bp = {
		.epoch = n->b.epoch,
		.index_in_epoch = ((const struct ipc_batch_hdr *)n->b.mem)->index_in_epoch,
		.seq = n->b.seq,
		.flags = n->b.flags,
	};
	p->pos = pos_after(&bp);
	n->out_prev = NULL;
	n->out_next = p->out;
	if (p->out)
		p->out->out_prev = n;
	p->out = n;
}

/* Finish the oldest job in flight: to the deliver callback or the ready queue, or the error. */
static int finish_oldest(struct pl_driver *d)
{
	struct pl_pipeline *p = d->p;
	struct pl_bjob *job = d->inflight[d->head];
	d->head = (d->head + 1) % d->cap;
	d->count--;
	struct pl_node *n = calloc(1, sizeof(*n));
	struct pl_batch b;
	int r = pl_bjob_finish(&p->ax, job, &b, &d->err);
	if (r == 0 && !n) {
		p->free(p->alloc_ctx, (void *)b.mem, b.len);
		io_error_set(&d->err, "out of memory");
		r = -ENOMEM;
	}
	pthread_mutex_lock(&p->lock);
	p->n_inflight--;
	if (r == 0) {
		n->b = b;
		if (p->deliver) {
			hand_out(p, n);
		} else {
			if (p->tail)
				p->tail->next = n;
			else
				p->head = n;
			p->tail = n;
			p->n_ready++;
		}
		p->batches++;
		p->rows += b.rows;
	}
	pthread_mutex_unlock(&p->lock);
	/*
	 * After the unlock: a consumer woken under the lock would only go back to sleep on it
	 * (two wake-ups, and the second preempts this thread).
	 */
	if (r == 0 && p->deliver)
		p->deliver(p->deliver_ctx, &n->b);
	else if (r == 0)
		pthread_cond_broadcast(&p->ready_cond);
	if (r < 0) {
		free(n);
		d->job_failed = true;
		set_error(p, r, &d->err);
	}
	return r;
}

/* Wait until another job may start: finish jobs that are done, or wait for the consumer. */
static int make_room(struct pl_driver *d)
{
	struct pl_pipeline *p = d->p;
	for (;;) {
		while (d->count > 0 && pl_bjob_done(d->inflight[d->head])) {
			int r = finish_oldest(d);
			if (r < 0)
				return r;
		}
		pthread_mutex_lock(&p->lock);
		if (p->stop) {
			pthread_mutex_unlock(&p->lock);
			return -ECANCELED;
		}
		if (p->n_ready + p->n_inflight < p->plan->prefetch) {
			pthread_mutex_unlock(&p->lock);
			return 0;
		}
		if (d->count > 0) {
			pthread_mutex_unlock(&p->lock);
			int r = finish_oldest(d);
			if (r < 0)
				return r;
			continue;
		}
		uint64_t t0 = pl_clock_ns(CLOCK_MONOTONIC);
		pthread_cond_wait(&p->space_cond, &p->lock);
		pthread_mutex_unlock(&p->lock);
		d->room_wait_ns += pl_clock_ns(CLOCK_MONOTONIC) - t0;
	}
}

static void drop_rows(struct pl_rec *rows, size_t n)
{
	for (size_t i = 0; i < n; i++)
		pl_rec_unref(&rows[i]);
	free(rows);
}

/* Start a batch of rows (or skip it while replaying up to a restored position). */
static int dispatch(struct pl_driver *d, struct pl_rec *rows, size_t n, uint64_t epoch,
		    uint64_t *index, uint64_t *seq, bool last, bool skip)
{
	struct pl_pipeline *p = d->p;
	const struct pl_spec *c = &p->plan->cfg;
	if (skip) {
		drop_rows(rows, n);
		(*index)++;
		return 0;
	}
	int r = make_room(d);
	if (r < 0) {
		drop_rows(rows, n);
		return r;
	}
	uint32_t flags = 0;
	if (last) {
		flags |= IPC_BATCH_F_END_EPOCH;
		if (c->epochs != PL_NULL && epoch + 1 >= (uint64_t)c->epochs)
			flags |= IPC_BATCH_F_END_STREAM;
	}
	struct pl_source_stats st;
	pl_source_get_stats(p->src, &st);
	p->ax.blocked_ns = st.wait_ns + d->room_wait_ns; /* with ax.alloc_ns: the driver's slack */
	struct pl_bjob *job;
	r = pl_bjob_start(&p->ax, rows, n, *seq, epoch, *index, flags, &job, &d->err);
	if (r < 0) {
		set_error(p, r, &d->err);
		return r;
	}
	d->inflight[(d->head + d->count) % d->cap] = job;
	d->count++;
	pthread_mutex_lock(&p->lock);
	p->n_inflight++;
	pthread_mutex_unlock(&p->lock);
	(*index)++;
	(*seq)++;
	publish_stats(p, false);
	return 0;
}

/* Up to b elements of the epoch into a new array. */
static int collect(struct pl_driver *d, size_t b, struct pl_rec **ret_rows, size_t *ret_n)
{
	struct pl_rec *rows = malloc(b * sizeof(*rows));
	if (!rows)
		return -ENOMEM;
	size_t n = 0;
	while (n < b) {
		int r = pl_source_next(d->p->src, &rows[n], &d->err);
		if (r < 0) {
			drop_rows(rows, n);
			return r;
		}
		if (r == 0)
			break;
		n++;
	}
	*ret_rows = rows;
	*ret_n = n;
	return 0;
}

/* One epoch: batches of target_batch_size, the last one flagged (semantics doc, 5). */
static int run_epoch(struct pl_driver *d, uint64_t epoch, uint64_t skip, uint64_t *seq)
{
	struct pl_pipeline *p = d->p;
	const struct pl_spec *c = &p->plan->cfg;
	size_t b = (size_t)c->target_batch_size;
	int r = pl_source_begin_epoch(p->src, epoch, &d->err);
	if (r < 0)
		return r;
	uint64_t index = 0;
	struct pl_rec *held = NULL;
	size_t n_held = 0;
	for (;;) {
		struct pl_rec *rows = NULL;
		size_t n = 0;
		r = collect(d, b, &rows, &n);
		if (r < 0)
			n = 0; /* collect dropped the partial rows */
		bool complete = n == b;
		bool usable = n > 0 && (complete || !c->drop_remainder);
		if (r < 0) {
			/* the batch held back is complete and came before the error: deliver it */
			if (held) {
				struct io_error keep = d->err;
				int e = dispatch(d, held, n_held, epoch, &index, seq, false,
						 index < skip);
				held = NULL;
				d->err = keep;
				if (e < 0 && e != -ECANCELED)
					r = e;
			}
			break;
		}
		if (held) {
			r = dispatch(d, held, n_held, epoch, &index, seq, !usable, index < skip);
			held = NULL;
			if (r < 0) {
				drop_rows(rows, n);
				break;
			}
		}
		if (!usable) {
			drop_rows(rows, n);
			break;
		}
		if (complete) {
			held = rows;
			n_held = n;
			continue;
		}
		r = dispatch(d, rows, n, epoch, &index, seq, true, index < skip);
		break;
	}
	if (held)
		drop_rows(held, n_held);
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

static void *driver_main(void *arg)
{
	struct pl_pipeline *p = arg;
	const struct pl_spec *c = &p->plan->cfg;
	struct pl_driver d = { .p = p, .cap = p->plan->prefetch };
	clockid_t clk;
	if (pthread_getcpuclockid(pthread_self(), &clk) == 0) {
		pthread_mutex_lock(&p->lock);
		p->driver_clock = clk;
		p->driver_clock_ok = true;
		pthread_mutex_unlock(&p->lock);
	}
	pthread_setname_np(pthread_self(), "sluice-driver"); /* for top and perf */
	d.inflight = calloc(d.cap, sizeof(*d.inflight));
	int r = d.inflight ? 0 : -ENOMEM;
	if (r < 0)
		io_error_set(&d.err, "out of memory");
	uint64_t seq = p->start.seq;
	for (uint64_t e = p->start.epoch; r == 0; e++) {
		if (c->epochs != PL_NULL && e >= (uint64_t)c->epochs)
			break;
		r = run_epoch(&d, e, e == p->start.epoch ? p->start.index : 0, &seq);
	}
	/*
	 * Batches in flight came before whatever ended the stream, an error included: deliver
	 * them in order (a job's own error comes first, as set_error keeps the first).
	 */
	struct io_error why = d.err;
	while (r != -ECANCELED && !d.job_failed && d.count > 0)
		if (finish_oldest(&d) < 0)
			break;
	if (r < 0 && r != -ECANCELED)
		set_error(p, r, &why);
	/* stopped or failed: whatever is still in flight is not delivered */
	while (d.count > 0) {
		struct pl_bjob *job = d.inflight[d.head];
		struct pl_batch b;
		struct io_error e;
		d.head = (d.head + 1) % d.cap;
		d.count--;
		if (pl_bjob_finish(&p->ax, job, &b, &e) == 0)
			p->free(p->alloc_ctx, (void *)b.mem, b.len);
		pthread_mutex_lock(&p->lock);
		p->n_inflight--;
		pthread_mutex_unlock(&p->lock);
	}
	free(d.inflight);
	publish_stats(p, true);
	pthread_mutex_lock(&p->lock);
	p->eos = true;
	pthread_cond_broadcast(&p->ready_cond);
	int rc = p->stop ? -ECANCELED : p->error;
	struct io_error e = p->err;
	pthread_mutex_unlock(&p->lock);
	if (p->end)
		p->end(p->deliver_ctx, rc, &e);
	return NULL;
}

/* ---- state ---- */

struct pl_state_blob {
	uint32_t magic, version;
	uint64_t fingerprint, seed, epoch, index, seq;
};
_Static_assert(sizeof(struct pl_state_blob) == 48, "state blob");
_Static_assert(sizeof(struct pl_state_blob) <= PL_STATE_MAX, "PL_STATE_MAX");

static int state_load(const struct pl_plan *plan, const void *buf, size_t len, struct pl_pos *ret,
		      struct io_error *err)
{
	struct pl_state_blob s;
	if (len != sizeof(s)) {
		io_error_set(err, "state: %zu bytes, expected %zu", len, sizeof(s));
		return -EBADMSG;
	}
	memcpy(&s, buf, sizeof(s));
	if (s.magic != PL_STATE_MAGIC || s.version != PL_STATE_VERSION) {
		io_error_set(err, "state: not a sluice pipeline state (magic %08x, version %u)",
			     s.magic, s.version);
		return -EBADMSG;
	}
	if (s.fingerprint != plan->fingerprint || s.seed != plan->cfg.seed) {
		io_error_set(err, "state: saved by a different pipeline (the spec, seed or data "
				  "files "
				  "changed)");
		return -EBADMSG;
	}
	ret->epoch = s.epoch;
	ret->index = s.index;
	ret->seq = s.seq;
	return 0;
}

/* The position after a batch: the next one of its epoch, or the start of the next epoch. */
static struct pl_pos pos_after(const struct pl_batch_pos *b)
{
	struct pl_pos r;
	if (b->flags & IPC_BATCH_F_END_EPOCH) {
		r.epoch = b->epoch + 1;
		r.index = 0;
	} else {
		r.epoch = b->epoch;
		r.index = b->index_in_epoch + 1;
	}
	r.seq = b->seq + 1;
	return r;
}

static int state_write(const struct pl_pipeline *p, const struct pl_pos *pos, void *buf, size_t cap)
{
	struct pl_state_blob s = { .magic = PL_STATE_MAGIC, .version = PL_STATE_VERSION };
	if (cap < sizeof(s))
		return -ENOSPC;
	s.fingerprint = p->plan->fingerprint;
	s.seed = p->plan->cfg.seed;
	s.epoch = pos->epoch;
	s.index = pos->index;
	s.seq = pos->seq;
	memcpy(buf, &s, sizeof(s));
	return (int)sizeof(s);
}

int pl_pipeline_save(const struct pl_pipeline *p, void *buf, size_t cap)
{
	pthread_mutex_lock((pthread_mutex_t *)&p->lock);
	struct pl_pos pos = p->pos;
	pthread_mutex_unlock((pthread_mutex_t *)&p->lock);
	return state_write(p, &pos, buf, cap);
}

int pl_pipeline_state_after(const struct pl_pipeline *p, const struct pl_batch_pos *b, void *buf,
			    size_t cap)
{
	struct pl_pos pos = b ? pos_after(b) : p->start;
	return state_write(p, &pos, buf, cap);
}

/* ---- lifecycle ---- */

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
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->ready_cond, NULL);
	pthread_cond_init(&p->space_cond, NULL);
	pthread_mutex_init(&p->cache.lock, NULL);
	p->deliver = o.deliver;
	p->end = o.end;
	p->deliver_ctx = o.deliver_ctx;
	p->alloc = o.alloc ? o.alloc : default_alloc;
	p->free = o.alloc ? o.free : default_free;
	p->alloc_ctx = o.alloc ? o.alloc_ctx : &p->cache;
	int r = pl_plan_create(spec, &p->plan, err);
	if (r < 0)
		goto fail;
	if (o.state) {
		r = state_load(p->plan, o.state, o.state_len, &p->start, err);
		if (r < 0)
			goto fail;
	}
	p->pos = p->start;
	r = make_info(p);
	if (r < 0)
		goto fail;
	r = pl_source_create(p->plan, o.engine, o.direct, &p->src, err);
	if (r < 0)
		goto fail;
	struct sched_pool *pool = o.pool;
	if (!pool) {
		struct sched_pool_opts po;
		sched_pool_opts_init(&po);
		po.workers = p->plan->parses;
		po.pin = false; /* a pool of the pipeline's own shares the process with others */
		r = sched_pool_create(&po, &p->own_pool);
		if (r < 0) {
			io_error_set(err, "cannot start %u parse workers", p->plan->parses);
			goto fail;
		}
		pool = p->own_pool;
	}
	r = sched_queue_create(pool, 1, -1, &p->q);
	if (r < 0)
		goto fail;
	p->ax.plan = p->plan;
	p->ax.pool = pool;
	p->ax.q = p->q;
	p->ax.n_workers = sched_pool_workers(pool);
	p->ax.alloc = p->alloc;
	p->ax.free = p->free;
	p->ax.alloc_ctx = p->alloc_ctx;
	p->ax.scratch = calloc(p->ax.n_workers, sizeof(*p->ax.scratch));
	atomic_init(&p->ax.parse_ns, 0);
	atomic_init(&p->ax.skipped_records, 0);
	atomic_init(&p->ax.lazy_fills, 0);
	pl_source_set_idle(p->src, pl_asm_idle, &p->ax);
	if (!p->ax.scratch) {
		r = -ENOMEM;
		goto fail;
	}
	r = -pthread_create(&p->driver, NULL, driver_main, p);
	if (r < 0) {
		io_error_set(err, "cannot start the pipeline's driver thread");
		goto fail;
	}
	p->driver_started = true;
	*ret_p = p;
	return 0;
fail:
	if (r == -ENOMEM)
		io_error_set(err, "out of memory");
	pl_pipeline_destroy(p);
	return r;
}

void pl_pipeline_destroy(struct pl_pipeline *p)
{
	if (!p)
		return;
	if (p->driver_started) {
		pthread_mutex_lock(&p->lock);
		p->stop = true;
		pthread_cond_broadcast(&p->space_cond);
		pthread_mutex_unlock(&p->lock);
		pl_source_stop(p->src);
		pthread_join(p->driver, NULL);
	}
	for (struct pl_node *n = p->head, *next; n; n = next) {
		next = n->next;
		p->free(p->alloc_ctx, (void *)n->b.mem, n->b.len);
		free(n);
	}
	for (struct pl_node *n = p->out, *next; n; n = next) { /* held by the caller */
		next = n->out_next;
		p->free(p->alloc_ctx, (void *)n->b.mem, n->b.len);
		free(n);
	}
	sched_queue_destroy(p->q);
	sched_pool_destroy(p->own_pool, SCHED_SHUTDOWN_DRAIN);
	pl_asm_ctx_fini(&p->ax);
	pl_source_destroy(p->src);
	free(p->info);
	pl_plan_destroy(p->plan);
	for (unsigned i = 0; i < p->cache.n; i++)
		block_free(p->cache.mem[i]);
	pthread_mutex_destroy(&p->cache.lock);
	pthread_cond_destroy(&p->ready_cond);
	pthread_cond_destroy(&p->space_cond);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

size_t pl_pipeline_n_tensors(const struct pl_pipeline *p)
{
	return p->plan->n_out;
}

const struct pl_tensor_info *pl_pipeline_tensor(const struct pl_pipeline *p, size_t i)
{
	return i < p->plan->n_out ? &p->info[i] : NULL;
}

/* ---- consumer ---- */

int pl_pipeline_next(struct pl_pipeline *p, int timeout_ms, struct pl_batch **ret_batch,
		     struct io_error *err)
{
	if (p->deliver) {
		if (err)
			io_error_set(err, "this pipeline delivers its batches to a callback");
		return -EINVAL;
	}
	uint64_t t0 = pl_clock_ns(CLOCK_MONOTONIC);
	struct timespec dl;
	if (timeout_ms >= 0) {
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += timeout_ms / 1000;
		dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
		if (dl.tv_nsec >= 1000000000L) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000L;
		}
	}
	int r = 0;
	pthread_mutex_lock(&p->lock);
	while (!p->head && !p->error && !p->eos) {
		if (timeout_ms < 0) {
			pthread_cond_wait(&p->ready_cond, &p->lock);
		} else if (pthread_cond_timedwait(&p->ready_cond, &p->lock, &dl) == ETIMEDOUT) {
			r = -ETIMEDOUT;
			break;
		}
	}
	if (p->head) {
		struct pl_node *n = p->head;
		p->head = n->next;
		if (!p->head)
			p->tail = NULL;
		p->n_ready--;
		hand_out(p, n);
		pthread_cond_broadcast(&p->space_cond);
		*ret_batch = &n->b;
		r = 1;
	} else if (r == 0 && p->error) {
		r = p->error;
		if (err)
			*err = p->err;
	} else if (r == 0) {
		r = 0; /* end of stream */
	} else if (err) {
		io_error_set(err, "no batch within %d ms", timeout_ms);
	}
	p->next_wait_ns += pl_clock_ns(CLOCK_MONOTONIC) - t0;
	pthread_mutex_unlock(&p->lock);
	return r;
}

void pl_batch_release(struct pl_pipeline *p, struct pl_batch *b)
{
	if (!b)
		return;
	struct pl_node *n = (struct pl_node *)b;
	pthread_mutex_lock(&p->lock);
	if (n->out_prev)
		n->out_prev->out_next = n->out_next;
	else
		p->out = n->out_next;
	if (n->out_next)
		n->out_next->out_prev = n->out_prev;
	pthread_mutex_unlock(&p->lock);
	p->free(p->alloc_ctx, (void *)n->b.mem, n->b.len);
	free(n);
}

void pl_pipeline_get_stats(const struct pl_pipeline *p, struct pl_stats *ret)
{
	memset(ret, 0, sizeof(*ret));
	pthread_mutex_lock((pthread_mutex_t *)&p->lock);
	ret->files_opened = p->src_stats.files_opened;
	ret->records = p->src_stats.records;
	ret->record_bytes = p->src_stats.record_bytes;
	ret->file_bytes = p->src_stats.file_bytes;
	ret->direct_bytes = p->src_stats.direct_bytes;
	ret->skipped_files = p->src_stats.skipped_files;
	ret->copied_bytes = p->src_stats.copied_bytes;
	ret->evacuations = p->src_stats.evacuations;
	ret->read_wait_ns = p->src_stats.wait_ns;
	ret->batches = p->batches;
	ret->rows = p->rows;
	ret->driver_cpu_ns = p->driver_cpu_ns;
	if (p->driver_clock_ok) /* under lock: the driver has not ended, its clock is its own */
		ret->driver_cpu_ns = pl_clock_ns(p->driver_clock);
	ret->next_wait_ns = p->next_wait_ns;
	ret->io_engine = p->io_engine;
	ret->io_fallback = p->io_fallback;
	ret->skipped_records = p->src_stats.skipped_records;
	pthread_mutex_unlock((pthread_mutex_t *)&p->lock);
	ret->skipped_records += atomic_load_explicit(&((struct pl_pipeline *)p)->ax.skipped_records,
						     memory_order_relaxed);
	ret->parse_ns =
		atomic_load_explicit(&((struct pl_pipeline *)p)->ax.parse_ns, memory_order_relaxed);
	ret->lazy_fills = atomic_load_explicit(&((struct pl_pipeline *)p)->ax.lazy_fills,
					       memory_order_relaxed);
}

void pl_pipeline_fingerprint(const struct pl_pipeline *p, uint8_t ret_fp[16])
{
	memcpy(ret_fp, &p->plan->fingerprint, 8);
	memcpy(ret_fp + 8, &p->plan->fingerprint2, 8);
}

int pl_spec_fingerprint(const struct pl_spec *spec, uint8_t ret_fp[16], struct io_error *err)
{
	struct pl_plan *plan;
	int r = pl_plan_create(spec, &plan, err);
	if (r < 0)
		return r;
	memcpy(ret_fp, &plan->fingerprint, 8);
	memcpy(ret_fp + 8, &plan->fingerprint2, 8);
	pl_plan_destroy(plan);
	return 0;
}
