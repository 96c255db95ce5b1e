/* SPDX-License-Identifier: Apache-2.0 */
/* Stage "read": a file at a time through an iox, chunks handed out as reference-counted blocks. */
#include "read.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PL_READ_POLL_MS 100

/*
 * An iox shared by a reader and the chunks still pinned by records. A reader that abandons a
 * file midway retires its iox (and starts a new one); the retired one is destroyed when its
 * last pinned chunk is released.
 */
struct pl_ioxref {
	struct iox *iox;
	size_t chunks; /* read buffers alive */
	bool retired;
	struct pl_stage_stats *st;
};

/* A chunk as a block: the block first, so that its put gets the whole back. */
struct read_buf {
	struct pl_block b;
	struct iox_chunk chunk;
	struct pl_ioxref *ix;
};

struct pl_read {
	struct pl_read_opts o;
	struct pl_ioxref *ix;
	unsigned depth;	    /* reads in flight */
	uint64_t chunk_seq; /* chunks taken so far */
	size_t chunk_len;   /* the read size of ix */
};

static void ioxref_put(struct pl_ioxref *ix)
{
	if (ix->retired && ix->chunks == 0) {
		iox_destroy(ix->iox);
		free(ix);
	}
}

static void buf_put(struct pl_block *b)
{
	struct read_buf *rb = (struct read_buf *)b;
	struct pl_ioxref *ix = rb->ix;
	iox_release(ix->iox, &rb->chunk);
	ix->chunks--;
	ix->st->buffered--;
	free(rb);
	ioxref_put(ix);
}

int pl_read_create(const struct pl_read_opts *opts, struct pl_read **ret)
{
	struct pl_read *rd = calloc(1, sizeof(*rd));
	if (!rd)
		return -ENOMEM;
	rd->o = *opts;
	rd->depth = opts->queue_depth ? opts->queue_depth : PL_READ_QUEUE_DEPTH;
	if (rd->depth > PL_READ_MAX_QUEUE_DEPTH)
		rd->depth = PL_READ_MAX_QUEUE_DEPTH;
	rd->o.st->capacity += pl_read_buffers(rd->depth);
	*ret = rd;
	return 0;
}

void pl_read_abandon(struct pl_read *rd)
{
	if (rd->ix) {
		rd->ix->retired = true;
		ioxref_put(rd->ix);
		rd->ix = NULL;
	}
}

void pl_read_destroy(struct pl_read *rd)
{
	if (!rd)
		return;
	pl_read_abandon(rd); /* the iox goes with its last pinned buffer */
	rd->o.st->capacity -= pl_read_buffers(rd->depth);
	free(rd);
}

static int make_iox(struct pl_read *rd, struct io_error *err)
{
	struct iox_opts o;
	iox_opts_init(&o);
	o.engine = rd->o.engine;
	o.queue_depth = rd->depth;
	o.max_open_files = 1;
	o.chunk_len = rd->chunk_len;
	o.num_buffers = pl_read_buffers(rd->depth);
	o.pread_threads = 1;
	o.direct = rd->o.direct;
	o.creds = rd->o.creds;
	/* buffered: pinning 21 buffers per slot at start costs more than fixed reads save */
	o.fixed_buffers = rd->o.direct;
	struct pl_ioxref *ix = calloc(1, sizeof(*ix));
	if (!ix)
		return -ENOMEM;
	int r = iox_create(&o, &ix->iox, err);
	if (r < 0) {
		free(ix);
		return r;
	}
	ix->st = rd->o.st;
	rd->ix = ix;
	struct pl_read_totals *t = rd->o.tot;
	if (!t->engine) {
		t->engine = iox_engine_name(iox_engine_used(ix->iox));
		const char *why = iox_fallback_reason(ix->iox);
		if (why) {
			snprintf(t->fallback, sizeof(t->fallback), "%s", why);
			t->have_fallback = true;
		}
	}
	return 0;
}

/*
 * Fault injection for tests (daemon/README.md): a file whose path holds SLUICED_TEST_STALL_OPEN's
 * text is never opened; the thread waits here for good, as in a read of a dead NFS server's that
 * never returns, and says so once on stderr.
 */
static void test_stall(const char *path)
{
	const char *s = getenv("SLUICED_TEST_STALL_OPEN");
	if (!s || !*s || !strstr(path, s))
		return;
	fprintf(stderr, "sluiced: test: the open of %s stalls for good (SLUICED_TEST_STALL_OPEN)\n",
		path);
	for (;;)
		pause();
}

