/* SPDX-License-Identifier: Apache-2.0 */
/* libsluice: readers (attach, next, save, detach) and re-attaching after a daemon restart. */
#include "client_internal.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- rings ---- */

static struct lc_ring *ring_new(struct ipc_ring_client *rc)
{
	struct lc_ring *ring = calloc(1, sizeof(*ring));

	if (!ring)
		return NULL;
	if (pthread_mutex_init(&ring->lock, NULL)) {
		free(ring);
		return NULL;
	}
	if (pthread_mutex_init(&ring->mu, NULL)) {
		pthread_mutex_destroy(&ring->lock);
		free(ring);
		return NULL;
	}
	ring->rc = rc;
	ring->refs = 1;
	ring->schema = ipc_ring_client_schema(rc, &ring->n_schema);
	return ring;
}

static void ring_ref(struct lc_ring *ring)
{
	pthread_mutex_lock(&ring->mu);
	ring->refs++;
	pthread_mutex_unlock(&ring->mu);
}

void lc_ring_unref(struct lc_ring *ring)
{
	bool last;

	if (!ring)
		return;
	pthread_mutex_lock(&ring->mu);
	last = --ring->refs == 0;
	pthread_mutex_unlock(&ring->mu);
	if (!last)
		return;
	assert(!ring->pending);
	lc_cuda_ring_fini(ring);
	ipc_ring_client_detach(ring->rc);
	pthread_mutex_destroy(&ring->mu);
	pthread_mutex_destroy(&ring->lock);
	free(ring);
}

/* With ring->lock held: give the queued batches back to the ring; they go to *done. */
static void ring_flush_locked(struct lc_ring *ring, struct sluice_batch **done)
{
	struct sluice_batch *b, *list;

	pthread_mutex_lock(&ring->mu);
	list = ring->pending;
	ring->pending = NULL;
	pthread_mutex_unlock(&ring->mu);
	while ((b = list)) {
		list = b->next_pending;
		ipc_ring_client_release(ring->rc, &b->rb);
		b->next_pending = *done;
		*done = b;
	}
}

static bool ring_has_pending(struct lc_ring *ring)
{
	bool any;

	pthread_mutex_lock(&ring->mu);
	any = ring->pending != NULL;
	pthread_mutex_unlock(&ring->mu);
	return any;
}

/* Free the batches ring_flush_locked() gave back. The caller holds a reference to ring. */
static void free_done(struct lc_ring *ring, struct sluice_batch *done)
{
	struct sluice_batch *b;

	while ((b = done)) {
		done = b->next_pending;
		free(b);
		lc_ring_unref(ring); /* not the last: the caller holds one */
	}
}

/*
 * Release what is queued, unless someone holds ring->lock: then they will. No release is
 * left behind: a batch queued after the holder's last flush is seen by the holder's own drain
 * after its unlock, or our trylock succeeds. The caller holds a reference to ring.
 */
static void ring_drain(struct lc_ring *ring)
{
	struct sluice_batch *done = NULL;

	while (ring_has_pending(ring) && pthread_mutex_trylock(&ring->lock) == 0) {
		ring_flush_locked(ring, &done);
		pthread_mutex_unlock(&ring->lock);
	}
	free_done(ring, done);
}

static void ring_unlock(struct lc_ring *ring)
{
	pthread_mutex_unlock(&ring->lock);
	ring_drain(ring);
}

/* Take ring->lock (others hold it for one ring call at most) and flush the queue. */
static void ring_lock(struct lc_ring *ring)
{
	struct sluice_batch *done = NULL;

	pthread_mutex_lock(&ring->lock);
	ring_flush_locked(ring, &done);
	free_done(ring, done);
}

/* Are batches of this ring out, besides the reader's own reference? */
static bool ring_batches_out(struct lc_ring *ring)
{
	bool out;

	pthread_mutex_lock(&ring->mu);
	out = ring->refs > 1;
	pthread_mutex_unlock(&ring->mu);
	return out;
}

int lc_schema_find(const struct lc_ring *ring, const char *name)
{
	for (size_t i = 0; i < ring->n_schema; i++)
		if (!strcmp(ring->schema[i].name, name))
			return (int)i;
	return -ENOENT;
}

