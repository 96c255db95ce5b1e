/* SPDX-License-Identifier: Apache-2.0 */
/* The shared-memory batch ring (DESIGN.md §5, §6): the daemon publishes, clients read it. */
#ifndef SLUICE_IPC_RING_H
#define SLUICE_IPC_RING_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * One ring per served stream. The daemon side (struct ipc_ring) owns a sealed memfd holding a
 * header, the schema table, a slot table and the data area where batch extents (ipc/batch.h)
 * live; clients map it read-only. Each reader also gets a small control-block memfd of its own,
 * writable by it and by the daemon, that carries its cursor, its releases and its wait words.
 * The protocol, the layout and the consumer modes are described in docs/ring.md.
 *
 * Neither side starts threads or takes locks: the daemon drives struct ipc_ring from one thread
 * (or under its own lock); one client thread at a time uses a struct ipc_ring_client.
 */

#define IPC_RING_MAX_READERS 64
#define IPC_RING_MAX_GROUPS  64
#define IPC_RING_MAX_SLOTS   4096u
#define IPC_RING_MIN_SLOTS   2u
#define IPC_RING_MAX_SCHEMA  1024u
#define IPC_RING_MAX_DATA    (1ull << 40)
#define IPC_RING_NAME_MAX    64 /* a tensor name: up to 63 bytes and a NUL */

/* The shared layout's version (docs/ring.md), as ATTACHED reports it: 2 since consumer groups. */
#define IPC_RING_LAYOUT_VERSION 2

enum ipc_ring_mode {
	IPC_RING_BROADCAST = 0, /* every reader sees every batch */
	IPC_RING_SPLIT = 1,	/* each batch to exactly one reader, whoever has room first */
	IPC_RING_RANK = 2,	/* batch k to the reader with rank index k mod rank_n */
};

/* One output tensor of the pipeline's schema (shared-memory layout: 136 bytes). */
struct ipc_ring_tensor {
	char name[IPC_RING_NAME_MAX]; /* NUL-terminated */
	uint8_t dtype;		      /* enum ipc_dtype */
	uint8_t rank;		      /* 1 .. IPC_BATCH_MAX_RANK, the batch dimension included */
	uint8_t ragged;		      /* 0 or 1: axis 1 is ragged (row_splits) */
	uint8_t reserved[5];
	int64_t shape[8]; /* static shape; -1 where it varies (shape[0]: rows) */
};

_Static_assert(sizeof(struct ipc_ring_tensor) == 136, "schema entry layout");

/* ------------------------------------------------------------------------------------------ */
/* Daemon side */

struct ipc_ring;

/*
 * Memory by use (docs/ring.md, "Memory"): the memfd has the data area's whole size, but only a
 * committed prefix of the data area is allocated (fallocate), and extents are taken inside it
 * only. It starts at commit_bytes and grows by commit_chunk steps when the batches the ring
 * holds need more; it never shrinks (the seals forbid punching holes).
 */
#define IPC_RING_COMMIT_DEFAULT (4ull << 20) /* ipc_ring_opts.commit_bytes */
#define IPC_RING_CHUNK_DEFAULT	(2ull << 20) /* ipc_ring_opts.commit_chunk */

struct ipc_ring_opts {
	size_t size;	       /* sizeof(struct ipc_ring_opts), set by _init */
	uint64_t data_bytes;   /* the data area (the maximum); rounded up to 4096; default 64 MiB */
	uint64_t commit_bytes; /* the memfd's bytes committed at creation, header and tables
				* included, rounded up to a commit_chunk boundary (at least a
				* page of data; UINT64_MAX: everything up front); default
				* IPC_RING_COMMIT_DEFAULT */
	uint64_t commit_chunk; /* the growth step; rounded up to 4096; default
				* IPC_RING_CHUNK_DEFAULT */
	uint64_t commit_limit; /* fault injection (tests): growth past this many bytes of the data
				* area fails with -ENOSPC, as on a full tmpfs; 0: no limit */
	uint32_t n_slots;      /* published batches the ring can hold: a power of two, default 64 */
	enum ipc_ring_mode mode;
	uint32_t rank_n;      /* IPC_RING_RANK: the number of ranks (1 .. IPC_RING_MAX_READERS) */
	uint32_t split_depth; /* IPC_RING_SPLIT: batches handed to a reader ahead of its reads
			       * (default 2; 1 .. n_slots) */
	const struct ipc_ring_tensor *schema; /* copied */
	uint32_t n_schema;		      /* <= IPC_RING_MAX_SCHEMA */
	const char *name; /* the memfd's name (shows in /proc/PID/fd), or NULL */
};

