/* SPDX-License-Identifier: Apache-2.0 */
/* Stage "frame": TFRecord framing of one file's chunks (+ inflate, header CRC) into records. */
#ifndef SLUICE_PIPELINE_FRAME_H
#define SLUICE_PIPELINE_FRAME_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "io/ioerr.h"
#include "cache.h"
#include "io/tfr.h"
#include "record.h"
#include "spec.h"
#include "stage.h"

/* What every framer of a pipeline adds to. */
struct pl_frame_totals {
	uint64_t skipped_files;
	uint64_t cache_files;	  /* files framed from the cache */
	uint64_t cache_bytes;	  /* record bytes that came from it */
	uint64_t cache_filled;	  /* files this pipeline put in it */
	uint64_t cache_followed;  /* files framed from it while another pipeline filled them */
	uint64_t cache_fallbacks; /* of those, files read after all from where the fill stopped */
	/* the files it filled or read whole from the cache: what their entries hold, their sizes */
	uint64_t sample_bytes, sample_file_bytes;
};

struct pl_frame_opts {
	enum tfr_compression compression;
	enum pl_on_corrupt on_corrupt;
	/* the upstream (a reader): its next chunk (pl_read_next's contract), and giving up the
	 * file midway (a framing error skipped, or a new epoch) */
	int (*read)(void *ctx, bool wait, struct pl_chunk *ret, struct io_error *err);
	void (*abandon)(void *ctx);
	/* open path with the reader (a file the cache was to give, read after all): 0 or -errno */
	int (*open)(void *ctx, const char *path, struct io_error *err);
	void *read_ctx;
	const atomic_bool *stop; /* set: a wait for a fill in progress ends (-ECANCELED) */
	/*
	 * on_corrupt skip_file: check each record as the parse task will (0 or -errno), so that a
	 * bad record ends its file here. NULL otherwise.
	 */
	int (*validate)(void *ctx, const struct pl_rec *rec);
	void *validate_ctx;
	struct pl_store *store; /* records not pinned in their chunk are copied here */
	/* a record assembled across chunks is charged to it before it is read (mem.h), or NULL */
	struct pl_mem *mem;
	/*
	 * The shared record cache, or NULL: a file it holds is framed from there (no read); a file
	 * it does not hold is put there as it is framed, when it fits (pl_cache_fill_begin).
	 */
	struct pl_cache *cache;
	const struct io_creds *creds;	  /* the cache is looked up for files these rights open */
	struct pl_cache_user *cache_user; /* the pipeline's (shared by its framers) */
	/*
	 * With a cache: project a record before it goes in (the cache keeps, per file, what the
	 * pipelines with the same projection key read of it). 1 and *ret_data, *ret_len (valid
	 * until the next call) when it was projected, its data CRC checked (rec->crc_checked set:
	 * the parse task need not check it again); 2 likewise when they are the flat form of its
	 * decoded features (PL_CACHE_REC_FLAT); 0 to keep it whole
	 * (a record that does not decode keeps its bytes, so that its errors stay the same);
	 * -ENOMEM. NULL: records are kept whole, proj_key 0.
	 */
	int (*project)(void *ctx, struct pl_rec *rec, const uint8_t **ret_data, uint32_t *ret_len);
	void *project_ctx;
	uint64_t proj_key;
	/*
	 * The bytes of a flat form's heads (16 per feature decoded): a flat record whose heads are
	 * those of the file's first is cached as its values only (PL_CACHE_REC_VALUES). 0: never.
	 */
	uint32_t flat_heads;
	/* the sizes of the dataset's files: what it would take in the cache is estimated from it */
	uint64_t dataset_bytes;
	struct pl_stage_stats *st;
	struct pl_frame_totals *tot;
	struct pl_prof *prof;
};

struct pl_frame;

int pl_frame_create(const struct pl_frame_opts *opts, struct pl_frame **ret);
void pl_frame_destroy(struct pl_frame *fr);
/*
 * Before the reader opens file `file` (index into the dataset, for the records) at path, size
 * bytes: 1 when the cache holds it or another pipeline is putting it there (it is framed from
 * there: no reader, no pl_frame_open), 0 when not. path stays valid while the file is open.
 */
int pl_frame_open_cached(struct pl_frame *fr, uint32_t file, const char *path, uint64_t size);
/* Start framing file `file` at path, size bytes, from the reader's chunks. */
int pl_frame_open(struct pl_frame *fr, uint32_t file, const char *path, uint64_t size);
/* Whether a file is open (not framed to its end or given up). */
bool pl_frame_is_open(const struct pl_frame *fr);
/* The file's index, while open. */
uint32_t pl_frame_file(const struct pl_frame *fr);
/*
 * The file's next record: 1 and *ret_rec (one reference, the caller's), 0 when the file ended
 * (cleanly, or by an error skipped under on_corrupt), -EAGAIN when wait is false and no input
 * is ready, or -errno (a framing or read error under on_corrupt fail; err says where).
 */
int pl_frame_next(struct pl_frame *fr, bool wait, struct pl_rec *ret_rec, struct io_error *err);
/* Give the open file up (a new epoch starts): its chunk goes, its reads are abandoned. */
void pl_frame_abandon(struct pl_frame *fr);

/*
 * The bytes a dataset of dataset_bytes would take in the cache, from the entries sampled in tot
 * (bytes per file byte): 0 until one was. A pipeline whose dataset does not fit the cache's
 * budget fills only free room (PL_CACHE_FILL_NO_EVICT).
 */
uint64_t pl_frame_cache_need(const struct pl_frame_totals *tot, uint64_t dataset_bytes);

#endif
