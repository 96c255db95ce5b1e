/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced's control server: requests and readers (DESIGN.md §6); conns.c admits connections. */
#include "server.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "daemon/pipeline/cache.h"
#include "daemon/pipeline/model.h"
#include "log.h"
#include "positions.h"
#include "sched/sched.h"

/*
 * Everything here runs on the server thread (the epoll loop). A client connection says HELLO,
 * then registers specs, attaches readers (each gets the ring's data memfd and a control memfd
 * of its own) and detaches them. When the connection closes — the process exited or was
 * killed — every reader it had is removed from its ring at once, which releases every batch it
 * held. Garbage on the socket closes that connection and nothing else.
 */

static int send_msg(struct dmn_conn *c, const void *buf, size_t len, const int *fds, size_t nfds)
{
	int r = ipc_ctl_send(c->fd, buf, len, fds, nfds);
	if (r < 0)
		dmn_log("client pid %d: send: %s", (int)c->pid, strerror(-r));
	return r;
}

static int reply_error(struct dmn_conn *c, uint32_t req_id, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int reply_error(struct dmn_conn *c, uint32_t req_id, int code, const char *fmt, ...)
{
	struct ipc_ctl_error m = { .code = code };
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m.text, sizeof(m.text), fmt, ap);
	va_end(ap);
	uint8_t buf[IPC_CTL_HDR_SIZE + IPC_CTL_TEXT_MAX + 64];
	size_t len;
	if (ipc_ctl_encode_error(buf, sizeof(buf), req_id, &m, &len) < 0)
		return -EINVAL;
	return send_msg(c, buf, len, NULL, 0);
}

/*
 * A reader goes: its ring slot and what the registry kept for it; a private pipeline with it.
 * detached: for good (a detach, an attach that failed); else its connection closed or it was
 * evicted, and it may come back with its token.
 */
static void remove_reader(struct dmn *d, struct dmn_reader *r, bool detached)
{
	for (struct dmn_conn *c = d->conns; c; c = c->next) {
		for (struct dmn_reader **pp = &c->readers; *pp; pp = &(*pp)->next) {
			if (*pp != r)
				continue;
			*pp = r->next;
			struct dmn_pipeline *pl = r->pl;
			pthread_mutex_lock(&pl->lock);
			dmn_pipeline_leave(pl, r->ring_id, r->group);
			pl->n_readers--;
			pthread_mutex_unlock(&pl->lock);
			dmn_log("reader %llu (pid %d, uid %u) detached from %s",
				(unsigned long long)r->id, (int)c->pid, (unsigned)c->uid, pl->name);
			pl->last_used = dmn_now_ns();
			free(r);
			if (pl->private_ && pl->n_readers == 0)
				dmn_pipeline_drop_private(&d->reg, pl, !detached);
			return;
		}
	}
}

