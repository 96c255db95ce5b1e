/* SPDX-License-Identifier: Apache-2.0 */
/* Stage "read": one file at a time, read ahead in chunks by an iox (io_uring or pread). */
#ifndef SLUICE_PIPELINE_READ_H
#define SLUICE_PIPELINE_READ_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/ioerr.h"
#include "io/iox.h"
#include "record.h"
#include "stage.h"

/* Read buffers a reader may keep pinned by records beyond the one being framed. */
#define PL_PIN_CHUNKS 16
/* Reads in flight per reader: the default (struct pl_read_opts.queue_depth 0), the most. */
#define PL_READ_QUEUE_DEPTH	4
#define PL_READ_MAX_QUEUE_DEPTH 16

/* The buffers of a reader with depth reads in flight: those, the chunk framed, the pinned ones. */
static inline unsigned pl_read_buffers(unsigned depth)
{
	return depth + 1 + PL_PIN_CHUNKS;
}

/* What every reader of a pipeline adds to (beside its struct pl_stage_stats). */
struct pl_read_totals {
	uint64_t direct_bytes; /* of bytes_out, read with O_DIRECT */
	uint64_t evacuations;  /* times pinned buffers were emptied (opts.evacuate) */
	const char *engine;    /* "io_uring" or "pread", once a file was opened */
	char fallback[160];    /* why not io_uring */
	bool have_fallback;
};

struct pl_read_opts {
	enum iox_engine engine;
	bool direct;	  /* O_DIRECT */
	size_t chunk_len; /* read size */
	/* where a tuner sets the read size of the next file opened (NULL: chunk_len, fixed) */
	const _Atomic size_t *chunk_live;
	const _Atomic unsigned *depth_live; /* ... and of its queue_depth (NULL: fixed) */
	bool pin; /* records may point into the chunks (else the framer copies them) */
	/*
	 * Reads in flight, 1 .. PL_READ_MAX_QUEUE_DEPTH; 0: PL_READ_QUEUE_DEPTH. The reader holds
	 * that many buffers + 1 (being framed) + PL_PIN_CHUNKS, and counts them in st->capacity.
	 */
	unsigned queue_depth;
	/*
	 * Before blocking for a chunk, idle(ctx) is called while it returns > 0 (it did some
	 * work), the reads polled between calls. NULL: none.
	 */
	int (*idle)(void *ctx);
	void *idle_ctx;
	/*
	 * The reader has PL_PIN_CHUNKS chunks pinned by records: evacuate(ctx, owner, below) is to
	 * move out of them the records that hold chunks of that owner (struct pl_block.owner)
	 * numbered below `below` (pl_store_own). 0 or -ENOMEM.
	 */
	int (*evacuate)(void *ctx, const void *owner, uint64_t below);
	void *evacuate_ctx;
	const atomic_bool *stop;      /* set: a blocked next returns -ECANCELED */
	const struct io_creds *creds; /* files are opened with these rights (struct iox_opts') */
	struct pl_stage_stats *st;
	struct pl_read_totals *tot;
	struct pl_prof *prof;
};

struct pl_read;

int pl_read_create(const struct pl_read_opts *opts, struct pl_read **ret);
/* Frees the reader; its chunks still pinned by records go back to the iox as they are dropped. */
void pl_read_destroy(struct pl_read *rd);
/* Start reading a file (the previous one was read to its end, or abandoned). */
int pl_read_open(struct pl_read *rd, const char *path, struct io_error *err);
/*
 * The open file's next chunk: 1 and *ret, 0 once the file was delivered, -EAGAIN when wait is
 * false and nothing is ready, -ECANCELED when stopped, or -errno (an engine failure; err).
 */
int pl_read_next(struct pl_read *rd, bool wait, struct pl_chunk *ret, struct io_error *err);
/* Give up on the open file midway: its reads in flight never reach the next file. */
void pl_read_abandon(struct pl_read *rd);

#endif
