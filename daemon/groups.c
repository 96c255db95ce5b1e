/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced's consumer groups: readers join and leave a ring in groups, late or elastic. */
#include "pipelines_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

static const char *mode_word(enum ipc_ring_mode m)
{
	return m == IPC_RING_SPLIT ? "split" : m == IPC_RING_RANK ? "rank" : "broadcast";
}

int dmn_pipeline_group_find(const struct dmn_pipeline *pl, const char *name)
{
	for (int i = 0; i < IPC_RING_MAX_GROUPS; i++)
		if (pl->groups[i].used && strcmp(pl->groups[i].name, name) == 0)
			return i;
	return -1;
}

/* Open a split/rank group of the ring for the first member of group name: its index, or -errno. */
static int group_open(struct dmn_pipeline *pl, const char *name, const struct dmn_join *j,
		      char *msg, size_t cap)
{
	int i;
	unsigned gid;
	for (i = 0; i < IPC_RING_MAX_GROUPS && pl->groups[i].used; i++)
		;
	int r = i < IPC_RING_MAX_GROUPS
			? ipc_ring_group_open(pl->ring, j->mode, j->rank_n, 2, 0, &gid)
			: -ENOSPC;
	if (r < 0) {
		snprintf(msg, cap, "pipeline \"%s\": %s", pl->name,
			 r == -ENOSPC ? "it serves its limit of consumer groups" : strerror(-r));
		return r;
	}
	struct dmn_group *g = &pl->groups[i];
	memset(g, 0, sizeof(*g));
	snprintf(g->name, sizeof(g->name), "%s", name);
	g->first_epoch = j->first_epoch;
	g->gid = gid;
	g->mode = j->mode;
	g->rank_n = j->mode == IPC_RING_RANK ? j->rank_n : 0;
	g->used = true;
	return i;
}

/* Close pl->groups[i]: what it had not handed out is given up. Under pl->lock. */
static void group_close(struct dmn_pipeline *pl, int i)
{
	ipc_ring_group_close(pl->ring, pl->groups[i].gid);
	pl->groups[i].used = false;
}

/*
 * The producer waits for room while readers are attached: close the groups that have had no
 * member for DMN_GROUP_GRACE_NS, so that an abandoned group does not hold the others back.
 * Returns whether one was closed. Under pl->lock.
 */
bool dmn_groups_expire(struct dmn_pipeline *pl)
{
	uint64_t now = dmn_now_ns();
	bool closed = false;
	for (int i = 0; i < IPC_RING_MAX_GROUPS; i++) {
		struct dmn_group *g = &pl->groups[i];
		if (!g->used || g->members || !g->empty_since ||
		    now - g->empty_since < DMN_GROUP_GRACE_NS)
			continue;
		dmn_log("pipeline %s: %s%s%s (%s) had no member for %llu s while the ring was "
			"full: "
			"closed, what it had not handed out is given up",
			pl->name, g->name[0] ? "group \"" : "the default group", g->name,
			g->name[0] ? "\"" : "", mode_word(g->mode),
			(unsigned long long)((now - g->empty_since) / 1000000000ull));
		group_close(pl, i);
		closed = true;
	}
	return closed;
}

/* The epoch after the one being published now (0 before the first batch). */
static uint64_t next_epoch(const struct dmn_pipeline *pl)
{
	struct ipc_ring_info info;
	ipc_ring_get_info(pl->ring, &info);
	if (info.head == 0)
		return 0;
	const struct dmn_hist *h = &pl->hist[(info.head - 1) % DMN_HIST];
	return h->pos.epoch + 1;
}