void ipc_ring_opts_init(struct ipc_ring_opts *opts);

/*
 * Create the ring: a memfd of the whole size of which the header, the tables and commit_bytes
 * of the data area are reserved with fallocate (so running out of memory is -ENOSPC/-ENOMEM
 * here or at a later growth, never a SIGBUS), mapped read-write by the daemon, then sealed
 * against shrinking, growing, future writable mappings and further seals. Returns 0, -EINVAL
 * (opts, with a message in msg), -ENOSPC, -ENOMEM, -errno. The caller owns *ret_ring.
 */
int ipc_ring_create(const struct ipc_ring_opts *opts, struct ipc_ring **ret_ring, char *msg,
		    size_t msg_cap);
/* Unmaps and closes everything, the readers' control blocks included. NULL is fine. */
void ipc_ring_destroy(struct ipc_ring *ring);

/*
 * The data fd to hand to clients (SCM_RIGHTS duplicates it): opened read-only where /proc is
 * there, the sealed memfd otherwise. Owned by the ring.
 */
int ipc_ring_data_fd(const struct ipc_ring *ring);

/* A reservation in the data area: the daemon writes the batch at mem, then publishes it. */
struct ipc_ring_extent {
	void *mem;    /* 4096-aligned, writable, cap bytes */
	uint64_t off; /* from the start of the data area */
	uint64_t cap; /* the reservation rounded up to 4096 */
	uint64_t id_; /* private */
};

/*
 * Reserve a slot and len bytes for a batch. Several reservations may be outstanding, published
 * or cancelled in any order. The extent is the smallest free range of committed memory that
 * fits (the lowest of equals). When no slot or no such range is left, the oldest batches that
 * every reader released are reclaimed (not before: a reader that attaches late can still read
 * them); when that is not enough either, the committed memory grows. Returns 0 and *ret_ext,
 * -EAGAIN (slots or space are held by batches not yet released: collect and retry; also when
 * growing failed and releases would make room: ipc_ring_info.commit_error says why),
 * -E2BIG (len can never fit), -EINVAL (len 0), -EPIPE (end of stream or error was set),
 * -ENOSPC/-ENOMEM (growing failed, and no release can make room: fallocate's error).
 */
int ipc_ring_reserve(struct ipc_ring *ring, uint64_t len, struct ipc_ring_extent *ret_ext);

enum {
	IPC_RING_RESERVE_NO_RECLAIM = 1u << 0, /* keep released batches: -EAGAIN instead */
	IPC_RING_RESERVE_NO_GROW = 1u << 1,    /* committed memory only: -EAGAIN instead */
};
/* ipc_ring_reserve with IPC_RING_RESERVE_* flags (0: what ipc_ring_reserve does). */
int ipc_ring_reserve_flags(struct ipc_ring *ring, uint64_t len, unsigned flags,
			   struct ipc_ring_extent *ret_ext);
/* Give a reservation back unpublished. 0, or -EINVAL (not an outstanding reservation). */
int ipc_ring_cancel(struct ipc_ring *ring, const struct ipc_ring_extent *ext);
/*
 * Publish a reservation holding len <= ext->cap bytes (the batch's total_bytes; the rest of the
 * extent is given back); the sequence number is the ring's next one (from 0). Broadcast:
 * every attached reader will hold it; split/rank: it is handed to a reader now or later. Wakes
 * readers that sleep. Returns 0 and *ret_seq (may be NULL), -EINVAL, -EPIPE.
 */