/* ---- attaching ---- */

_Static_assert((int)SLUICE_LAG_DEFAULT == IPC_CTL_LAG_DEFAULT &&
		       (int)SLUICE_LAG_CATCH_UP == IPC_CTL_LAG_CATCH_UP &&
		       (int)SLUICE_LAG_HOLD == IPC_CTL_LAG_HOLD,
	       "the lag policies are the wire's");

void sluice_attach_opts_init(struct sluice_attach_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	o->mode = SLUICE_MODE_BROADCAST;
	o->reconnect_tries = LC_DEFAULT_TRIES;
	/* $SLUICE_REATTACH_S: the window in seconds (decimals allowed; 0: never re-attach) */
	const char *w = getenv("SLUICE_REATTACH_S");
	if (w && *w) {
		char *end;
		errno = 0;
		double s = strtod(w, &end);
		if (!errno && end != w && !*end && s >= 0 && s <= 86400)
			o->reconnect_tries = (unsigned)((s * 1000 + LC_RETRY_MS - 1) / LC_RETRY_MS);
	}
}

/* "attach \"NAME\"" or "attach by spec", for messages. */
static void reader_what(const struct sluice_reader *r, const char *verb, char *buf, size_t cap)
{
	const char *name = r->name[0] ? r->name : r->opt_name;

	if (name[0])
		snprintf(buf, cap, "%s \"%s\"", verb, name);
	else
		snprintf(buf, cap, "%s by spec", verb);
}

/* Is the client's connection still the one of generation gen, open and not shutting down? */
static bool conn_is_locked(const struct sluice_client *c, uint64_t gen)
{
	return gen == atomic_load_explicit(&c->gen, memory_order_relaxed) && c->fd >= 0 &&
	       !c->shutdown_seen;
}

/* Tell the daemon to drop reader_id; errors are ignored (it drops it anyway when we go). */
static void detach_remote_locked(struct sluice_client *c, uint64_t reader_id)
{
	struct ipc_ctl_reader_ref ref = { .reader_id = reader_id };
	struct ipc_ctl_msg m;
	uint32_t req = lc_req_id_locked(c);
	size_t len, nfds = 0;

	if (c->fd < 0 ||
	    ipc_ctl_encode_reader_ref(c->sbuf, IPC_CTL_MAX_MSG, IPC_CTL_DETACH, req, &ref, &len))
		return;
	lc_call_locked(c, len, req, IPC_CTL_DETACHED, &m, NULL, 0, &nfds, "detach", NULL);
}

/* The ATTACHED summary and the ring's own schema must agree. */
static int check_schema(const struct ipc_ctl_attached *a, const struct ipc_ring_client *rc,
			const char *what, struct sluice_error *err)
{
	size_t n;
	const struct ipc_ring_tensor *s = ipc_ring_client_schema(rc, &n);

	if (n != a->n_tensors)
		return lc_fail(err, -EBADMSG, "%s: the ring has %zu tensors, ATTACHED says %u",
			       what, n, a->n_tensors);
	for (size_t i = 0; i < n; i++) {
		const struct ipc_ctl_tensor_info *t = &a->tensors[i];

		if (strcmp(s[i].name, t->name) || s[i].dtype != t->dtype || s[i].rank != t->rank ||
		    (bool)s[i].ragged != t->ragged)
			return lc_fail(err, -EBADMSG,
				       "%s: tensor %zu: the ring has \"%s\" %s rank %u%s, ATTACHED "
				       "says \"%s\" %s rank %u%s",
				       what, i, s[i].name, ipc_dtype_name(s[i].dtype), s[i].rank,
				       s[i].ragged ? " ragged" : "", t->name,
				       ipc_dtype_name(t->dtype), t->rank,
				       t->ragged ? " ragged" : "");
	}
	return 0;
}

