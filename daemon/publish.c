/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced's publisher: the engine's batches, in place in the ring, and where its readers are. */
#include "pipelines_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ipc/batch.h"
#include "log.h"

/*
 * The engine writes each batch straight into the ring: its allocator reserves an extent in the
 * ring's data area (waiting while readers still hold the space), and its deliver callback
 * publishes the finished batch in place, on the engine's driver thread. Nothing is copied
 * between the engine and the readers.
 *
 * Ring memory by use (docs/ring.md, "Memory"): the ring reuses freed extents, then reclaims
 * released batches, then grows its committed memory. While no reader is attached the
 * allocator neither reclaims (a reader that attaches later starts at the first batch) nor
 * grows once the ring holds anything: a pipeline nobody reads holds what its first commit
 * (--ring-commit) or its first batch takes, and waits for a reader.
 */

#define DMN_WAIT_NS 2000000 /* how long the allocator sleeps on the ring per try */
/*
 * A full ring wakes the allocator once readers released a quarter of the batches it holds, not
 * at each release: the driver then makes that many batches in a row, filling them itself (its
 * slack: assemble.c), instead of a wake-up of the driver, and of a worker, for each batch a
 * reader paced by its training step releases. Tries of DMN_WAIT_NS that time out before that
 * (lock released between them) are retried up to DMN_REFILL_TRIES times.
 */
#define DMN_REFILL_DIV	 4
#define DMN_REFILL_TRIES 8

/* ---- the engine's batch memory: extents of the ring ---- */

/*
 * Under pl->lock: say once in the log when the ring could not grow (it goes on within the
 * memory it has, waiting for releases), and once when it grew again.
 */
static void grow_report(struct dmn_pipeline *pl)
{
	struct ipc_ring_info info;

	ipc_ring_get_info(pl->ring, &info);
	if (info.commit_error && !pl->grow_failed) {
		pl->grow_failed = true;
		dmn_log("pipeline %s: the ring's memory cannot grow past %llu bytes (%s): it "
			"goes on within them, waiting for readers to release batches",
			pl->name, (unsigned long long)info.committed, strerror(-info.commit_error));
	} else if (!info.commit_error && pl->grow_failed) {
		pl->grow_failed = false;
		dmn_log("pipeline %s: the ring's memory grows again (%llu bytes)", pl->name,
			(unsigned long long)info.committed);
	}
}

/*
 * One try of waiting for want releases, called under pl->lock, which is released while it
 * sleeps (a reader's SAVE_STATE, stats or attach must not wait for the allocator's sleep):
 * how many tries in a row timed out.
 */
static unsigned wait_room(struct dmn_pipeline *pl, uint32_t want, unsigned quiet)
{
	return ipc_ring_wait_releases_unlocking(pl->ring, DMN_WAIT_NS, want, &pl->lock) ==
			       -ETIMEDOUT
		       ? quiet + 1
		       : 0;
}

static void capture_moved(struct dmn_pipeline *pl);

