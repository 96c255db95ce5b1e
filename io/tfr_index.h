/* SPDX-License-Identifier: Apache-2.0 */
/* Record index of TFRecord files: per file its record count and record offsets (issue 36). */
#ifndef SLUICE_IO_TFR_INDEX_H
#define SLUICE_IO_TFR_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "ioerr.h"
#include "tfr.h"

/*
 * A TFRecord file carries no record count. An index file holds, for each data file of one
 * directory (keyed by basename), its record count, the total payload bytes and the offsets of
 * records 0, k, 2k, ... in the (decompressed) stream, together with the data file's identity
 * (size, st_mtim, st_ctim, st_ino) so that an entry for a file that changed since is never used.
 *
 * The usual place is DIR/.sluice-index (TFR_INDEX_NAME: a leading dot, so that dataset listings
 * skip it); the format also serves an index kept anywhere else, which is why the API takes the
 * index file's path and the data directory apart (the directory is recorded in the header).
 *
 * File format (all little-endian; docs in tfr_index.c):
 *   header: "SLIDX001", u32 version, u32 header_len, u64 n_entries, u32 dir_len, dir bytes,
 *           then a table of n_entries rows {u64 entry_offset, u64 entry_len, u32 name_len,
 *           name bytes}, then u32 CRC32C of every header byte before it.
 *   entry:  u32 name_len, u32 compression, u64 size, i64 mtime_ns, i64 ctime_ns, u64 ino,
 *           u64 records, u64 payload_bytes, u64 stream_bytes, u64 stride, u64 n_offsets,
 *           name bytes, n_offsets x u64 offsets, then u32 CRC32C of every entry byte before it.
 * The table lets each entry be found without trusting any other: a damaged entry is reported
 * (-EBADMSG) and the others stay usable; a damaged header makes the whole file unusable.
 */

#define TFR_INDEX_NAME	  ".sluice-index"
#define TFR_INDEX_MAGIC	  "SLIDX001"
#define TFR_INDEX_VERSION 1u
/* At most this many offsets per entry: the stride k grows beyond it. */
#define TFR_INDEX_MAX_OFFSETS (1ull << 20)

/* One data file's entry. Built by tfr_index_build_fd() or read by tfr_index_open(). */
struct tfr_index_entry {
	char *name;			  /* the data file's basename (NUL-terminated, no '/') */
	uint64_t size;			  /* st_size */
	int64_t mtime_ns;		  /* st_mtim in ns since the epoch */
	int64_t ctime_ns;		  /* st_ctim in ns since the epoch */
	uint64_t ino;			  /* st_ino */
	enum tfr_compression compression; /* of the whole file */
	uint64_t records;		  /* records in the file */
	uint64_t payload_bytes;		  /* sum of the records' lengths */
	uint64_t stream_bytes;		  /* bytes of the (decompressed) stream */
	uint64_t stride;		  /* k: offsets[i] is record i * k's (k >= 1) */
	uint64_t n_offsets;		  /* ceil(records / k) */
	uint64_t *offsets;		  /* byte offset of each indexed record's header */
};

void tfr_index_entry_destroy(struct tfr_index_entry *e);

/* A part of one data file: records [first, first + count), at bytes [offset, offset + bytes). */
struct tfr_index_split {
	uint64_t first, count;
	uint64_t offset, bytes;
};

/*
 * Cut e's file into record ranges of about `records` records each, at its indexed offsets: a
 * split starts at a multiple of the entry's stride k (so a reader starts there reading nothing
 * before) and holds a multiple of k records, the last the rest; together they cover every
 * record and byte of the file once, in order (what a dispatcher hands to workers: DESIGN.md
 * §9). An uncompressed file is cut so; a compressed one is one split of the whole file (an
 * offset inside its stream needs everything before it inflated), and so is an empty file (count
 * 0). *ret (malloc'ed: the caller frees it) and *ret_n. -EINVAL (records 0, or an entry whose
 * offsets do not fit its counts), -ENOMEM.
 */
int tfr_index_splits(const struct tfr_index_entry *e, uint64_t records,
		     struct tfr_index_split **ret, size_t *ret_n);

struct tfr_index_build_opts {
	size_t size;			  /* sizeof(struct tfr_index_build_opts), set by _init */
	enum tfr_compression compression; /* of the whole file (default none) */
	uint64_t max_record_len;	  /* default TFR_DEFAULT_MAX_RECORD_LEN */
	uint64_t max_offsets;		  /* default TFR_INDEX_MAX_OFFSETS (tests set less) */
	/*
	 * Offsets kept while scanning before every other one is dropped and the sampling stride
	 * doubles (bounds the memory of a scan; default 1 << 24). k is then the smallest multiple
	 * of that stride keeping at most max_offsets: exact while the file has at most this many
	 * records, within 1/16 of the smallest k otherwise. Tests set less.
	 */
	uint64_t scan_cap;
	/*
	 * Uncompressed files of 4 MiB or more are scanned by several interleaved cursors (one
	 * thread; the result is exactly the serial scan's, which decides on any doubt). true:
	 * the serial scan only (tests, benchmarks, and counts that must not touch the pages of
	 * huge records: plan.c).
	 */
	bool serial;
};

void tfr_index_build_opts_init(struct tfr_index_build_opts *opts);

