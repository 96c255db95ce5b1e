/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced's budgets: --memory, --max-pipelines, the per-user quotas, --linger. */
#include "pipelines_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "daemon/pipeline/cache.h"
#include "log.h"

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
	dmn_keep_expire(&d->keep, now, d->cfg.linger_ns); /* orphaned private pipelines' records */
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
 * Room for need more bytes under --memory: evict the record cache's unread entries, then drop
 * ended pipelines without readers, the least recently used first, until there is. Whether
 * there is.
 */
static bool reclaim_idle(struct dmn_registry *d, uint64_t need)
{
	for (uint64_t used; (used = dmn_budget_used(d)) + need > d->cfg.total_bytes;) {
		/* the cache's unread entries first (a pipeline dropped may leave more of them) */
		if (d->cache && pl_cache_reclaim(d->cache, used + need - d->cfg.total_bytes))
			continue;
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
 * Fair shares (docs/security.md, "Shares"): what users other than root may not take, so that
 * root and the config dir's pipelines always find room: an eighth of --memory (at least one
 * pipeline's) and of --max-pipelines (at least one).
 */
static uint64_t reserve_bytes(const struct dmn_registry *d)
{
	uint64_t r = d->cfg.total_bytes / 8;
	return r > d->cfg.pipeline_bytes ? r : d->cfg.pipeline_bytes;
}

static unsigned reserve_pipelines(const struct dmn_registry *d)
{
	unsigned r = d->cfg.max_pipelines / 8;
	return r > 1 ? r : 1;
}

/* For a refusal: what the record cache holds that it could not give back (entries being read). */
static const char *cache_held(struct dmn_registry *d, char *buf, size_t cap)
{
	uint64_t n = d->cache ? pl_mem_used(&d->cache_mem) : 0;
	if (!n)
		return "";
	snprintf(buf, cap, " (%llu of them the record cache's, read by running pipelines)",
		 (unsigned long long)n);
	return buf;
}

int dmn_budget_admit(struct dmn_registry *d, uid_t owner, char *msg, size_t msg_cap)
{
	bool user = owner != 0 && owner != (uid_t)-1; /* root and the config dir's: not */
	if (d->cfg.max_pipelines && d->n_pipelines >= d->cfg.max_pipelines) {
		snprintf(msg, msg_cap, "sluiced runs its limit of %u pipelines",
			 d->cfg.max_pipelines);
		return -EUSERS;
	}
	unsigned n = 0;
	uint64_t bytes = 0;
	if (user) {
		for (struct dmn_pipeline *pl = d->pipelines; pl; pl = pl->next) {
			if (pl->owner == owner && !ended_idle(pl)) {
				n++;
				bytes += pl_mem_floor(&pl->mem); /* its reservation */
			}
		}
	}
	if (user && (d->cfg.user_pipelines || d->cfg.user_bytes)) {
		if ((d->cfg.user_pipelines && n >= d->cfg.user_pipelines) ||
		    (d->cfg.user_bytes && bytes + d->cfg.pipeline_bytes > d->cfg.user_bytes)) {
			snprintf(msg, msg_cap,
				 "uid %u's quota: it runs %u pipelines of %u and holds %llu of "
				 "%llu "
				 "bytes, a pipeline takes %llu (--user-pipelines, --user-memory)",
				 (unsigned)owner, n, d->cfg.user_pipelines,
				 (unsigned long long)bytes, (unsigned long long)d->cfg.user_bytes,
				 (unsigned long long)d->cfg.pipeline_bytes);
			return -EDQUOT;
		}
	}
	if (user && d->cfg.max_pipelines) {
		/*
		 * A uid that runs nothing may take what users may have; one that runs some, at
		 * most half of what is left to them: others who come later find room.
		 */
		unsigned left = d->cfg.max_pipelines - d->n_pipelines;
		unsigned res = reserve_pipelines(d);
		unsigned avail = left > res ? left - res : 0;
		if (avail < (n ? 2u : 1u)) {
			snprintf(msg, msg_cap,
				 "uid %u's fair share: %u of sluiced's %u pipelines are free, %u "
				 "of "
				 "them kept for root and the config dir; a uid that runs some (it "
				 "runs %u) may take at most half of the rest (--max-pipelines)",
				 (unsigned)owner, left, d->cfg.max_pipelines, res, n);
			return -EDQUOT;
		}
	}
	char held[96];
	if (!reclaim_idle(d, d->cfg.pipeline_bytes)) {
		snprintf(msg, msg_cap,
			 "memory budget: %llu of %llu bytes in use%s, a pipeline takes %llu "
			 "(--memory, --pipeline-memory)",
			 (unsigned long long)dmn_budget_used(d),
			 (unsigned long long)d->cfg.total_bytes, cache_held(d, held, sizeof(held)),
			 (unsigned long long)d->cfg.pipeline_bytes);
		return -ENOSPC;
	}
	if (user) {
		/*
		 * What is free past the reserve must hold the pipeline (twice it, for a uid that
		 * holds some: it takes at most half), dropping ended idle ones if need be.
		 */
		uint64_t need = d->cfg.pipeline_bytes, res = reserve_bytes(d);
		if (!reclaim_idle(d, res + (n ? 2 * need : need))) {
			snprintf(msg, msg_cap,
				 "uid %u's fair share: %llu of %llu bytes are free%s, %llu of "
				 "them kept for root and the config dir; a pipeline takes %llu, "
				 "and a uid that holds some (it holds %llu) may take at most half "
				 "of the rest (--memory)",
				 (unsigned)owner,
				 (unsigned long long)(d->cfg.total_bytes - dmn_budget_used(d)),
				 (unsigned long long)d->cfg.total_bytes,
				 cache_held(d, held, sizeof(held)), (unsigned long long)res,
				 (unsigned long long)need, (unsigned long long)bytes);
			return -EDQUOT;
		}
	}
	return 0;
}

/*
 * The ring's data bytes: --pipeline-memory, or more when the engine's batches have a known size
 * and num_prefetch + 2 of them (those being filled, one being read) need more — a batch of 256
 * float32 ImageNet images is 154 MB — as long as --memory has room for it. Memory is committed
 * as batches use it (docs/ring.md), so a larger ring costs only what it holds.
 */
uint64_t dmn_budget_ring_bytes(struct dmn_registry *d, const struct dmn_pipeline *pl)
{
	unsigned prefetch = 0;
	uint64_t batch = pl_pipeline_batch_bytes(pl->pl, &prefetch);
	uint64_t want = batch * (prefetch + 2);
	want = (want + (1u << 20) - 1) & ~(uint64_t)((1u << 20) - 1);
	uint64_t spare = d->cache ? pl_cache_reclaimable(d->cache) : 0; /* it goes first */
	if (batch == 0 || want <= d->cfg.pipeline_bytes ||
	    dmn_budget_used(d) + want > d->cfg.total_bytes + spare)
		return d->cfg.pipeline_bytes; /* an unknown size, or no room: the engine will say */
	dmn_log("pipeline %s: a ring of %llu bytes for %u + 2 batches of %llu bytes (over "
		"--pipeline-memory %llu)",
		pl->name, (unsigned long long)want, prefetch, (unsigned long long)batch,
		(unsigned long long)d->cfg.pipeline_bytes);
	return want;
}

void dmn_budget_init(struct dmn_registry *d)
{
	pl_mem_init(&d->mem, NULL, d->cfg.total_bytes, "sluiced's --memory");
}

static uint64_t reclaim_cache(void *ctx, uint64_t need)
{
	return pl_cache_reclaim(ctx, need);
}

int dmn_budget_cache(struct dmn_registry *d)
{
	if (!d->cfg.cache_bytes)
		return 0;
	int r = pl_cache_create(d->cfg.cache_bytes, &d->cache);
	if (r < 0)
		return r;
	pl_mem_init(&d->cache_mem, &d->mem, 0, "the record cache");
	d->cache_mem.no_reclaim = true; /* it evicts for itself, under its own lock */
	pl_cache_set_account(d->cache, &d->cache_mem);
	d->mem.reclaim = reclaim_cache;
	d->mem.reclaim_ctx = d->cache;
	return 0;
}

void dmn_budget_fini(struct dmn_registry *d)
{
	if (d->cache) {
		pl_cache_destroy(d->cache); /* every pipeline that read it is gone */
		d->cache = NULL;
		d->mem.reclaim = NULL;
		pl_mem_fini(&d->cache_mem);
	}
	while (d->umems) {
		struct dmn_umem *u = d->umems;
		d->umems = u->next;
		pl_mem_fini(&u->m);
		free(u);
	}
	pl_mem_fini(&d->mem);
}

uint64_t dmn_budget_used(struct dmn_registry *d)
{
	return pl_mem_held(&d->mem);
}

/* uid's account (made at its first pipeline), or NULL when out of memory. */
static struct pl_mem *user_account(struct dmn_registry *d, uid_t uid)
{
	for (struct dmn_umem *u = d->umems; u; u = u->next)
		if (u->uid == uid)
			return &u->m;
	struct dmn_umem *u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	char what[64];
	snprintf(what, sizeof(what), "uid %u's --user-memory", (unsigned)uid);
	u->uid = uid;
	pl_mem_init(&u->m, &d->mem, d->cfg.user_bytes, what);
	/* what users leave to root and the config dir (docs/security.md, "Shares") */
	u->m.leave = reserve_bytes(d);
	u->next = d->umems;
	d->umems = u;
	return &u->m;
}

int dmn_budget_attach(struct dmn_registry *d, struct dmn_pipeline *pl)
{
	bool user = pl->owner != 0 && pl->owner != (uid_t)-1;
	struct pl_mem *parent = user ? user_account(d, pl->owner) : &d->mem;
	if (!parent)
		return -ENOMEM;
	/* the settings as they are (a test changes them; sluiced's are fixed at its start) */
	pl_mem_set_limit(&d->mem, d->cfg.total_bytes, 0);
	if (user)
		pl_mem_set_limit(parent, d->cfg.user_bytes, reserve_bytes(d));
	char what[IPC_CTL_NAME_MAX + 48];
	snprintf(what, sizeof(what), "pipeline %s's args.ram_budget", pl->name);
	pl_mem_init(&pl->mem, parent, 0, what);
	pl->mem_open = true;
	return 0;
}

int dmn_budget_reserve(struct dmn_registry *d, struct dmn_pipeline *pl, uint64_t *ret_data_bytes,
		       char *msg, size_t msg_cap)
{
	struct pl_mem_need need = { 0 };
	int64_t budget = 0;
	if (pl->pl) {
		pl_pipeline_mem_need(pl->pl, &need);
		budget = pl_pipeline_ram_budget(pl->pl);
	}
	/*
	 * --pipeline-memory is what a pipeline takes: its engine's fixed needs first, its ring
	 * the rest, while that leaves the ring at least half (docs/security.md, "Memory"); a
	 * ring sized for its batches, or an engine that needs more, takes what it needs on top.
	 */
	uint64_t data_bytes = *ret_data_bytes;
	need.total = (need.total + 4095) & ~(uint64_t)4095; /* a ring is whole pages */
	if (data_bytes == d->cfg.pipeline_bytes && need.total <= data_bytes / 2)
		data_bytes -= need.total;
	*ret_data_bytes = data_bytes;
	/* args.ram_budget bounds what the engine holds; the ring is sluiced's to size */
	if (budget > 0)
		pl_mem_set_limit(&pl->mem, data_bytes + (uint64_t)budget, 0);
	uint64_t floor = data_bytes + need.total;
	struct pl_mem_full f;
	int r = pl_mem_set_floor(&pl->mem, floor, &f);
	if (r < 0 && f.at == &d->mem && reclaim_idle(d, f.ask))
		r = pl_mem_set_floor(&pl->mem, floor, &f); /* idle ones dropped for it */
	if (r == 0 && (r = pl_mem_charge(&pl->mem, data_bytes, &f)) == 0) { /* within the floor */
		pl->mem_need = need.total;
		pl->data_bytes = data_bytes;
		return 0;
	}
	char fig[256];
	pl_mem_full_text(&f, fig, sizeof(fig));
	snprintf(msg, msg_cap,
		 "pipeline %s needs %llu bytes from its start: a ring of %llu (--pipeline-memory), "
		 "read buffers of %llu (%u readers x %u buffers x %zu bytes: num_parallel_reads, "
		 "cycle_length, num_read_buffer_bytes) and shuffle slots of %llu "
		 "(num_shuffle_buffer_elements); %s",
		 pl->name, (unsigned long long)floor, (unsigned long long)data_bytes,
		 (unsigned long long)need.read_bytes, need.cycle, need.buffers, need.chunk,
		 (unsigned long long)need.slot_bytes, fig);
	return f.at == &d->mem || f.at == &pl->mem ? -ENOSPC : -EDQUOT; /* else a uid's */
}

void dmn_budget_close(struct dmn_pipeline *pl)
{
	if (!pl->mem_open)
		return;
	pl_mem_uncharge(&pl->mem, pl->data_bytes);
	uint64_t left = pl_mem_fini(&pl->mem);
	if (left)
		dmn_warn("pipeline %s: %llu bytes charged to its memory account were not given "
			 "back (a leak)",
			 pl->name, (unsigned long long)left);
	pl->mem_open = false;
}