static void *ring_alloc(void *ctx, size_t len)
{
	struct dmn_pipeline *pl = ctx;
	uint64_t t0 = 0;
	uint32_t want = 0;  /* releases to wait for (0: not waiting yet) */
	unsigned quiet = 0; /* tries that timed out in a row */
	for (;;) {
		if (atomic_load(&pl->stop))
			return NULL;
		if (want > 1 && quiet && quiet < DMN_REFILL_TRIES) {
			/* still short of the releases waited for: wait on, without taking room */
			pthread_mutex_lock(&pl->lock);
			quiet = wait_room(pl, want, quiet);
			pthread_mutex_unlock(&pl->lock);
			continue;
		}
		pthread_mutex_lock(&pl->lock);
		struct ipc_ring_info info;
		ipc_ring_get_info(pl->ring, &info);
		/*
		 * Without readers the ring would reclaim its oldest batches to make room: hold
		 * instead, so that a reader attaching late finds the stream from its start; and
		 * hold within the memory committed so far once it holds a batch.
		 */
		bool idle = info.n_readers == 0;
		unsigned flags = 0;
		if (idle)
			flags = IPC_RING_RESERVE_NO_RECLAIM |
				(info.data_used ? IPC_RING_RESERVE_NO_GROW : 0);
		uint64_t bad = 0;
		struct ipc_ring_extent ext;
		if (!idle)
			ipc_ring_collect(pl->ring, &bad);
		int r = ipc_ring_reserve_flags(pl->ring, len, flags, &ext);
		bool hold = idle && r == -EAGAIN;
		grow_report(pl);
		if (r == 0 && pl->n_resv == pl->cap_resv) {
			size_t nc = pl->cap_resv ? pl->cap_resv * 2 : 16;
			struct dmn_resv *nr = realloc(pl->resv, nc * sizeof(*nr));
			if (!nr) {
				ipc_ring_cancel(pl->ring, &ext);
				pthread_mutex_unlock(&pl->lock);
				return NULL;
			}
			pl->resv = nr;
			pl->cap_resv = nc;
		}
		if (r == 0) {
			capture_moved(pl); /* a reserve without room may have moved one off */
			pl->resv[pl->n_resv].mem = ext.mem;
			pl->resv[pl->n_resv].ext = ext;
			pl->n_resv++;
			if (t0)
				pl->wait_ns += dmn_now_ns() - t0;
			pthread_mutex_unlock(&pl->lock);
			return ext.mem;
		}
		if (r == -EAGAIN) {
			/*
			 * The batches the engine is filling hold their extents until the driver
			 * publishes them, and the driver is here, waiting: if what is left beside
			 * them cannot hold this batch, no reader's release ever will. Say so
			 * rather than wait for ever (batches of images: prefetch x batch bytes
			 * over --pipeline-memory).
			 */
			uint64_t filling = 0;
			for (size_t i = 0; i < pl->n_resv; i++)
				filling += pl->resv[i].ext.cap;
			if (filling && info.data_size < filling + len + 4096) {
				snprintf(pl->error, sizeof(pl->error),
					 "a batch of %zu bytes does not fit the ring's %llu bytes "
					 "beside the %zu batches being filled (%llu bytes): raise "
					 "--pipeline-memory or lower num_prefetch",
					 len, (unsigned long long)info.data_size, pl->n_resv,
					 (unsigned long long)filling);
				pthread_mutex_unlock(&pl->lock);
				return NULL;
			}
		}
		if (r != -EAGAIN) {
			if (r == -E2BIG)
				snprintf(pl->error, sizeof(pl->error),
					 "a batch of %zu bytes does not fit the ring's %llu bytes "
					 "(raise "
					 "--pipeline-memory)",
					 len, (unsigned long long)info.data_size);
			else if (r == -ENOSPC || r == -ENOMEM)
				snprintf(pl->error, sizeof(pl->error),
					 "the ring's memory could not grow past %llu bytes for a "
					 "batch of %zu bytes: %s (shared memory or the memory "
					 "cgroup "
					 "is full)",
					 (unsigned long long)info.committed, len, strerror(-r));
			pthread_mutex_unlock(&pl->lock);
			return NULL;
		}
		if (!t0) {
			t0 = dmn_now_ns();
			pl->reserve_waits++;
		}
		if (!hold && dmn_groups_expire(pl)) {
			pthread_mutex_unlock(&pl->lock);
			continue;
		}
		if (hold) {
			/* nobody to free space: sleep until a reader attaches (no polling) */
			struct timespec dl;
			clock_gettime(CLOCK_REALTIME, &dl);
			dl.tv_sec += 1;
			if (!atomic_load(&pl->stop))
				pthread_cond_timedwait(&pl->attach_cond, &pl->lock, &dl);
			pthread_mutex_unlock(&pl->lock);
		} else {
			uint64_t part = (info.head - info.low) / DMN_REFILL_DIV;
			if (!want)
				want = part > 1 ? (uint32_t)part : 1;
			quiet = wait_room(pl, want, quiet);
			pthread_mutex_unlock(&pl->lock);
		}
	}
}