/* ATTACH with r's options and state; on success r->ring, reader_id, name and gen are set. */
static int attach_locked(struct sluice_reader *r, struct sluice_error *err)
{
	struct sluice_client *c = r->c;
	struct ipc_ctl_attach a;
	struct ipc_ctl_attached out;
	struct ipc_ring_client *rc = NULL;
	struct lc_ring *ring;
	struct ipc_ctl_msg m;
	int fds[2] = { -1, -1 };
	size_t len, nfds = 0;
	char what[300], emsg[512];
	uint32_t req;
	int rc_;

	reader_what(r, "attach", what, sizeof(what));
	memset(&a, 0, sizeof(a));
	memcpy(a.name, r->opt_name, sizeof(a.name));
	a.spec = r->spec;
	a.spec_len = (uint32_t)r->spec_len;
	a.spec_dir = r->spec_dir;
	a.spec_dir_len = r->spec_dir ? (uint32_t)strlen(r->spec_dir) : 0;
	a.mode = r->mode;
	a.rank_index = r->rank_index;
	a.rank_count = r->rank_count;
	memcpy(a.group, r->group, sizeof(a.group));
	if (r->token_len) { /* re-attaching: where the daemon kept it, not a saved state */
		a.resume = r->token;
		a.resume_len = (uint32_t)r->token_len;
		a.resume_seq = r->next_seq;
	} else {
		a.state = r->state_len ? r->state : NULL;
		a.state_len = (uint32_t)r->state_len;
	}
	/* once moved off, it is alone on its own pipeline: nobody to hold back */
	a.lag_policy = r->moved ? IPC_CTL_LAG_HOLD : r->lag_policy;
	a.max_lag = r->moved ? 0 : r->max_lag;
	a.lag_timeout_ms = r->moved ? 0 : r->lag_timeout_ms;
	a.move = r->move;
	a.moved_max_lag = r->move ? r->max_lag : 0; /* where it may come back within */
	req = lc_req_id_locked(c);
	rc_ = ipc_ctl_encode_attach(c->sbuf, IPC_CTL_MAX_MSG, req, &a, &len);
	if (rc_ < 0)
		return lc_fail(err, rc_, "%s: encoding the request: %s", what, strerror(-rc_));
	rc_ = lc_call_locked(c, len, req, IPC_CTL_ATTACHED, &m, fds, 2, &nfds, what, err);
	if (rc_ < 0)
		return rc_;
	memset(&out, 0, sizeof(out));
	rc_ = ipc_ctl_decode_attached(&m, &out, emsg, sizeof(emsg));
	if (rc_ < 0) {
		rc_ = lc_fail(err, rc_, "%s: %s", what, emsg);
		goto fail;
	}
	if (nfds != 2) {
		rc_ = lc_fail(err, -EBADMSG, "%s: ATTACHED carried %zu fds, expected 2", what,
			      nfds);
		goto fail_remote;
	}
	rc_ = ipc_ring_client_attach(fds[0], fds[1], &rc, emsg, sizeof(emsg));
	if (rc_ < 0) {
		rc_ = lc_fail(err, rc_, "%s: the ring: %s", what, emsg);
		goto fail_remote;
	}
	rc_ = check_schema(&out, rc, what, err);
	if (rc_ < 0)
		goto fail_remote;
	ring = ring_new(rc);
	if (!ring) {
		rc_ = lc_fail(err, -ENOMEM, "%s: out of memory", what);
		goto fail_remote;
	}
	close(fds[0]);
	close(fds[1]);
	r->ring = ring;
	r->reader_id = out.reader_id;
	memcpy(r->name, out.name, sizeof(r->name));
	if (!r->token_len || out.first_epoch > r->first_epoch)
		r->first_epoch = out.first_epoch;
	if (r->token_len) { /* a resume: what this attachment gives again */
		r->skip_below = out.skip_below;
		r->redeliv_below = out.redelivered_below;
		r->redeliv_epochs = out.redelivered_epochs;
	} else if (out.redelivered_below > r->redeliv_below) {
		/* a member joining a group that resumed after a restart: what it may have had */
		r->redeliv_below = out.redelivered_below;
	}
	if (out.token_len) /* decoded: <= IPC_CTL_TOKEN_MAX (none: a daemon without a state dir) */
		memcpy(r->token, out.token, out.token_len);
	r->token_len = out.token_len;
	r->gen = atomic_load_explicit(&c->gen, memory_order_relaxed);
	ipc_ctl_attached_fini(&out);
	return 0;
fail_remote:
	detach_remote_locked(c, out.reader_id);
fail:
	ipc_ring_client_detach(rc);
	ipc_ctl_attached_fini(&out);
	for (size_t i = 0; i < nfds; i++)
		close(fds[i]);
	return rc_;
}

