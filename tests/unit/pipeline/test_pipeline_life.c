/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for daemon/pipeline/pipeline.c: lifecycle, memory, allocators, threads and timeouts. */
#include "daemon/pipeline/pipeline.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ipc/batch.h"
#include "sched/sched.h"
#include "tests/unit/pipeline/pipeline_fixture.h"

/* ---- destroy at every point ---- */

/*
 * Until the ready queue of p is full (prefetch batches ready: the driver may start no other and
 * waits for the consumer), polled every millisecond; fails the test after 10 s. Returns the
 * queue's capacity, its prefetch.
 */
static uint64_t until_queue_full(struct pl_pipeline *p)
{
	const struct timespec ms = { 0, 1000000 };
	struct pl_stats st;

	for (int i = 0; i < 10000; i++) {
		pl_pipeline_get_stats(p, &st);
		if (st.stages[PL_STAGE_DELIVER].buffered == st.stages[PL_STAGE_DELIVER].capacity)
			return st.stages[PL_STAGE_DELIVER].capacity;
		nanosleep(&ms, NULL); /* polls the condition itself */
	}
	fail_msg("the ready queue holds %llu of %llu batches after 10 s",
		 (unsigned long long)st.stages[PL_STAGE_DELIVER].buffered,
		 (unsigned long long)st.stages[PL_STAGE_DELIVER].capacity);
	return 0;
}

/* What c gave out: allocations live now and ever. */
static void ca_counts(struct count_alloc *c, size_t *ret_live, size_t *ret_total)
{
	pthread_mutex_lock(&c->lock);
	*ret_live = c->live_n;
	*ret_total = c->total_n;
	pthread_mutex_unlock(&c->lock);
}

static void test_destroy_right_after_create(void **state)
{
	struct count_alloc c;
	struct pl_pipeline_opts o;
	struct spec_args a = spec_default();

	ca_init(&c);
	opts_with(&o, &c);
	pl_pipeline_destroy(NULL);
	for (int i = 0; i < 20; i++) {
		a.epochs = i % 2 ? "null" : "1";
		pl_pipeline_destroy(create(&a, &o));
		assert_int_equal(ca_live(&c), 0);
	}
	assert_false(c.misuse);
	ca_fini(&c);
}

static void test_destroy_after_one_batch(void **state)
{
	struct count_alloc c;
	struct pl_pipeline_opts o;
	struct spec_args a = spec_default();
	struct pl_batch *b;

	ca_init(&c);
	opts_with(&o, &c);
	a.shuffle = true;
	struct pl_pipeline *p = create(&a, &o);
	assert_int_equal(pl_pipeline_next(p, -1, &b, NULL), 1);
	assert_true(ca_owns(&c, b->mem, b->len));
	pl_batch_release(p, b);
	pl_pipeline_destroy(p);
	assert_int_equal(ca_live(&c), 0);
	assert_false(c.misuse);
	ca_fini(&c);
}

/*
 * pipeline.h: destroy "frees every batch not yet released". Batches that next() handed out and
 * the caller still holds are not yet released: destroy must free them (and the caller must not
 * release them afterwards).
 */
static void test_destroy_frees_held_batches(void **state)
{
	struct count_alloc c;
	struct pl_pipeline_opts o;
	struct spec_args a = spec_default();
	struct pl_batch *b1, *b2;
	size_t live, total;

	ca_init(&c);
	opts_with(&o, &c);
	a.batch = 16;
	a.prefetch = 4;
	struct pl_pipeline *p = create(&a, &o);
	assert_int_equal(pl_pipeline_next(p, -1, &b1, NULL), 1);
	assert_int_equal(pl_pipeline_next(p, -1, &b2, NULL), 1);
	/* the driver fills the queue behind them, and stops there */
	assert_int_equal(until_queue_full(p), 4);
	ca_counts(&c, &live, &total);
	assert_int_equal(total, 2 + 4); /* the two held, the four queued, nothing more */
	assert_int_equal(live, 2 + 4);
	pl_pipeline_destroy(p);
	if (ca_live(&c) != 0)
		fail_msg("%zu bytes of batches still allocated after pl_pipeline_destroy (the two "
			 "batches the caller held were not freed)",
			 ca_live(&c));
	assert_false(c.misuse);
	ca_fini(&c);
}

