/* SPDX-License-Identifier: Apache-2.0 */
/* libsluice internals shared by its files (and by sluicectl, which links the static library). */
#ifndef SLUICE_LIBCLIENT_CLIENT_INTERNAL_H
#define SLUICE_LIBCLIENT_CLIENT_INTERNAL_H

#include "sluice/sluice.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/un.h>

#include "ipc/batch.h"
#include "ipc/ctl.h"
#include "ipc/ring.h"

/*
 * Who owns what:
 *
 *   struct sluice_client   the socket (one request at a time, under lock), the list of its
 *                          readers, the connection generation gen (bumped at every connect).
 *   struct sluice_reader   one attachment: its options (for re-attaching), its current ring.
 *   struct lc_ring         one mapping of a ring (ipc_ring_client), reference-counted: the
 *                          reader holds one reference while it is its current ring, every
 *                          batch taken from it holds one. After a reconnect or a detach the
 *                          old ring lives on until its last batch is released.
 *   struct sluice_batch    a batch taken from an lc_ring; freed by sluice_batch_release(),
 *                          from any thread.
 *
 * Locks: client->lock guards the socket, req ids, gen and the readers list (never held while
 * a reader waits for a batch).
 *
 * A ring client is used by one thread at a time (ipc/ring.h), but batches are released from
 * any thread while the reader's thread may be waiting in next for the daemon, which may in
 * turn be waiting for those very releases (a full ring): a release must never wait for next.
 * So lc_ring->lock is taken around every ipc_ring_client_* call, next waits in slices of
 * LC_HOLD_SLICE_MS while batches of that ring are out, and a release that finds the lock
 * taken queues the batch on `pending` (under mu) instead of waiting. Whoever holds the lock
 * drains the queue right after it lets go (ring_unlock), so a queued release reaches the
 * daemon within one slice.
 */

#define LC_REPLY_TIMEOUT_MS 30000 /* a daemon that does not answer a request in time is gone */
#define LC_SLICE_MS	    200	  /* next() checks the socket this often while it waits */
#define LC_HOLD_SLICE_MS    1	  /* ... and lets queued releases through this often */
#define LC_RETRY_MS	    100	  /* between reconnect attempts */
#define LC_ABORT_GRACE_MS   100	  /* after -ECONNABORTED: how long to wait for EOF/SHUTDOWN */
/*
 * The re-attach window after the daemon went away, by default (SLUICE_REATTACH_S overrides it):
 * systemd restarts sluiced RestartSec=1s after a crash (tools/systemd/sluiced.service.in) and it
 * is READY within ~10 ms (30 ms at most, measured: docs/python.md); an administrator's restart
 * takes its SIGTERM stop too. A minute covers both with room, where a job would otherwise die.
 */
#define LC_DEFAULT_REATTACH_S 60
#define LC_DEFAULT_TRIES      (LC_DEFAULT_REATTACH_S * 1000 / LC_RETRY_MS)

struct sluice_client {
	pthread_mutex_t lock;
	int fd;		      /* -1 while disconnected */
	_Atomic uint64_t gen; /* written under lock; readers compare without it */
	bool shutdown_seen;   /* a SHUTDOWN notice came on this connection */
	uint32_t shutdown_flags;
	char shutdown_reason[IPC_CTL_TEXT_MAX + 1];
	uint32_t next_req;
	struct ipc_ctl_hello_ok hello;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct sluice_reader *readers; /* doubly linked through prev/next */
	uint8_t *sbuf, *rbuf;	       /* IPC_CTL_MAX_MSG bytes each */
};

struct lc_ring {
	pthread_mutex_t lock; /* every call on rc */
	struct ipc_ring_client *rc;
	pthread_mutex_t mu; /* refs and pending (never held across a ring call) */
	unsigned refs;
	struct sluice_batch *pending;	      /* released while lock was taken: to release on rc */
	const struct ipc_ring_tensor *schema; /* owned by rc */
	size_t n_schema;
	_Atomic int cuda_reg; /* cuda.c: is the data area registered with CUDA */
};

/* Readers a move left behind whose batches the caller still holds (a move off, then back). */
#define LC_OLD_MAX 4

struct sluice_reader {
	struct sluice_client *c;
	struct sluice_reader *prev, *next;
	struct lc_ring *ring; /* NULL while not attached (a reconnect failed) */
	uint64_t reader_id;
	uint64_t gen;			 /* the connection it was attached on */
	char name[IPC_CTL_NAME_MAX + 1]; /* from ATTACHED */
	/* The attach options, for re-attaching. */
	char *spec; /* attached by spec: a copy, else NULL */
	size_t spec_len;
	char *spec_dir; /* with spec: where its relative paths start (lc_spec_dir) */
	char opt_name[IPC_CTL_NAME_MAX + 1];
	uint32_t mode, rank_index, rank_count;
	char group[IPC_CTL_NAME_MAX + 1]; /* split/rank: "" is the default group */
	unsigned tries;
	uint8_t state[IPC_CTL_STATE_MAX]; /* the last saved state, else the attach's */
	size_t state_len;
	uint32_t lag_policy; /* enum sluice_lag, broadcast */
	uint64_t max_lag;
	uint64_t lag_timeout_ms;
	/*
	 * Moved off the shared stream (lag policy): on its own pipeline now, until the daemon
	 * moves it back (it caught up). The readers it was moved from (the shared one, then the
	 * private one, ...) are detached once no batch of theirs is held any more; move: the
	 * ATTACH of a move says which (enum ipc_ctl_move; 0 otherwise).
	 */
	bool moved;
	uint32_t move;
	struct lc_old {
		struct lc_ring *ring;
		uint64_t reader_id;
		uint64_t gen;
	} old[LC_OLD_MAX];
	unsigned n_old;
	/* A late reader's first whole epoch (ATTACHED): batches of earlier ones are skipped. */
	uint64_t first_epoch;
	/*
	 * Restarts (docs/DECISIONS.md, "Restarts"): the resume token of its last ATTACHED (none:
	 * the daemon keeps no position), 1 + the seq of the last batch taken (0: none), and what
	 * the ATTACHED of a resume said: batches below skip_below were read before the restart
	 * (given back unread), those below redeliv_below or of epochs below redeliv_epochs may
	 * have been delivered before it (marked re-delivered).
	 */
	uint8_t token[IPC_CTL_TOKEN_MAX];
	size_t token_len;
	uint64_t next_seq;
	uint64_t skip_below, redeliv_below, redeliv_epochs;
	/* Sticky outcomes. */
	int error; /* the pipeline's error batch: returned from then on */
	char error_msg[sizeof(((struct sluice_error *)0)->msg)];
	bool eos;
};

