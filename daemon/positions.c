/* SPDX-License-Identifier: Apache-2.0 */
/* Readers that resume where they were after sluiced restarted (docs/DECISIONS.md, "Restarts"). */
#include "positions.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "pipelines_internal.h"

/*
 * The daemon keeps, per pipeline, the state at the oldest batch its ring holds (every reader
 * and group of it is at or past it), and bounds on what it published; the client keeps the seq
 * of the last batch it took. A reader that comes back after a restart presents the token its
 * ATTACHED gave (this run, the pipeline's fingerprint and name) and that seq; it resumes from
 * the kept state and gives back unread what it had read (broadcast, rank: exactly once), or
 * gets what may have been delivered marked (split, sloppy: at least once).
 */

/* The pipeline seq of the batch at ring seq cursor (0 when not known). Under pl->lock. */
static uint64_t seq_at(const struct dmn_pipeline *pl, uint64_t cursor, uint64_t head)
{
	if (cursor < head && pl->hist[cursor % DMN_HIST].ring_seq == cursor)
		return pl->hist[cursor % DMN_HIST].pos.seq;
	if (cursor && pl->hist[(cursor - 1) % DMN_HIST].ring_seq == cursor - 1)
		return pl->hist[(cursor - 1) % DMN_HIST].pos.seq + 1;
	return 0;
}

/* Sloppy: the state at the start of the epoch of the batch at ring seq low. Under pl->lock. */
static int epoch_start_at(struct dmn_pipeline *pl, uint64_t low, uint64_t head, void *buf,
			  size_t cap)
{
	if (head == 0) /* nothing published: the pipeline's start, an epoch's start */
		return dmn_pipeline_state_at(pl, 0, buf, cap);
	uint64_t e;
	if (low < head && pl->hist[low % DMN_HIST].ring_seq == low) {
		e = pl->hist[low % DMN_HIST].pos.epoch;
	} else {
		const struct dmn_hist *h = &pl->hist[(head - 1) % DMN_HIST];
		if (h->ring_seq != head - 1)
			return -ENOENT;
		e = h->pos.epoch + !!(h->pos.flags & IPC_BATCH_F_END_EPOCH);
	}
	const struct dmn_hist *first = &pl->hist[0];
	if (first->ring_seq == 0 && first->pos.epoch == e && first->pos.index_in_epoch == 0)
		return dmn_pipeline_state_at(pl, 0, buf, cap); /* it started at that epoch */
	if (e && pl->epoch_end_set[(e - 1) % 2] && pl->epoch_end[(e - 1) % 2].epoch == e - 1)
		return pl_pipeline_state_after(pl->pl, &pl->epoch_end[(e - 1) % 2], buf, cap);
	return -ENOENT;
}

/*
 * The ring seq of the oldest batch a reader or group may still need: the ring's low, or older,
 * a batch held or pending below it (low passes batches released out of order: a rank member's
 * batch handed to it and not yet taken stays behind while the next one, another rank's, goes).
 * Under pl->lock.
 */
static uint64_t kept_low(struct dmn_pipeline *pl, const struct ipc_ring_info *info)
{
	uint64_t oldest, holders;
	if (ipc_ring_oldest(pl->ring, &oldest, &holders) == 0 && oldest < info->low)
		return oldest;
	return info->low;
}