/* Batches released after a queue has filled up, then destroy with a full queue. */
static void test_destroy_with_full_queue(void **state)
{
	struct count_alloc c;
	struct pl_pipeline_opts o;
	struct spec_args a = spec_default();
	struct pl_batch *b;
	size_t live, total;

	ca_init(&c);
	opts_with(&o, &c);
	a.batch = 8;
	a.prefetch = 6;
	struct pl_pipeline *p = create(&a, &o);
	assert_int_equal(pl_pipeline_next(p, -1, &b, NULL), 1);
	pl_batch_release(p, b);
	/* prefetch batches ready behind the released one: all allocated, none released */
	assert_int_equal(until_queue_full(p), 6);
	ca_counts(&c, &live, &total);
	assert_int_equal(total, 1 + 6);
	assert_int_equal(live, 6);
	pl_pipeline_destroy(p);
	assert_int_equal(ca_live(&c), 0);
	assert_false(c.misuse);
	ca_fini(&c);
}

/* epochs null: the driver blocks on the full prefetch queue forever; destroy must stop it. */
static void test_destroy_endless_blocked(void **state)
{
	struct count_alloc c;
	struct pl_pipeline_opts o;
	struct spec_args a = spec_default();

	ca_init(&c);
	opts_with(&o, &c);
	a.epochs = "null";
	a.shuffle = true;
	a.batch = 32;
	for (int i = 0; i < 6; i++) {
		size_t live, before, total, taken;

		ca_counts(&c, &live, &before);
		a.prefetch = i % 3; /* 0 is resolved to at least 1 */
		struct pl_pipeline *p = create(&a, &o);
		struct stream *s = stream_new();
		/* across an epoch boundary, then stop consuming */
		taken = (size_t)(i * 17 % 40) + 1;
		drain(p, s, taken, false);
		assert_stream_ok(s);
		assert_int_equal(s->end, 1);
		assert_int_equal(s->n, taken);
		/* the driver is blocked: the queue is full, every batch taken was released */
		assert_int_equal(until_queue_full(p), a.prefetch ? a.prefetch : 1);
		ca_counts(&c, &live, &total);
		assert_int_equal(live, a.prefetch ? a.prefetch : 1);
		assert_int_equal(total, before + taken + live);
		pl_pipeline_destroy(p);
		stream_free(s);
		assert_int_equal(ca_live(&c), 0);
	}
	assert_false(c.misuse);
	ca_fini(&c);
}

/* 200 pipelines, stopped at varied points, with their own and a shared pool. */
static void test_create_destroy_loop(void **state)
{
	struct count_alloc c;
	struct pl_pipeline_opts o;
	struct sched_pool_opts po;
	struct sched_pool *pool;
	struct spec_args a = spec_default();

	ca_init(&c);
	sched_pool_opts_init(&po);
	po.workers = 2;
	po.pin = false;
	assert_int_equal(sched_pool_create(&po, &pool), 0);
	a.batch = 32;
	for (int i = 0; i < 200; i++) {
		struct pl_batch *b;
		int r;

		opts_with(&o, &c);
		o.pool = i % 2 ? pool : NULL;
		a.epochs = i % 3 ? "null" : "1";
		a.shuffle = i % 5 < 2;
		a.prefetch = 1 + i % 3;
		struct pl_pipeline *p = create(&a, &o);
		switch (i % 4) {
		case 0:
			break;
		case 1:
			assert_int_equal(pl_pipeline_next(p, -1, &b, NULL), 1);
			pl_batch_release(p, b);
			break;
		case 2:
			r = pl_pipeline_next(p, 0, &b, NULL);
			assert_true(r == 1 || r == -ETIMEDOUT);
			if (r == 1)
				pl_batch_release(p, b);
			break;
		default:
			for (int k = 0; k < i % 7; k++) {
				assert_int_equal(pl_pipeline_next(p, -1, &b, NULL), 1);
				pl_batch_release(p, b);
			}
			break;
		}
		pl_pipeline_destroy(p);
		if (ca_live(&c) != 0)
			fail_msg("iteration %d: %zu bytes left", i, ca_live(&c));
	}
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
	assert_false(c.misuse);
	ca_fini(&c);
}

/* ---- pools and threads ---- */

struct consumer {
	pthread_t t;
	struct pl_pipeline *p;
	struct stream *s;
	size_t max;
};

static void *consumer_main(void *arg)
{
	struct consumer *c = arg;
	drain(c->p, c->s, c->max, true);
	return NULL;
}

