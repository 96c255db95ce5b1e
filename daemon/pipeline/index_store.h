/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced's own record index: entries made as a by-product of framing (docs/index.md). */
#ifndef SLUICE_PIPELINE_INDEX_STORE_H
#define SLUICE_PIPELINE_INDEX_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "io/creds.h"
#include "io/tfr.h"
#include "io/tfr_index.h"

/*
 * One table per process (the daemon's), keyed by data directory and basename, holding struct
 * tfr_index_entry's made when a pipeline framed a file from its start to its clean end. It is
 * off until pl_own_index_init() (sluicectl run and the unit tests never call it). With a state
 * directory, the entries of each data directory are also kept in
 * STATE/index/<16 hex of the directory's hash>.sluice-index (tfr_index_update, by a thread of
 * the store's: never on a pipeline's thread; at most once a second, and last at fini), and read
 * back by the next start (not a file whose name is not the hash of the directory its header
 * names, nor an entry whose data file is gone or changed since). Nothing is ever written
 * beside the data. Every function is thread-safe.
 */

/* Turn the store on; state_dir (may be NULL: memory only) is read back. Once, before pipelines. */
int pl_own_index_init(const char *state_dir);
/* Write what is not written yet, stop the writer, free the table. */
void pl_own_index_fini(void);
bool pl_own_index_on(void);

/*
 * The records of the data file at path, from its entry when fresh against st (fstat of the
 * data file, opened with the requester's rights) and read as compression: 0 and *ret_records,
 * -ENOENT (no entry, or the store is off), -ESTALE (the file changed since).
 */
int pl_own_index_records(const char *path, const struct stat *st, enum tfr_compression compression,
			 uint64_t *ret_records);

/* Offsets kept per entry at most (the stride doubles beyond): 8 KiB a file. */
#define PL_OWN_INDEX_OFFSETS 1024u

/*
 * A framer's collection of one file's entry (struct pl_frame's): begun when a file is framed
 * from its start, fed each record (an increment, and a store every stride-th record), ended
 * at the file's clean end. Anything else (a skip, an error, a file given up) drops it.
 */
struct pl_own_collect {
	bool on;
	struct stat st; /* fstat of the file when it was opened */
	uint64_t next;	/* the index the next record must have */
	uint64_t payload;
	uint64_t mask; /* stride - 1 (a power of 2) */
	uint64_t n;    /* offsets kept */
	uint64_t *offs;
};

/* Start collecting path's entry (opened with creds) unless the store is off or holds it fresh. */
void pl_own_collect_begin(struct pl_own_collect *c, const struct io_creds *creds, const char *path,
			  enum tfr_compression compression);
void pl_own_collect_keep_(struct pl_own_collect *c, uint64_t offset);

static inline void pl_own_collect_rec(struct pl_own_collect *c, uint64_t index, uint64_t offset,
				      size_t len)
{
	if (!c->on)
		return;
	if (index != c->next) {
		c->on = false; /* not every record, in order: no entry */
		return;
	}
	c->next++;
	c->payload += len;
	if (!(index & c->mask))
		pl_own_collect_keep_(c, offset);
}

/* The file's clean end: its entry goes in the store when the file is still as it was opened. */
void pl_own_collect_end(struct pl_own_collect *c, const struct io_creds *creds, const char *path,
			enum tfr_compression compression);
static inline void pl_own_collect_drop(struct pl_own_collect *c)
{
	c->on = false;
}
void pl_own_collect_fini(struct pl_own_collect *c);

#endif