int dmn_pipeline_join(struct dmn_pipeline *pl, const struct dmn_join *j, unsigned *ret_ring_id,
		      int *ret_group, int *ret_cb_fd, char *msg, size_t msg_cap)
{
	const char *name = j->group ? j->group : "";
	int r;
	if (j->mode == IPC_RING_BROADCAST) {
		if (name[0]) {
			snprintf(msg, msg_cap,
				 "group \"%s\": a broadcast reader is a group of its own; a named "
				 "group reads in split or rank mode",
				 name);
			return -EINVAL;
		}
		if (pl->bcast_gid < 0) {
			unsigned gid;
			r = ipc_ring_group_open(pl->ring, IPC_RING_BROADCAST, 0, 0, 0, &gid);
			if (r < 0) {
				snprintf(msg, msg_cap, "pipeline \"%s\": %s", pl->name,
					 r == -ENOSPC ? "it serves its limit of consumer groups"
						      : strerror(-r));
				return r;
			}
			pl->bcast_gid = (int)gid;
		}
		if (j->at_state) {
			uint64_t at = 0;
			bool started = pl->start_state_len == j->at_state_len &&
				       memcmp(pl->start_state, j->at_state, j->at_state_len) == 0;
			/* its next batch in the ring (docs/ring.md), or the start of a pipeline
			   started at its state; else the caller starts a private one */
			r = dmn_pipeline_at_state(pl, j->at_state, j->at_state_len, j->max_lag,
						  j->from_head, &at);
			if (r < 0 && started)
				r = 0;
			if (r == 0)
				r = ipc_ring_add_reader_at(pl->ring, (unsigned)pl->bcast_gid, at,
							   ret_ring_id, ret_cb_fd);
			if (r == 0 && !started)
				pl->rejoins++;
		} else {
			r = ipc_ring_add_reader_to(pl->ring, (unsigned)pl->bcast_gid, 0,
						   ret_ring_id, ret_cb_fd);
		}
		*ret_group = -1;
		if (j->at_state && (r == -ENOENT || r == -ERANGE)) {
			snprintf(msg, msg_cap,
				 "pipeline \"%s\" no longer holds this reader's position within "
				 "its lag bound",
				 pl->name);
			return -ERANGE;
		}
		if (r < 0)
			snprintf(msg, msg_cap, "pipeline \"%s\": %s", pl->name,
				 r == -EUSERS ? "too many readers" : strerror(-r));
		return r;
	}
	int i = dmn_pipeline_group_find(pl, name);
	if (i >= 0 && pl->groups[i].moved_to) { /* the caller follows moved_to */
		snprintf(msg, msg_cap, "pipeline \"%s\": group \"%s\" reads another pipeline",
			 pl->name, name);
		return -EXDEV;
	}
	if (i >= 0 && !pl->groups[i].members && pl->groups[i].mode == IPC_RING_RANK &&
	    j->mode == IPC_RING_RANK && pl->groups[i].rank_n != j->rank_n) {
		/*
		 * An elastic restart: every member went, and they come back with another count.
		 * The group starts the next epoch with it; the rest of the current one is not
		 * delivered to it (said in the log: which epoch, which count).
		 */
		struct dmn_join nj = *j;
		nj.first_epoch = next_epoch(pl);
		dmn_log("pipeline %s: group \"%s\" comes back with %u ranks (it had %u): it starts "
			"at epoch %llu, the rest of epoch %llu is not delivered to it",
			pl->name, name, j->rank_n, pl->groups[i].rank_n,
			(unsigned long long)nj.first_epoch,
			(unsigned long long)(nj.first_epoch ? nj.first_epoch - 1 : 0));
		group_close(pl, i);
		if ((i = group_open(pl, name, &nj, msg, msg_cap)) < 0)
			return i;
	} else if (i >= 0) {
		const struct dmn_group *g = &pl->groups[i];
		if (g->mode != j->mode || (j->mode == IPC_RING_RANK && g->rank_n != j->rank_n)) {
			char cnt[32] = "";
			if (g->mode == IPC_RING_RANK)
				snprintf(cnt, sizeof(cnt), " with count %u", g->rank_n);
			snprintf(msg, msg_cap,
				 "pipeline \"%s\": %s%s%s reads in %s mode%s; attach to it with "
				 "that "
				 "mode, or give another group",
				 pl->name, name[0] ? "group \"" : "the default group", name,
				 name[0] ? "\"" : "", mode_word(g->mode), cnt);
			return -EBUSY;
		}
	} else if ((i = group_open(pl, name, j, msg, msg_cap)) < 0) {
		return i;
	}
	struct dmn_group *g = &pl->groups[i];
	r = ipc_ring_add_reader_to(pl->ring, g->gid, j->rank_index, ret_ring_id, ret_cb_fd);
	if (r < 0) {
		snprintf(msg, msg_cap, "pipeline \"%s\"%s%s%s: %s", pl->name,
			 name[0] ? ", group \"" : "", name, name[0] ? "\"" : "",
			 r == -EBUSY	? "that rank is taken"
			 : r == -EUSERS ? "too many readers"
					: strerror(-r));
		if (!g->members && !g->empty_since)
			group_close(pl, i); /* opened for this reader */
		return r;
	}
	g->members++;
	g->empty_since = 0;
	*ret_group = i;
	return 0;
}

/* Whether the stream goes on after epoch e (the spec's epochs; it has not failed). */
static bool goes_on_after(const struct dmn_pipeline *pl, uint64_t e)
{
	return pl->status == DMN_RUNNING && (pl->epochs < 0 || e + 1 < (uint64_t)pl->epochs);
}

int dmn_pipeline_join_point(struct dmn_pipeline *pl, struct dmn_join_point *ret)
{
	struct ipc_ring_info info;
	ipc_ring_get_info(pl->ring, &info);
	memset(ret, 0, sizeof(*ret));
	if (info.head == 0)
		return 0; /* nothing published: from the start */
	/* the batch a new reader would see first (at low), or the last one published */
	bool in_ring = info.low < info.head;
	uint64_t s = in_ring ? info.low : info.head - 1;
	const struct dmn_hist *h = &pl->hist[s % DMN_HIST];
	if (h->ring_seq != s)
		return -ENOENT; /* cannot happen: the history holds more than the ring */
	uint64_t e = h->pos.epoch;
	if (in_ring && h->pos.index_in_epoch == 0) {
		ret->first_epoch = e; /* the whole epoch is still in the ring */
		return 0;
	}
	if (!in_ring && (h->pos.flags & IPC_BATCH_F_END_EPOCH) && goes_on_after(pl, e)) {
		ret->first_epoch = e + 1; /* the next batch starts an epoch */
		return 0;
	}
	if (goes_on_after(pl, e)) {
		ret->first_epoch = e + 1; /* the tail of this one is skipped */
		return 0;
	}
	/* the last epoch, partly gone: a pipeline of its own from that epoch's start */
	ret->private_ = true;
	ret->first_epoch = 0;
	if (e == 0 && !pl->start_state_len)
		return 0; /* the pipeline's start, from the spec */
	const struct pl_batch_pos *prev = &pl->epoch_end[(e - 1) % 2];
	if (e == 0 || !pl->epoch_end_set[(e - 1) % 2] || prev->epoch != e - 1)
		return -ENOENT;
	int n = pl_pipeline_state_after(pl->pl, prev, ret->state, sizeof(ret->state));
	if (n < 0)
		return n;
	ret->state_len = n;
	return 0;
}

void dmn_pipeline_leave(struct dmn_pipeline *pl, unsigned ring_id, int group)
{
	ipc_ring_remove_reader(pl->ring, ring_id);
	dmn_pipeline_forget_reader(pl, ring_id);
	if (group >= 0 && group < IPC_RING_MAX_GROUPS && pl->groups[group].used &&
	    --pl->groups[group].members == 0)
		pl->groups[group].empty_since = dmn_now_ns();
}
