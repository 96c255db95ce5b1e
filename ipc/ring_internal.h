/* SPDX-License-Identifier: Apache-2.0 */
/* The ring's shared-memory layouts (docs/ring.md), for ring.c, ring_client.c and their tests. */
#ifndef SLUICE_IPC_RING_INTERNAL_H
#define SLUICE_IPC_RING_INTERNAL_H

#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ring.h"

/*
 * The data memfd:
 *
 *   struct ipc_ring_hdr                   192 bytes: constants (lines 0-1), producer words (line 2)
 *   struct ipc_ring_tensor[n_schema]      at schema_off (64-aligned)
 *   struct ipc_ring_slot[n_slots]         at slots_off (64-aligned), one line each
 *   uint32_t order[n_slots]               at order_off (64-aligned): the slot of seq s is
 *                                         order[s % n_slots] (broadcast readers look it up)
 *   data area                             at data_off (4096-aligned), data_size bytes
 *
 * Slots and extents are not tied to seq order: the daemon takes a free slot and a free extent
 * (best fit inside the committed prefix of the data area) for each batch and frees them when
 * every reader released it, so a batch held for long costs only its own slot and extent. Pages
 * of the data area past the committed prefix are holes nobody writes or reads.
 *
 * The reader's control-block memfd:
 *
 *   struct ipc_ring_cb                    192 bytes: constants (line 0), reader words (line 1),
 *                                         daemon words (line 2)
 *   struct ipc_ring_ent rel[n]            at rel_off: batches the reader released (it writes)
 *   struct ipc_ring_ent asg[n]            at asg_off: batches handed to it (the daemon writes)
 *   (n = n_slots; the size is rounded up to a page)
 *
 * All integers are little-endian native words; offsets are from the start of the memfd.
 */

#define IPC_RING_MAGIC	  0x474e5253u /* "SRNG" */
#define IPC_RING_CB_MAGIC 0x42435253u /* "SRCB" */
#define IPC_RING_VERSION  IPC_RING_LAYOUT_VERSION
#define IPC_RING_LINE	  64
#define IPC_RING_PAGE	  4096u
#define IPC_RING_SEQ_NONE UINT64_MAX /* a slot being rewritten */
/* In an asg[] entry's slot word: this hand-out is a re-delivery (ipc_ring_batch.flags). */
#define IPC_RING_ENT_REDELIVERED (1ull << 62)

/* The seals a client requires on the data memfd (F_SEAL_WRITE is accepted for FUTURE_WRITE). */
#define IPC_RING_DATA_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)
#define IPC_RING_CB_SEALS   (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

/* Values of ipc_ring_hdr.state. */
enum { IPC_RING_S_RUNNING = 0, IPC_RING_S_EOS = 1, IPC_RING_S_ERROR = 2 };
/* Bits of ipc_ring_cb.flags. */
enum {
	IPC_RING_CB_EOS = 1u << 0,
	IPC_RING_CB_EVICTED = 1u << 1,
	IPC_RING_CB_MOVED = 1u << 2,	 /* broadcast: being moved off the shared stream */
	IPC_RING_CB_MOVED_END = 1u << 3, /* ... and end says where its stream here ends */
	IPC_RING_CB_LEASE = 1u << 4,	 /* with EVICTED: it held a batch past the lease */
	IPC_RING_CB_ORPHAN = 1u << 5,	 /* with EVICTED: its rank group lost a rank for good */
};

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2, "shared words must be "
									 "lock-free atomics");

struct ipc_ring_hdr {
	/* lines 0-1: written once by the daemon before the memfd is sealed and handed out */
	uint32_t magic;	     /* IPC_RING_MAGIC */
	uint16_t version;    /* IPC_RING_VERSION */
	uint16_t hdr_size;   /* sizeof(struct ipc_ring_hdr) */
	uint32_t mode;	     /* enum ipc_ring_mode */
	uint32_t rank_n;     /* IPC_RING_RANK: ranks; else 0 */
	uint64_t total_size; /* the memfd's size */
	uint64_t schema_off;
	uint32_t n_schema;
	uint32_t n_slots; /* a power of two */
	uint64_t slots_off;
	uint64_t order_off;
	uint64_t data_off;
	uint64_t data_size; /* a multiple of 4096 */
	uint8_t pad0_[56];
	/* line 2: written by the daemon while it runs; read by clients */
	_Alignas(IPC_RING_LINE) _Atomic uint64_t head; /* seqs < head are published */
	_Atomic uint64_t low;	/* every seq in [low, head) is still in the ring (informative) */
	_Atomic uint32_t state; /* IPC_RING_S_* */
	_Atomic int32_t error;	/* IPC_RING_S_ERROR: -errno */
	uint8_t pad2_[40];
};

