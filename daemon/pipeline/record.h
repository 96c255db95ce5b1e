/* SPDX-License-Identifier: Apache-2.0 */
/* The element that flows between the engine's stages: a record or a window, and its bytes. */
#ifndef SLUICE_PIPELINE_RECORD_H
#define SLUICE_PIPELINE_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Record bytes live in blocks: a heap block the records were copied into (struct pl_store), or
 * a read buffer that the records were framed in and still point into (zero-copy: put set by the
 * read stage, which gets the buffer back when the last record in it is dropped). A block is
 * reference-counted by the records in it, +1 while it is being filled or framed. Blocks and
 * records belong to the driver thread, except that a batch's parse tasks read its rows' bytes.
 */
struct pl_block {
	size_t used, cap;
	uint8_t *data;
	struct pl_block **free_list;	 /* heap: where a standard-size block goes when unused */
	void (*put)(struct pl_block *b); /* a read buffer: gives it back (and frees b) */
	/* a read buffer: its reader's, for pl_read_evacuate; a record cache entry's: the entry;
	   a big record's block of its own: the memory account it is charged to */
	void *owner;
	uint64_t seq; /* a read buffer: its reader's chunk number (age) */
	bool pin;     /* a read buffer: its records may point into it */
	bool own;     /* one record's bytes (pl_store_own) */
	bool cached;  /* a record cache entry's (frame.c): it stays in memory, owner is the entry */
	/*
	 * Last, next to a pl_store_own record's first bytes (the header is 80 bytes, the block
	 * 64-aligned): dropping or reusing the block then touches a line that parsing read.
	 */
	struct pl_block *next_free;
	size_t refs;
};

/*
 * One element: a record (the independent loader), or a window of a sequence loader (win set:
 * its records, which it owns; for continuous_sequence the steps [win_skip, win_skip + win_len)
 * of their concatenation, for discrete_sequence all of it, win_len -1). A window's file, index
 * and offset are its first record's, for messages.
 */
struct pl_rec {
	struct pl_block *blk;
	struct pl_rec *win;
	const uint8_t *data; /* followed by the record's footer (its stored CRC) */
	uint64_t index;	     /* in its file */
	uint64_t offset;     /* of its header in the (decompressed) file */
	uint32_t len;
	uint32_t file; /* index into the dataset's files */
	uint32_t n_win;
	/* steps: at most max_window (< 2^31), and a record of 256 MiB holds fewer */
	int32_t win_skip, win_len;
	bool crc_checked;
	bool decompressed;
	bool flat; /* data is its decoded features' flat form (pbex_flat_view), from the cache */
	/*
	 * data is only that form's values (PL_CACHE_REC_VALUES): its heads are its entry's
	 * (blk->cached, pl_row_flat_heads), or a cached epoch's (a compact row: cepoch.h)
	 */
	bool values;
};
/*
 * One cache line: the shuffle buffer's slots and a batch's rows are arrays of them, read at
 * random (the buffer) or by another thread (the rows), so each is one miss, not two.
 */
_Static_assert(sizeof(struct pl_rec) == 64, "struct pl_rec is one cache line");
#define PL_REC_ALIGN 64

/*
 * A compact row: a record of a cached epoch (struct pl_cepoch, cepoch.h), every file of which
 * the record cache holds decoded. It holds no reference (the epoch holds the entries) and takes
 * 16 bytes: the shuffle buffer and a batch's rows hold four to a cache line where a struct
 * pl_rec takes one line, read by another thread. id names its file and index (pl_cepoch_rec).
 */
struct pl_crow {
	const uint8_t *data; /* its decoded features' flat form, or its values (PL_CROW_VALUES) */
	uint32_t len;
	uint32_t id;
};
/* A compact row's id: data is the values of a flat form whose heads are its epoch's */
#define PL_CROW_VALUES (1u << 31)

/*
 * A chunk of a file as the read stage hands it on: blk (one reference, the taker's; blk->pin
 * says whether records may point into it), or the file's read error (error < 0, the io_error
 * that comes with it names the file).
 */
struct pl_chunk {
	struct pl_block *blk;
	bool last; /* the file's last chunk */
	int error;
};

/* Drop the element's reference (a window: its records' too). */
void pl_rec_unref(struct pl_rec *r);
/* Another reference to a record (not a window). */
void pl_rec_ref(struct pl_rec *r);
/* Drop a block reference (the holder is not a record: a reader framing it, a store filling it). */
void pl_block_unref(struct pl_block *b);

/* pl_store_own's blocks: a block and its record in multiples of 64 bytes up to 64 KiB */
#define PL_OWN_UNIT    64
#define PL_OWN_CLASSES 1024

/*
 * Heap blocks that records are copied into: 1 MiB blocks filled in turn and reused when their
 * last record goes, so their pages stay mapped; and blocks of one record each, carved from
 * 1 MiB slabs in size classes and reused from a free list per class (last freed, first
 * reused: its lines are the warmest), never returned to malloc until pl_store_fini. One per
 * pipeline, on the driver thread.
 */
struct pl_store {
	struct pl_block *cur;
	struct pl_block *free_blocks;
	struct pl_block *own_free[PL_OWN_CLASSES];
	uint8_t *slab; /* the slab being carved, slab_left bytes left */
	size_t slab_left;
	void *slabs;	       /* every slab, linked through its first word */
	uint64_t copied_bytes; /* bytes copied in (record bytes, footers not counted) */
	/*
	 * The pipeline's memory account (mem.h), or NULL: slabs and blocks are charged to it
	 * before they are allocated; a big record's block names it in its owner, for the
	 * uncharge when its last record goes.
	 */
	struct pl_mem *mem;
};

/*
 * Copy len bytes (a record and its footer) into the store: *ret_blk gets a reference, *ret_data
 * where they are. 0 or -ENOMEM. copied_bytes grows by counted.
 */
int pl_store_copy(struct pl_store *s, const uint8_t *data, size_t len, size_t counted,
		  struct pl_block **ret_blk, const uint8_t **ret_data);
/*
 * Move a record's bytes (and footer) into a heap block of their own, out of the read buffer or
 * the shared store block they are in: a record that may stay long (a shuffle buffer draws at
 * random, so a shared block would live until its last record is drawn, several times the
 * buffer's bytes in all). copied_bytes grows by its length. 0 or -ENOMEM (r unchanged).
 */
int pl_store_own(struct pl_store *s, struct pl_rec *r);
/*
 * Whether the record shares its block (a read buffer or a store block) with other records that
 * would keep it in memory: a record cache entry stays there anyway.
 */
static inline bool pl_rec_shared(const struct pl_rec *r)
{
	return r->blk && !r->blk->own && !r->blk->cached && (r->blk->put || r->blk->free_list);
}
/* Free the store's blocks (records still in them keep theirs until dropped). */
void pl_store_fini(struct pl_store *s);

#endif