int ipc_ring_publish(struct ipc_ring *ring, const struct ipc_ring_extent *ext, uint64_t len,
		     uint64_t epoch, uint32_t flags, uint64_t *ret_seq);

/*
 * Add a reader: creates its control-block memfd (*ret_cb_fd, owned by the ring until the reader
 * is removed; hand it with ipc_ring_data_fd() to the client). rank_index: IPC_RING_RANK only
 * (0 .. rank_n - 1, one reader each), else ignored. A broadcast reader starts at the ring's
 * low: the oldest batch from which on every batch is still in the ring. Returns 0, -EUSERS
 * (IPC_RING_MAX_READERS attached), -EBUSY (rank taken), -EINVAL, -ENOMEM, -errno.
 */
int ipc_ring_add_reader(struct ipc_ring *ring, uint32_t rank_index, unsigned *ret_id,
			int *ret_cb_fd);

/*
 * Consumer groups (docs/ring.md): one ring serves any number of groups, each in its own mode,
 * from one sequence. Group 0 is the ring's own (ipc_ring_opts.mode, rank_n, split_depth), the
 * one ipc_ring_add_reader adds to. A group receives every batch from seq `from` on that the
 * ring still holds (from the ring's low when `from` is older; 0: everything there is) and
 * every batch published later. In a split or rank group each is pending until handed to one
 * member (and held by the ring meanwhile, as a split ring with no reader holds its batches); a
 * member removed while holding batches it took gives them back to its group, and their next
 * hand-out carries IPC_RING_BATCH_REDELIVERED. A broadcast group's members each hold every
 * batch, as broadcast readers do. Returns 0 and *ret_gid, -EINVAL (mode,
 * rank_n 1 .. IPC_RING_MAX_READERS, split_depth 1 .. n_slots), -ENOSPC (IPC_RING_MAX_GROUPS
 * open), -ENOMEM.
 */
int ipc_ring_group_open(struct ipc_ring *ring, enum ipc_ring_mode mode, uint32_t rank_n,
			uint32_t split_depth, uint64_t from, unsigned *ret_gid);
/*
 * Close group gid (0 too: ipc_ring_add_reader then says -ENOENT): the batches pending in it
 * are given up. -EBUSY while it has members, -ENOENT when it is not open.
 */
int ipc_ring_group_close(struct ipc_ring *ring, unsigned gid);
/* ipc_ring_add_reader into group gid (-ENOENT: not open). */
int ipc_ring_add_reader_to(struct ipc_ring *ring, unsigned gid, uint32_t rank_index,
			   unsigned *ret_id, int *ret_cb_fd);
/*
 * ipc_ring_add_reader_to for a broadcast group, the reader starting at seq (the first batch it
 * takes) instead of at low: a reader that resumes from a position the ring still holds, such as
 * one moved off the shared stream that caught up on its own (docs/ring.md, "Joining at a
 * seq"). It holds every batch from seq on, as a late reader holds every batch from low on.
 * -ERANGE when the ring no longer holds seq (below low, or below the group's from) or it is
 * past head (head itself is fine: the next batch published); -EINVAL (not a broadcast group);
 * otherwise as ipc_ring_add_reader_to.
 */
int ipc_ring_add_reader_at(struct ipc_ring *ring, unsigned gid, uint64_t seq, unsigned *ret_id,
			   int *ret_cb_fd);
/* The mode of group gid, or -ENOENT. */
int ipc_ring_group_mode(const struct ipc_ring *ring, unsigned gid);
/*
 * Remove a reader (it exited, was killed, or is evicted): every batch it held is released at
 * once; in split and rank mode the batches handed to it that it never released, taken or not,
 * go back to be handed to another reader (split) or to the next reader of its rank, so nothing
 * is lost. Its control block is marked evicted (a live client sees -ECONNABORTED, or -ETIME
 * when ipc_ring_lease_check marked it), unmapped
 * and closed. 0, or -ENOENT.
 */
int ipc_ring_remove_reader(struct ipc_ring *ring, unsigned id);