int sluice_attach(struct sluice_client *c, const struct sluice_attach_opts *opts,
		  struct sluice_reader **ret_reader, struct sluice_error *err)
{
	struct sluice_reader *r;
	int rc;

	if (!c || !ret_reader)
		return lc_fail(err, -EINVAL, "attach: no client or ret_reader");
	r = calloc(1, sizeof(*r));
	if (!r)
		return lc_fail(err, -ENOMEM, "attach: out of memory");
	r->c = c;
	rc = lc_reader_setup(r, opts, err);
	if (rc < 0)
		goto fail;
	pthread_mutex_lock(&c->lock);
	rc = lc_ensure_locked(c, err);
	if (rc == 0)
		rc = attach_locked(r, err);
	if (rc == 0) {
		r->next = c->readers;
		if (c->readers)
			c->readers->prev = r;
		c->readers = r;
	}
	pthread_mutex_unlock(&c->lock);
	if (rc < 0)
		goto fail;
	*ret_reader = r;
	return 0;
fail:
	free(r->spec);
	free(r->spec_dir);
	free(r);
	return rc;
}

void sluice_detach(struct sluice_reader *r)
{
	struct sluice_client *c;

	if (!r)
		return;
	c = r->c;
	pthread_mutex_lock(&c->lock);
	if (r->prev)
		r->prev->next = r->next;
	else
		c->readers = r->next;
	if (r->next)
		r->next->prev = r->prev;
	if (r->ring && conn_is_locked(c, r->gen))
		detach_remote_locked(c, r->reader_id);
	for (unsigned i = 0; i < r->n_old; i++)
		if (conn_is_locked(c, r->old[i].gen))
			detach_remote_locked(c, r->old[i].reader_id);
	pthread_mutex_unlock(&c->lock);
	for (unsigned i = 0; i < r->n_old; i++)
		lc_ring_unref(r->old[i].ring);
	lc_ring_unref(r->ring);
	free(r->spec);
	free(r->spec_dir);
	free(r);
}

/* ---- re-attaching ---- */

static void sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/*
 * The reader's connection is gone (EOF, SHUTDOWN, or another reader of the client already
 * reconnected): drop its ring (batches still held keep it mapped) and re-attach on a new
 * connection, from the last saved state, up to r->tries times LC_RETRY_MS apart.
 */
static int reattach(struct sluice_reader *r, struct sluice_error *err)
{
	struct sluice_client *c = r->c;
	struct sluice_error last = { 0, "" };
	char what[300];
	unsigned i;

	reader_what(r, "next", what, sizeof(what));
	lc_ring_unref(r->ring);
	r->ring = NULL;
	if (!r->token_len && r->next_seq && !r->state_len) {
		r->error = -ESTALE;
		snprintf(r->error_msg, sizeof(r->error_msg),
			 "%s: the connection to sluiced was lost, and sluiced keeps no "
			 "position for this reader (it runs without --state-dir): it cannot "
			 "resume where it was and does not start over from the beginning",
			 what);
		return lc_fail(err, -ESTALE, "%s", r->error_msg);
	}
	for (i = 0; i < r->tries; i++) {
		int rc = 0;

		if (i)
			sleep_ms(LC_RETRY_MS);
		pthread_mutex_lock(&c->lock);
		if (c->fd < 0 || c->shutdown_seen ||
		    atomic_load_explicit(&c->gen, memory_order_relaxed) == r->gen)
			rc = lc_open_locked(c, &last);
		if (rc == 0)
			rc = attach_locked(r, &last);
		pthread_mutex_unlock(&c->lock);
		if (rc == 0)
			return 0;
		if (rc == -EPROTONOSUPPORT)
			break; /* a daemon of another version came back: waiting will not help */
		if (rc == -ESTALE) { /* its position is lost: say so, from now on */
			r->error = rc;
			snprintf(r->error_msg, sizeof(r->error_msg), "%s", last.msg);
			return lc_fail(err, rc, "%s", last.msg);
		}
	}
	if (!r->tries)
		return lc_fail(err, -ECONNRESET,
			       "%s: the connection to sluiced was lost "
			       "(reconnect_tries is 0)",
			       what);
	return lc_fail(err, -ECONNRESET,
		       "%s: the connection to sluiced was lost and %u "
		       "attempts to re-attach failed; the last: %s",
		       what, i < r->tries ? i + 1 : i, last.msg[0] ? last.msg : "?");
}