/* Pipelines sharing one pool, consumed on their own threads, each get their full stream. */
static void test_shared_pool_threads(void **state)
{
	enum { N = 5 };
	struct sched_pool_opts po;
	struct sched_pool *pool;
	struct consumer cs[N];
	struct stream *ref[N];
	struct spec_args a[N];

	for (int i = 0; i < N; i++) {
		a[i] = spec_default();
		a[i].epochs = "2";
		a[i].shuffle = i != 0;
		a[i].seed = (uint64_t)(i % 3);
		a[i].batch = 20 + 13 * i;
		a[i].prefetch = 1 + i % 3;
		ref[i] = run_all(&a[i], NULL, true);
	}
	sched_pool_opts_init(&po);
	po.workers = 3;
	po.pin = false;
	assert_int_equal(sched_pool_create(&po, &pool), 0);
	for (int round = 0; round < 2; round++) {
		/* round 1: pipelines 1 and 3 are stopped early while the others run */
		for (int i = 0; i < N; i++) {
			struct pl_pipeline_opts o;
			pl_pipeline_opts_init(&o);
			o.pool = pool;
			cs[i].p = create(&a[i], &o);
			cs[i].s = stream_new();
			cs[i].max = round == 1 && i % 2 ? 3 : 0;
		}
		for (int i = 0; i < N; i++)
			assert_int_equal(pthread_create(&cs[i].t, NULL, consumer_main, &cs[i]), 0);
		for (int i = 0; i < N; i++) {
			pthread_join(cs[i].t, NULL);
			if (cs[i].max)
				pl_pipeline_destroy(cs[i].p); /* the others still run */
		}
		for (int i = 0; i < N; i++) {
			if (!cs[i].max)
				pl_pipeline_destroy(cs[i].p);
			assert_stream_ok(cs[i].s);
			if (cs[i].max) {
				assert_int_equal(cs[i].s->n, cs[i].max);
				struct stream *part = cs[i].s;
				for (size_t k = 0; k < part->n; k++)
					assert_same_batch(&ref[i]->b[k], &part->b[k], k, false);
			} else {
				assert_same_batches(ref[i], 0, cs[i].s);
			}
			stream_free(cs[i].s);
		}
	}
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
	for (int i = 0; i < N; i++)
		stream_free(ref[i]);
}

/*
 * Every byte of an extent is written by the pipeline: two runs whose allocators leave different
 * garbage in fresh memory give byte-identical extents (the padding between blocks and the tail
 * included; clients see the whole extent in shared memory).
 */
static void test_extent_fully_written(void **state)
{
	struct spec_args a = spec_default();
	struct count_alloc c1, c2;
	struct pl_pipeline_opts o1, o2;

	a.shuffle = true;
	a.batch = 37;
	ca_init(&c1);
	ca_init(&c2);
	opts_with(&o1, &c1);
	opts_with(&o2, &c2);
	c2.poison = 0x5a;
	struct stream *x = run_all(&a, &o1, true);
	struct stream *y = run_all(&a, &o2, true);
	assert_same_batches_(x, 0, y, true);
	stream_free(x);
	stream_free(y);
	ca_fini(&c1);
	ca_fini(&c2);
}

/* ---- the allocator ---- */

static void test_custom_allocator(void **state)
{
	struct count_alloc c;
	struct pl_pipeline_opts o;
	struct spec_args a = spec_default();
	struct pl_batch *held[8];
	size_t n_held = 0, n = 0;
	int r;

	ca_init(&c);
	opts_with(&o, &c);
	a.shuffle = true;
	a.epochs = "2";
	a.prefetch = 3;
	a.batch = 40;
	struct pl_pipeline *p = create(&a, &o);
	for (;;) {
		struct pl_batch *b;
		r = pl_pipeline_next(p, -1, &b, NULL);
		if (r <= 0)
			break;
		n++;
		assert_true(ca_owns(&c, b->mem, b->len));
		assert_int_equal((uintptr_t)b->mem % IPC_BATCH_EXTENT_ALIGN, 0);
		/* hold a few at a time: the driver keeps going on other memory */
		held[n_held++] = b;
		if (n_held == 8 || n % 5 == 0) {
			while (n_held)
				pl_batch_release(p, held[--n_held]);
		}
	}
	assert_int_equal(r, 0);
	assert_int_equal(n, 2 * ((N_RECS + 39) / 40));
	while (n_held)
		pl_batch_release(p, held[--n_held]);
	assert_int_equal(ca_live(&c), 0);
	pl_pipeline_destroy(p);
	assert_int_equal(ca_live(&c), 0);
	assert_true(c.total_n >= n);
	assert_false(c.misuse);
	ca_fini(&c);
}