struct sluice_batch {
	struct lc_ring *ring;
	struct sluice_batch *next_pending;
	struct ipc_ring_batch rb;
	struct ipc_batch_view v;
	void *cuda_event;   /* cuda.c: recorded after its copies, or NULL */
	bool resumed_again; /* after a daemon restart: may have been delivered before it */
};

/* ---- attach options (attach_opts.c) ---- */

/*
 * Check the caller's options and copy them into r (its spec and spec_dir allocated: the
 * caller frees them with r). 0, or -EINVAL / -EMSGSIZE / -ENOMEM with a message in err.
 */
int lc_reader_setup(struct sluice_reader *r, const struct sluice_attach_opts *opts,
		    struct sluice_error *err);

/* ---- errors (conn.c) ---- */

/* Fill err (may be NULL) with code and the formatted message; returns code. */
int lc_fail(struct sluice_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- the connection (conn.c); every _locked function wants client->lock held ---- */

/*
 * The socket path as sluice.h says (socket_path wins when not NULL) into buf. 0, or
 * -ENAMETOOLONG when it does not fit a sockaddr_un (with a message).
 */
int lc_socket_path(const char *socket_path, char *buf, size_t cap, struct sluice_error *err);

/*
 * The directory a spec's relative dataset paths are relative to, as an absolute path in a new
 * string (*ret): realpath(dir), or the working directory when dir is NULL or "". -errno with
 * a message naming what failed (what: "register", "attach").
 */
int lc_spec_dir(const char *dir, const char *what, char **ret, struct sluice_error *err);

/* Connect to client->path and say HELLO; on success fd is set and gen bumped. */
int lc_open_locked(struct sluice_client *c, struct sluice_error *err);
/* Close the socket (no-op when closed). */
void lc_close_locked(struct sluice_client *c);
/* Open the connection again when it is closed or the daemon said SHUTDOWN. */
int lc_ensure_locked(struct sluice_client *c, struct sluice_error *err);

/*
 * Send the message in c->sbuf (len bytes, req_id) and wait for its reply, of type want (or
 * ERROR). On success *ret_msg describes the reply in c->rbuf (valid until the next call) and
 * fds[] (up to max_fds) holds the fds it carried, *ret_nfds of them (the caller's to close).
 * An ERROR reply is its code with "what: text" in err. A closed socket is -ECONNRESET (the
 * connection is closed here). SHUTDOWN notices on the way are remembered.
 */
int lc_call_locked(struct sluice_client *c, size_t len, uint32_t req_id, uint16_t want,
		   struct ipc_ctl_msg *ret_msg, int *fds, size_t max_fds, size_t *ret_nfds,
		   const char *what, struct sluice_error *err);
uint32_t lc_req_id_locked(struct sluice_client *c);
/*
 * SAVE_STATE ref (a reader's, or a pipeline's by name) and its STATE reply, under c->lock: the
 * state into buf (cap bytes), its length in *ret_len, the reply's reader id in *ret_reader_id.
 * what names the call in messages.
 */
int lc_save_state_locked(struct sluice_client *c, const struct ipc_ctl_reader_ref *ref,
			 const char *what, void *buf, size_t cap, size_t *ret_len,
			 uint64_t *ret_reader_id, struct sluice_error *err);

/*
 * Read what the daemon sent unasked (SHUTDOWN notices, EOF), waiting up to wait_ms for the
 * first of them. Returns true while the connection is usable: open, and no SHUTDOWN came.
 */
bool lc_poll_locked(struct sluice_client *c, int wait_ms);

/* ---- readers (sluice.c) ---- */

/* Drop a reference to a ring (NULL is fine); the last one unmaps it. */
void lc_ring_unref(struct lc_ring *ring);

/* The schema index of a tensor name, or -ENOENT. */
int lc_schema_find(const struct lc_ring *ring, const char *name);

/* ---- CUDA (cuda.c) ---- */

/* Before the ring is unmapped: unregister its data area if a copy registered it. */
void lc_cuda_ring_fini(struct lc_ring *ring);
/* Before the batch goes back: wait for its copies to the GPU (none: a no-op). */
void lc_cuda_batch_wait(struct sluice_batch *b);

#endif