/*
 * Take in what the readers released and where they are (their control blocks are untrusted:
 * a reader whose block holds an impossible value is marked bad, its id's bit set in *ret_bad,
 * and it is left alone until the caller removes it; ipc_ring_reader_problem() says why).
 * Hands pending batches to split/rank readers. Returns the number of releases taken in.
 */
int ipc_ring_collect(struct ipc_ring *ring, uint64_t *ret_bad);
/*
 * Leases (split and rank readers): a reader that has held the same batch (handed to it, taken
 * or not, not released) for more than lease_ns since a check first saw it hold it is marked bad
 * (its problem says which batch, for how long), so that the caller removes it and its batches
 * go to its group, as a Kafka consumer past max.poll.interval.ms loses its partitions. Call
 * with the monotonic time, after ipc_ring_collect; lease_ns 0 checks nothing. The readers marked
 * bad (ipc_ring_collect's *ret_bad) in *ret_bad; returns how many this call marked.
 */
int ipc_ring_lease_check(struct ipc_ring *ring, uint64_t now_ns, uint64_t lease_ns,
			 uint64_t *ret_bad);
/*
 * Rank group gid: a rank that has no reader while batches of its wait for it (the lowest such),
 * in *ret_rank, with how many wait in *ret_pending. 0, or -ENOENT (none; no such group), -EINVAL
 * (not a rank group). Those batches hold their slots: once the ring is full of them the others
 * get nothing more, so the daemon ends such a group after its lease.
 */
int ipc_ring_group_vacant(const struct ipc_ring *ring, unsigned gid, uint32_t *ret_rank,
			  uint32_t *ret_pending);
/*
 * Reader id's removal (ipc_ring_remove_reader) tells it that its group cannot go on: the client
 * sees -ENOLINK, and why (text for a person, or NULL: none; cut at 1023 bytes) in its control
 * block (ipc_ring_client_why). 0, or -ENOENT.
 */
int ipc_ring_mark_orphan(struct ipc_ring *ring, unsigned id, const char *why);
/* Why reader id was marked bad ("" when it is not, NULL when there is no such reader). */
const char *ipc_ring_reader_problem(const struct ipc_ring *ring, unsigned id);

/*
 * The oldest published batch not yet released by everyone (the one holding its slot and extent
 * longest): its seq and the readers holding it (0: a split/rank batch not handed to anyone yet).
 * 0, or -ENOENT (nothing held).
 */
int ipc_ring_oldest(const struct ipc_ring *ring, uint64_t *ret_seq, uint64_t *ret_holders);
/*
 * Batches published but not yet taken by reader id: broadcast, the ring head minus its cursor;
 * split/rank, those handed to it not yet taken (rank: plus those waiting for its rank). As of
 * the last collect. 0, or -ENOENT.
 */
int ipc_ring_reader_lag(const struct ipc_ring *ring, unsigned id, uint64_t *ret_lag);
/*
 * The cursor of the leading broadcast reader still on the stream (not moved off, not marked
 * bad), reader except left out (IPC_RING_MAX_READERS: none), as of the last collect: where a
 * reader would be counted behind from by a lag policy with behind_others. 0, or -ENOENT (no
 * such reader).
 */
int ipc_ring_lead_cursor(const struct ipc_ring *ring, unsigned except, uint64_t *ret_cursor);
/*
 * Broadcast lag policy (DESIGN.md §5) of reader id; set before its fds are handed out. Unset
 * (all zero, the default of a new reader) it holds the others back for as long as it lags.
 * Otherwise it is moved off the shared stream: it holds no batch it has not taken (nor any
 * published later), and its next take after its last one returns -EXDEV to the client (its
 * position: ipc_ring_reader_lag, from head). It is moved, after a publish or when a reserve
 * finds no room,
 *   - max_lag (> 0): once it is more than max_lag batches behind head, or, with
 *     behind_others, behind the cursor of the leading other broadcast reader still on the
 *     stream (alone it is behind nobody: the writer running ahead is no lag);
 *   - timeout_ns (> 0): once it has held the others back that long: a reserve found no room
 *     while it held the oldest batch that another reader still on the stream had released
 *     (or not been given), and meanwhile neither its cursor nor its releases moved.
 * -ENOENT, -EINVAL (not broadcast).
 */
