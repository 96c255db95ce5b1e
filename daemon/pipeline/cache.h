/* SPDX-License-Identifier: Apache-2.0 */
/* The shared record cache (DESIGN.md §5): whole files' framed records, shared by pipelines. */
#ifndef SLUICE_PIPELINE_CACHE_H
#define SLUICE_PIPELINE_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "io/tfr.h"

/*
 * One cache serves every pipeline of a process (sluiced makes one with --cache-memory; `sluicectl
 * run --cache-memory` one for its pipeline's epochs). An entry is one file's records as the
 * frame stage produced them, after decompression, in order: each record's bytes and the 4-byte
 * footer that holds its stored data CRC (checked by the parse task as for a record read from
 * the file: the cache never changes what a pipeline sees, errors included). Only a file framed
 * cleanly from its first record to its end becomes an entry; a file that fails, or is skipped,
 * is not cached.
 *
 * An entry is keyed by the file's device, inode, size, mtime and the compression it was read
 * with: a file that changes is a new key, and the entry of its old contents is dropped at the
 * next lookup of that file. Entries that no pipeline reads are evicted, least recently used
 * first, when a fill needs room under the budget. Thread-safe (one mutex; entries are
 * immutable once ready and reference-counted by their readers).
 */

struct pl_cache;
struct pl_cache_entry;

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
};

struct pl_cache_stats {
	uint64_t budget, bytes; /* bytes held (entries and fills in progress) */
	uint64_t entries;	/* ready */
	uint64_t hits, misses;	/* lookups of a file */
	uint64_t fills;		/* files cached */
	uint64_t fill_aborts;	/* fills given up (over the budget, an error in the file) */
	uint64_t evictions;	/* entries dropped for room */
	uint64_t invalidations; /* entries dropped because their file changed */
};

/* A cache of at most budget bytes (> 0). 0 or -ENOMEM. */
int pl_cache_create(uint64_t budget, struct pl_cache **ret);
/* Frees every entry: call once no pipeline uses the cache any more. NULL is fine. */
void pl_cache_destroy(struct pl_cache *c);

/* The key of the file at path as it is now (stat), read with compression. 0 or -errno. */
int pl_cache_key_of(const char *path, enum tfr_compression compression, struct pl_cache_key *ret);

/*
 * The ready entry for key, with a reference for the caller (pl_cache_put), or NULL (a miss:
 * counted). An entry of the same file (device and inode) with another size or mtime is dropped.
 */
struct pl_cache_entry *pl_cache_get(struct pl_cache *c, const struct pl_cache_key *key);
/* Drop a reference from pl_cache_get. */
void pl_cache_put(struct pl_cache_entry *e);

/*
 * Start caching the file of key as it is framed: an entry being filled (the caller's until
 * pl_cache_fill_end), or NULL when the file is cached or being cached already, or when
 * size_hint bytes (the file's size: an uncompressed file's records take about that much) do not
 * fit the budget even after evicting every unused entry.
 */
struct pl_cache_entry *pl_cache_fill_begin(struct pl_cache *c, const struct pl_cache_key *key,
					   uint64_t size_hint);
/*
 * Append the next record: len bytes of data, followed by its 4-byte footer at data + len unless
 * flags has PL_CACHE_REC_CHECKED; its header's offset in the (decompressed) file. 0, or -ENOSPC
 * (over the budget: end the fill with complete false), -ESTALE (the file changed meanwhile:
 * likewise), -ENOMEM.
 */
int pl_cache_fill_add(struct pl_cache_entry *e, const uint8_t *data, uint32_t len, uint64_t offset,
		      unsigned flags);
/* Finish a fill: complete (every record of the file, in order, to its end) makes it ready. */
void pl_cache_fill_end(struct pl_cache_entry *e, bool complete);

/* A ready entry's records. */
uint64_t pl_cache_entry_records(const struct pl_cache_entry *e);
/* Record i: its data (its footer follows unless CHECKED), length, header offset and flags. */
void pl_cache_entry_record(const struct pl_cache_entry *e, uint64_t i, const uint8_t **ret_data,
			   uint32_t *ret_len, uint64_t *ret_offset, unsigned *ret_flags);
/* Where its records are (record i's data is within [base, base + pl_cache_entry_bytes)). */
const uint8_t *pl_cache_entry_record_base(const struct pl_cache_entry *e);
/* Bytes of its records (data and footers). */
uint64_t pl_cache_entry_bytes(const struct pl_cache_entry *e);

void pl_cache_get_stats(struct pl_cache *c, struct pl_cache_stats *ret);

#endif