/* Called for published batches too (a no-op: the ring owns them now). */
static void ring_free(void *ctx, void *mem, size_t len)
{
	struct dmn_pipeline *pl = ctx;
	pthread_mutex_lock(&pl->lock);
	for (size_t i = 0; i < pl->n_resv; i++) {
		if (pl->resv[i].mem == mem) {
			ipc_ring_cancel(pl->ring, &pl->resv[i].ext);
			pl->resv[i] = pl->resv[--pl->n_resv];
			break;
		}
	}
	pthread_mutex_unlock(&pl->lock);
}

/* ---- the publisher ---- */

int dmn_publish_error(struct dmn_pipeline *pl, int code, const char *text, int tries)
{
	size_t tl = strlen(text);
	size_t len = sizeof(struct ipc_batch_hdr) + tl;
	struct ipc_ring_extent ext;
	int r = -EAGAIN;
	for (int t = 0; t < tries && r == -EAGAIN; t++) {
		uint64_t bad = 0;
		ipc_ring_collect(pl->ring, &bad);
		r = ipc_ring_reserve(pl->ring, len, &ext);
		if (r == -EAGAIN && t + 1 < tries)
			ipc_ring_wait(pl->ring, DMN_WAIT_NS);
	}
	if (r == 0) {
		struct ipc_batch_hdr *h = ext.mem;
		memset(ext.mem, 0, ext.cap);
		h->magic = IPC_BATCH_MAGIC;
		h->version = IPC_BATCH_VERSION;
		h->flags = IPC_BATCH_F_ERROR | IPC_BATCH_F_END_STREAM;
		h->error = code;
		h->total_bytes = len;
		h->msg_off = sizeof(*h);
		h->msg_len = (uint32_t)tl;
		memcpy((char *)ext.mem + sizeof(*h), text, tl);
		ipc_ring_publish(pl->ring, &ext, len, 0, h->flags, NULL);
	}
	if (r == -EAGAIN && tries == 1)
		return r;
	ipc_ring_set_error(pl->ring, code);
	return 0;
}

/* The position of a reader at ring seq cursor (the next it would take). Under pl->lock. */
int dmn_pipeline_state_at(struct dmn_pipeline *pl, uint64_t cursor, void *buf, size_t cap)
{
	const struct dmn_hist *h = cursor ? &pl->hist[(cursor - 1) % DMN_HIST] : NULL;

	if (h && h->ring_seq != cursor - 1)
		return -ENOENT; /* cannot happen: the ring holds less than the history */
	if (!pl->pl)
		return -EIDRM; /* removed: its engine is gone */
	return pl_pipeline_state_after(pl->pl, h ? &h->pos : NULL, buf, cap);
}

/*
 * Readers the lag policy just moved off: keep their position now, while the history still has
 * it (the client asks for it at its next sluice_next, which may be much later). Under pl->lock.
 */
static void capture_moved(struct dmn_pipeline *pl)
{
	struct ipc_ring_info info;
	uint64_t news, lag;

	ipc_ring_get_info(pl->ring, &info);
	news = info.moved & ~pl->moved_seen;
	while (news) {
		unsigned id = (unsigned)__builtin_ctzll(news);
		struct dmn_moved *m = &pl->moved[id];

		news &= news - 1;
		pl->moved_seen |= 1ull << id;
		m->state = malloc(PL_STATE_MAX);
		m->len = !m->state ? -ENOMEM
			 : ipc_ring_reader_lag(pl->ring, id, &lag) < 0
				 ? -ENOENT
				 : dmn_pipeline_state_at(pl, info.head - lag, m->state,
							 PL_STATE_MAX);
		int why = ipc_ring_reader_moved_why(pl->ring, id);
		if (why == IPC_RING_MOVED_CALL) {
			/* dmn_pipeline_move_reader: its caller says why */
		} else if (why == IPC_RING_MOVED_TIME) {
			dmn_log("pipeline %s: reader %u held the others back without reading for "
				"longer than its lag timeout (%llu batches behind): moved off the "
				"shared stream to catch up on its own",
				pl->name, id, (unsigned long long)lag);
		} else {
			dmn_log("pipeline %s: reader %u is %llu batches behind: moved off the "
				"shared stream to catch up on its own",
				pl->name, id, (unsigned long long)lag);
		}
	}
}

