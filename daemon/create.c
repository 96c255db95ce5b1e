/* SPDX-License-Identifier: Apache-2.0 */
/* Making sluiced's pipelines: from a spec (shared by fingerprint, or new), from the config dir. */
#include "pipelines_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/file.h"
#include "log.h"

/*
 * May a reader resuming at state share pl? A broadcast reader that may join at its position
 * (q->at_position): if pl's ring holds it (dmn_pipeline_at_state). Else only if pl started at
 * that very state, and either
 * its first batch is still in the ring (a reader that attaches starts at the oldest batch the
 * ring holds) or the reader joins a group of pl that resumed there: the other members of a
 * rank or split group that resumes together (DataLoader workers, data-parallel ranks) attach
 * one after another with the same state, and the group's place is theirs.
 */
static bool shares_state(struct dmn_pipeline *pl, const struct dmn_get_req *q)
{
	struct ipc_ring_info info;
	bool member = false;

	if (q->at_position && q->mode == IPC_RING_BROADCAST && !pl->private_) {
		/* a shared stream that still holds its position, close enough to the others:
		   it joins there (dmn_join.at_state) rather than computing it all again */
		uint64_t at;
		pthread_mutex_lock(&pl->lock);
		int r = dmn_pipeline_at_state(pl, q->state, q->state_len, q->max_lag, q->from_head,
					      &at);
		pthread_mutex_unlock(&pl->lock);
		if (r == 0)
			return true;
	}
	if (pl->start_state_len != q->state_len ||
	    memcmp(pl->start_state, q->state, q->state_len) != 0)
		return false;
	pthread_mutex_lock(&pl->lock);
	ipc_ring_get_info(pl->ring, &info);
	if (q->group && q->group[0] && q->mode != IPC_RING_BROADCAST)
		member = dmn_pipeline_group_find(pl, q->group) >= 0;
	pthread_mutex_unlock(&pl->lock);
	return info.low == 0 || member;
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
		if (!q->fresh && (q->state_len ? shares_state(pl, q) : !pl->private_))
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
		    dmn_name_space(pl->owner) != dmn_name_space(g->req->owner))
			continue; /* another user's name is theirs: it takes nobody's */
		if (strcmp(pl->name, g->name) == 0) {
			snprintf(g->msg, g->msg_cap,
				 "a different pipeline is already called \"%s\"", g->name);
			return -EEXIST;
		}
	}
	return dmn_budget_admit(d, g->req->owner, g->msg, g->msg_cap);
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
	po.tune = d->cfg.autotune;
	dmn_pipeline_engine_opts(pl, &po);
	po.creds = q->creds;
	po.state = q->state;
	po.state_len = q->state_len;
	po.defer_start = true;
	po.mem = &pl->mem;
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

/* The ring the engine publishes into, made before it starts: the schema, the budget's bytes. */
static int make_ring(struct dmn_registry *d, struct get_ctx *g, struct dmn_pipeline *pl)
{
	uint64_t data_bytes = dmn_budget_ring_bytes(d, pl);
	struct ipc_ring_tensor *schema = NULL;
	struct ipc_ring_opts ro;
	ipc_ring_opts_init(&ro);
	/* what it needs from the start is reserved first: refused here, with the figures */
	int r = dmn_budget_reserve(d, pl, &data_bytes, g->msg, g->msg_cap);
	if (r == 0)
		r = make_schema(pl->pl, &schema, &ro.n_schema, g->msg, g->msg_cap);
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
	if (r == 0 && dmn_budget_attach(d, pl) < 0) {
		snprintf(msg, msg_cap, "out of memory");
		r = -ENOMEM;
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