/* Is the reader's connection still the client's, open and not shutting down? */
static bool conn_ok(struct sluice_reader *r, int wait_ms)
{
	struct sluice_client *c = r->c;
	bool ok;

	pthread_mutex_lock(&c->lock);
	ok = lc_poll_locked(c, wait_ms) &&
	     atomic_load_explicit(&c->gen, memory_order_relaxed) == r->gen;
	pthread_mutex_unlock(&c->lock);
	return ok;
}

/* ---- reading ---- */

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Turn what the ring handed out into a batch, or the pipeline's error. */
static int take(struct sluice_reader *r, const struct ipc_ring_batch *rb,
		struct sluice_batch **ret_batch, struct sluice_error *err)
{
	struct lc_ring *ring = r->ring;
	struct ipc_batch_view v;
	struct sluice_batch *b;
	char emsg[400], what[300];
	int rc;

	rc = ipc_batch_view(rb->mem, rb->len, &v, emsg, sizeof(emsg));
	if (rc == 0 && !(v.flags & IPC_BATCH_F_ERROR) && v.n_tensors != ring->n_schema) {
		snprintf(emsg, sizeof(emsg), "batch %" PRIu64 ": %u tensors, the schema has %zu",
			 v.seq, v.n_tensors, ring->n_schema);
		rc = -EBADMSG;
	}
	if (rc < 0) {
		ring_lock(ring);
		ipc_ring_client_release(ring->rc, rb);
		ring_unlock(ring);
		reader_what(r, "next", what, sizeof(what));
		return lc_fail(err, -EBADMSG, "%s: seq %" PRIu64 ": %s", what, rb->seq, emsg);
	}
	if (v.flags & IPC_BATCH_F_ERROR) {
		reader_what(r, "pipeline", what, sizeof(what));
		r->error = v.error;
		snprintf(r->error_msg, sizeof(r->error_msg), "%s: %.*s", what, (int)v.msg_len,
			 v.msg);
		ring_lock(ring);
		ipc_ring_client_release(ring->rc, rb);
		ring_unlock(ring);
		return lc_fail(err, r->error, "%s", r->error_msg);
	}
	if (v.seq < r->skip_below) { /* read before the daemon restarted: given back unread */
		ring_lock(ring);
		ipc_ring_client_release(ring->rc, rb);
		ring_unlock(ring);
		return 2;
	}
	b = malloc(sizeof(*b));
	if (!b) {
		ring_lock(ring);
		ipc_ring_client_release(ring->rc, rb);
		ring_unlock(ring);
		return lc_fail(err, -ENOMEM, "next: out of memory");
	}
	b->ring = ring;
	b->next_pending = NULL;
	b->rb = *rb;
	b->v = v;
	b->cuda_event = NULL;
	b->resumed_again = v.seq < r->redeliv_below || v.epoch < r->redeliv_epochs;
	if (v.seq + 1 > r->next_seq)
		r->next_seq = v.seq + 1;
	ring_ref(ring);
	*ret_batch = b;
	return 1;
}

static int save_locked(struct sluice_reader *r, const struct ipc_ctl_reader_ref *at, void *buf,
		       size_t cap, size_t *ret_len, struct sluice_error *err);

/*
 * The old readers of moves, once none of their batches is held: detach them (force: the oldest
 * one too, whatever it holds, to make room for one more: LC_OLD_MAX moves whose batches are
 * all still held).
 */