void dmn_pipeline_keep(struct dmn_pipeline *pl, uint64_t bound, uint64_t bound_epochs)
{
	struct dmn_kept rec;
	struct ipc_ring_info info;
	memset(&rec, 0, sizeof(rec));
	rec.run = pl->keep->run;
	memcpy(rec.fp, pl->fp, 16);
	snprintf(rec.name, sizeof(rec.name), "%s", pl->name);
	rec.owner = pl->owner;
	rec.spec_json = pl->spec_json; /* borrowed: dmn_keep_save copies */
	rec.spec_dir = pl->spec_dir;
	rec.sloppy = pl->sloppy;
	ipc_ring_get_info(pl->ring, &info);
	uint64_t low = kept_low(pl, &info);
	int n = dmn_pipeline_state_at(pl, low, rec.low, sizeof(rec.low));
	rec.low_len = n > 0 ? n : 0;
	rec.low_seq = seq_at(pl, low, info.head);
	if (pl->sloppy) {
		n = epoch_start_at(pl, low, info.head, rec.epoch_start, sizeof(rec.epoch_start));
		rec.epoch_start_len = n > 0 ? n : 0;
	}
	/* rank groups: from a multiple of the count, so that each rank gets the batches it got */
	for (int i = 0; i < IPC_RING_MAX_GROUPS && rec.n_rank < DMN_KEEP_RANKS; i++) {
		const struct dmn_group *g = &pl->groups[i];
		bool seen = false;
		if (!g->used || g->moved_to || g->mode != IPC_RING_RANK || !g->rank_n)
			continue;
		for (unsigned k = 0; k < rec.n_rank; k++)
			seen |= rec.rank[k].n == g->rank_n;
		uint64_t a = low - low % g->rank_n;
		struct dmn_kept_rank *kr = &rec.rank[rec.n_rank];
		if (seen || (n = dmn_pipeline_state_at(pl, a, kr->state, sizeof(kr->state))) <= 0)
			continue;
		kr->n = g->rank_n;
		kr->len = n;
		kr->seq = seq_at(pl, a, info.head);
		rec.n_rank++;
	}
	for (int i = 0; i < IPC_RING_MAX_GROUPS && rec.n_group < DMN_KEEP_GROUPS; i++) {
		const struct dmn_group *g = &pl->groups[i];
		if (!g->used || g->moved_to)
			continue;
		rec.group[rec.n_group] = dmn_keep_group_hash(g->name);
		rec.group_bound[rec.n_group++] =
			g->resumed_bound > bound ? g->resumed_bound : bound;
	}
	pl->keep_low = low;
	pl->keep_ns = dmn_now_ns();
	rec.bound = bound;
	rec.bound_epochs = bound_epochs;
	pl->keep_bound = bound;
	pl->keep_epochs = bound_epochs;
	int r = dmn_keep_save(pl->keep, &rec);
	if (r < 0 && !pl->keep_failed)
		dmn_log("pipeline %s: cannot keep its position in %s: %s (readers may not resume "
			"after a restart)",
			pl->name, pl->keep->dir, strerror(-r));
	pl->keep_failed = r < 0;
}

void dmn_pipeline_keep_tick(struct dmn_pipeline *pl)
{
	struct ipc_ring_info info;
	ipc_ring_get_info(pl->ring, &info);
	if (kept_low(pl, &info) != pl->keep_low && dmn_now_ns() - pl->keep_ns >= DMN_KEEP_TICK_NS)
		dmn_pipeline_keep(pl, pl->keep_bound, pl->keep_epochs);
}

static const char *mode_word(uint32_t m)
{
	return m == IPC_CTL_MODE_SPLIT ? "split" : m == IPC_CTL_MODE_RANK ? "rank" : "broadcast";
}

/*
 * Whether g is where members of m's split or rank group resumed after a restart. Members may
 * come back with tokens of different runs (one re-attached to a sluiced killed again before the
 * other did), and so with different kept records, or with none (a worker started again): the
 * group is still the one of its name on the same computation, as it was before the restart.
 * A rank member whose next batch of its own is own_next (0: it took none) joins it only where
 * that batch is still to come (a member's batches hold the ring, so the rank state kept by any
 * run of its group is at or before it). Apart, each would read alone: a rank member waiting for
 * ever for the others' batches, a split member given its group's batches again, unmarked. Under
 * pl->lock.
 */
static bool resumed_here(const struct dmn_group *g, const struct ipc_ctl_attach *m,
			 uint64_t own_next)
{
	return g->resumed && !g->moved_to && (uint32_t)g->mode == m->mode &&
	       (m->mode != IPC_CTL_MODE_RANK ||
		(g->rank_n == m->rank_count && (!own_next || g->resumed_seq <= own_next)));
}

/* A live pipeline of computation fp where m's group resumed (resumed_here), or NULL. */
static struct dmn_pipeline *resumed_group(struct dmn *d, const uint8_t fp[16],
					  const struct ipc_ctl_attach *m, uint64_t own_next)
{
	for (struct dmn_pipeline *pl = d->reg.pipelines; pl; pl = pl->next) {
		if (memcmp(pl->fp, fp, 16) != 0 || pl->removed)
			continue;
		pthread_mutex_lock(&pl->lock);
		int gi = dmn_pipeline_group_find(pl, m->group);
		bool hit = gi >= 0 && resumed_here(&pl->groups[gi], m, own_next);
		pthread_mutex_unlock(&pl->lock);
		if (hit)
			return pl;
	}
	return NULL;
}