int pl_read_open(struct pl_read *rd, const char *path, struct io_error *err)
{
	test_stall(path);
	unsigned prev = pl_prof_enter(rd->o.prof, PL_STAGE_READ);
	size_t want = rd->o.chunk_live
			      ? atomic_load_explicit(rd->o.chunk_live, memory_order_relaxed)
			      : rd->o.chunk_len;
	unsigned depth = rd->o.depth_live
				 ? atomic_load_explicit(rd->o.depth_live, memory_order_relaxed)
				 : rd->depth;
	if (depth < 1 || depth > PL_READ_MAX_QUEUE_DEPTH)
		depth = rd->depth;
	/* a new read size or depth: a new iox (the old one goes with its last pinned chunk) */
	if (rd->ix && (want != rd->chunk_len || depth != rd->depth))
		pl_read_abandon(rd);
	rd->o.st->capacity += depth; /* the stage's buffers (pl_read_buffers) */
	rd->o.st->capacity -= rd->depth;
	rd->depth = depth;
	rd->chunk_len = want;
	int r = rd->ix ? 0 : make_iox(rd, err);
	if (r == 0)
		r = iox_add_file(rd->ix->iox, path, NULL); /* >= 0: the file's number */
	if (r >= 0) {
		rd->o.st->elems_in++;
		r = 0;
	}
	pl_prof_leave(rd->o.prof, prev);
	return r;
}

/* Wait for the iox's next chunk, running idle work meanwhile: iox_next's result. */
static int next_chunk(struct pl_read *rd, bool wait, struct iox_chunk *ch, struct io_error *err)
{
	bool idle_done = !rd->o.idle; /* poll between idle work; block once there is none */
	for (;;) {
		if (rd->o.stop && atomic_load_explicit(rd->o.stop, memory_order_relaxed))
			return -ECANCELED;
		bool block = wait && idle_done;
		uint64_t t0 = 0;
		unsigned prev = 0;
		if (block) {
			prev = pl_prof_enter(rd->o.prof, PL_STAGE_IDLE_);
			t0 = pl_clock_ns(CLOCK_MONOTONIC);
		}
		int r = iox_next(rd->ix->iox, block ? PL_READ_POLL_MS : 0, ch, err);
		if (block) {
			rd->o.st->wait_up_ns += pl_clock_ns(CLOCK_MONOTONIC) - t0;
			pl_prof_leave(rd->o.prof, prev);
		}
		if (r != -ETIMEDOUT)
			return r;
		if (!wait)
			return -EAGAIN;
		if (!idle_done && rd->o.idle(rd->o.idle_ctx) <= 0)
			idle_done = true;
	}
}

int pl_read_next(struct pl_read *rd, bool wait, struct pl_chunk *ret, struct io_error *err)
{
	unsigned prev = pl_prof_enter(rd->o.prof, PL_STAGE_READ);
	struct pl_stage_stats *st = rd->o.st;
	/*
	 * Pin the next chunk only while the reader has pinned chunks to spare (PL_PIN_CHUNKS);
	 * otherwise the framer copies its records, so that reading always has buffers left. At the
	 * limit the records that pin the older half of them are moved out first (a shuffle buffer
	 * drains at random: an old chunk is held by a few stragglers, few bytes to copy).
	 */
	bool pin = rd->o.pin;
	int r = 0;
	if (pin && rd->ix->chunks >= PL_PIN_CHUNKS) {
		rd->o.tot->evacuations++;
		r = rd->o.evacuate(rd->o.evacuate_ctx, rd->ix, rd->chunk_seq - PL_PIN_CHUNKS / 2);
		pin = rd->ix->chunks < PL_PIN_CHUNKS;
	}
	struct iox_chunk ch;
	if (r == 0)
		r = next_chunk(rd, wait, &ch, err);
	if (r <= 0)
		goto out;
	if (ch.error) {
		iox_release(rd->ix->iox, &ch);
		memset(ret, 0, sizeof(*ret));
		ret->error = ch.error;
		r = 1;
		goto out;
	}
	struct read_buf *rb = calloc(1, sizeof(*rb));
	if (!rb) {
		iox_release(rd->ix->iox, &ch);
		r = -ENOMEM;
		goto out;
	}
	rb->chunk = ch;
	rb->ix = rd->ix;
	rb->b.refs = 1;
	rb->b.data = (uint8_t *)ch.data;
	rb->b.cap = ch.len;
	rb->b.put = buf_put;
	rb->b.owner = rd->ix;
	rb->b.seq = rd->chunk_seq++;
	rb->b.pin = pin;
	rd->ix->chunks++;
	st->buffered++;
	st->elems_out++;
	st->completions++;
	st->bytes_out += ch.len;
	if (ch.direct)
		rd->o.tot->direct_bytes += ch.len;
	ret->blk = &rb->b;
	ret->last = ch.last;
	ret->error = 0;
	r = 1;
out:
	pl_prof_leave(rd->o.prof, prev);
	return r;
}