static void drop_old_readers(struct sluice_reader *r, bool force)
{
	struct sluice_client *c = r->c;
	unsigned k = 0;

	for (unsigned i = 0; i < r->n_old; i++) {
		struct lc_old o = r->old[i];

		if (!(force && i == 0) && ring_batches_out(o.ring)) {
			r->old[k++] = o;
			continue;
		}
		pthread_mutex_lock(&c->lock);
		if (conn_is_locked(c, o.gen))
			detach_remote_locked(c, o.reader_id);
		pthread_mutex_unlock(&c->lock);
		lc_ring_unref(o.ring);
	}
	r->n_old = k;
}

/*
 * The daemon moved this reader off the shared stream (lag policy): ask where it is, and attach
 * to a pipeline of its own started there (the daemon makes it private); or, on that private
 * pipeline, moved it back (it caught up): attach to the shared ring at that position. Batches
 * of the old ring that the caller still holds stay valid: the old reader is detached when they
 * are all back.
 */
static int move_off(struct sluice_reader *r, struct sluice_error *err)
{
	struct sluice_client *c = r->c;
	uint8_t st[IPC_CTL_STATE_MAX];
	struct lc_ring *old;
	uint64_t old_id, old_gen;
	size_t n;
	int rc;

	bool back = r->moved; /* on its own pipeline: this move is the one back */

	drop_old_readers(r, r->n_old == LC_OLD_MAX);
	pthread_mutex_lock(&c->lock);
	rc = save_locked(r, &(struct ipc_ctl_reader_ref){ 0 }, st, sizeof(st), &n, err);
	if (rc < 0) {
		pthread_mutex_unlock(&c->lock);
		return rc;
	}
	old = r->ring;
	old_id = r->reader_id;
	old_gen = r->gen;
	r->moved = !back;
	r->ring = NULL;
	size_t token_len = r->token_len;
	uint64_t first_epoch = r->first_epoch;
	r->token_len = 0; /* from the state just saved, not a resume */
	/* the daemon's default policy brings it back once caught up (catch up: never) */
	r->move = back					 ? IPC_CTL_MOVE_BACK
		  : r->lag_policy == IPC_CTL_LAG_DEFAULT ? IPC_CTL_MOVE_OFF
							 : IPC_CTL_MOVE_NONE;
	rc = attach_locked(r, err);
	r->move = IPC_CTL_MOVE_NONE;
	/* a late reader moved before its first whole epoch still skips what precedes it */
	if (r->first_epoch < first_epoch)
		r->first_epoch = first_epoch;
	if (rc < 0) {
		r->token_len = token_len;
		r->ring = old;
		r->moved = back;
		pthread_mutex_unlock(&c->lock);
		return rc;
	}
	r->old[r->n_old++] = (struct lc_old){ .ring = old, .reader_id = old_id, .gen = old_gen };
	pthread_mutex_unlock(&c->lock);
	drop_old_readers(r, false);
	return 0;
}

int sluice_next(struct sluice_reader *r, int timeout_ms, struct sluice_batch **ret_batch,
		struct sluice_error *err)
{
	int64_t start = mono_ms(), deadline = start + (timeout_ms > 0 ? timeout_ms : 0);
	int64_t check_at = start + LC_SLICE_MS;
	char what[300];
	bool lost = false;
	int rc;