int dmn_resume_prepare(struct dmn *d, const struct ipc_ctl_attach *m, struct dmn_resume *ret,
		       char *msg, size_t cap)
{
	struct dmn_resume rs;
	char name[IPC_CTL_NAME_MAX + 1];
	uint8_t fp[16];
	memset(&rs, 0, sizeof(rs));
	if (dmn_token_parse(m->resume, m->resume_len, &rs.run, fp, name) < 0) {
		snprintf(msg, cap, "resume: the token is not one sluiced gave");
		return -EINVAL;
	}
	if (!d->reg.keep.dir) {
		snprintf(msg, cap,
			 "sluiced runs without a state directory (--state-dir): it kept no "
			 "position for this reader of pipeline \"%s\", which cannot resume where "
			 "it "
			 "was (it does not start over silently)",
			 name);
		return -ESTALE;
	}
	int r = dmn_keep_find(&d->reg.keep, rs.run, fp, name, &rs.rec);
	if (r == -ENOENT) {
		snprintf(msg, cap,
			 "sluiced kept no position for pipeline \"%s\" (run %016" PRIx64 ") in its "
			 "state directory %s (lost or removed): this reader cannot resume where "
			 "it was (it does not start over silently)",
			 name, rs.run, d->reg.keep.dir);
		return -ESTALE;
	}
	if (r < 0) {
		snprintf(msg, cap, "out of memory");
		return r;
	}
	uint64_t next = m->resume_seq; /* 1 + the last batch it took; 0: none */
	const uint8_t *st = rs.rec.low;
	int st_len = rs.rec.low_len;
	uint64_t st_seq = rs.rec.low_seq;
	const char *what = "the oldest batch its ring held";
	if (rs.rec.sloppy) { /* its order is not the spec's: the whole epoch again, marked */
		st = rs.rec.epoch_start;
		st_len = rs.rec.epoch_start_len;
		st_seq = 0;
		what = "the start of the epoch it was in";
		rs.redelivered_epochs = rs.rec.bound_epochs;
	} else if (m->mode == IPC_CTL_MODE_RANK) {
		st_len = 0;
		what = "a batch where its ranks start";
		for (unsigned i = 0; i < rs.rec.n_rank; i++) {
			if (rs.rec.rank[i].n == m->rank_count) {
				st = rs.rec.rank[i].state;
				st_len = rs.rec.rank[i].len;
				st_seq = rs.rec.rank[i].seq;
			}
		}
		rs.skip_below = next;
	} else if (m->mode == IPC_CTL_MODE_SPLIT) {
		/*
		 * What its group may have had: this record's bound, or that of a later run's record
		 * that had the group (a member that came back with an older token than the others'
		 * resumes the group from its own record: what the others read in the runs it missed
		 * comes again too).
		 */
		rs.redelivered_below = dmn_keep_max_bound(&d->reg.keep, rs.rec.fp, m->group);
		if (rs.redelivered_below < rs.rec.bound)
			rs.redelivered_below = rs.rec.bound;
	} else {
		rs.skip_below = next;
	}
	/*
	 * The first batch it has not had: a rank member's next is its next batch of its own (the
	 * others' batches before it may be gone from the kept state: the group's other members
	 * released them).
	 */
	uint64_t own_next = rs.skip_below;
	if (own_next && m->mode == IPC_CTL_MODE_RANK && m->rank_count)
		own_next +=
			(m->rank_index % m->rank_count + m->rank_count - own_next % m->rank_count) %
			m->rank_count;
	if (st_len <= 0 || (own_next && st_seq > own_next)) {
		snprintf(msg, cap,
			 "sluiced kept no usable position (%s) for this %s reader of pipeline "
			 "\"%s\"%s: it cannot resume where it was (it does not start over "
			 "silently)",
			 what, mode_word(m->mode), name,
			 st_len > 0 ? ": the kept one is past the reader's" : "");
		dmn_kept_fini(&rs.rec);
		return -ESTALE;
	}
	memcpy(rs.state, st, (size_t)st_len);
	rs.state_len = (size_t)st_len;
	rs.from_seq = st_seq;
	if (m->mode != IPC_CTL_MODE_BROADCAST)
		rs.join = resumed_group(d, rs.rec.fp, m, own_next);
	rs.on = true;
	*ret = rs;
	return 0;
}

void dmn_resume_fini(struct dmn_resume *rs)
{
	if (rs && rs->on)
		dmn_kept_fini(&rs->rec);
}

struct dmn_pipeline *dmn_resume_group_home(struct dmn *d, struct dmn_pipeline *pl, bool created,
					   const struct ipc_ctl_attach *m)
{
	if (m->mode == IPC_CTL_MODE_BROADCAST)
		return pl;
	/* (a pipeline made for this reader has its group, made with it: not the one it had) */
	pthread_mutex_lock(&pl->lock);
	bool here = !created && dmn_pipeline_group_find(pl, m->group) >= 0;
	pthread_mutex_unlock(&pl->lock);
	struct dmn_pipeline *home = here ? NULL : resumed_group(d, pl->fp, m, 0);
	if (!home || home == pl)
		return pl;
	dmn_log("pipeline %s: a %s reader of group \"%s\" joins it on %s, where it resumed after "
		"a restart",
		pl->name, mode_word(m->mode), m->group, home->name);
	if (created && pl->n_readers == 0) /* started for this reader, which goes elsewhere */
		dmn_pipeline_drop(&d->reg, pl, "dropped: its reader joined its group elsewhere");
	return home;
}