/*
 * Scan one data file (fd, open for reading; path for the entry's name and for messages) into
 * a new entry whose identity fields come from fstat(fd). Uncompressed files are not read in
 * full: the scan hops from header to header (mmap), checking each header's length CRC and that
 * the record fits in the file, and never CRCs a payload. gzip/zlib files are inflated through
 * the tfr_reader (header CRCs checked, data CRCs not). fd's file offset is not used or moved.
 *
 * The caller owns *ret_e (tfr_index_entry_destroy). Errors: -EBADMSG (bad or truncated header,
 * record past the end, bad compressed stream; the message names the file, the byte offset and
 * the record index), -EMSGSIZE (a length over max_record_len), -EINVAL (not a regular file),
 * -ENOMEM, fstat's/mmap's/pread's -errno. opts may be NULL.
 */
int tfr_index_build_fd(int fd, const char *path, const struct tfr_index_build_opts *opts,
		       struct tfr_index_entry **ret_e, struct io_error *err);

/*
 * Write an index file holding entries (sorted by name here; a duplicate name is -EINVAL) for
 * the data directory data_dir (recorded as written: pass an absolute path). Written to a
 * temporary file in index_path's directory, fsync'ed and renamed over index_path (mode 0644),
 * so that a reader sees the old index or the new one, never half of one. Entries are only read.
 * Errors: -EINVAL (a duplicate or bad name), -ENOMEM, the -errno of open/write/rename, with a
 * message naming the index file.
 */
int tfr_index_write(const char *index_path, const char *data_dir,
		    const struct tfr_index_entry *const *entries, size_t n, struct io_error *err);

/*
 * Rewrite index_path with entries (as tfr_index_write) merged with the entries of the index
 * already there: an old entry of another file is kept when it is intact and still fresh
 * (stat of data_dir/NAME, as tfr_index_entry_check); entries replace old ones of their name.
 * An index that is missing, or whose header is damaged, is replaced as if there were none.
 * *ret_kept (may be NULL) is the number of old entries kept. Errors as tfr_index_write, and
 * open's other than -ENOENT for the old index.
 */
int tfr_index_update(const char *index_path, const char *data_dir,
		     const struct tfr_index_entry *const *entries, size_t n, size_t *ret_kept,
		     struct io_error *err);

/* A read index; every entry it hands out is owned by it (valid until tfr_index_destroy). */
struct tfr_index;

/*
 * Read and check an index file (tfr_index_parse over its bytes). The caller owns *ret_ix.
 * Errors: -ENOENT (no such file) and open's other errors, -EBADMSG (not an index, a damaged or
 * truncated header), -ENOMEM; the message names the index file. Damaged entries are not an
 * error here: they are reported when looked up.
 */
int tfr_index_open(const char *index_path, struct tfr_index **ret_ix, struct io_error *err);

/*
 * The same over len bytes in memory (copied where needed: buf may go after the call). name is
 * for messages (the index file's path; may be NULL). Every field is bound-checked: the bytes
 * may be hostile.
 */
int tfr_index_parse(const void *buf, size_t len, const char *name, struct tfr_index **ret_ix,
		    struct io_error *err);

void tfr_index_destroy(struct tfr_index *ix);

/* The data directory recorded in the header, and the number of entries (damaged ones too). */
const char *tfr_index_data_dir(const struct tfr_index *ix);
size_t tfr_index_count(const struct tfr_index *ix);

/*
 * Entry i (0 <= i < count, in name order): its name in *ret_name always (from the header, which
 * is checked), and 0 with the entry in *ret_e, or -EBADMSG with a message naming the index file
 * and the entry (bad CRC, truncated, absurd counts), or -ERANGE for i out of range.
 */
int tfr_index_entry_at(const struct tfr_index *ix, size_t i, const char **ret_name,
		       const struct tfr_index_entry **ret_e, struct io_error *err);

/*
 * The entry of the data file called name (a basename), with no freshness check: 0, -ENOENT (no
 * entry), -EBADMSG (the entry is damaged; the message names the index file and the entry).
 */
int tfr_index_find(const struct tfr_index *ix, const char *name,
		   const struct tfr_index_entry **ret_e, struct io_error *err);

/*
 * Whether e still describes the file that st (fstat of the data file) describes: 0, or -ESTALE
 * with a message naming the file and the field that changed (size, mtime, ctime, ino). ctime
 * counts too, as touch -r cannot set it back: a file rewritten to the same size with its mtime
 * restored is stale.
 */
int tfr_index_entry_check(const struct tfr_index_entry *e, const struct stat *st,
			  struct io_error *err);

/*
 * tfr_index_find() then tfr_index_entry_check() against st: 0 with a fresh entry in *ret_e,
 * -ENOENT, -EBADMSG or -ESTALE (message as above).
 */
int tfr_index_lookup(const struct tfr_index *ix, const char *name, const struct stat *st,
		     const struct tfr_index_entry **ret_e, struct io_error *err);

/*
 * Where to start for record `record`: the nearest indexed record at or below it, its offset in
 * *ret_offset, and in *ret_skip how many records to hop from there. 0, or -ERANGE when record is
 * not below e->records.
 */
int tfr_index_entry_offset(const struct tfr_index_entry *e, uint64_t record, uint64_t *ret_offset,
			   uint64_t *ret_skip);

#endif