	if (!r || !ret_batch)
		return lc_fail(err, -EINVAL, "next: no reader or ret_batch");
	if (r->error)
		return lc_fail(err, r->error, "%s", r->error_msg);
	if (r->eos)
		return 0;
	if (r->n_old)
		drop_old_readers(r, false);
	for (;;) {
		struct ipc_ring_batch rb;
		int64_t slice = 0, now;

		if (lost || !r->ring ||
		    atomic_load_explicit(&r->c->gen, memory_order_relaxed) != r->gen) {
			rc = reattach(r, err);
			if (rc < 0)
				return rc;
			lost = false;
		}
		if (timeout_ms != 0) {
			/* Wait in slices: short ones while releases of this ring may be queued. */
			slice = ring_batches_out(r->ring) ? LC_HOLD_SLICE_MS : LC_SLICE_MS;
			if (timeout_ms > 0 && slice > deadline - mono_ms())
				slice = deadline - mono_ms();
			if (slice < 1)
				slice = 1;
		}
		ring_lock(r->ring);
		rc = ipc_ring_client_next(r->ring->rc, slice * 1000000, &rb);
		ring_unlock(r->ring);
		if (rc == 0 && rb.epoch < r->first_epoch && !(rb.flags & IPC_BATCH_F_ERROR)) {
			/* a late reader gets whole epochs: the tail of an earlier one goes back */
			ring_lock(r->ring);
			ipc_ring_client_release(r->ring->rc, &rb);
			ring_unlock(r->ring);
			continue;
		}
		if (rc == 0) {
			rc = take(r, &rb, ret_batch, err);
			if (rc == 2)
				continue; /* read before a restart */
			return rc;
		}
		if (rc == -ENODATA) {
			r->eos = true;
			return 0;
		}
		if (rc == -EXDEV) { /* moved off the shared stream: on from our own pipeline */
			rc = move_off(r, err);
			if (rc < 0)
				return rc;
			continue;
		}
		if (rc == -EAGAIN || rc == -ETIMEDOUT) {
			now = mono_ms();
			if (timeout_ms == 0 || now >= check_at ||
			    (timeout_ms > 0 && now >= deadline)) {
				/* Nothing yet: is the daemon still there? */
				check_at = now + LC_SLICE_MS;
				if (!conn_ok(r, 0)) {
					lost = true;
					continue;
				}
			}
			if (timeout_ms == 0 || (timeout_ms > 0 && now >= deadline))
				return lc_fail(err, -ETIMEDOUT, "next: no batch within %d ms",
					       timeout_ms);
			continue;
		}
		if (rc == -ETIME) {
			reader_what(r, "next", what, sizeof(what));
			return lc_fail(err, rc,
				       "%s: sluiced removed this reader: it held a batch longer "
				       "than "
				       "the lease (sluiced --lease), and its batches went to the "
				       "other "
				       "members of its group",
				       what);
		}
		if (rc == -ENOLINK) {
			char why[sizeof(err->msg)];

			reader_what(r, "next", what, sizeof(what));
			ring_lock(r->ring);
			ipc_ring_client_why(r->ring->rc, why, sizeof(why));
			ring_unlock(r->ring);
			if (why[0]) /* which rank, for how long: the daemon's words */
				return lc_fail(err, rc, "%s: sluiced removed this reader: %s", what,
					       why);
			return lc_fail(err, rc,
				       "%s: sluiced removed this reader: a rank of its group has "
				       "had "
				       "no reader for longer than the lease (sluiced --lease; a "
				       "process of the job was killed?) while its batches hold the "
				       "ring, so the group cannot go on (sluiced's log says which "
				       "rank): restart the job from its checkpoint",
				       what);
		}
		if (rc == -ECONNABORTED) {
			/* Removed: because the daemon is going away (re-attach), or for good. */
			if (!conn_ok(r, LC_ABORT_GRACE_MS)) {
				lost = true;
				continue;
			}
			reader_what(r, "next", what, sizeof(what));
			return lc_fail(err, rc, "%s: sluiced removed this reader", what);
		}
		reader_what(r, "next", what, sizeof(what));
		if (rc == -EBADMSG)
			return lc_fail(err, rc, "%s: the ring holds an impossible value", what);
		return lc_fail(err, rc, "%s: the pipeline failed: %s", what, sluice_strerror(rc));
	}
}

/*
 * From any thread. Never waits for a reader sleeping in next: when the ring's lock is taken,
 * the batch is queued for whoever holds it (see client_internal.h).
 */
void sluice_batch_release(struct sluice_batch *b)
{
	struct lc_ring *ring;

	if (!b)
		return;
	lc_cuda_batch_wait(b); /* DMA may still read it */
	ring = b->ring;
	ring_ref(ring); /* the ring outlives this call even when another thread frees b */
	pthread_mutex_lock(&ring->mu);
	b->next_pending = ring->pending;
	ring->pending = b;
	pthread_mutex_unlock(&ring->mu);
	ring_drain(ring);
	lc_ring_unref(ring);
}