void dmn_conn_close(struct dmn *d, struct dmn_conn *c)
{
	while (c->readers)
		remove_reader(d, c->readers, false);
	epoll_ctl(d->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	dmn_conn_uncount(d, c);
	free(c->groups);
	for (struct dmn_conn **pp = &d->conns; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	}
	free(c);
}

/* The caller's rights (a view of c's: not owned). */
static struct io_creds conn_creds(const struct dmn_conn *c)
{
	return (struct io_creds){
		.uid = c->uid, .gid = c->gid, .n_groups = c->n_groups, .groups = c->groups
	};
}

static bool may_read(const struct dmn_conn *c, const struct dmn_pipeline *pl)
{
	struct io_creds who = conn_creds(c);
	return dmn_may_read(pl, &who);
}

/* ENOENT for name, with the names close to it that c may read; EACCES when it may not. */
static int reply_no_pipeline(struct dmn *d, struct dmn_conn *c, uint32_t req_id, const char *name,
			     bool hidden)
{
	if (hidden)
		return reply_error(c, req_id, -EACCES, "permission denied");
	struct io_creds who = conn_creds(c);
	char hint[IPC_CTL_TEXT_MAX / 2];
	dmn_name_suggest(&d->reg, name, &who, hint, sizeof(hint));
	return reply_error(c, req_id, -ENOENT, "no pipeline named \"%s\"%s", name, hint);
}

static const char *mode_name(unsigned m)
{
	return m == IPC_RING_SPLIT ? "split" : m == IPC_RING_RANK ? "rank" : "broadcast";
}

static int on_hello(struct dmn *d, struct dmn_conn *c, const struct ipc_ctl_msg *msg)
{
	struct ipc_ctl_hello h;
	char emsg[256];
	if (ipc_ctl_decode_hello(msg, &h, emsg, sizeof(emsg)) < 0) {
		reply_error(c, msg->req_id, -EBADMSG, "%s", emsg);
		return -EBADMSG;
	}
	struct ipc_ctl_hello_ok ok = {
		.version = IPC_CTL_VERSION,
		.server_pid = (uint32_t)getpid(),
		.max_msg = IPC_CTL_MAX_MSG,
		.max_readers = d->reg.cfg.max_readers,
	};
	uint8_t buf[256];
	size_t len;
	if (ipc_ctl_encode_hello_ok(buf, sizeof(buf), msg->req_id, &ok, &len) < 0)
		return -EINVAL;
	c->hello = true;
	return send_msg(c, buf, len, NULL, 0);
}

/* A request's spec_dir view as a string in buf (IPC_CTL_DIR_MAX + 1 bytes), or NULL. */
static const char *spec_dir(char *buf, const char *dir, uint32_t len)
{
	if (!len)
		return NULL;
	memcpy(buf, dir, len);
	buf[len] = '\0';
	return buf;
}

static int on_register(struct dmn *d, struct dmn_conn *c, const struct ipc_ctl_msg *msg)
{
	struct ipc_ctl_register m;
	char emsg[1024];
	if (ipc_ctl_decode_register(msg, &m, emsg, sizeof(emsg)) < 0)
		return reply_error(c, msg->req_id, -EBADMSG, "%s", emsg);
	struct dmn_pipeline *pl;
	bool created;
	char dir[IPC_CTL_DIR_MAX + 1];
	struct io_creds who = conn_creds(c);
	struct dmn_get_req req = { .spec = m.spec,
				   .spec_len = m.spec_len,
				   .origin = "<spec>",
				   .spec_dir = spec_dir(dir, m.spec_dir, m.spec_dir_len),
				   .owner = c->uid,
				   .creds = &who,
				   .mode = IPC_RING_BROADCAST };
	int r = dmn_pipeline_get(&d->reg, &req, &pl, &created, emsg, sizeof(emsg));
	if (r < 0)
		return reply_error(c, msg->req_id, r, "%s", emsg);
	if (!may_read(c, pl)) /* the same spec, registered by someone else */
		return reply_error(c, msg->req_id, -EACCES, "permission denied");
	if (created)
		dmn_log("pipeline %s registered by uid %u", pl->name, (unsigned)c->uid);
	struct ipc_ctl_registered out = { .created = created };
	snprintf(out.name, sizeof(out.name), "%s", pl->name);
	memcpy(out.fingerprint, pl->fp, 16);
	uint8_t buf[512];
	size_t len;
	if (ipc_ctl_encode_registered(buf, sizeof(buf), msg->req_id, &out, &len) < 0)
		return -EINVAL;
	return send_msg(c, buf, len, NULL, 0);
}

/*
 * A request for pl's own computation (its spec, read with what its owner granted) for a reader
 * of c's in mode from state (NULL: its start); the caller sets the rest.
 */
static struct dmn_get_req computation_of(const struct dmn_pipeline *pl, const struct dmn_conn *c,
					 enum ipc_ring_mode mode, const void *state,
					 size_t state_len)
{
	return (struct dmn_get_req){ .spec = pl->spec_json,
				     .spec_len = strlen(pl->spec_json),
				     .origin = pl->name,
				     .spec_dir = pl->spec_dir,
				     .owner = c->uid,
				     .creds = pl->creds,
				     .mode = mode,
				     .state = state,
				     .state_len = state_len };
}

/*
 * DESIGN.md §5: a reader of a new group (a broadcast reader is a group of its own) receives
 * whole epochs, never a silent partial one. A member of a group that exists starts where its
 * group is (on the private pipeline its group moved to, if it did). Otherwise the pipeline
 * says where whole epochs start (dmn_pipeline_join_point): *ret_first_epoch, or, in its last
 * epoch, a private pipeline from that epoch's start (*io_pl becomes it; a split or rank
 * group's later members follow it there).
 */
static int whole_epochs(struct dmn *d, struct dmn_conn *c, const struct ipc_ctl_attach *m,
			struct dmn_pipeline **io_pl, uint64_t *ret_first_epoch, char *emsg,
			size_t cap)
{
	struct dmn_pipeline *pl = *io_pl;
	enum ipc_ring_mode mode = (enum ipc_ring_mode)m->mode;
	struct dmn_join_point jp;
	pthread_mutex_lock(&pl->lock);
	int gi = mode == IPC_RING_BROADCAST ? -1 : dmn_pipeline_group_find(pl, m->group);
	if (gi >= 0) {
		struct dmn_pipeline *to = pl->groups[gi].moved_to;
		*ret_first_epoch = to ? 0 : pl->groups[gi].first_epoch;
		pthread_mutex_unlock(&pl->lock);
		if (to)
			*io_pl = to;
		return 0;
	}
	int r = dmn_pipeline_join_point(pl, &jp);
	pthread_mutex_unlock(&pl->lock);
	if (r < 0) {
		dmn_log("pipeline %s: where the epoch of its oldest batch started is no longer "
			"known: a %s reader of uid %u starts in the middle of it",
			pl->name, mode_name(mode), (unsigned)c->uid);
		return 0;
	}
	*ret_first_epoch = jp.first_epoch;
	if (!jp.private_)
		return 0;
	bool created;
	struct dmn_pipeline *np;
	struct dmn_get_req req =
		computation_of(pl, c, mode, jp.state_len ? jp.state : NULL, (size_t)jp.state_len);
	req.rank_n = m->rank_count;
	req.group = m->group;
	req.fresh = true;
	char why[512];
	r = dmn_pipeline_get(&d->reg, &req, &np, &created, why, sizeof(why));
	if (r < 0) {
		snprintf(emsg, cap,
			 "pipeline \"%s\" is past the start of its last epoch, and the private "
			 "pipeline that would give this reader that epoch whole could not start: "
			 "%s",
			 pl->name, why);
		return r;
	}
	dmn_log("pipeline %s is past the start of its last epoch: a %s reader of uid %u reads "
		"that epoch whole from private pipeline %s",
		pl->name, mode_name(mode), (unsigned)c->uid, np->name);
	if (mode != IPC_RING_BROADCAST) {
		pthread_mutex_lock(&pl->lock);
		for (int i = 0; i < IPC_RING_MAX_GROUPS; i++) {
			struct dmn_group *g = &pl->groups[i];
			if (g->used)
				continue;
			*g = (struct dmn_group){ .mode = mode, .moved_to = np, .used = true };
			snprintf(g->name, sizeof(g->name), "%s", m->group);
			break;
		}
		pthread_mutex_unlock(&pl->lock);
	}
	*io_pl = np;
	return 0;
}

static int attach_as(struct dmn *d, struct dmn_conn *c, const struct ipc_ctl_msg *msg,
		     const struct ipc_ctl_attach *am, struct dmn_resume *rs);

/*
 * A private pipeline of pl's computation at broadcast reader m's saved state (*ret_pl), for a
 * reader whose position pl's ring no longer holds. 0, or -errno with emsg.
 */
static int private_at(struct dmn *d, struct dmn_conn *c, struct dmn_pipeline *pl,
		      const struct ipc_ctl_attach *m, struct dmn_pipeline **ret_pl, char *emsg,
		      size_t cap)
{
	bool created;
	struct dmn_get_req req = computation_of(pl, c, IPC_RING_BROADCAST, m->state, m->state_len);
	req.fresh = true;
	return dmn_pipeline_get(&d->reg, &req, ret_pl, &created, emsg, cap);
}

/* ATTACH; one that resumes after a restart (a token) from where the daemon kept it. */
static int on_attach(struct dmn *d, struct dmn_conn *c, const struct ipc_ctl_msg *msg)
{
	struct ipc_ctl_attach m;
	struct dmn_resume rs = { .on = false };
	char emsg[1024];
	if (ipc_ctl_decode_attach(msg, &m, emsg, sizeof(emsg)) < 0)
		return reply_error(c, msg->req_id, -EBADMSG, "%s", emsg);
	if (m.resume_len && !m.state_len) {
		int r = dmn_resume_prepare(d, &m, &rs, emsg, sizeof(emsg));
		if (r < 0)
			return reply_error(c, msg->req_id, r, "%s", emsg);
		if (!rs.join) { /* from the kept state, as a saved state would */
			m.state = rs.state;
			m.state_len = (uint32_t)rs.state_len;
		}
	}
	int r = attach_as(d, c, msg, &m, &rs);
	dmn_resume_fini(&rs);
	return r;
}

/*
 * The lag policy of broadcast reader ring_id (DESIGN.md §5), not HOLD: moved off the shared
 * stream past max_lag (default half the ring; below the ring's size, or it could never
 * trigger) behind the leading other reader (CATCH_UP: behind head), or once it held the
 * others back for lag_timeout_ms (default sluiced's --lag-timeout; 0 there: no bound). Under
 * pl->lock, before its fds go out.
 */
static void set_lag(struct dmn *d, struct dmn_pipeline *pl, unsigned ring_id,
		    const struct ipc_ctl_attach *m)
{
	struct ipc_ring_info ri;
	uint64_t ml, ms;

	ipc_ring_get_info(pl->ring, &ri);
	ml = m->max_lag ? m->max_lag : ri.n_slots / 2;
	if (ml >= ri.n_slots)
		ml = ri.n_slots - 1;
	ms = m->lag_timeout_ms ? m->lag_timeout_ms : d->reg.cfg.lag_timeout_ns / 1000000;
	if (ms > UINT64_MAX / 1000000)
		ms = UINT64_MAX / 1000000;
	ipc_ring_set_lag(pl->ring, ring_id,
			 &(struct ipc_ring_lag){
				 .max_lag = ml ? ml : 1,
				 .behind_others = m->lag_policy != IPC_CTL_LAG_CATCH_UP,
				 .timeout_ns = ms * 1000000,
			 });
}

static int attach_as(struct dmn *d, struct dmn_conn *c, const struct ipc_ctl_msg *msg,
		     const struct ipc_ctl_attach *am, struct dmn_resume *rs)
{
	struct ipc_ctl_attach m = *am;
	char emsg[1024];
	enum ipc_ring_mode mode = (enum ipc_ring_mode)m.mode;
	struct dmn_pipeline *pl;
	bool created = false;
	int r;
	/*
	 * A broadcast reader with a state joins a running shared pipeline at its position when
	 * that ring still holds it (docs/DECISIONS.md, "Readers that cannot hold others"),
	 * unless it holds the others back (it would hold them from behind) or the lag policy has
	 * just moved it off (MOVE_OFF: a private pipeline, which moves it back once caught up).
	 */
	bool at_position = mode == IPC_RING_BROADCAST && m.state_len &&
			   m.lag_policy != IPC_CTL_LAG_HOLD && m.move != IPC_CTL_MOVE_OFF;
	if (rs->join) {
		pl = rs->join; /* its group resumed there */
	} else if (m.spec) {
		char dir[IPC_CTL_DIR_MAX + 1];
		struct io_creds who = conn_creds(c);
		struct dmn_get_req req = { .spec = m.spec,
					   .spec_len = m.spec_len,
					   .origin = "<spec>",
					   .spec_dir = spec_dir(dir, m.spec_dir, m.spec_dir_len),
					   .owner = c->uid,
					   .creds = &who,
					   .mode = mode,
					   .rank_n = m.rank_count,
					   .group = m.group,
					   .state = m.state,
					   .state_len = m.state_len,
					   .fresh = m.move == IPC_CTL_MOVE_OFF,
					   .at_position = at_position,
					   .max_lag = m.max_lag,
					   .from_head = m.lag_policy == IPC_CTL_LAG_CATCH_UP };
		r = dmn_pipeline_get(&d->reg, &req, &pl, &created, emsg, sizeof(emsg));
		if (r == -EBADMSG && rs->on) /* the kept state is another pipeline's now */
			return reply_error(c, msg->req_id, -ESTALE,
					   "%s: this reader cannot resume where it was (it does "
					   "not start over silently)",
					   emsg);
		if (r < 0)
			return reply_error(c, msg->req_id, r, "%s", emsg);
		if (created)
			dmn_log("pipeline %s started for uid %u", pl->name, (unsigned)c->uid);
	} else {
		struct io_creds who = conn_creds(c);
		bool hidden;
		pl = dmn_pipeline_find(&d->reg, m.name, &who, false, &hidden);
		if (!pl && !hidden && rs->on) /* a user's, gone with the restart */
			pl = dmn_resume_recreate(d, rs, &m, &who);
		if (!pl)
			return reply_no_pipeline(d, c, msg->req_id, m.name, hidden);
	}
	if (!m.state_len && !rs->on) /* a member again: to its group, where it resumed */
		pl = dmn_resume_group_home(d, pl, created, &m);
	if (!may_read(c, pl))
		return reply_error(c, msg->req_id, -EACCES, "permission denied");
	if (m.lag_policy == IPC_CTL_LAG_CATCH_UP && mode != IPC_RING_BROADCAST)
		return reply_error(c, msg->req_id, -EINVAL,
				   "pipeline \"%s\": a lag policy is for "
				   "broadcast readers; a %s reader never lags the others",
				   pl->name, mode_name(mode));
	if (rs->on && memcmp(pl->fp, rs->rec.fp, 16) != 0)
		return reply_error(c, msg->req_id, -ESTALE,
				   "pipeline \"%s\" is not the one this reader read before sluiced "
				   "restarted (its spec or its files changed): it cannot resume "
				   "where it was (it does not start over silently)",
				   pl->name);
	if (!m.spec && m.state_len) {
		/* Resuming by name: the named pipeline if it starts there, else a private one. */
		struct dmn_get_req req = computation_of(pl, c, mode, m.state, m.state_len);
		req.rank_n = m.rank_count;
		req.group = m.group;
		req.fresh = m.move == IPC_CTL_MOVE_OFF;
		req.at_position = at_position;
		req.max_lag = m.max_lag;
		req.from_head = m.lag_policy == IPC_CTL_LAG_CATCH_UP;
		r = dmn_pipeline_get(&d->reg, &req, &pl, &created, emsg, sizeof(emsg));
		if (r < 0)
			return reply_error(c, msg->req_id, r, "%s", emsg);
	}
	uint64_t first_epoch = 0;
	if (!m.state_len) {
		r = whole_epochs(d, c, &m, &pl, &first_epoch, emsg, sizeof(emsg));
		if (r < 0)
			return reply_error(c, msg->req_id, r, "%s", emsg);
	} else if (pl->private_ && pl->n_readers == 0) {
		dmn_log("private pipeline %s started for uid %u at a saved state", pl->name,
			(unsigned)c->uid);
	}
	if (d->reg.cfg.max_readers && pl->n_readers >= d->reg.cfg.max_readers)
		return reply_error(c, msg->req_id, -EUSERS,
				   "pipeline \"%s\" has its limit of %u readers", pl->name,
				   d->reg.cfg.max_readers);
	struct dmn_reader *rd = calloc(1, sizeof(*rd));
	if (!rd)
		return reply_error(c, msg->req_id, -ENOMEM, "out of memory");
	int cb_fd = -1;
	pthread_mutex_lock(&pl->lock);
	struct dmn_join join = { .mode = mode,
				 .group = m.group,
				 .rank_index = m.rank_index,
				 .rank_n = m.rank_count,
				 .first_epoch = first_epoch };
	if (at_position && !pl->private_) {
		join.at_state = m.state;
		join.at_state_len = m.state_len;
		join.max_lag = m.max_lag;
		join.from_head = m.lag_policy == IPC_CTL_LAG_CATCH_UP;
	}
	rd->attached_ns = dmn_now_ns();
	uint64_t rejoins = pl->rejoins;
	r = dmn_pipeline_join(pl, &join, &rd->ring_id, &rd->group, &cb_fd, emsg, sizeof(emsg));
	if (r == -ERANGE && join.at_state) {
		/* the ring moved on since it was found: a private pipeline at the state, then */
		pthread_mutex_unlock(&pl->lock);
		struct dmn_pipeline *np;
		r = private_at(d, c, pl, &m, &np, emsg, sizeof(emsg));
		if (r < 0) {
			free(rd);
			return reply_error(c, msg->req_id, r, "%s", emsg);
		}
		pl = np;
		join.at_state = NULL;
		pthread_mutex_lock(&pl->lock);
		rejoins = pl->rejoins;
		r = dmn_pipeline_join(pl, &join, &rd->ring_id, &rd->group, &cb_fd, emsg,
				      sizeof(emsg));
	}
	rd->mode = mode;
	rd->rejoined = r == 0 && pl->rejoins != rejoins;
	if (r == 0 && rd->group >= 0) /* its group's (an elastic restart may have moved it) */
		first_epoch = pl->groups[rd->group].first_epoch;
	/* a moved reader alone on a private pipeline holds nobody back: no policy there */
	bool moved_private = m.move != IPC_CTL_MOVE_NONE && pl->private_;
	if (r == 0 && mode == IPC_RING_BROADCAST && m.lag_policy != IPC_CTL_LAG_HOLD &&
	    !moved_private)
		set_lag(d, pl, rd->ring_id, &m);
	if (r == 0 && moved_private && pl->n_readers == 0) {
		pl->rejoin = true; /* started for it: it may go back (dmn_server_rejoin) */
		pl->rejoin_max_lag = m.moved_max_lag;
	}
	if (r == 0) {
		pl->n_readers++;
		pl->last_used = dmn_now_ns();
		pthread_cond_broadcast(
			&pl->attach_cond); /* a producer holding for readers goes on */
	}
	struct ipc_ring_info info;
	ipc_ring_get_info(pl->ring, &info);
	pthread_mutex_unlock(&pl->lock);
	if (r < 0) {
		free(rd);
		if (pl->private_ && pl->n_readers == 0)
			dmn_pipeline_drop_private(&d->reg, pl, false);
		return reply_error(c, msg->req_id, r, "%s", emsg); /* it names the pipeline */
	}
	rd->id = ++d->next_reader_id;
	rd->pl = pl;
	rd->next = c->readers;
	c->readers = rd;

	dmn_resume_joined(pl, rd->group, rs);
	uint8_t token[IPC_CTL_TOKEN_MAX];
	struct ipc_ctl_attached out = {
		.reader_id = rd->id,
		.ring_version = IPC_RING_LAYOUT_VERSION,
		.n_slots = info.n_slots,
		.data_bytes = info.data_size,
		.first_epoch = first_epoch,
		.token = token,
		.token_len = (uint32_t)dmn_resume_token(d, pl, token, sizeof(token)),
		.skip_below = rs->skip_below,
		.redelivered_below = dmn_resume_redelivered_below(pl, rd->group, rs),
		.redelivered_epochs = rs->redelivered_epochs,
	};
	snprintf(out.name, sizeof(out.name), "%s", pl->name);
	memcpy(out.fingerprint, pl->fp, 16);
	size_t n = pl_pipeline_n_tensors(pl->pl);
	struct ipc_ctl_tensor_info *ti = calloc(n + 1, sizeof(*ti));
	if (!ti) {
		remove_reader(d, rd, true);
		return reply_error(c, msg->req_id, -ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		const struct pl_tensor_info *t = pl_pipeline_tensor(pl->pl, i);
		snprintf(ti[i].name, sizeof(ti[i].name), "%s", t->name);
		ti[i].dtype = (uint32_t)t->dtype;
		ti[i].rank = t->rank;
		memcpy(ti[i].shape, t->shape, sizeof(ti[i].shape));
		ti[i].ragged = t->ragged;
	}
	out.tensors = ti;
	out.n_tensors = (uint32_t)n;
	uint8_t *buf = malloc(IPC_CTL_MAX_MSG);
	size_t len;
	r = buf ? ipc_ctl_encode_attached(buf, IPC_CTL_MAX_MSG, msg->req_id, &out, &len) : -ENOMEM;
	free(ti);
	if (r == 0) {
		int fds[2] = { ipc_ring_data_fd(pl->ring), cb_fd };
		r = send_msg(c, buf, len, fds, 2);
	}
	free(buf);
	if (r < 0) {
		remove_reader(d, rd, true);
		return r;
	}
	if (rd->rejoined)
		dmn_log("reader %llu (pid %d, uid %u) attached to %s (%s) at its saved position, "
			"which its ring still holds%s",
			(unsigned long long)rd->id, (int)c->pid, (unsigned)c->uid, pl->name,
			mode_name(mode),
			m.move == IPC_CTL_MOVE_BACK ? ": back on the shared stream" : "");
	else
		dmn_log("reader %llu (pid %d, uid %u) attached to %s (%s)",
			(unsigned long long)rd->id, (int)c->pid, (unsigned)c->uid, pl->name,
			mode_name(mode));
	return 0;
}

static struct dmn_reader *find_reader(struct dmn_conn *c, uint64_t id)
{
	for (struct dmn_reader *r = c->readers; r; r = r->next)
		if (r->id == id)
			return r;
	return NULL;
}

static int on_detach(struct dmn *d, struct dmn_conn *c, const struct ipc_ctl_msg *msg)
{
	struct ipc_ctl_reader_ref m;
	char emsg[256];
	if (ipc_ctl_decode_reader_ref(msg, IPC_CTL_DETACH, &m, emsg, sizeof(emsg)) < 0)
		return reply_error(c, msg->req_id, -EBADMSG, "%s", emsg);
	struct dmn_reader *r = find_reader(c, m.reader_id);
	if (!r)
		return reply_error(c, msg->req_id, -ENOENT, "no reader %llu on this connection",
				   (unsigned long long)m.reader_id);
	remove_reader(d, r, true);
	uint8_t buf[128];
	size_t len;
	if (ipc_ctl_encode_reader_ref(buf, sizeof(buf), IPC_CTL_DETACHED, msg->req_id, &m, &len) <
	    0)
		return -EINVAL;
	return send_msg(c, buf, len, NULL, 0);
}

static int on_save_state(struct dmn *d, struct dmn_conn *c, const struct ipc_ctl_msg *msg)
{
	struct ipc_ctl_reader_ref m;
	char emsg[256];
	if (ipc_ctl_decode_reader_ref(msg, IPC_CTL_SAVE_STATE, &m, emsg, sizeof(emsg)) < 0)
		return reply_error(c, msg->req_id, -EBADMSG, "%s", emsg);
	struct dmn_pipeline *pl = NULL;
	struct dmn_reader *rd = NULL;
	if (m.name[0]) { /* no reader: the pipeline named, read with this connection's rights */
		struct io_creds who = conn_creds(c);
		bool hidden;
		pl = dmn_pipeline_find(&d->reg, m.name, &who, true, &hidden);
		if (!pl)
			return reply_no_pipeline(d, c, msg->req_id, m.name, hidden);
	} else if ((rd = find_reader(c, m.reader_id)) == NULL) {
		return reply_error(c, msg->req_id, -ENOENT, "no reader %llu on this connection",
				   (unsigned long long)m.reader_id);
	} else {
		pl = rd->pl;
	}
	uint8_t state[PL_STATE_MAX];
	int n;
	if (m.at) {
		/* a position the client names (a rank group's epoch position): this pipeline's
		   fingerprint and seed with it; resuming checks nothing more than any state */
		n = dmn_pipeline_state_of(pl, m.at_epoch, m.at_index, m.at_seq, state,
					  sizeof(state));
	} else if (rd->mode != IPC_RING_BROADCAST) {
		return reply_error(c, msg->req_id, -EOPNOTSUPP,
				   "a %s reader sees part of the stream: save the "
				   "position of a broadcast reader, or name the group's "
				   "position (sluice_reader_save_at)",
				   mode_name(rd->mode));
	} else {
		n = dmn_pipeline_reader_state(rd->pl, rd->ring_id, state, sizeof(state));
	}
	if (n < 0)
		return reply_error(c, msg->req_id, n, "cannot tell the reader's position");
	struct ipc_ctl_state out = { .reader_id = m.reader_id,
				     .state = state,
				     .state_len = (uint32_t)n };
	uint8_t buf[IPC_CTL_HDR_SIZE + PL_STATE_MAX + 64];
	size_t len;
	int r = ipc_ctl_encode_state(buf, sizeof(buf), msg->req_id, &out, &len);
	return r == 0 ? send_msg(c, buf, len, NULL, 0) : r;
}

static int on_list(struct dmn *d, struct dmn_conn *c, const struct ipc_ctl_msg *msg)
{
	size_t n = 0;
	for (struct dmn_pipeline *pl = d->reg.pipelines; pl; pl = pl->next)
		n += !pl->removed && may_read(c, pl);
	struct ipc_ctl_pipeline_info *pi = calloc(n + 1, sizeof(*pi));
	uint8_t *buf = malloc(IPC_CTL_MAX_MSG);
	if (!pi || !buf) {
		free(pi);
		free(buf);
		return reply_error(c, msg->req_id, -ENOMEM, "out of memory");
	}
	size_t k = 0;
	for (struct dmn_pipeline *pl = d->reg.pipelines; pl; pl = pl->next) {
		if (pl->removed || !may_read(c, pl))
			continue;
		struct ipc_ring_info info;
		pthread_mutex_lock(&pl->lock);
		ipc_ring_get_info(pl->ring, &info);
		snprintf(pi[k].name, sizeof(pi[k].name), "%s", pl->name);
		memcpy(pi[k].fingerprint, pl->fp, 16);
		pi[k].status = pl->status;
		pi[k].n_readers = pl->n_readers;
		pi[k].batches_published = pl->published;
		pi[k].slots_used = info.n_slots - info.n_free_slots;
		pi[k].n_slots = info.n_slots;
		pi[k].owner_uid = pl->owner == (uid_t)-1 ? IPC_CTL_OWNER_HOST : (uint32_t)pl->owner;
		pthread_mutex_unlock(&pl->lock);
		k++;
	}
	struct ipc_ctl_list_reply out = { .pipelines = pi, .n_pipelines = (uint32_t)k };
	size_t len;
	int r = ipc_ctl_encode_list_reply(buf, IPC_CTL_MAX_MSG, msg->req_id, &out, &len);
	if (r == 0)
		r = send_msg(c, buf, len, NULL, 0);
	else
		r = reply_error(c, msg->req_id, r, "the list does not fit one message");
	free(pi);
	free(buf);
	return r;
}

static int on_stats(struct dmn *d, struct dmn_conn *c, const struct ipc_ctl_msg *msg)
{
	struct ipc_ctl_stats m;
	char emsg[256];
	if (ipc_ctl_decode_stats(msg, &m, emsg, sizeof(emsg)) < 0)
		return reply_error(c, msg->req_id, -EBADMSG, "%s", emsg);
	struct io_creds who = conn_creds(c);
	bool hidden;
	struct dmn_pipeline *pl = dmn_pipeline_find(&d->reg, m.name, &who, true, &hidden);
	if (!pl)
		return reply_no_pipeline(d, c, msg->req_id, m.name, hidden);
	struct pl_stats st;
	pl_pipeline_get_stats(pl->pl, &st);
	struct pl_tune tunable;
	pl_pipeline_tunable(pl->pl, &tunable);
	struct pl_cache_stats cs = { 0 };
	if (d->reg.cache)
		pl_cache_get_stats(d->reg.cache, &cs);
	struct ipc_ring_info info;
	pthread_mutex_lock(&pl->lock);
	ipc_ring_get_info(pl->ring, &info);
	struct ipc_ctl_stat s[] = {
		{ "status", pl->status },
		{ "readers", pl->n_readers },
		/* the spec's file shard (one per host of a multi-host job): index of count */
		{ "shard_index", pl->shard_index },
		{ "shard_count", pl->shard_count },
		{ "batches_published", (int64_t)pl->published },
		{ "ring_slots_used", (int64_t)(info.n_slots - info.n_free_slots) },
		{ "ring_slots", info.n_slots },
		{ "ring_bytes_used", (int64_t)info.data_used },
		{ "ring_bytes", (int64_t)info.data_size },
		/* memory by use (docs/ring.md): allocated now, the extents lie inside */
		{ "ring_bytes_committed", (int64_t)info.committed },
		{ "ring_commit_failures", (int64_t)info.commit_fails },
		/* readers that joined this ring at a saved position it still held: moved back
		   after catching up on their own, or resumed only a little behind */
		{ "rejoins", (int64_t)pl->rejoins },
		{ "producer_waits", (int64_t)pl->reserve_waits },
		{ "producer_wait_ns", (int64_t)pl->wait_ns },
		{ "records", (int64_t)st.records },
		{ "record_bytes", (int64_t)st.record_bytes },
		{ "copied_bytes", (int64_t)st.copied_bytes },
		/* the shared record cache (docs/pipeline.md, "The record cache"): what it keeps
		   of this pipeline's files, 0 nothing or 2 its projected records; its files
		   from it and put in it */
		{ "cache_level", st.cache_level },
		{ "cache_files", (int64_t)st.cache_files },
		{ "cache_bytes", (int64_t)st.cache_bytes },
		{ "cache_filled", (int64_t)st.cache_filled },
		{ "cache_followed", (int64_t)st.cache_followed },
		{ "cache_fallbacks", (int64_t)st.cache_fallbacks },
		{ "cached_epochs", (int64_t)st.cached_epochs },
		/* Plumber's rule: the dataset's estimated bytes at its level, and whether they fit
		   (else it keeps what fits and evicts nothing for the rest) */
		{ "cache_need_bytes", (int64_t)st.cache_need },
		{ "cache_fits", st.cache_fits },
		{ "cache_memory", (int64_t)cs.budget },
		{ "cache_memory_used", (int64_t)cs.bytes },
		{ "cache_entries", (int64_t)cs.entries },
		{ "cache_evictions", (int64_t)cs.evictions },
		{ "cache_reclaims", (int64_t)cs.reclaims },
		{ "cache_invalidations", (int64_t)cs.invalidations },
		{ "skipped_records", (int64_t)st.skipped_records },
		{ "skipped_files", (int64_t)st.skipped_files },
		/* batches per epoch: counted by the first epoch, or ahead (the record index,
		   or hopping over uncompressed files); 0 not known yet */
		{ "epoch_batches", (int64_t)st.epoch_batches },
		{ "epoch_batches_ahead", (int64_t)st.epoch_batches_ahead },
		{ "driver_cpu_ns", (int64_t)st.driver_cpu_ns },
		{ "parse_ns", (int64_t)st.parse_ns },
		{ "pool_task_ns", (int64_t)st.pool_task_ns },
		{ "read_wait_ns", (int64_t)st.read_wait_ns },
		{ "lazy_fills", (int64_t)st.lazy_fills },
		{ "small_fills", (int64_t)st.small_fills },
		/* the read engine (once a file was opened): 1 io_uring, 0 the pread fallback */
		{ "io_uring", st.io_engine ? strcmp(st.io_engine, "io_uring") == 0 : -1 },
		{ "direct_io", d->reg.cfg.direct_io },
		{ "direct_io_bytes",
		  (int64_t)st.direct_bytes }, /* 0 where the fs refuses O_DIRECT */
		/* the resource model's window and allocation (docs/plumber.md): the time since
		   the pipeline started (and now, for differences between two readings), the
		   pool's workers and the cores sluiced may use (thousandths) */
		{ "uptime_ns", (int64_t)(dmn_now_ns() - pl->started_ns) },
		{ "now_ns", (int64_t)dmn_now_ns() },
		{ "workers", sched_pool_workers(d->reg.pool) },
		{ "cpus_milli", (int64_t)(d->reg.cfg.cpus * 1000) },
		{ "host_cpus", sysconf(_SC_NPROCESSORS_ONLN) },
		/* what the host's other processes use (between two readings): its busy time
		   less sluiced's */
		{ "host_busy_ns", (int64_t)pl_model_host_busy_ns() },
		{ "sluiced_cpu_ns", (int64_t)pl_model_own_cpu_ns() },
		/* the knobs as they are (the tuner's where the spec said "auto", docs/plumber.md):
		   batch jobs in flight and the most the tuner may allow (the spec's value when
		   fixed), the read size of the next file opened and its bound, the reads in flight
		   per file and theirs (each bound the spec's value when fixed; all three within
		   args.ram_budget when given), the pool's weight of its tasks, the tuner's moves
		   so far, the windows it judged (DMN_TUNE_WINDOW_NS each), of them those in which
		   the pipeline, not its readers, was the limit (where a knob "auto" steps) and the
		   longest run of those in a row with no knob moved, and the batch rate its
		   allocation gave it */
		{ "tune_prefetch", st.prefetch },
		{ "tune_prefetch_max", st.prefetch_max },
		{ "tune_read_buffer_bytes", (int64_t)st.read_chunk },
		{ "tune_read_buffer_max",
		  (int64_t)(tunable.read_chunk ? tunable.read_chunk : st.read_chunk) },
		{ "tune_read_depth", st.read_depth },
		{ "tune_read_depth_max", tunable.read_depth ? tunable.read_depth : st.read_depth },
		{ "tune_weight", st.pool_weight },
		{ "tune_moves", (int64_t)pl->tune.moves },
		{ "tune_windows", (int64_t)pl->tune.windows },
		{ "tune_limited_windows", (int64_t)pl->tune.limited },
		{ "tune_limited_run", (int64_t)pl->tune.run_max },
		{ "tune_alloc_per_s", (int64_t)pl->tune.alloc_per_s },
		{ "autotune", d->reg.cfg.autotune },
		/* which knobs the tuner moves: 1 batch jobs in flight, 2 the read size, 4 the
   reads in flight */
		{ "tune_knobs", (tunable.prefetch ? 1 : 0) | (tunable.read_chunk ? 2 : 0) |
					(tunable.read_depth ? 4 : 0) },
	};
	/* then every counter of every stage of the engine (docs/pipeline.md), stage.NAME.COUNTER,
	 * and per reader: batches taken, time waited in next, lag (batches behind) */
	enum {
		N_PIPE = sizeof(s) / sizeof(s[0]),
		N_STAGE = PL_STAGE_COUNT_ * 16,
		MAX_RD = 7 * IPC_RING_MAX_READERS
	};
	struct ipc_ctl_stat all[N_PIPE + N_STAGE + MAX_RD];
	memcpy(all, s, sizeof(s));
	size_t n = N_PIPE;
	for (unsigned i = 0; i < PL_STAGE_COUNT_; i++) {
		uint64_t v;
		const char *what;
		for (unsigned k = 0; n < N_PIPE + N_STAGE &&
				     (what = pl_stage_counter(&st.stages[i], k, &v)) != NULL;
		     k++) {
			snprintf(all[n].key, sizeof(all[n].key), "stage.%s.%s", pl_stage_name(i),
				 what);
			all[n++].value = (int64_t)(v > INT64_MAX ? INT64_MAX : v);
		}
	}
	size_t n_base = n;
	for (struct dmn_conn *cc = d->conns; cc; cc = cc->next) {
		for (struct dmn_reader *rd = cc->readers; rd; rd = rd->next) {
			uint64_t taken = 0, wait_ns = 0, lag = 0, holding = 0;
			if (rd->pl != pl || n + 7 > n_base + MAX_RD ||
			    ipc_ring_reader_counters(pl->ring, rd->ring_id, &taken, &wait_ns) < 0)
				continue;
			ipc_ring_reader_lag(pl->ring, rd->ring_id, &lag);
			/* how long it has held the others back; why it was moved off (0: not) */
			ipc_ring_reader_holding(pl->ring, rd->ring_id, &holding);
			int why = ipc_ring_reader_moved_why(pl->ring, rd->ring_id);
			/* rejoined: it joined this ring at its saved position (moved back) */
			const char *what[7] = { "taken",      "wait_ns", "lag",	    "attached_ns",
						"holding_ns", "moved",	 "rejoined" };
			uint64_t val[7] = { taken,	 wait_ns,
					    lag,	 dmn_now_ns() - rd->attached_ns,
					    holding,	 why > 0 ? (uint64_t)why : 0,
					    rd->rejoined };
			for (int k = 0; k < 7; k++) {
				snprintf(all[n].key, sizeof(all[n].key), "reader.%llu.%s",
					 (unsigned long long)rd->id, what[k]);
				all[n++].value = (int64_t)(val[k] > INT64_MAX ? INT64_MAX : val[k]);
			}
		}
	}
	pthread_mutex_unlock(&pl->lock);
	struct ipc_ctl_stats_reply out = { .stats = all, .n_stats = (uint32_t)n };
	snprintf(out.name, sizeof(out.name), "%s", pl->name);
	uint8_t buf[32768];
	size_t len;
	int r = ipc_ctl_encode_stats_reply(buf, sizeof(buf), msg->req_id, &out, &len);
	return r == 0 ? send_msg(c, buf, len, NULL, 0) : r;
}

/* sluicectl rm: its owner or root; the config dir's, root only (docs/protocol.md). */
static int on_remove(struct dmn *d, struct dmn_conn *c, const struct ipc_ctl_msg *msg)
{
	struct ipc_ctl_remove m;
	char emsg[256];
	if (ipc_ctl_decode_remove(msg, IPC_CTL_REMOVE, &m, emsg, sizeof(emsg)) < 0)
		return reply_error(c, msg->req_id, -EBADMSG, "%s", emsg);
	struct io_creds who = conn_creds(c);
	bool hidden;
	struct dmn_pipeline *pl = dmn_pipeline_find(&d->reg, m.name, &who, true, &hidden);
	if (!pl)
		return reply_no_pipeline(d, c, msg->req_id, m.name, hidden);
	if (c->uid != 0 && pl->from_config)
		return reply_error(c, msg->req_id, -EACCES,
				   "pipeline \"%s\" is from sluiced's config dir: only root may "
				   "remove it",
				   pl->name);
	if (c->uid != 0 && pl->owner != c->uid)
		return reply_error(c, msg->req_id, -EACCES,
				   "pipeline \"%s\" is uid %u's: only its owner or root may remove "
				   "it",
				   pl->name, (unsigned)pl->owner);
	dmn_pipeline_remove(&d->reg, pl, c->uid, false);
	uint8_t buf[IPC_CTL_HDR_SIZE + IPC_CTL_NAME_MAX + 64];
	size_t len;
	int r = ipc_ctl_encode_remove(buf, sizeof(buf), IPC_CTL_REMOVED, msg->req_id, &m, &len);
	return r == 0 ? send_msg(c, buf, len, NULL, 0) : r;
}

int dmn_conn_input(struct dmn *d, struct dmn_conn *c)
{
	c->last_ms = dmn_now_ms();
	uint8_t *buf = malloc(IPC_CTL_MAX_MSG);
	if (!buf)
		return -ENOMEM;
	int r = 0;
	for (;;) {
		int fds[IPC_CTL_MAX_FDS];
		size_t nfds = 0;
		r = ipc_ctl_recv(c->fd, buf, IPC_CTL_MAX_MSG, fds, IPC_CTL_MAX_FDS, &nfds);
		for (size_t i = 0; i < nfds; i++) /* clients send none: not taken */
			close(fds[i]);
		if (r == -EAGAIN) {
			r = 0;
			break;
		}
		if (r <= 0) { /* closed, or garbage the transport refused */
			r = -ECONNRESET;
			break;
		}
		struct ipc_ctl_msg msg;
		char emsg[256];
		size_t len = (size_t)r;
		r = ipc_ctl_msg_parse(buf, len, &msg, emsg, sizeof(emsg));
		if (r == -EPROTONOSUPPORT) {
			reply_error(c, msg.req_id, r,
				    "client speaks protocol %u, sluiced speaks %u", msg.version,
				    IPC_CTL_VERSION);
			break;
		}
		if (r < 0) {
			dmn_log("client pid %d: %s: connection closed", (int)c->pid, emsg);
			break;
		}
		if (!c->hello && msg.type != IPC_CTL_HELLO) {
			reply_error(c, msg.req_id, -EPROTO, "say HELLO first");
			r = -EPROTO;
			break;
		}
		switch (msg.type) {
		case IPC_CTL_HELLO:
			r = on_hello(d, c, &msg);
			break;
		case IPC_CTL_REGISTER:
			r = on_register(d, c, &msg);
			break;
		case IPC_CTL_ATTACH:
			r = on_attach(d, c, &msg);
			break;
		case IPC_CTL_DETACH:
			r = on_detach(d, c, &msg);
			break;
		case IPC_CTL_SAVE_STATE:
			r = on_save_state(d, c, &msg);
			break;
		case IPC_CTL_LIST:
			r = on_list(d, c, &msg);
			break;
		case IPC_CTL_STATS:
			r = on_stats(d, c, &msg);
			break;
		case IPC_CTL_REMOVE:
			r = on_remove(d, c, &msg);
			break;
		default:
			if (!(msg.type & 0x8000)) { /* a request of a later client: say so, go on */
				r = reply_error(c, msg.req_id, -EOPNOTSUPP,
						"sluiced does not know request type 0x%04x",
						msg.type);
				break;
			}
			reply_error(c, msg.req_id, -EBADMSG, "a %s is not a request",
				    ipc_ctl_type_name(msg.type));
			r = -EBADMSG;
		}
		if (r < 0)
			break;
	}
	free(buf);
	return r;
}

/*
 * A rank group whose rank k has had no reader for longer than the lease while batches of k wait
 * cannot go on: those batches hold the ring, and once it is full of them the other ranks get
 * nothing more (a data-parallel job's rank was killed and did not come back). Its members are
 * removed, each told why (-ENOLINK, and the text logged here in its control block: what
 * sluice_next says: the pipeline, the group, the rank, how long), instead of waiting forever; the
 * pipeline and its other groups go on. A rank that comes back within the lease finds its place.
 * Returns the bits of the groups to end (members marked). Under nothing; takes pl->lock.
 */
static uint64_t orphaned_groups(struct dmn *d, struct dmn_pipeline *pl)
{
	uint64_t lease = d->reg.cfg.lease_ns, now = dmn_now_ns();
	uint64_t out = 0;
	if (!lease || !pl->ring)
		return 0;
	pthread_mutex_lock(&pl->lock);
	for (int i = 0; i < IPC_RING_MAX_GROUPS; i++) {
		struct dmn_group *g = &pl->groups[i];
		uint32_t rank, pending;
		if (!g->used || g->mode != IPC_RING_RANK || !g->members ||
		    ipc_ring_group_vacant(pl->ring, g->gid, &rank, &pending) < 0) {
			if (g->used)
				g->vacant_since = 0;
			continue;
		}
		if (!g->vacant_since)
			g->vacant_since = now;
		if (now - g->vacant_since <= lease)
			continue;
		/* what each member's next call says (its control block), and the log */
		char why[IPC_CTL_TEXT_MAX + 1];
		snprintf(why, sizeof(why),
			 "pipeline \"%s\", %s%s%s: rank %u of %u has had no reader for %.1f s, "
			 "longer than the lease (%.1f s, sluiced --lease), while %u of its batches "
			 "wait for it and hold the ring, so the group cannot go on: restart the "
			 "job (it resumes from its checkpoint)",
			 pl->name, g->name[0] ? "group \"" : "the default group", g->name,
			 g->name[0] ? "\"" : "", rank, g->rank_n,
			 (double)(now - g->vacant_since) / 1e9, (double)lease / 1e9, pending);
		dmn_warn("%s; its %u member%s removed", why, g->members,
			 g->members == 1 ? "" : "s");
		g->vacant_since = 0;
		out |= 1ull << i;
		for (struct dmn_conn *c = d->conns; c; c = c->next)
			for (struct dmn_reader *r = c->readers; r; r = r->next)
				if (r->pl == pl && r->group == i)
					ipc_ring_mark_orphan(pl->ring, r->ring_id, why);
	}
	pthread_mutex_unlock(&pl->lock);
	return out;
}

/*
 * The move back (docs/DECISIONS.md, "Readers that cannot hold others"): a private pipeline that
 * was started for a broadcast reader the lag policy moved off (pl->rejoin) costs a second
 * computation for as long as it runs. Once the shared pipeline of its fingerprint holds that
 * reader's next batch, within half its max_lag of the leading reader there (room for the
 * shared stream to go on while it comes over), the reader is moved off its private ring as the
 * lag policy moves one (the same handshake: its next sluice_next saves its state and attaches
 * with MOVE_BACK, and dmn_pipeline_join puts it on the shared ring at exactly that batch).
 * The private pipeline is dropped when its last reader, the old one, detaches.
 */
static void rejoin_pass(struct dmn *d)
{
	for (struct dmn_pipeline *pl = d->reg.pipelines; pl; pl = pl->next) {
		struct dmn_reader *rd = NULL;
		struct dmn_conn *rc = NULL;
		struct dmn_pipeline *sh = NULL;
		struct ipc_ring_info si;
		uint8_t st[PL_STATE_MAX];
		uint64_t at, ml;
		int n, r;

		if (!pl->private_ || !pl->rejoin || pl->removed || pl->n_readers != 1 ||
		    pl->status != DMN_RUNNING)
			continue;
		for (struct dmn_conn *c = d->conns; c && !rd; c = c->next)
			for (struct dmn_reader *x = c->readers; x && !rd; x = x->next)
				if (x->pl == pl) {
					rd = x;
					rc = c;
				}
		if (!rd || rd->mode != IPC_RING_BROADCAST)
			continue;
		for (struct dmn_pipeline *o = d->reg.pipelines; o && !sh; o = o->next)
			if (o != pl && !o->private_ && !o->removed &&
			    memcmp(o->fp, pl->fp, 16) == 0 && may_read(rc, o))
				sh = o;
		if (!sh)
			continue;
		pthread_mutex_lock(&pl->lock);
		r = ipc_ring_reader_moved(pl->ring, rd->ring_id);
		pthread_mutex_unlock(&pl->lock);
		if (r != 0)
			continue; /* on its way already */
		n = dmn_pipeline_reader_state(pl, rd->ring_id, st, sizeof(st));
		if (n <= 0)
			continue;
		pthread_mutex_lock(&sh->lock);
		ipc_ring_get_info(sh->ring, &si);
		ml = pl->rejoin_max_lag ? pl->rejoin_max_lag : si.n_slots / 2;
		if (ml >= si.n_slots)
			ml = si.n_slots - 1;
		r = dmn_pipeline_at_state(sh, st, (size_t)n, ml / 2 ? ml / 2 : 1, false, &at);
		pthread_mutex_unlock(&sh->lock);
		if (r < 0)
			continue;
		pthread_mutex_lock(&pl->lock);
		r = dmn_pipeline_move_reader(pl, rd->ring_id);
		pthread_mutex_unlock(&pl->lock);
		if (r == 0)
			dmn_log("pipeline %s: reader %llu caught up with %s (which holds its next "
				"batch): moved back to the shared stream",
				pl->name, (unsigned long long)rd->id, sh->name);
	}
}

/* Take in the releases of every pipeline, and evict readers whose control block is corrupt. */
void dmn_server_collect(struct dmn *d)
{
	for (struct dmn_pipeline *pl = d->reg.pipelines, *next; pl; pl = next) {
		next = pl->next; /* evicting a private pipeline's last reader drops it */
		uint64_t orphans = orphaned_groups(d, pl);
		if (orphans) {
			/* removing a private pipeline's last reader may free it: pl is not
			   touched after the first removal (collected at the next round) */
			struct dmn_reader *gone[IPC_RING_MAX_READERS];
			size_t n = 0;
			for (struct dmn_conn *c = d->conns; c; c = c->next)
				for (struct dmn_reader *r = c->readers; r; r = r->next)
					if (r->pl == pl && r->group >= 0 &&
					    (orphans >> r->group & 1) && n < IPC_RING_MAX_READERS)
						gone[n++] = r;
			for (size_t k = 0; k < n; k++)
				remove_reader(d, gone[k], false);
			continue;
		}
		uint64_t bad = dmn_pipeline_collect(pl, d->reg.cfg.lease_ns);
		for (struct dmn_conn *c = d->conns; bad && c; c = c->next) {
			for (struct dmn_reader *r = c->readers, *rn; r; r = rn) {
				rn = r->next;
				if (r->pl != pl || !(bad >> r->ring_id & 1))
					continue;
				pthread_mutex_lock(&pl->lock);
				const char *why = ipc_ring_reader_problem(pl->ring, r->ring_id);
				dmn_warn("evicting reader %llu of %s (pid %d): %s",
					 (unsigned long long)r->id, pl->name, (int)c->pid,
					 why ? why : "?");
				pthread_mutex_unlock(&pl->lock);
				bad &= ~(1ull << r->ring_id);
				remove_reader(d, r, false);
			}
		}
	}
	rejoin_pass(d);
	dmn_pipelines_retry_ends(&d->reg);
	dmn_pipelines_expire(&d->reg);
	dmn_reap_report();
}