void dmn_resume_joined(struct dmn_pipeline *pl, int group, const struct dmn_resume *rs)
{
	if (!rs->on) { /* a new reader: a rank group's place kept before it takes anything */
		if (pl->keep) {
			pthread_mutex_lock(&pl->lock);
			dmn_pipeline_keep(pl, pl->keep_bound, pl->keep_epochs);
			pthread_mutex_unlock(&pl->lock);
		}
		return;
	}
	pthread_mutex_lock(&pl->lock);
	if (group >= 0 && !pl->groups[group].resumed) {
		struct dmn_group *g = &pl->groups[group];
		g->resumed = true;
		g->resumed_seq = rs->from_seq;
	}
	/* what its members may have had, in any run (a member joining without a token) */
	uint64_t bound = pl->keep && group >= 0
				 ? dmn_keep_max_bound(pl->keep, rs->rec.fp, pl->groups[group].name)
				 : 0;
	if (bound < rs->rec.bound)
		bound = rs->rec.bound;
	if (group >= 0 && pl->groups[group].resumed_bound < bound)
		pl->groups[group].resumed_bound = bound;
	if (pl->keep)
		dmn_pipeline_keep(pl, pl->keep_bound, pl->keep_epochs);
	pthread_mutex_unlock(&pl->lock);
	dmn_log("pipeline %s: a %s reader resumed from the position kept for %s (run %016" PRIx64
		")%s",
		pl->name, group >= 0 ? mode_word(pl->groups[group].mode) : "broadcast",
		rs->rec.name, rs->run,
		rs->skip_below ? ": exactly where it was"
			       : ": what it may have had before is marked re-delivered");
}

uint64_t dmn_resume_redelivered_below(struct dmn_pipeline *pl, int group,
				      const struct dmn_resume *rs)
{
	uint64_t below = rs->redelivered_below;
	if (group < 0 || (rs->on && pl->groups[group].mode == IPC_RING_RANK))
		return below; /* broadcast; a rank member with its place: exactly once */
	pthread_mutex_lock(&pl->lock);
	const struct dmn_group *g = &pl->groups[group];
	if (g->resumed && g->resumed_bound > below)
		below = g->resumed_bound;
	pthread_mutex_unlock(&pl->lock);
	return below;
}

struct dmn_pipeline *dmn_resume_recreate(struct dmn *d, const struct dmn_resume *rs,
					 const struct ipc_ctl_attach *m, const struct io_creds *who)
{
	struct dmn_pipeline *pl = NULL;
	char why[512];
	bool created;
	if (!rs->on || !rs->rec.spec_json)
		return NULL;
	if (rs->rec.owner != (uid_t)-1 && rs->rec.owner != who->uid) {
		dmn_log("pipeline %s: a reader of uid %u resuming by name waits for its owner "
			"(uid %u) to make it again: it reads with the owner's rights",
			rs->rec.name, (unsigned)who->uid, (unsigned)rs->rec.owner);
		return NULL;
	}
	struct dmn_get_req req = { .spec = rs->rec.spec_json,
				   .spec_len = strlen(rs->rec.spec_json),
				   .origin = rs->rec.name,
				   .spec_dir = rs->rec.spec_dir,
				   .owner = rs->rec.owner,
				   /* the owner's own rights, from its connection (the config dir's:
				      the daemon's) */
				   .creds = rs->rec.owner == (uid_t)-1 ? NULL : who,
				   .mode = (enum ipc_ring_mode)m->mode,
				   .rank_n = m->rank_count,
				   .group = m->group,
				   .state = m->state,
				   .state_len = m->state_len };
	if (dmn_pipeline_get(&d->reg, &req, &pl, &created, why, sizeof(why)) < 0) {
		dmn_log("pipeline %s could not be made again for a reader resuming: %s",
			rs->rec.name, why);
		return NULL;
	}
	if (created)
		dmn_log("pipeline %s made again from its kept record (uid %d's)", pl->name,
			rs->rec.owner == (uid_t)-1 ? -1 : (int)rs->rec.owner);
	return pl;
}

size_t dmn_resume_token(struct dmn *d, const struct dmn_pipeline *pl, uint8_t *buf, size_t cap)
{
	if (!d->reg.keep.dir)
		return 0;
	return dmn_token_make(d->reg.keep.run, pl->fp, pl->name, buf, cap);
}
