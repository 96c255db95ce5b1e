/* SPDX-License-Identifier: Apache-2.0 */
/* iox internals: the engine's state and the interface between the front end and its backends. */
#ifndef SLUICE_IO_IOX_INTERNAL_H
#define SLUICE_IO_IOX_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "iox.h"

/*
 * Who does what. iox.c (the front end) owns the files, the buffer pool, ordering and delivery;
 * it runs only in the consumer's thread. A backend only performs reads: the front end hands it
 * one read per buffer (struct iox_rd), the backend later hands back (buffer, result) pairs
 * (struct iox_cqe). A buffer has at most one read in flight, so the buffer index identifies
 * the read. The io_uring backend runs in the consumer's thread too; the pread backend has
 * worker threads, which touch only the bytes of the buffer they were given and their own
 * queues (under the backend's mutex).
 */

#define IOX_NO_BUF	    UINT32_MAX
#define IOX_ALIGN	    4096u
#define IOX_HUGE	    (2u << 20) /* a transparent huge page (x86-64, arm64 with 4 KiB pages) */
#define IOX_MAX_QUEUE_DEPTH 4096u
#define IOX_MAX_BUFFERS	    16384u     /* io_uring's limit on registered buffers */
#define IOX_MAX_CHUNK	    (1u << 30) /* io_uring's limit on one registered buffer */
#define IOX_MAX_OPEN_FILES  65536u
#define IOX_MAX_THREADS	    1024u

/* One read handed to a backend: fill addr[0..len) from fd at off. */
struct iox_rd {
	int fd;
	uint32_t buf;
	uint8_t *addr;
	uint32_t len;
	uint64_t off;
};

/* One finished read: bytes read, or a negative errno. */
struct iox_cqe {
	uint32_t buf;
	int32_t res;
};

struct iox_backend_ops {
	/*
	 * Take a read. It may only start at the next flush or reap. -errno is an engine failure
	 * (the front end never queues more reads than there are buffers).
	 */
	int (*queue)(struct iox *iox, const struct iox_rd *rd);
	/* Start the queued reads. */
	int (*flush)(struct iox *iox);
	/*
	 * Start queued reads, then return up to max finished ones in out[], waiting up to
	 * timeout_ms (-1: forever, 0: not at all) when none is finished yet. Returns the count
	 * (0 when the time ran out or the wait was interrupted) or -errno for an engine failure.
	 */
	int (*reap)(struct iox *iox, int timeout_ms, struct iox_cqe *out, unsigned max);
	/* Finish or cancel every read in flight, then free the backend. The fds stay open. */
	void (*destroy)(struct iox *iox);
};

enum iox_buf_state {
	IOX_BUF_FREE = 0,
	IOX_BUF_INFLIGHT, /* a read into it is queued or running */
	IOX_BUF_PENDING,  /* read complete, waiting for its turn in the file's order (or, an
			     at-read, on the done list) */
	IOX_BUF_HELD,	  /* delivered; the consumer has it until iox_release() */
	IOX_BUF_QUEUED,	  /* an iox_read_at read waiting for a slot in queue_depth */
};

struct iox_buf {
	uint64_t off; /* the chunk's offset in its file */
	uint32_t file_id;
	uint32_t next;	 /* free list, the file's pending list, or an at-read list */
	uint32_t want;	 /* bytes the chunk should hold */
	uint32_t filled; /* bytes read so far */
	uint32_t gen_;	 /* bumped at each delivery; part of the chunk's buf_ */
	uint8_t state;	 /* enum iox_buf_state */
	/* reads of iox_read_at only (file_id IOX_AT_FILE): the caller's fd, path and user */
	int at_fd;
	int at_err; /* 0 or -errno of the read that failed */
	const char *at_path;
	void *at_user;
};

struct iox_file {
	char *path; /* freed once the last chunk is delivered */
	void *user;
	int fd;		     /* -1 when not open */
	bool opened;	     /* open was tried */
	bool closed;	     /* done reading: no more reads will be issued */
	bool delivered;	     /* the last chunk went to the consumer */
	bool direct;	     /* the fd is O_DIRECT */
	bool in_ready;	     /* on the ready list */
	bool term;	     /* the last delivery is a terminal pseudo-chunk (empty or error) */
	int term_err;	     /* 0 or -errno for the terminal chunk */
	const char *term_op; /* the syscall that failed: "open", "fstat", "read" */
	uint64_t term_off;
	uint64_t size;	     /* from fstat; UINT64_MAX when not a regular file */
	uint64_t next_k;     /* next chunk to issue */
	uint64_t deliver_k;  /* next chunk to deliver */
	uint64_t last_k;     /* the final chunk index, UINT64_MAX while unknown */
	uint32_t inflight;   /* reads in flight */
	uint32_t pending;    /* head of the list of completed chunks, sorted by offset */
	uint32_t ready_next; /* next file id on the ready list, or UINT32_MAX */
};