struct ipc_ring_lag {
	uint64_t max_lag;    /* batches; 0: no limit */
	bool behind_others;  /* max_lag counts from the leading other reader, not from head */
	uint64_t timeout_ns; /* 0: no time bound */
};
int ipc_ring_set_lag(struct ipc_ring *ring, unsigned id, const struct ipc_ring_lag *lag);
/* ipc_ring_set_lag with { max_lag } alone: behind head, no time bound (0: it holds). */
int ipc_ring_set_max_lag(struct ipc_ring *ring, unsigned id, uint64_t max_lag);
/*
 * How long reader id has held the others back, as of the last reserve that found no room (0:
 * it does not, or the writer had room since). Any broadcast reader, whatever its policy: what
 * explains a writer that waits. 0, or -ENOENT.
 */
int ipc_ring_reader_holding(const struct ipc_ring *ring, unsigned id, uint64_t *ret_ns);
/* Why reader id was moved off: the IPC_RING_MOVED_* that did it (0: it was not), or -ENOENT. */
enum {
	IPC_RING_MOVED_CALL = 1, /* ipc_ring_move_reader */
	IPC_RING_MOVED_LAG = 2,	 /* past its max_lag */
	IPC_RING_MOVED_TIME = 3, /* it held the others back past its timeout_ns */
};
int ipc_ring_reader_moved_why(const struct ipc_ring *ring, unsigned id);
/* Move reader id off now (what the lag policy does); *ret_end: the seq its stream ends at. */
int ipc_ring_move_reader(struct ipc_ring *ring, unsigned id, uint64_t *ret_end);
/* Whether reader id was moved off (1), not (0), or -ENOENT. */
int ipc_ring_reader_moved(const struct ipc_ring *ring, unsigned id);

/*
 * What reader id says of itself in its control block (statistics only, not trusted): batches
 * its next() returned and the time next() waited for them. 0, or -ENOENT.
 */
int ipc_ring_reader_counters(const struct ipc_ring *ring, unsigned id, uint64_t *ret_taken,
			     uint64_t *ret_wait_ns);

/* No batch follows the ones published: readers see -ENODATA once they took them all. 0/-EPIPE. */
int ipc_ring_set_eos(struct ipc_ring *ring);
/* The stream failed: readers see err (a negative errno) from their next call on. 0/-EINVAL. */
int ipc_ring_set_error(struct ipc_ring *ring, int err);

/*
 * Sleep until a reader released something or wants a batch that a collect can hand it, or
 * timeout_ns passes (< 0: no limit). The daemon calls it when reserve says -EAGAIN after a
 * collect. 0 (go and collect), -ETIMEDOUT, -EINTR.
 */
int ipc_ring_wait(struct ipc_ring *ring, int64_t timeout_ns);
/*
 * ipc_ring_wait, woken only once a reader has released want batches since the last collect
 * (or any, if it is asleep for a batch; want 0 is 1): the daemon then finds room for several
 * batches and makes them at once, instead of being woken for each release of a full ring.
 */
int ipc_ring_wait_releases(struct ipc_ring *ring, int64_t timeout_ns, uint32_t want);
/*
 * ipc_ring_wait_releases called under lock (the caller's lock on the ring, held: NULL for
 * none), which it releases while it sleeps and takes again before it returns, as
 * pthread_cond_wait does: the ring's state may change meanwhile (readers attach, go).
 */
int ipc_ring_wait_releases_unlocking(struct ipc_ring *ring, int64_t timeout_ns, uint32_t want,
				     pthread_mutex_t *lock);