/* An allocator that runs out: the batches before come out, then -ENOMEM; nothing leaks. */
struct failing_alloc {
	struct count_alloc c;
	size_t left; /* allocations that succeed */
};

static void *fa_alloc(void *ctx, size_t len)
{
	struct failing_alloc *f = ctx;
	bool ok;

	pthread_mutex_lock(&f->c.lock);
	ok = f->left > 0;
	if (ok)
		f->left--;
	pthread_mutex_unlock(&f->c.lock);
	return ok ? ca_alloc(&f->c, len) : NULL;
}

static void fa_free(void *ctx, void *mem, size_t len)
{
	struct failing_alloc *f = ctx;
	ca_free(&f->c, mem, len);
}

static void test_allocator_out_of_memory(void **state)
{
	struct spec_args a = spec_default();
	struct failing_alloc f;
	struct pl_pipeline_opts o;

	a.batch = 20;
	a.prefetch = 3;
	for (int no_tag = 0; no_tag < 2; no_tag++) {
		ca_init(&f.c);
		f.left = 5;
		pl_pipeline_opts_init(&o);
		o.alloc = fa_alloc;
		o.free = fa_free;
		o.alloc_ctx = &f;
		a.no_tag = no_tag;
		struct pl_pipeline *p = create(&a, &o);
		struct stream *s = stream_new();
		drain(p, s, 0, false);
		if (s->bad)
			fail_msg("%s", s->why);
		assert_int_equal(s->end, -ENOMEM);
		assert_non_null(strstr(s->err.msg, "out of memory"));
		assert_int_equal(s->n, 5);
		for (size_t i = 0; i < s->n_ids; i++)
			assert_int_equal(s->ids[i], file_order_id(i));
		pl_pipeline_destroy(p);
		stream_free(s);
		assert_int_equal(ca_live(&f.c), 0);
		assert_false(f.c.misuse);
		ca_fini(&f.c);
	}
}

/* ---- timeouts ---- */

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void test_next_timeouts(void **state)
{
	struct count_alloc c;
	struct pl_pipeline_opts o;
	struct spec_args a = spec_default();
	struct io_error err = { { 0 } };
	struct pl_batch *b = NULL;
	size_t batches = 0, timeouts = 0;
	uint64_t t0;
	int r;

	ca_init(&c);
	opts_with(&o, &c);
	c.delay_us = 20000; /* each batch takes at least 20 ms */
	a.batch = 100;
	struct pl_pipeline *p = create(&a, &o);
	t0 = mono_ms();
	r = pl_pipeline_next(p, 0, &b, &err);
	assert_int_equal(r, -ETIMEDOUT);
	assert_null(b);
	assert_non_null(strstr(err.msg, "no batch within 0 ms"));
	r = pl_pipeline_next(p, 1, &b, &err);
	assert_int_equal(r, -ETIMEDOUT);
	assert_true(mono_ms() - t0 < 1000);
	for (int i = 0;; i++) {
		static const int tmo[] = { 0, 1, 3, 0, 7 };
		uint64_t t1 = mono_ms();
		r = pl_pipeline_next(p, tmo[i % 5], &b, &err);
		assert_true(mono_ms() - t1 < 2000);
		if (r == -ETIMEDOUT) {
			timeouts++;
		} else if (r == 1) {
			batches++;
			pl_batch_release(p, b);
		} else {
			break;
		}
		assert_true(mono_ms() - t0 < 60000);
	}
	assert_int_equal(r, 0);
	assert_int_equal(batches, (N_RECS + 99) / 100);
	assert_true(timeouts > 0);
	assert_int_equal(pl_pipeline_next(p, 0, &b, &err), 0);
	struct pl_stats st;
	pl_pipeline_get_stats(p, &st);
	assert_true(st.next_wait_ns > 0);
	pl_pipeline_destroy(p);
	assert_int_equal(ca_live(&c), 0);
	ca_fini(&c);
}

/* ---- delivery to a callback (opts.deliver / opts.end) ---- */