struct iox {
	struct iox_opts opts; /* normalized */
	enum iox_engine engine;
	const struct iox_backend_ops *ops;
	void *be;	      /* backend state */
	char reason[160];     /* why io_uring is not used; empty when it is */
	bool fixed;	      /* buffers registered with io_uring */
	char fixed_note[160]; /* why registration failed, empty otherwise */

	uint8_t *mem; /* num_buffers * chunk_len, 4096-aligned */
	struct iox_buf *bufs;
	uint32_t free_head;
	uint32_t nfree;
	uint32_t inflight;  /* reads in flight, all files */
	uint32_t unstarted; /* of those, queued but not yet flushed to the backend */
	int failed;	    /* -errno once the engine failed; iox_next returns it */

	struct iox_file *files; /* files[i] has id base + i */
	uint32_t base;
	uint32_t nfiles; /* live entries in files[] */
	uint32_t cap;
	uint32_t next_open;  /* id of the next file to open */
	uint32_t nadded;     /* ids handed out */
	uint32_t ndelivered; /* files whose last chunk went out */

	uint32_t *open_ids; /* files reading now (opened, not closed) */
	uint32_t nopen;
	uint32_t rr; /* round-robin cursor into open_ids */

	uint32_t ready_head; /* files with a chunk ready to deliver, FIFO */
	uint32_t ready_tail;

	/* iox_read_at: buffer lists through iox_buf.next, FIFO */
	uint32_t at_wait_head; /* IOX_BUF_QUEUED: waiting for a slot in queue_depth */
	uint32_t at_wait_tail;
	uint32_t at_done_head; /* IOX_BUF_PENDING: complete, waiting for iox_next */
	uint32_t at_done_tail;
	uint32_t at_pending; /* waiting + in flight + done, not yet delivered */
	bool at_turn;	     /* both lists ready: deliver an at-read next (alternates) */

	struct iox_cqe *cqes; /* scratch for reap, num_buffers entries */
	struct iox_stats stats;
};

/* A buffer index plus a generation in the public chunk's buf_, so that a stale release is
 * ignored instead of freeing someone else's buffer. IOX_MAX_BUFFERS is 1 << 14. */
#define IOX_BUF_BITS 14u
#define IOX_GEN_MAX  ((1u << (32 - IOX_BUF_BITS)) - 2) /* keeps buf_ != IOX_NO_BUF */
#define IOX_NONE     UINT32_MAX

_Static_assert(IOX_MAX_BUFFERS == (1u << IOX_BUF_BITS), "buf_ encoding");

/* iox.c's, for iox_at.c: a buffer back on the free list; strerror_r's text. */
void iox_buf_free(struct iox *iox, uint32_t idx);
const char *iox_strerror(int e, char *buf, size_t len);
/*
 * iox_at.c's, for iox.c: issue the waiting at-reads while queue_depth allows; take one's
 * completion (continue a short read, or on to the done list); deliver the oldest done one.
 */
int iox_at_pump(struct iox *iox);
int iox_at_complete(struct iox *iox, const struct iox_cqe *c);
void iox_at_deliver(struct iox *iox, struct iox_chunk *ret_chunk, struct io_error *err);

/*
 * Backend constructors: on success set iox->ops and iox->be and return 0. The io_uring one
 * returns -errno when the kernel refuses the ring (the caller decides about the fallback) and
 * fills err with "io_uring_queue_init: <strerror>"; fake_errno > 0 simulates that refusal (a
 * test hook). It registers iox->mem as fixed buffers when it can and sets iox->fixed, or
 * records why not in iox->fixed_note (fake_reg_errno > 0 simulates that failure).
 */
int iox_uring_create(struct iox *iox, int fake_errno, int fake_reg_errno, struct io_error *err);
int iox_pread_create(struct iox *iox, struct io_error *err);

/* True when io_uring reads into registered buffers (read_fixed); for tests and stats. */
bool iox_fixed_buffers(const struct iox *iox);
/* Why registering the buffers failed ("io_uring_register_buffers: ..."), or NULL. */
const char *iox_fixed_note(const struct iox *iox);

#endif