struct ipc_ring_info {
	uint64_t head;	    /* the next seq to publish */
	uint64_t low;	    /* every seq in [low, head) is still in the ring */
	uint64_t data_used; /* bytes of the data area in extents (reserved or published) */
	uint64_t data_size; /* the maximum */
	uint64_t committed; /* bytes of the data area allocated (fallocate): extents lie inside */
	uint64_t commit_grows; /* times the committed memory grew */
	uint64_t commit_fails; /* times growing failed */
	int commit_error;      /* the last growth's failure (-errno), 0 once one succeeds */
	uint32_t n_slots;
	uint32_t n_readers;
	uint32_t n_free_slots;
	uint64_t readers; /* bit per attached reader id */
	uint64_t moved;	  /* broadcast: bit per reader moved off by the lag policy */
};
void ipc_ring_get_info(const struct ipc_ring *ring, struct ipc_ring_info *ret_info);

/* ------------------------------------------------------------------------------------------ */
/* Client side */

struct ipc_ring_client;

/*
 * In ipc_ring_batch.flags: a split or rank group member took this batch before, and went away
 * without releasing it (at least once delivery: it may have been used).
 */
#define IPC_RING_BATCH_REDELIVERED (1u << 31)

/* A published batch, borrowed from the read-only mapping until released. */
struct ipc_ring_batch {
	const void *mem; /* the extent: check it with ipc_batch_view() */
	uint64_t len;
	uint64_t seq;
	uint64_t epoch;
	uint32_t flags; /* IPC_BATCH_F_* as the daemon published them, and
			   IPC_RING_BATCH_REDELIVERED */
	uint32_t slot_; /* private: where it lives */
};

/*
 * Attach from the two fds the daemon handed over (not taken: the caller may close them at once).
 * The data memfd must be sealed against writes, shrinking, growing and further seals, or it is
 * refused (-EPERM); its header, schema and sizes are checked (-EBADMSG, with a message), then it
 * is mapped read-only and the control block read-write. -ENOMEM, -errno.
 */
int ipc_ring_client_attach(int data_fd, int cb_fd, struct ipc_ring_client **ret_client, char *msg,
			   size_t msg_cap);
/* Unmap both and free. Held batches are released by the daemon when it removes the reader. */
void ipc_ring_client_detach(struct ipc_ring_client *c);

/*
 * The next batch for this reader, in order. No system call when one is already published: it
 * spins briefly, then sleeps on the control block's wake word. timeout_ns: 0 try once, < 0 no
 * limit. Returns 0 and *ret_batch, -EAGAIN (timeout 0, nothing yet), -ETIMEDOUT, -ENODATA (end
 * of stream: every batch was taken), -ECONNABORTED (the daemon removed this reader), -ETIME (it
 * removed this split or rank reader for holding a batch past the lease), -ENOLINK (it removed
 * this rank reader because its group cannot go on: ipc_ring_client_why says why), -EXDEV
 * (moved off the shared stream by the lag policy: no batch after the last one taken), the ring's
 * error (ipc_ring_set_error), -EBADMSG (shared memory holds an impossible value).
 */
int ipc_ring_client_next(struct ipc_ring_client *c, int64_t timeout_ns,
			 struct ipc_ring_batch *ret_batch);
/*
 * Give a batch back (b as next() returned it; only seq and slot_ are used, so a copy will do).
 * 0, -EINVAL (not held), -ENOBUFS (the daemon collects nothing).
 */
int ipc_ring_client_release(struct ipc_ring_client *c, const struct ipc_ring_batch *b);

/* The pipeline's schema as checked at attach (owned by c). */
const struct ipc_ring_tensor *ipc_ring_client_schema(const struct ipc_ring_client *c,
						     size_t *ret_n);
/* The read-only data area (for cudaHostRegister) and its length. */
const void *ipc_ring_client_data(const struct ipc_ring_client *c, uint64_t *ret_len);
/*
 * After next() returned -ENOLINK: why the daemon removed this reader, as it wrote it in the
 * control block, copied into buf (cap > 0: always NUL-terminated; "" when it said nothing, an
 * older daemon). Returns the length copied.
 */
size_t ipc_ring_client_why(const struct ipc_ring_client *c, char *buf, size_t cap);
enum ipc_ring_mode ipc_ring_client_mode(const struct ipc_ring_client *c);
unsigned ipc_ring_client_id(const struct ipc_ring_client *c);

#endif
