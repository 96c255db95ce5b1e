/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced's pipelines: one engine per distinct spec, its batches published into a ring. */
#include "registry.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "io/file.h"
#include "ipc/batch.h"
#include "log.h"
#include "pipelines_internal.h"

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

static void *ring_alloc(void *ctx, size_t len)
{
	struct dmn_pipeline *pl = ctx;
	uint64_t t0 = 0;
	for (;;) {
		if (atomic_load(&pl->stop))
			return NULL;
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
			ipc_ring_wait(pl->ring, DMN_WAIT_NS);
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
		dmn_log("pipeline %s: reader %u is %llu batches behind: moved off the shared "
			"stream to catch up on its own",
			pl->name, id, (unsigned long long)lag);
	}
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
	if (i < pl->n_resv) {
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

/* ---- registry ---- */

static bool in_group(const struct io_creds *who, uint32_t gid)
{
	if (who->gid == gid)
		return true;
	for (size_t i = 0; i < who->n_groups; i++)
		if (who->groups[i] == gid)
			return true;
	return false;
}

bool dmn_may_read(const struct dmn_pipeline *pl, const struct io_creds *who)
{
	if (!who || who->uid == 0 || pl->owner == (uid_t)-1 || pl->owner == who->uid)
		return true;
	for (size_t i = 0; i < pl->n_reader_uids; i++)
		if (pl->reader_uids[i] == (uint32_t)who->uid)
			return true;
	for (size_t i = 0; i < pl->n_reader_gids; i++)
		if (in_group(who, pl->reader_gids[i]))
			return true;
	return false;
}

/* Names belong to their owner: root's and the config dir's are the host's, one namespace. */
static uid_t name_space(uid_t owner)
{
	return owner == 0 ? (uid_t)-1 : owner;
}

struct dmn_pipeline *dmn_pipeline_find(struct dmn_registry *d, const char *name,
				       const struct io_creds *who, bool any_owner, bool *ret_hidden)
{
	uid_t mine = name_space(who ? who->uid : (uid_t)-1);
	struct dmn_pipeline *host = NULL, *other = NULL;
	bool hidden = false;
	for (struct dmn_pipeline *pl = d->pipelines; pl; pl = pl->next) {
		if (pl->private_ || strcmp(pl->name, name) != 0)
			continue;
		uid_t ns = name_space(pl->owner);
		if (ns == mine)
			return pl;
		if (!dmn_may_read(pl, who))
			hidden = true;
		else if (ns == (uid_t)-1)
			host = pl;
		else if (!other && (any_owner || mine != (uid_t)-1))
			other = pl; /* root never reaches a user's name by chance: no squatting */
	}
	if (ret_hidden)
		*ret_hidden = !host && !other && hidden;
	return host ? host : other;
}

void dmn_pipeline_drop(struct dmn_registry *d, struct dmn_pipeline *pl, const char *why)
{
	for (struct dmn_pipeline **pp = &d->pipelines; *pp; pp = &(*pp)->next) {
		if (*pp == pl) {
			*pp = pl->next;
			d->n_pipelines--;
			dmn_log("%spipeline %s %s", pl->private_ ? "private " : "", pl->name, why);
			/* a group that had moved to it is gone with it */
			for (struct dmn_pipeline *o = d->pipelines; o; o = o->next) {
				pthread_mutex_lock(&o->lock);
				for (int i = 0; i < IPC_RING_MAX_GROUPS; i++)
					if (o->groups[i].used && o->groups[i].moved_to == pl)
						o->groups[i].used = false;
				pthread_mutex_unlock(&o->lock);
			}
			/* no reader left to resume it: its record goes, once its driver (which
			   writes it) is joined */
			struct dmn_keep *keep = d->stopping ? NULL : pl->keep;
			uint8_t fp[16];
			char name[sizeof(pl->name)];
			memcpy(fp, pl->fp, 16);
			memcpy(name, pl->name, sizeof(name));
			dmn_pipeline_destroy(d, pl);
			if (keep)
				dmn_keep_forget(keep, fp, name);
			return;
		}
	}
}

void dmn_pipeline_drop_private(struct dmn_registry *d, struct dmn_pipeline *pl)
{
	dmn_pipeline_drop(d, pl,
			  pl->removed ? "dropped: its last reader is gone"
				      : "stopped: its reader is gone");
}

/* Whether pl ended and nobody reads it (the config dir's never count). Server thread. */
static bool ended_idle(struct dmn_pipeline *pl)
{
	if (pl->from_config || pl->n_readers)
		return false;
	pthread_mutex_lock(&pl->lock);
	bool ended = pl->status != DMN_RUNNING;
	pthread_mutex_unlock(&pl->lock);
	return ended;
}

void dmn_pipelines_expire(struct dmn_registry *d)
{
	uint64_t now = dmn_now_ns();
	for (struct dmn_pipeline *pl = d->pipelines, *next; pl; pl = next) {
		next = pl->next;
		if (!ended_idle(pl)) {
			pl->idle_since = 0;
		} else if (!pl->idle_since) {
			pl->idle_since = now;
		} else if (now - pl->idle_since >= d->cfg.linger_ns) {
			char why[96];
			snprintf(why, sizeof(why), "dropped: it ended and had no reader for %llu s",
				 (unsigned long long)((now - pl->idle_since) / 1000000000));
			dmn_pipeline_drop(d, pl, why);
		}
	}
}

/*
 * Room for need more ring bytes under --memory: drop ended pipelines without readers, the
 * least recently used first, until there is. Whether there is.
 */
static bool reclaim_idle(struct dmn_registry *d, uint64_t need)
{
	while (d->bytes_used + need > d->cfg.total_bytes) {
		struct dmn_pipeline *oldest = NULL;
		for (struct dmn_pipeline *pl = d->pipelines; pl; pl = pl->next)
			if (ended_idle(pl) && (!oldest || pl->last_used < oldest->last_used))
				oldest = pl;
		if (!oldest)
			return false;
		dmn_pipeline_drop(d, oldest, "dropped for memory: it ended and has no reader");
	}
	return true;
}

/*
 * May a reader resuming at state share pl? Only if pl started at that very state and its first
 * batch is still in the ring (a reader that attaches starts at the oldest batch the ring holds).
 */
static bool shares_state(struct dmn_pipeline *pl, const void *state, size_t state_len)
{
	struct ipc_ring_info info;

	if (pl->start_state_len != state_len || memcmp(pl->start_state, state, state_len) != 0)
		return false;
	pthread_mutex_lock(&pl->lock);
	ipc_ring_get_info(pl->ring, &info);
	pthread_mutex_unlock(&pl->lock);
	return info.low == 0;
}

void dmn_pipeline_destroy(struct dmn_registry *d, struct dmn_pipeline *pl)
{
	if (!pl)
		return;
	atomic_store(&pl->stop, true);
	pthread_mutex_lock(&pl->lock);
	pthread_cond_broadcast(&pl->attach_cond);
	pthread_mutex_unlock(&pl->lock);
	pl_pipeline_destroy(pl->pl); /* joins the driver, and with it the callbacks */
	ipc_ring_destroy(pl->ring);
	if (d)
		d->bytes_used -= pl->data_bytes;
	pthread_cond_destroy(&pl->attach_cond);
	pthread_mutex_destroy(&pl->lock);
	for (unsigned i = 0; i < IPC_RING_MAX_READERS; i++)
		free(pl->moved[i].state);
	free(pl->resv);
	free(pl->reader_uids);
	free(pl->reader_gids);
	if (pl->creds)
		io_creds_clear(pl->creds);
	free(pl->creds);
	free(pl->spec_json);
	free(pl->spec_dir);
	free(pl->start_state);
	free(pl->config_path);
	free(pl);
}

static int make_schema(struct pl_pipeline *p, struct ipc_ring_tensor **ret, uint32_t *ret_n,
		       char *msg, size_t cap)
{
	size_t n = pl_pipeline_n_tensors(p);
	struct ipc_ring_tensor *t = calloc(n + 1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const struct pl_tensor_info *ti = pl_pipeline_tensor(p, i);
		if (strlen(ti->name) >= IPC_RING_NAME_MAX) {
			snprintf(msg, cap, "tensor name \"%s\" is longer than %d bytes", ti->name,
				 IPC_RING_NAME_MAX - 1);
			free(t);
			return -EINVAL;
		}
		snprintf(t[i].name, sizeof(t[i].name), "%s", ti->name);
		t[i].dtype = (uint8_t)ti->dtype;
		t[i].rank = (uint8_t)ti->rank;
		t[i].ragged = ti->ragged;
		memcpy(t[i].shape, ti->shape, sizeof(t[i].shape));
	}
	*ret = t;
	*ret_n = (uint32_t)n;
	return 0;
}

/* The spec parsed, its fingerprint, and the name it is served under. */
struct get_ctx {
	const struct dmn_get_req *req;
	struct pl_spec *spec;
	uint8_t fp[16];
	char name[IPC_CTL_NAME_MAX + 1];
	bool private_;
	char *msg;
	size_t msg_cap;
};

static int parse_spec(struct get_ctx *g)
{
	struct io_error e;
	const struct dmn_get_req *q = g->req;
	int r = pl_spec_parse(q->spec, q->spec_len, q->origin, &g->spec, &e);
	if (r < 0) {
		snprintf(g->msg, g->msg_cap, "%s", e.msg);
		return r;
	}
	if (q->spec_dir && pl_spec_rebase(g->spec, q->spec_dir, strlen(q->spec_dir)) < 0) {
		snprintf(g->msg, g->msg_cap, "out of memory");
		return -ENOMEM;
	}
	r = pl_spec_fingerprint(g->spec, q->creds, g->fp, &e);
	if (r < 0) {
		snprintf(g->msg, g->msg_cap, "%s: %s", q->origin, e.msg);
		return r;
	}
	if (g->spec->name) {
		snprintf(g->name, sizeof(g->name), "%s", g->spec->name);
	} else {
		uint64_t h;
		memcpy(&h, g->fp, 8);
		snprintf(g->name, sizeof(g->name), "fp-%016llx", (unsigned long long)h);
	}
	return 0;
}

/*
 * A running pipeline of the same computation to share, or NULL. With a saved state it must
 * have started at that very state; when one of the fingerprint runs from elsewhere, the new
 * one is private (g->private_), named NAME@N.
 */
static struct dmn_pipeline *find_shared(struct dmn_registry *d, struct get_ctx *g)
{
	const struct dmn_get_req *q = g->req;
	for (struct dmn_pipeline *pl = d->pipelines; pl; pl = pl->next) {
		if (memcmp(pl->fp, g->fp, 16) != 0 || pl->removed)
			continue; /* a removed one's engine is gone: nobody joins it */
		/* read with rights the asker has, or was granted: else one of its own */
		if (q->owner == (uid_t)-1 ? pl->owner != (uid_t)-1 : !dmn_may_read(pl, q->creds))
			continue;
		if (!q->fresh &&
		    (q->state_len ? shares_state(pl, q->state, q->state_len) : !pl->private_))
			return pl;
		if (q->state_len || q->fresh)
			g->private_ = true; /* it runs, but not from where this reader resumes */
	}
	if (g->private_) {
		size_t len = strlen(g->name);
		char sfx[32];
		int n = snprintf(sfx, sizeof(sfx), "@%llu",
				 (unsigned long long)++d->next_private_id);
		if (len + (size_t)n > IPC_CTL_NAME_MAX)
			len = IPC_CTL_NAME_MAX - (size_t)n;
		snprintf(g->name + len, sizeof(g->name) - len, "%s", sfx);
	}
	return NULL;
}

/* The name is free, and the daemon's limits allow one more pipeline. */
static int check_room(struct dmn_registry *d, struct get_ctx *g)
{
	for (struct dmn_pipeline *pl = d->pipelines; pl; pl = pl->next) {
		if (pl->private_ || memcmp(pl->fp, g->fp, 16) == 0 ||
		    name_space(pl->owner) != name_space(g->req->owner))
			continue; /* another user's name is theirs: it takes nobody's */
		if (strcmp(pl->name, g->name) == 0) {
			snprintf(g->msg, g->msg_cap,
				 "a different pipeline is already called \"%s\"", g->name);
			return -EEXIST;
		}
	}
	if (d->cfg.max_pipelines && d->n_pipelines >= d->cfg.max_pipelines) {
		snprintf(g->msg, g->msg_cap, "sluiced runs its limit of %u pipelines",
			 d->cfg.max_pipelines);
		return -EUSERS;
	}
	if (g->req->owner != 0 && g->req->owner != (uid_t)-1 &&
	    (d->cfg.user_pipelines || d->cfg.user_bytes)) {
		unsigned n = 0;
		uint64_t bytes = 0;
		for (struct dmn_pipeline *pl = d->pipelines; pl; pl = pl->next) {
			if (pl->owner == g->req->owner && !ended_idle(pl)) {
				n++;
				bytes += pl->data_bytes;
			}
		}
		if ((d->cfg.user_pipelines && n >= d->cfg.user_pipelines) ||
		    (d->cfg.user_bytes && bytes + d->cfg.pipeline_bytes > d->cfg.user_bytes)) {
			snprintf(g->msg, g->msg_cap,
				 "uid %u's quota: it runs %u pipelines of %u and holds %llu of "
				 "%llu "
				 "bytes, a pipeline takes %llu (--user-pipelines, --user-memory)",
				 (unsigned)g->req->owner, n, d->cfg.user_pipelines,
				 (unsigned long long)bytes, (unsigned long long)d->cfg.user_bytes,
				 (unsigned long long)d->cfg.pipeline_bytes);
			return -EDQUOT;
		}
	}
	if (!reclaim_idle(d, d->cfg.pipeline_bytes)) {
		snprintf(g->msg, g->msg_cap,
			 "memory budget: %llu of %llu bytes in use, a pipeline takes %llu "
			 "(--memory, --pipeline-memory)",
			 (unsigned long long)d->bytes_used, (unsigned long long)d->cfg.total_bytes,
			 (unsigned long long)d->cfg.pipeline_bytes);
		return -ENOSPC;
	}
	return 0;
}

/* A copy of the n ids (none: NULL); false when out of memory. */
static bool ids_dup(const uint32_t *ids, size_t n, uint32_t **ret, size_t *ret_n)
{
	if (!n)
		return true;
	*ret = malloc(n * sizeof(*ids));
	if (!*ret)
		return false;
	memcpy(*ret, ids, n * sizeof(*ids));
	*ret_n = n;
	return true;
}

/* A new struct dmn_pipeline for the request (not started), or NULL (out of memory). */
static struct dmn_pipeline *pipeline_new(const struct get_ctx *g)
{
	const struct dmn_get_req *q = g->req;
	struct dmn_pipeline *pl = calloc(1, sizeof(*pl));
	if (!pl)
		return NULL;
	snprintf(pl->name, sizeof(pl->name), "%s", g->name);
	memcpy(pl->fp, g->fp, 16);
	pl->owner = q->owner;
	if (q->creds && (pl->creds = calloc(1, sizeof(*pl->creds))) != NULL &&
	    io_creds_copy(pl->creds, q->creds) < 0) {
		free(pl->creds);
		pl->creds = NULL;
	}
	pl->mode = q->mode;
	pl->rank_n = q->rank_n;
	pl->epochs = g->spec->epochs == PL_NULL ? -1 : g->spec->epochs;
	pl->shard_index = g->spec->has_shard ? g->spec->shard_index : 0;
	pl->shard_count = g->spec->has_shard ? g->spec->shard_count : 1;
	/* the ring's group 0 reads in the mode the pipeline was started for */
	pl->bcast_gid = q->mode == IPC_RING_BROADCAST ? 0 : -1;
	if (q->mode != IPC_RING_BROADCAST) {
		pl->groups[0] = (struct dmn_group){
			.gid = 0, .mode = q->mode, .rank_n = q->rank_n, .used = true
		};
		snprintf(pl->groups[0].name, sizeof(pl->groups[0].name), "%s",
			 q->group ? q->group : "");
	}
	pl->private_ = g->private_;
	pl->last_used = pl->started_ns = dmn_now_ns();
	bool ids_ok = ids_dup(g->spec->reader_uids, g->spec->n_reader_uids, &pl->reader_uids,
			      &pl->n_reader_uids) &&
		      ids_dup(g->spec->reader_gids, g->spec->n_reader_gids, &pl->reader_gids,
			      &pl->n_reader_gids);
	pthread_mutex_init(&pl->lock, NULL);
	pthread_cond_init(&pl->attach_cond, NULL);
	atomic_init(&pl->stop, false);
	pl->spec_json = strndup(q->spec, q->spec_len);
	pl->spec_dir = q->spec_dir ? strdup(q->spec_dir) : NULL;
	if (q->state_len && (pl->start_state = malloc(q->state_len)) != NULL) {
		memcpy(pl->start_state, q->state, q->state_len);
		pl->start_state_len = q->state_len;
	}
	if (!ids_ok || (q->creds && !pl->creds) || !pl->spec_json ||
	    (q->spec_dir && !pl->spec_dir) || (q->state_len && !pl->start_state)) {
		dmn_pipeline_destroy(NULL, pl);
		return NULL;
	}
	return pl;
}

/*
 * Make the engine, its batches to be published into pl's ring from its driver thread. It starts
 * once the ring exists (run_engine): its allocator and its end callback need the ring, and an
 * error before its first batch (a bad first record) would otherwise end it before there is a
 * ring to tell the readers in.
 */
static int make_engine(struct dmn_registry *d, struct get_ctx *g, struct dmn_pipeline *pl)
{
	const struct dmn_get_req *q = g->req;
	struct pl_pipeline_opts po;
	pl_pipeline_opts_init(&po);
	po.pool = d->pool;
	po.direct = d->cfg.direct_io;
	po.cache = d->cache;
	po.cache_uncompressed = d->cfg.cache_uncompressed;
	po.alloc = ring_alloc;
	po.free = ring_free;
	po.alloc_ctx = pl;
	po.deliver = pub_deliver;
	po.end = pub_end;
	po.deliver_ctx = pl;
	po.creds = q->creds;
	po.state = q->state;
	po.state_len = q->state_len;
	po.defer_start = true;
	struct io_error e;
	int r = pl_pipeline_create(g->spec, &po, &pl->pl, &e);
	if (r < 0)
		snprintf(g->msg, g->msg_cap, "%s: %s", q->origin, e.msg);
	return r;
}

static int run_engine(struct get_ctx *g, struct dmn_pipeline *pl)
{
	struct io_error e;
	int r = pl_pipeline_start(pl->pl, &e);
	if (r < 0)
		snprintf(g->msg, g->msg_cap, "%s: %s", g->req->origin, e.msg);
	return r;
}

/*
 * The ring's data bytes: --pipeline-memory, or more when the engine's batches have a known size
 * and num_prefetch + 2 of them (those being filled, one being read) need more — a batch of 256
 * float32 ImageNet images is 154 MB — as long as --memory has room for it. Memory is committed
 * as batches use it (docs/ring.md), so a larger ring costs only what it holds.
 */
static uint64_t ring_bytes(const struct dmn_registry *d, const struct dmn_pipeline *pl)
{
	unsigned prefetch = 0;
	uint64_t batch = pl_pipeline_batch_bytes(pl->pl, &prefetch);
	uint64_t want = batch * (prefetch + 2);
	want = (want + (1u << 20) - 1) & ~(uint64_t)((1u << 20) - 1);
	if (batch == 0 || want <= d->cfg.pipeline_bytes ||
	    d->bytes_used + want > d->cfg.total_bytes)
		return d->cfg.pipeline_bytes; /* an unknown size, or no room: the engine will say */
	dmn_log("pipeline %s: a ring of %llu bytes for %u + 2 batches of %llu bytes (over "
		"--pipeline-memory %llu)",
		pl->name, (unsigned long long)want, prefetch, (unsigned long long)batch,
		(unsigned long long)d->cfg.pipeline_bytes);
	return want;
}

/* The ring the engine publishes into, made before it starts: the schema, the budget's bytes. */
static int make_ring(struct dmn_registry *d, struct get_ctx *g, struct dmn_pipeline *pl)
{
	uint64_t data_bytes = ring_bytes(d, pl);
	struct ipc_ring_tensor *schema = NULL;
	struct ipc_ring_opts ro;
	ipc_ring_opts_init(&ro);
	int r = make_schema(pl->pl, &schema, &ro.n_schema, g->msg, g->msg_cap);
	if (r == 0) {
		char rname[IPC_CTL_NAME_MAX + 16];
		snprintf(rname, sizeof(rname), "sluice:%s", pl->name);
		ro.schema = schema;
		ro.data_bytes = data_bytes;
		ro.commit_bytes = d->cfg.ring_commit;
		ro.commit_limit = d->cfg.ring_commit_limit;
		ro.n_slots = d->cfg.ring_slots;
		ro.mode = pl->mode;
		ro.rank_n = pl->mode == IPC_RING_RANK ? pl->rank_n : 0;
		ro.name = rname;
		struct ipc_ring *ring;
		r = ipc_ring_create(&ro, &ring, g->msg, g->msg_cap);
		pthread_mutex_lock(&pl->lock);
		pl->ring = r == 0 ? ring : NULL;
		pthread_mutex_unlock(&pl->lock);
	}
	free(schema);
	if (r == 0)
		pl->data_bytes = data_bytes;
	return r;
}

int dmn_pipeline_get(struct dmn_registry *d, const struct dmn_get_req *req,
		     struct dmn_pipeline **ret_pl, bool *ret_created, char *msg, size_t msg_cap)
{
	struct get_ctx g = { .req = req, .msg = msg, .msg_cap = msg_cap };
	struct dmn_pipeline *pl = NULL;
	int r = parse_spec(&g);
	if (r == 0 && (pl = find_shared(d, &g)) != NULL) { /* the same computation: share it */
		pl_spec_destroy(g.spec);
		*ret_pl = pl;
		*ret_created = false;
		return 0;
	}
	if (r == 0)
		r = check_room(d, &g);
	if (r == 0 && !(pl = pipeline_new(&g))) {
		snprintf(msg, msg_cap, "out of memory");
		r = -ENOMEM;
	}
	if (r == 0) { /* before the engine runs: its first batch writes the record */
		pl->keep = d->keep.dir ? &d->keep : NULL;
		pl->sloppy = g.spec->sloppy_interleave;
	}
	if (r == 0)
		r = make_engine(d, &g, pl);
	pl_spec_destroy(g.spec);
	if (r == 0)
		r = make_ring(d, &g, pl);
	if (r == 0)
		r = run_engine(&g, pl);
	if (r < 0) {
		dmn_pipeline_destroy(NULL, pl);
		return r;
	}
	d->bytes_used += pl->data_bytes;
	pl->next = d->pipelines;
	d->pipelines = pl;
	d->n_pipelines++;
	*ret_pl = pl;
	*ret_created = true;
	return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

/*
 * Every DIR/NAME.json is a pipeline spec, started now (broadcast) and readable by every client
 * that may connect. A bad spec is logged and skipped: the others and the daemon go on.
 */
int dmn_load_config_dir(struct dmn_registry *d, char *msg, size_t msg_cap)
{
	struct dirent **ents;
	int n = scandir(d->cfg.config_dir, &ents, NULL, by_name);
	if (n < 0) {
		snprintf(msg, msg_cap, "%s: %s", d->cfg.config_dir, strerror(errno));
		return -errno;
	}
	/* a spec file's relative paths are relative to its directory, as everywhere */
	char *dir = realpath(d->cfg.config_dir, NULL);
	for (int i = 0; i < n; i++) {
		const char *nm = ents[i]->d_name;
		size_t l = strlen(nm);
		if (nm[0] != '.' && l > 5 && strcmp(nm + l - 5, ".json") == 0) {
			char path[4096], *text = NULL, emsg[4096 + 1024];
			size_t len = 0;
			snprintf(path, sizeof(path), "%s/%s", d->cfg.config_dir, nm);
			struct io_error e;
			int r = io_file_read(path, DMN_MAX_SPEC_BYTES, &text, &len, &e);
			struct dmn_pipeline *pl;
			bool created;
			struct dmn_get_req req = { .spec = text,
						   .spec_len = len,
						   .origin = path,
						   .spec_dir = dir,
						   .owner = (uid_t)-1,
						   .mode = IPC_RING_BROADCAST };
			if (r == 0)
				r = dmn_pipeline_get(d, &req, &pl, &created, emsg, sizeof(emsg));
			else
				snprintf(emsg, sizeof(emsg), "%s", e.msg);
			if (r == 0) {
				pl->from_config = true;
				free(pl->config_path);
				pl->config_path = strdup(path); /* SIGHUP: dmn_reload_config_dir */
				dmn_log("pipeline %s from %s", pl->name, path);
			} else {
				dmn_warn("skipped: %s", emsg);
			}
			free(text);
		}
		free(ents[i]);
	}
	free(ents);
	free(dir);
	return 0;
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