struct dl {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct pl_pipeline *p; /* set under lock once create returned */
	struct stream *s;
	pthread_t driver;
	bool driver_set, other_thread; /* every batch came on one thread, not the caller's */
	pthread_t caller;
	int ends, end_rc;
	struct io_error err;
	size_t keep; /* record at most this many batches (0: all): an endless stream outgrows the
		      * stream's id table if the destroying thread is slow to get the CPU */
	size_t seen;
};

static void dl_init(struct dl *d)
{
	memset(d, 0, sizeof(*d));
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->cond, NULL);
	d->s = stream_new();
	d->caller = pthread_self();
}

static void dl_fini(struct dl *d)
{
	stream_free(d->s);
	pthread_cond_destroy(&d->cond);
	pthread_mutex_destroy(&d->lock);
}

static void dl_deliver(void *ctx, struct pl_batch *b)
{
	struct dl *d = ctx;
	pthread_mutex_lock(&d->lock);
	if (!d->driver_set) {
		d->driver = pthread_self();
		d->driver_set = true;
	}
	if (!pthread_equal(d->driver, pthread_self()) || pthread_equal(d->caller, pthread_self()))
		d->other_thread = true;
	if (!d->keep || d->s->n < d->keep)
		stream_add(d->s, b, true);
	d->seen++;
	struct pl_pipeline *p = d->p;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
	pl_batch_release(p, b);
}

static void dl_end(void *ctx, int rc, const struct io_error *err)
{
	struct dl *d = ctx;
	pthread_mutex_lock(&d->lock);
	d->ends++;
	d->end_rc = rc;
	d->err = *err;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
}

static struct pl_pipeline *dl_create(struct dl *d, const struct spec_args *a)
{
	struct pl_pipeline_opts o;
	struct io_error err = { { 0 } };
	struct pl_spec *spec = make_spec(a);
	pl_pipeline_opts_init(&o);
	o.deliver = dl_deliver;
	o.end = dl_end;
	o.deliver_ctx = d;
	pthread_mutex_lock(&d->lock); /* the callbacks may run before create returns */
	int r = pl_pipeline_create(spec, &o, &d->p, &err);
	pthread_mutex_unlock(&d->lock);
	pl_spec_destroy(spec);
	if (r < 0)
		fail_msg("create: %s", err.msg);
	return d->p;
}

/* Wait until end was called, or (until > 0) that many batches came. */
static void dl_wait(struct dl *d, size_t until)
{
	pthread_mutex_lock(&d->lock);
	while (!d->ends && (!until || d->s->n < until))
		pthread_cond_wait(&d->cond, &d->lock);
	pthread_mutex_unlock(&d->lock);
}

/*
 * Delivered batches are the batches next() would give, in order, on the driver thread, and
 * the end comes once, last, with 0; next() refuses a delivering pipeline.
 */
static void test_deliver_stream(void **state)
{
	struct spec_args a = spec_default();
	a.epochs = "2";
	a.shuffle = true;
	a.batch = 50;
	a.parses = 3;
	struct stream *want = run_all(&a, NULL, true);
	struct dl d;
	dl_init(&d);
	struct pl_pipeline *p = dl_create(&d, &a);
	dl_wait(&d, 0);
	struct pl_batch *b = NULL;
	struct io_error err;
	assert_int_equal(pl_pipeline_next(p, 0, &b, &err), -EINVAL);
	assert_null(b);
	assert_non_null(strstr(err.msg, "callback"));
	struct pl_stats st;
	pl_pipeline_get_stats(p, &st);
	pl_pipeline_destroy(p);
	assert_int_equal(d.ends, 1);
	assert_int_equal(d.end_rc, 0);
	assert_false(d.other_thread);
	assert_stream_ok(d.s);
	assert_int_equal(d.s->n, want->n);
	assert_same_batches_(want, 0, d.s, true);
	assert_int_equal(st.batches, want->n);
	stream_free(want);
	dl_fini(&d);
}

