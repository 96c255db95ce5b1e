/* SPDX-License-Identifier: Apache-2.0 */
/* The shared record cache (DESIGN.md §5): whole files' framed records, shared by pipelines. */
#ifndef SLUICE_PIPELINE_CACHE_H
#define SLUICE_PIPELINE_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "io/creds.h"
#include "io/tfr.h"

struct pl_mem;

/*
 * One cache serves every pipeline of a process (sluiced makes one with --cache-memory; `sluicectl
 * run --cache-memory` one for its pipeline's epochs). An entry is one file's records as the
 * frame stage produced them, after decompression, in order: each record's bytes and the 4-byte
 * footer that holds its stored data CRC (checked by the parse task as for a record read from
 * the file: the cache never changes what a pipeline sees, errors included), or its projection
 * (PL_CACHE_REC_CHECKED). Only a file framed cleanly from its first record to its end becomes a
 * ready entry; a file that fails, or is skipped, is not cached.
 *
 * One pipeline fills an entry as it frames the file; other pipelines that open the file
 * meanwhile read the records published so far and wait for the rest (pl_cache_entry_record), so
 * that a file is read once however many jobs start together. A reader that would wait for
 * itself through a cycle of fills is told so at once (-EDEADLK), one whose fill is given up
 * midway learns which record to go on from (-ECANCELED): either reads the file itself.
 *
 * An entry is keyed by the file's device, inode, size, mtime and the compression it was read
 * with: a file that changes is a new key, and the entry of its old contents is dropped at the
 * next lookup of that file. Entries that no pipeline reads are evicted, least recently used
 * first, when a fill needs room under the budget. Thread-safe (one mutex; a record never moves
 * once published; entries are reference-counted by their readers).
 */

struct pl_cache;
struct pl_cache_entry;

/*
 * One reader of the cache that may wait (a pipeline's driver): what it waits for, so that no two
 * pipelines wait for each other's fills. Zeroed by its owner; used under the cache's lock.
 */
struct pl_cache_user {
	struct pl_cache_entry *waiting_on;
};

/* A record of an entry. */
struct pl_cache_rec {
	const uint8_t *data; /* its footer follows unless flags has PL_CACHE_REC_CHECKED */
	uint32_t len;
	unsigned flags;	 /* PL_CACHE_REC_* */
	uint64_t offset; /* of its header in the (decompressed) file */
};

struct pl_cache_key {
	uint64_t dev, ino, size;
	int64_t mtime_ns;
	uint32_t compression; /* enum tfr_compression */
	/* 0: the records as framed; else what they were projected to (struct pl_plan.proj_fp) */
	uint64_t proj;
};

/* A cached record's flags. */
enum {
	PL_CACHE_REC_DECOMPRESSED = 1u << 0, /* its file was compressed (for messages) */
	/*
	 * Its data CRC was checked when it was cached and its bytes are a projection of the
	 * record (pbex_project): no footer follows it, and nobody checks it again.
	 */
	PL_CACHE_REC_CHECKED = 1u << 1,
	/*
	 * Checked too, and its bytes are the flat form of its decoded features (pbex_flatten of
	 * the projection's pbex_decode_example): a reader takes them with pbex_flat_view.
	 */
	PL_CACHE_REC_FLAT = 1u << 2,
	/*
	 * Checked and decoded too, and uniform: its bytes are the values of its flat form, whose
	 * heads (kind, count, where the values are, per feature) are the entry's
	 * (pl_cache_entry_heads), the same for every such record of it. A reader puts them back in
	 * front for pbex_flat_view. A column of scalars keeps 8 bytes a feature instead of 24.
	 */
	PL_CACHE_REC_VALUES = 1u << 3,
};

struct pl_cache_stats {
	uint64_t budget, bytes; /* bytes held (entries and fills in progress) */
	uint64_t entries;	/* ready */
	uint64_t hits, misses;	/* lookups of a file */
	uint64_t follows;	/* hits on a file being filled */
	uint64_t fills;		/* files cached */
	uint64_t fill_aborts;	/* fills given up (over the budget, an error in the file) */
	uint64_t evictions;	/* entries dropped for room (reclaims included) */
	uint64_t reclaims;	/* of them, dropped for a pipeline's memory (pl_cache_reclaim) */
	uint64_t invalidations; /* entries dropped because their file changed */
};

/* A cache of at most budget bytes (> 0). 0 or -ENOMEM. */
int pl_cache_create(uint64_t budget, struct pl_cache **ret);
/* Frees every entry: call once no pipeline uses the cache any more. NULL is fine. */
void pl_cache_destroy(struct pl_cache *c);
/*
 * Charge what the cache holds to acct too (sluiced's: an account under --memory that no user
 * owns, with no_reclaim set): a fill that acct refuses evicts unused entries, least recently used
 * first, and is given up when none is left. Before the first fill; acct outlives the cache.
 */
void pl_cache_set_account(struct pl_cache *c, struct pl_mem *acct);
/*
 * Evict entries that nobody reads, least recently used first, until they gave back need bytes or
 * none is left: for a pipeline's charge that --memory refused (the cache goes first). The bytes
 * given back. Any thread that holds no cache lock.
 */
uint64_t pl_cache_reclaim(struct pl_cache *c, uint64_t need);
/* Bytes of entries that pl_cache_reclaim could give back now (ready and unread). */
uint64_t pl_cache_reclaimable(struct pl_cache *c);

/*
 * The key of the file at path as it is now, read with compression. The file is opened with
 * creds' rights (NULL: the process's) and the key is that of the file opened: a pipeline
 * finds in the cache only files it could read itself. 0 or -errno (open's: the reader will
 * say what is wrong).
 */