int dmn_pipeline_at_state(struct dmn_pipeline *pl, const void *state, size_t len, uint64_t max_lag,
			  bool from_head, uint64_t *ret_seq)
{
	struct ipc_ring_info info;
	uint8_t buf[PL_STATE_MAX];
	uint64_t lead, ml;

	if (!pl->ring || !pl->pl || pl->sloppy || !len || len > sizeof(buf))
		return -ENOENT;
	ipc_ring_get_info(pl->ring, &info);
	/* newest first: a reader that caught up is near head */
	for (uint64_t s = info.head + 1; s-- > info.low;) {
		int n = dmn_pipeline_state_at(pl, s, buf, sizeof(buf));

		if (n < 0 || (size_t)n != len || memcmp(buf, state, len) != 0)
			continue;
		if (from_head)
			lead = info.head;
		else if (ipc_ring_lead_cursor(pl->ring, IPC_RING_MAX_READERS, &lead) < 0)
			lead = s; /* nobody on the stream: behind nobody */
		ml = max_lag ? max_lag : info.n_slots / 2;
		if (ml >= info.n_slots)
			ml = info.n_slots - 1;
		if (lead > s && lead - s > ml)
			return -ERANGE;
		*ret_seq = s;
		return 0;
	}
	return -ENOENT;
}

int dmn_pipeline_move_reader(struct dmn_pipeline *pl, unsigned ring_id)
{
	uint64_t end;
	int r = ipc_ring_move_reader(pl->ring, ring_id, &end);

	if (r == 0)
		capture_moved(pl);
	return r;
}

void dmn_pipeline_forget_reader(struct dmn_pipeline *pl, unsigned ring_id)
{
	if (ring_id >= IPC_RING_MAX_READERS)
		return;
	free(pl->moved[ring_id].state);
	pl->moved[ring_id].state = NULL;
	pl->moved[ring_id].len = 0;
	pl->moved_seen &= ~(1ull << ring_id);
}

/* DESIGN.md §4: a refused io_uring is said once in the log (and in every pipeline's stats). */
static void log_io_engine(struct dmn_pipeline *pl)
{
	static atomic_bool said;
	struct pl_stats st;
	pl_pipeline_get_stats(pl->pl, &st);
	if (st.io_fallback && !atomic_exchange(&said, true))
		dmn_log("reading with the pread engine, not io_uring: %s", st.io_fallback);
}

/*
 * The engine's deliver callback, on its driver thread: publish the finished batch in place.
 * (Delivered rather than queued for a publisher thread: no wake-up per batch, and no
 * preemption of the driver by it.) pl->pl is set: a batch was allocated, which waited for the
 * ring, which is set after pl_pipeline_create returned.
 */
static void pub_deliver(void *ctx, struct pl_batch *b)
{
	struct dmn_pipeline *pl = ctx;
	pthread_mutex_lock(&pl->lock);
	size_t i;
	for (i = 0; i < pl->n_resv && pl->resv[i].mem != b->mem; i++)
		;
	bool first = false;
	/* stopped (removed): the server publishes the end; the extent goes back in ring_free */
	if (i < pl->n_resv && !atomic_load(&pl->stop)) {
		uint64_t rseq;
		/* restarts: the kept record's bounds cover every batch published (positions.c) */
		if (pl->keep && (b->seq >= pl->keep_bound || b->epoch >= pl->keep_epochs))
			dmn_pipeline_keep(pl, b->seq + DMN_KEEP_EVERY, b->epoch + 1);
		if (ipc_ring_publish(pl->ring, &pl->resv[i].ext, b->len, b->epoch, b->flags,
				     &rseq) == 0) {
			struct dmn_hist *h = &pl->hist[rseq % DMN_HIST];
			h->ring_seq = rseq;
			h->pos.epoch = b->epoch;
			h->pos.index_in_epoch =
				((const struct ipc_batch_hdr *)b->mem)->index_in_epoch;
			h->pos.seq = b->seq;
			h->pos.flags = b->flags;
			if (b->flags & IPC_BATCH_F_END_EPOCH) {
				pl->epoch_end[b->epoch % 2] = h->pos;
				pl->epoch_end_set[b->epoch % 2] = true;
			}
		}
		pl->resv[i] = pl->resv[--pl->n_resv];
		first = pl->published++ == 0;
		capture_moved(pl);
	}
	pthread_mutex_unlock(&pl->lock);
	pl_batch_release(pl->pl, b); /* the node only: the extent is the ring's */
	if (first)
		log_io_engine(pl);
}