/* SAVE_STATE for the reader: into buf and r->state (for re-attaching). Under c->lock. */
static int save_locked(struct sluice_reader *r, const struct ipc_ctl_reader_ref *at, void *buf,
		       size_t cap, size_t *ret_len, struct sluice_error *err)
{
	struct sluice_client *c = r->c;
	struct ipc_ctl_reader_ref ref;
	uint64_t id;
	char what[300];
	int rc;

	reader_what(r, "save", what, sizeof(what));
	if (!r->ring || r->gen != atomic_load_explicit(&c->gen, memory_order_relaxed) ||
	    !lc_poll_locked(c, 0)) {
		rc = lc_fail(err, -ECONNRESET,
			     "%s: the connection to sluiced was lost "
			     "(sluice_next re-attaches)",
			     what);
		goto out;
	}
	ref = *at;
	ref.reader_id = r->reader_id;
	rc = lc_save_state_locked(c, &ref, what, buf, cap, ret_len, &id, err);
	if (rc < 0)
		goto out;
	if (id != r->reader_id) {
		rc = lc_fail(err, -EBADMSG,
			     "%s: STATE is for reader %" PRIu64 ", expected %" PRIu64, what, id,
			     r->reader_id);
		goto out;
	}
	if (!at->at) { /* the reader's own position: for re-attaching */
		memcpy(r->state, buf, *ret_len);
		r->state_len = *ret_len;
	}
out:
	return rc;
}

int lc_save_state_locked(struct sluice_client *c, const struct ipc_ctl_reader_ref *ref,
			 const char *what, void *buf, size_t cap, size_t *ret_len,
			 uint64_t *ret_reader_id, struct sluice_error *err)
{
	struct ipc_ctl_state st;
	struct ipc_ctl_msg m;
	size_t len, nfds = 0;
	char emsg[256];
	uint32_t req = lc_req_id_locked(c);
	int rc = ipc_ctl_encode_reader_ref(c->sbuf, IPC_CTL_MAX_MSG, IPC_CTL_SAVE_STATE, req, ref,
					   &len);

	if (rc < 0)
		return lc_fail(err, rc, "%s: encoding: %s", what, strerror(-rc));
	rc = lc_call_locked(c, len, req, IPC_CTL_STATE, &m, NULL, 0, &nfds, what, err);
	if (rc < 0)
		return rc;
	rc = ipc_ctl_decode_state(&m, &st, emsg, sizeof(emsg));
	if (rc < 0)
		return lc_fail(err, rc, "%s: %s", what, emsg);
	if (st.state_len > cap)
		return lc_fail(err, -ENOBUFS, "%s: the state has %u bytes, the buffer %zu", what,
			       st.state_len, cap);
	memcpy(buf, st.state, st.state_len);
	*ret_len = st.state_len;
	*ret_reader_id = st.reader_id;
	return 0;
}

int sluice_reader_save(struct sluice_reader *r, void *buf, size_t cap, size_t *ret_len,
		       struct sluice_error *err)
{
	int rc;

	if (!r || !buf || !ret_len)
		return lc_fail(err, -EINVAL, "save: no reader, buffer or ret_len");
	pthread_mutex_lock(&r->c->lock);
	rc = save_locked(r, &(struct ipc_ctl_reader_ref){ 0 }, buf, cap, ret_len, err);
	pthread_mutex_unlock(&r->c->lock);
	return rc;
}

int sluice_reader_save_at(struct sluice_reader *r, uint64_t epoch, uint64_t index_in_epoch,
			  uint64_t seq, void *buf, size_t cap, size_t *ret_len,
			  struct sluice_error *err)
{
	struct ipc_ctl_reader_ref at = {
		.at = true, .at_epoch = epoch, .at_index = index_in_epoch, .at_seq = seq
	};
	int rc;

	if (!r || !buf || !ret_len)
		return lc_fail(err, -EINVAL, "save: no reader, buffer or ret_len");
	pthread_mutex_lock(&r->c->lock);
	rc = save_locked(r, &at, buf, cap, ret_len, err);
	pthread_mutex_unlock(&r->c->lock);
	return rc;
}