/* An error ends a delivering stream too: the batches before it, then end with the error. */
static void test_deliver_error(void **state)
{
	char dir[PATH_MAX];
	sub_dir("deliver_missing", dir);
	assert_int_equal(make_dataset(dir, SPOIL_NO_ID, 2, 30, NULL), 0);
	struct spec_args a = spec_default();
	a.dir = dir;
	a.batch = 16;
	struct dl d;
	dl_init(&d);
	struct pl_pipeline *p = dl_create(&d, &a);
	dl_wait(&d, 0);
	pl_pipeline_destroy(p);
	assert_int_equal(d.ends, 1);
	assert_int_equal(d.end_rc, -EBADMSG);
	assert_non_null(strstr(d.err.msg, "feature \"id\""));
	assert_non_null(strstr(d.err.msg, "record 30"));
	/* file order: files 0 and 1, then 30 records of file 2; the batch holding it is not sent */
	size_t bad_pos = 250 + 300 + 30;
	assert_int_equal(d.s->n, bad_pos / 16);
	for (size_t i = 0; i < d.s->n_ids; i++)
		assert_int_equal(d.s->ids[i], file_order_id(i));
	dl_fini(&d);
}

/* Stopped by destroy while it delivers an endless stream: end says -ECANCELED, once. */
static void test_deliver_destroy(void **state)
{
	struct spec_args a = spec_default();
	a.epochs = "null";
	a.shuffle = true;
	struct dl d;
	dl_init(&d);
	d.keep = 32;
	struct pl_pipeline *p = dl_create(&d, &a);
	dl_wait(&d, 5);
	pl_pipeline_destroy(p);
	assert_int_equal(d.ends, 1);
	assert_int_equal(d.end_rc, -ECANCELED);
	assert_true(d.s->n >= 5 && d.seen >= d.s->n);
	assert_stream_ok(d.s);
	dl_fini(&d);

	/* deliver and end go together */
	struct pl_pipeline_opts o;
	struct io_error err = { { 0 } };
	struct pl_spec *spec = make_spec(&a);
	pl_pipeline_opts_init(&o);
	o.deliver = dl_deliver;
	assert_int_equal(pl_pipeline_create(spec, &o, &p, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "deliver and end"));
	pl_spec_destroy(spec);
}

/*
 * defer_start: nothing runs until pl_pipeline_start (sluiced makes its ring in between): destroyed
 * unstarted, the end callback never comes; started, the stream is whole; a second start is
 * refused.
 */
static void test_deliver_deferred_start(void **state)
{
	struct spec_args a = spec_default();
	a.batch = 50;
	struct stream *want = run_all(&a, NULL, true);
	struct pl_spec *spec = make_spec(&a);
	for (int start = 0; start < 2; start++) {
		struct dl d;
		dl_init(&d);
		struct pl_pipeline_opts o;
		struct io_error err = { { 0 } };
		pl_pipeline_opts_init(&o);
		o.deliver = dl_deliver;
		o.end = dl_end;
		o.deliver_ctx = &d;
		o.defer_start = true;
		struct pl_pipeline *p;
		assert_int_equal(pl_pipeline_create(spec, &o, &p, &err), 0);
		pthread_mutex_lock(&d.lock);
		d.p = p;
		pthread_mutex_unlock(&d.lock);
		if (start) {
			assert_int_equal(pl_pipeline_start(p, &err), 0);
			dl_wait(&d, 0);
			assert_int_equal(pl_pipeline_start(p, &err), -EALREADY);
		}
		pl_pipeline_destroy(p);
		assert_int_equal(d.ends, start); /* unstarted: not even -ECANCELED */
		if (start) {
			assert_int_equal(d.end_rc, 0);
			assert_int_equal(d.s->n, want->n);
			assert_same_batches_(want, 0, d.s, true);
		} else {
			assert_int_equal(d.s->n, 0);
		}
		dl_fini(&d);
	}
	pl_spec_destroy(spec);
	stream_free(want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_destroy_right_after_create),
		cmocka_unit_test(test_destroy_after_one_batch),
		cmocka_unit_test(test_destroy_frees_held_batches),
		cmocka_unit_test(test_destroy_with_full_queue),
		cmocka_unit_test(test_destroy_endless_blocked),
		cmocka_unit_test(test_create_destroy_loop),
		cmocka_unit_test(test_shared_pool_threads),
		cmocka_unit_test(test_extent_fully_written),
		cmocka_unit_test(test_custom_allocator),
		cmocka_unit_test(test_allocator_out_of_memory),
		cmocka_unit_test(test_next_timeouts),
		cmocka_unit_test(test_deliver_stream),
		cmocka_unit_test(test_deliver_error),
		cmocka_unit_test(test_deliver_destroy),
		cmocka_unit_test(test_deliver_deferred_start),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