_Static_assert(sizeof(struct ipc_ring_hdr) == 3 * IPC_RING_LINE, "ring header: three lines");
_Static_assert(offsetof(struct ipc_ring_hdr, total_size) == 16, "layout");
_Static_assert(offsetof(struct ipc_ring_hdr, n_slots) == 36, "layout");
_Static_assert(offsetof(struct ipc_ring_hdr, data_size) == 64, "layout");
_Static_assert(offsetof(struct ipc_ring_hdr, head) == 128, "producer words on their own line");
_Static_assert(offsetof(struct ipc_ring_hdr, error) == 148, "layout");

/*
 * A published batch. Written by the daemon only (seq last, with release: a seqlock whose odd
 * state is IPC_RING_SEQ_NONE); a slot is reused only after every reader released its batch.
 */
struct ipc_ring_slot {
	_Atomic uint64_t seq; /* the batch's seq, IPC_RING_SEQ_NONE while rewritten */
	_Atomic uint64_t off; /* from the start of the data area, 4096-aligned */
	_Atomic uint64_t len; /* > 0; off + len <= data_size */
	_Atomic uint64_t epoch;
	_Atomic uint32_t flags; /* IPC_BATCH_F_* */
	uint32_t reserved;
	uint64_t pad_[3];
};

_Static_assert(sizeof(struct ipc_ring_slot) == IPC_RING_LINE, "one slot per line");
_Static_assert(offsetof(struct ipc_ring_slot, flags) == 32, "layout");

/* An entry of a control block's rel[] or asg[]: a batch and the slot that holds it. */
struct ipc_ring_ent {
	_Atomic uint64_t seq;
	_Atomic uint64_t slot;
};

_Static_assert(sizeof(struct ipc_ring_ent) == 16, "control block entry");

struct ipc_ring_cb {
	/* line 0: written by the daemon when it adds the reader; the client checks it at attach */
	uint32_t magic;	      /* IPC_RING_CB_MAGIC */
	uint16_t version;     /* IPC_RING_VERSION */
	uint16_t cb_hdr_size; /* sizeof(struct ipc_ring_cb) */
	uint32_t reader_id;
	uint32_t mode; /* the ring's */
	uint32_t n;    /* entries of rel[] and of asg[]: the ring's n_slots */
	uint32_t rank_index;
	uint64_t size; /* the memfd's size */
	uint64_t rel_off;
	uint64_t asg_off;
	uint64_t start;	   /* broadcast: the first seq for this reader (the ring's low); else 0 */
	uint32_t catch_up; /* broadcast: nonzero when it may be moved off the shared stream
			      (set before the fds are handed out) */
	uint32_t rank_n;   /* rank: its group's number of ranks; else 0 */
	/* line 1: written by the reader (the daemon validates every value it reads here) */
	_Alignas(IPC_RING_LINE) _Atomic uint64_t cursor; /* broadcast: next seq it will take;
							    split/rank: asg[] entries taken */
	_Atomic uint64_t rel_head;			 /* rel[] entries written */
	_Atomic uint32_t waiting;  /* nonzero: asleep (or about to be) on wake */
	_Atomic uint32_t doorbell; /* bumped (and woken) when daemon_waiting is set */
	_Atomic uint64_t taken;	   /* statistics only: batches next() returned */
	_Atomic uint64_t wait_ns;  /* statistics only: time next() waited for one */
	uint8_t pad1_[24];
	/* line 2: written by the daemon (the client checks what it reads here too) */
	_Alignas(IPC_RING_LINE) _Atomic uint64_t asg_head; /* asg[] entries written */
	_Atomic uint64_t rel_tail; /* rel[] entries taken in by the daemon */
	_Atomic uint64_t end;	   /* with IPC_RING_CB_EOS: the cursor at which the stream ends */
	_Atomic uint32_t wake;	   /* the reader's futex word: bumped when there is news */
	_Atomic uint32_t flags;	   /* IPC_RING_CB_* */
	_Atomic uint32_t daemon_waiting; /* nonzero: the daemon sleeps on doorbell */
	uint32_t pad2a_;
	/*
	 * While daemon_waiting: a release rings the doorbell once rel_head reaches this (0: every
	 * release). The daemon waits for room for several batches at once, not one per release
	 * (ipc_ring_wait_releases); a reader that goes to sleep for a batch rings regardless.
	 * Zero in a block made by an older daemon; an older client rings at every release.
	 */
	_Atomic uint64_t wake_rel;
	uint8_t pad2_[16];
};