int pl_cache_key_of(const struct io_creds *creds, const char *path,
		    enum tfr_compression compression, struct pl_cache_key *ret);

/*
 * The entry for key, with a reference for the caller (pl_cache_put), or NULL (a miss: counted).
 * With user, an entry being filled by another user counts (its records are read as they come);
 * without, only a ready one. An entry of the same file (device and inode) with another size or
 * mtime is dropped.
 */
struct pl_cache_entry *pl_cache_get(struct pl_cache *c, const struct pl_cache_key *key,
				    const struct pl_cache_user *user);
/* Drop a reference from pl_cache_get. */
void pl_cache_put(struct pl_cache_entry *e);

/* pl_cache_fill_begin's flags. */
enum {
	/*
	 * Take only free room, evict nothing (a dataset larger than the budget: what fits stays,
	 * instead of each file pushing out the one read before it).
	 */
	PL_CACHE_FILL_NO_EVICT = 1u << 0,
};

/*
 * Start caching the file of key as it is framed, by user (may be NULL): an entry being filled
 * (the caller's until pl_cache_fill_end), or NULL when the file is cached or being cached
 * already, or when its first segment does not fit the budget even after evicting every unused
 * entry (or, with PL_CACHE_FILL_NO_EVICT, in the free room). size_hint (the file's size: an
 * uncompressed file's records take about that much) sizes that segment, up to 1 MiB and a
 * quarter of the budget; the entry grows as records come.
 */
struct pl_cache_entry *pl_cache_fill_begin(struct pl_cache *c, const struct pl_cache_key *key,
					   uint64_t size_hint, struct pl_cache_user *user,
					   unsigned flags);
/*
 * Append the next record: len bytes of data, followed by its 4-byte footer at data + len unless
 * flags has PL_CACHE_REC_CHECKED; its header's offset in the (decompressed) file. Readers may
 * read it at once. *ret_stored (may be NULL): where its bytes now are, as long as a reference to
 * e is held (pl_cache_entry_ref). 0, or -ENOSPC (over the budget: end the fill with complete
 * false), -ESTALE (the file changed meanwhile: likewise), -ENOMEM.
 */
int pl_cache_fill_add(struct pl_cache_entry *e, const uint8_t *data, uint32_t len, uint64_t offset,
		      unsigned flags, const uint8_t **ret_stored);
/*
 * The heads that e's PL_CACHE_REC_VALUES records share: set once by the filler, before the first
 * such record. 0, -EEXIST (set already), -ENOMEM.
 */
int pl_cache_fill_heads(struct pl_cache_entry *e, const uint8_t *heads, uint32_t len);
/* e's heads (*ret_len bytes), or NULL before the filler set them. */
const uint8_t *pl_cache_entry_heads(const struct pl_cache_entry *e, uint32_t *ret_len);
/* One more reference to e (pl_cache_put): its records stay where they are while it is held. */
void pl_cache_entry_ref(struct pl_cache_entry *e);
/*
 * Finish a fill: complete (every record of the file, in order, to its end) makes it ready;
 * else its readers are told (-ECANCELED) and it goes with the last of them. The bytes the
 * entry holds (counted against the budget: pages and index) once ready, else 0. e is not the
 * caller's any more.
 */
uint64_t pl_cache_fill_end(struct pl_cache_entry *e, bool complete);

/*
 * Record i of e: 1 and *ret. 0 when the file ends before record i. Of an entry still being
 * filled, waiting up to timeout_ms (0: not at all) as user for the record: -EAGAIN when it is
 * not there yet; -EDEADLK when user may not wait (its filler waits, through a chain of fills,
 * for user's own: told whatever timeout_ms; or user is NULL and timeout_ms is not 0);
 * -ECANCELED when the fill was given up before record i. The record stays valid while the
 * caller holds its reference to e.
 */
int pl_cache_entry_record(struct pl_cache_entry *e, uint64_t i, struct pl_cache_user *user,
			  int timeout_ms, struct pl_cache_rec *ret);
/* An entry's index entry: a record's place, its header's offset in the file, its flags. */
struct pl_cache_ix {
	const uint8_t *data;
	uint64_t offset;
	uint32_t len;
	uint32_t flags; /* PL_CACHE_REC_* */
};
/*
 * Records i, i + 1, ... of e as a run of index entries in place: the first, and in *ret_n how
 * many follow in a row (at least 1), or NULL and 0 past the records published. For a reader
 * that walks an entry in order; valid while the caller holds its reference to e.
 */
const struct pl_cache_ix *pl_cache_entry_run(const struct pl_cache_entry *e, uint64_t i,
					     uint64_t *ret_n);
/* Records published so far (all of them, once ready). */
uint64_t pl_cache_entry_records(const struct pl_cache_entry *e);
bool pl_cache_entry_ready(const struct pl_cache_entry *e);
/* Ready, and every record of it is decoded (PL_CACHE_REC_FLAT or _VALUES). */
bool pl_cache_entry_all_flat(const struct pl_cache_entry *e);
/* Bytes of a ready entry's records (data and footers). */
uint64_t pl_cache_entry_bytes(const struct pl_cache_entry *e);
/* Bytes it holds against the budget (pages and index). */
uint64_t pl_cache_entry_held(const struct pl_cache_entry *e);

void pl_cache_get_stats(struct pl_cache *c, struct pl_cache_stats *ret);
/* Its budget in bytes (fixed). */
uint64_t pl_cache_budget(const struct pl_cache *c);

#endif