/* The engine's end callback: the end of the stream, or its error, for the readers. */
static void pub_end(void *ctx, int rc, const struct io_error *err)
{
	struct dmn_pipeline *pl = ctx;
	pthread_mutex_lock(&pl->lock);
	if (atomic_load(&pl->stop)) {
		/* stopped: nobody is told */
	} else if (rc == 0) {
		ipc_ring_set_eos(pl->ring);
		pl->status = DMN_FINISHED;
		dmn_log("pipeline %s finished: %llu batches", pl->name,
			(unsigned long long)pl->published);
	} else {
		if (!pl->error[0])
			snprintf(pl->error, sizeof(pl->error), "%s", err->msg);
		dmn_publish_error(pl, rc, pl->error, 500);
		pl->status = DMN_FAILED;
		dmn_err("pipeline %s failed: %s", pl->name, pl->error);
	}
	pthread_mutex_unlock(&pl->lock);
}

void dmn_pipeline_engine_opts(struct dmn_pipeline *pl, struct pl_pipeline_opts *po)
{
	po->alloc = ring_alloc;
	po->free = ring_free;
	po->alloc_ctx = pl;
	po->deliver = pub_deliver;
	po->end = pub_end;
	po->deliver_ctx = pl;
}

uint64_t dmn_pipeline_collect(struct dmn_pipeline *pl, uint64_t lease_ns)
{
	uint64_t bad = 0;
	pthread_mutex_lock(&pl->lock);
	if (pl->ring) {
		ipc_ring_collect(pl->ring, &bad);
		ipc_ring_lease_check(pl->ring, dmn_now_ns(), lease_ns, &bad);
		if (pl->keep)
			dmn_pipeline_keep_tick(
				pl); /* its readers moved on: at most once a second */
	}
	pthread_mutex_unlock(&pl->lock);
	return bad;
}

int dmn_pipeline_state_of(struct dmn_pipeline *pl, uint64_t epoch, uint64_t index, uint64_t seq,
			  void *buf, size_t cap)
{
	pthread_mutex_lock(&pl->lock);
	int r = pl->pl ? pl_pipeline_state_of(pl->pl, epoch, index, seq, buf, cap) : -EIDRM;
	pthread_mutex_unlock(&pl->lock);
	return r;
}

int dmn_pipeline_reader_state(struct dmn_pipeline *pl, unsigned ring_id, void *buf, size_t cap)
{
	pthread_mutex_lock(&pl->lock);
	uint64_t bad = 0, lag = 0;
	struct ipc_ring_info info;
	ipc_ring_collect(pl->ring, &bad); /* its cursor as of now */
	ipc_ring_get_info(pl->ring, &info);
	int r = ipc_ring_reader_lag(pl->ring, ring_id, &lag);
	if (r == 0 && ring_id < IPC_RING_MAX_READERS && (pl->moved_seen >> ring_id & 1)) {
		const struct dmn_moved *m = &pl->moved[ring_id];
		r = m->len < 0 ? m->len : (size_t)m->len > cap ? -ENOSPC : m->len;
		if (r > 0)
			memcpy(buf, m->state, (size_t)m->len);
	} else if (r == 0) {
		r = dmn_pipeline_state_at(pl, info.head - lag, buf,
					  cap); /* head - lag: the next it takes */
	}
	pthread_mutex_unlock(&pl->lock);
	return r;
}