_Static_assert(sizeof(struct ipc_ring_cb) == 3 * IPC_RING_LINE, "control block: three lines");
_Static_assert(offsetof(struct ipc_ring_cb, start) == 48, "layout");
_Static_assert(offsetof(struct ipc_ring_cb, catch_up) == 56, "layout");
_Static_assert(offsetof(struct ipc_ring_cb, cursor) == 64, "reader words on their own line");
_Static_assert(offsetof(struct ipc_ring_cb, doorbell) == 84, "layout");
_Static_assert(offsetof(struct ipc_ring_cb, wait_ns) == 96, "layout");
_Static_assert(offsetof(struct ipc_ring_cb, asg_head) == 128, "daemon words on their own line");
_Static_assert(offsetof(struct ipc_ring_cb, daemon_waiting) == 160, "layout");
_Static_assert(offsetof(struct ipc_ring_cb, wake_rel) == 168, "layout");

/* Where things go for n_slots slots and n_schema tensors (both already checked). */
static inline uint64_t ipc_ring_align(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

static inline uint64_t ipc_ring_cb_size(uint32_t n)
{
	return ipc_ring_align(sizeof(struct ipc_ring_cb) + 2ull * sizeof(struct ipc_ring_ent) * n,
			      IPC_RING_PAGE);
}

/*
 * The message area of a control block: from the end of asg[] to the end of the block, which is
 * 192 + 32 n bytes rounded up to a page (n a power of two): at least 1856 bytes (n = 64). Before
 * its removal sets IPC_RING_CB_ORPHAN (release), the daemon writes there why (text for a
 * person, NUL-terminated, at most IPC_RING_CB_MSG_MAX bytes); nothing else uses it. A block of
 * an older daemon has zeros there: no message.
 */
#define IPC_RING_CB_MSG_MAX 1024u

static inline uint64_t ipc_ring_cb_msg_off(uint32_t n)
{
	return sizeof(struct ipc_ring_cb) + 2ull * sizeof(struct ipc_ring_ent) * n;
}

_Static_assert(IPC_RING_PAGE - sizeof(struct ipc_ring_cb) - 2 * sizeof(struct ipc_ring_ent) * 64 >=
		       IPC_RING_CB_MSG_MAX,
	       "the smallest message area (n = 64) holds a message");

/* ---- the daemon's private state (ring.c, ring_readers.c) ---- */

enum { SL_FREE = 0, SL_RESERVED, SL_LIVE };

struct slot_priv {
	uint64_t seq;	  /* SL_LIVE */
	uint64_t holders; /* readers that hold it: broadcast readers, and the member of each
			     split/rank group it was handed to, until they release it */
	uint64_t pend;	  /* split/rank groups that have not handed it to a member yet */
	uint64_t off;	  /* the extent, from the start of the data area */
	uint64_t cap;
	uint32_t gen; /* bumped when the slot is freed: stale ipc_ring_extents are refused */
	int state;    /* SL_* */
};

/*
 * A consumer group (docs/ring.md, "Consumer groups"). Broadcast: each member holds every batch
 * published while it is attached. Split and rank: a batch is pending in the group until the
 * daemon hands it to one member (the one with room and the fewest batches ahead, or the member
 * of rank seq mod rank_n), in seq order.
 */
struct group {
	bool open;
	enum ipc_ring_mode mode;
	uint32_t rank_n, split_depth;
	uint64_t members;
	uint64_t from;		      /* its first seq (a member: the ring's low, when later) */
	uint32_t *pending, n_pending; /* split/rank: slots handed to no member yet, in seq order */
	uint8_t *redo;		      /* split/rank, per slot: taken by a member that went away
					 without releasing it; its next hand-out is marked */
	uint32_t *pending_by_rank;    /* rank: how many of them each rank has */
	int by_rank[IPC_RING_MAX_READERS];
};

struct range {
	uint64_t off, len;
};

struct reader {
	struct ipc_ring_cb *cb;
	struct ipc_ring_ent *rel; /* reader-written */
	struct ipc_ring_ent *asg; /* daemon-written */
	size_t cb_size;
	int fd;
	uint32_t rank_index;
	unsigned group;
	enum ipc_ring_mode mode; /* its group's */
	uint64_t cursor;	 /* the last valid value read from cb->cursor */
	uint64_t rel_tail;	 /* rel[] entries taken in */
	uint64_t asg_head;	 /* asg[] entries written */
	uint32_t *asg_slot;	 /* split/rank: the slot of asg[k] (the daemon's own copy) */
	uint64_t max_lag; /* broadcast: moved off past this lag; 0: it holds the others back */
	bool lag_behind_others;	 /* ... counted from the leading other reader, not from head */
	uint8_t moved_why;	 /* IPC_RING_MOVED_*, once moved */
	uint64_t lag_timeout_ns; /* broadcast: moved off once it held the others back this long */
	/* since when it holds the others back (0: not, as of the last reserve without room), and
	   its cursor and releases then: a change of either is progress, and starts it again */
	uint64_t hold_since_ns, hold_cursor, hold_rel;
	uint64_t moved_end; /* once moved: where its stream here ended */
	/* split/rank leases (ipc_ring_lease_check): the oldest batch it held at the last check,
	   plus 1 (0: none), and since when */
	uint64_t lease_seq1, lease_since_ns;
	bool bad, late, eos_sent; /* late: marked bad for its lease */
	bool orphan;		  /* its rank group cannot go on (ipc_ring_mark_orphan) */
	char problem[160];
};

struct ipc_ring {
	int memfd, ro_fd; /* memfd: read-write, kept to fallocate growth (may equal ro_fd) */
	uint8_t *map;
	uint64_t total_size;
	uint64_t data_off;		     /* of the data area in the memfd */
	uint64_t committed;		     /* [0, committed) of the data area is allocated */
	uint64_t commit_chunk, commit_limit; /* ipc_ring_opts' */
	uint64_t commit_grows, commit_fails;
	int commit_error;
	struct ipc_ring_hdr *hdr;
	struct ipc_ring_slot *slots;
	_Atomic uint32_t *order;
	uint8_t *data;
	uint64_t data_size, data_used;
	uint32_t n_slots, mask;
	int state; /* IPC_RING_S_* */
	uint64_t head, low;
	struct slot_priv *sp;
	uint32_t *free_slots, n_free; /* a stack */
	struct range *free_rng;	      /* sorted by off, never adjacent, inside committed;
					 at most n_slots + 1 */
	uint32_t n_rng;
	struct group grp[IPC_RING_MAX_GROUPS]; /* group 0: the ring's (ipc_ring_opts.mode) */
	uint64_t split_groups;		       /* open split and rank groups */
	uint64_t broadcast;		       /* readers in broadcast groups */
	uint64_t attached, bad_mask;
	uint64_t moved;		     /* broadcast readers moved off: they hold no new batch */
	uint64_t holding;	     /* broadcast readers whose hold_since_ns is set */
	uint64_t (*clock_ns_)(void); /* CLOCK_MONOTONIC ns; tests may set their own (NULL: real) */
	struct reader rd[IPC_RING_MAX_READERS];
};

/* Shared between ring.c and ring_readers.c. */
int ipc_ring_memfd_make_(const char *name, uint64_t len, uint64_t reserve, int *ret_fd,
			 void **ret_map);
void ipc_ring_kick_(struct ipc_ring *r, unsigned id);
void ipc_ring_wake_waiting_(struct ipc_ring *r, uint64_t mask);
void ipc_ring_pending_push_(struct ipc_ring *r, unsigned gid, uint32_t slot);
int ipc_ring_group_init_(struct ipc_ring *r, unsigned gid, enum ipc_ring_mode mode, uint32_t rank_n,
			 uint32_t split_depth);
void ipc_ring_group_fini_(struct group *g);
uint64_t ipc_ring_assign_pass_(struct ipc_ring *r);
void ipc_ring_eos_pass_(struct ipc_ring *r);
/* full: a reserve found no room (the writer waits: the time bounds are checked then). */
bool ipc_ring_lag_pass_(struct ipc_ring *r, bool full);
void ipc_ring_lag_clear_(struct ipc_ring *r);
/* A reserve found room: nobody holds the writer back now. */
static inline void ipc_ring_lag_room_(struct ipc_ring *r)
{
	if (r->holding)
		ipc_ring_lag_clear_(r);
}

/* For tests: the daemon's writable view of the header and of reader id's control block. */
struct ipc_ring_hdr *ipc_ring_hdr_(struct ipc_ring *ring);
struct ipc_ring_cb *ipc_ring_cb_(struct ipc_ring *ring, unsigned id);

/*
 * A standalone fence. ThreadSanitizer does not model those (gcc warns with -Wtsan): every word
 * the ring's fences order is an atomic and the batch bytes are ordered by release/acquire pairs
 * (head, asg_head, rel_head), so under TSan the fence stays and only the warning is silenced.
 */
#if defined(__SANITIZE_THREAD__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#endif
static inline void ipc_ring_fence(memory_order mo)
{
	atomic_thread_fence(mo);
}
#if defined(__SANITIZE_THREAD__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC diagnostic pop
#endif

/* The spin before sleeping, in polls of the shared words (a few microseconds). */
#define IPC_RING_SPIN 256

#endif
