/* SPDX-License-Identifier: Apache-2.0 */
/* The pipeline engine: a spec compiled into a plan that produces batches (DESIGN.md §3.5, §4). */
#ifndef SLUICE_PIPELINE_PIPELINE_H
#define SLUICE_PIPELINE_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/ioerr.h"
#include "io/iox.h"
#include "io/manifest.h"
#include "spec.h"
#include "stage.h"

/*
 * A pipeline reads the spec's dataset and produces batches in the layout of ipc/batch.h into
 * memory from opts.alloc, up to num_prefetch batches ahead of the consumer. Work runs on a
 * sched pool (parse tasks decode each row straight into its place in the batch) and on one
 * driver thread of the pipeline's own (reads, framing, interleave, shuffle, batch assembly).
 * What the batches are is docs/pipeline-semantics.md.
 *
 * One consumer thread calls pl_pipeline_next()/pl_batch_release()/pl_pipeline_save().
 */

struct sched_pool;
struct pl_pipeline;
struct pl_batch;

struct pl_cache; /* cache.h */

struct pl_pipeline_opts {
	size_t size; /* sizeof(struct pl_pipeline_opts), set by _init */
	struct sched_pool
		*pool; /* NULL: the pipeline starts a pool of num_parallel_parses workers */
	enum iox_engine engine; /* default AUTO (honours SLUICE_IO_ENGINE=pread) */
	/*
	 * The shared record cache (cache.h), or NULL: files it holds are not read again; files it
	 * does not hold are put in it as they are framed, while they fit. The cache never changes
	 * a batch. Kept by the caller past pl_pipeline_destroy.
	 */
	struct pl_cache *cache;
	/*
	 * Cache uncompressed files too (default: only compressed ones, whose inflate it saves; an
	 * uncompressed file costs less to read again from the page cache than to copy into the
	 * cache: docs/BENCHMARKS.md, "cache"; for slow or remote storage, set it).
	 */
	bool cache_uncompressed;
	bool direct; /* O_DIRECT reads where the file system takes them (default off:
		      * no kernel copy, but no page cache either; for big files on
		      * NVMe, docs/io-engine.md) */
	/*
	 * Whose rights read the dataset: every directory, manifest, list file and data file is
	 * opened with them (io/creds.h; copied). NULL: the process's own.
	 */
	const struct io_creds *creds;
	const void *state; /* resume from pl_pipeline_save() output, or NULL */
	size_t state_len;
	/*
	 * Batch memory: len bytes, IPC_BATCH_EXTENT_ALIGN-aligned, or NULL when out of memory.
	 * NULL alloc: aligned_alloc, with up to 8 freed batches kept for reuse. Called from the
	 * pipeline's threads.
	 */
	void *(*alloc)(void *ctx, size_t len);
	void (*free)(void *ctx, void *mem, size_t len);
	void *alloc_ctx;
	/*
	 * Delivery without a consumer thread (NULL: batches wait in a queue for
	 * pl_pipeline_next()). deliver gets each batch, in order, on the driver thread as soon as
	 * it is done, and owns it (pl_batch_release(), from any thread); end is called once, last,
	 * with 0 at the end of the stream or the pipeline's error (not after pl_pipeline_destroy
	 * stopped it: then with -ECANCELED). Saves the hand-over to a consumer that would only pass
	 * the batch on (sluiced's publisher): a wake-up, and the preemption of the driver by it.
	 * The callbacks may take locks the driver's alloc also takes, not the pipeline's.
	 */
	void (*deliver)(void *ctx, struct pl_batch *b);
	void (*end)(void *ctx, int rc, const struct io_error *err);
	void *deliver_ctx;
	/*
	 * Create without starting: nothing runs, and no callback is called, until
	 * pl_pipeline_start(). For a caller whose deliver and end callbacks need what it makes
	 * from the pipeline (its schema, its batch size) first: sluiced's ring.
	 */
	bool defer_start;
	/*
	 * A tuner will move the knobs the spec left "auto" (pl_pipeline_tune): they start at their
	 * least, one batch job in flight, reads of PL_TUNE_CHUNK_MIN bytes, one read in flight per
	 * reader (num_parallel_reads, under a cycle_length), instead of the spec's "auto" values,
	 * and within the spec's ram_budget when it gives one (docs/plumber.md, "Autotuning").
	 */
	bool tune;
	/*
	 * The pipeline's memory account (mem.h), or NULL (nothing counted): every block its
	 * stages allocate that grows with the spec or the data is charged to it first, and a
	 * refused charge fails the pipeline with the figures (never the process). Kept by the
	 * caller past pl_pipeline_destroy. pl_pipeline_mem_need() says what to reserve in it.
	 */
	struct pl_mem *mem;
};

/*
 * The knobs a tuner may move while the pipeline runs. None changes a batch: batches are
 * published in seq order whatever is in flight, framing does not depend on where reads end,
 * and the pool's weights order tasks, not rows.
 */
#define PL_TUNE_PREFETCH_MAX 32
#define PL_TUNE_CHUNK_MIN    ((size_t)64 << 10)
#define PL_TUNE_CHUNK_MAX    ((size_t)4 << 20)
struct pl_tune {
	unsigned prefetch; /* batch jobs ready or in flight (0: leave it) */
	size_t read_chunk; /* bytes per read, for the next file a reader opens (0: leave it) */
	/* reads in flight per reader of the cycle, for the next file it opens (0: leave it); a
	   knob only where the spec gives cycle_length (num_parallel_reads is then not the cycle) */
	unsigned read_depth;
	unsigned weight; /* the pool's weight of its tasks (0: leave it) */
};
/*
 * Which knobs a tuner may move (the spec left them "auto" and opts.tune was set): the most each
 * may take in *ret_max (within args.ram_budget when given: docs/plumber.md, "Autotuning"), 0
 * for one that is fixed (weight: always tunable, up to UINT_MAX).
 */
void pl_pipeline_tunable(const struct pl_pipeline *p, struct pl_tune *ret_max);
/* Move the knobs t names (0: leave it), clamped to pl_pipeline_tunable's. Any thread. */
void pl_pipeline_tune(struct pl_pipeline *p, const struct pl_tune *t);

void pl_pipeline_opts_init(struct pl_pipeline_opts *opts);

/*
 * Open the dataset, check the spec against its manifest (errors name the JSON path), and start.
 * The spec is not kept (copy what you need). -EINVAL (rule), -ENOENT (no files, empty shard),
 * -EBADMSG (bad manifest, bad state), -ENOMEM, -errno.
 */
int pl_pipeline_create(const struct pl_spec *spec, const struct pl_pipeline_opts *opts,
		       struct pl_pipeline **ret_p, struct io_error *err);
/*
 * Start a pipeline created with defer_start. -EALREADY (it has started: without defer_start,
 * or a second call), -EAGAIN (no thread); err says which.
 */
int pl_pipeline_start(struct pl_pipeline *p, struct io_error *err);
/* Stops the driver and the pipeline's pool tasks, frees every batch not yet released. NULL ok. */
void pl_pipeline_destroy(struct pl_pipeline *p);

/* One output tensor of the schema (the order of ipc_batch_tensor.schema_index). */
struct pl_tensor_info {
	const char *name; /* the to_name */
	enum manifest_dtype dtype;
	unsigned rank;		    /* the batch dimension included */
	int64_t shape[PL_MAX_RANK]; /* shape[0] = -1 (rows); -1 where it varies per batch */
	bool ragged;		    /* axis 1 is ragged (row_splits) */
};

/*
 * What the pipeline's stages are known to need before any record is read, for a reservation in
 * its memory account (opts.mem; pl_mem_set_floor): its read buffers (the cycle's readers, each
 * with the buffers of its reads in flight, the chunk framed and those records may pin, at the
 * most a tuner may give) and the shuffle slots it starts with. What grows with the data (record
 * blocks, more slots, a record assembled across chunks, batches' rows) is charged as it comes.
 */
struct pl_mem_need {
	uint64_t read_bytes; /* cycle x buffers x chunk */
	unsigned cycle, buffers;
	size_t chunk;
	uint64_t slot_bytes;
	uint64_t store_bytes; /* the record store's first blocks, batches' row slots */
	uint64_t total;
};
void pl_pipeline_mem_need(const struct pl_pipeline *p, struct pl_mem_need *ret);
/* The spec's args.ram_budget in bytes, or 0 when it gives none. */
int64_t pl_pipeline_ram_budget(const struct pl_pipeline *p);
size_t pl_pipeline_n_tensors(const struct pl_pipeline *p);
/*
 * The most bytes one batch takes, when every tensor's rows have a fixed shape (dense images,
 * fixed-size features: the layout's bound, headers and alignment included), else 0; and in
 * *ret_prefetch the batches the engine keeps ahead. For sizing a ring before the first batch.
 */
uint64_t pl_pipeline_batch_bytes(const struct pl_pipeline *p, unsigned *ret_prefetch);
const struct pl_tensor_info *pl_pipeline_tensor(const struct pl_pipeline *p, size_t i);

struct pl_batch {
	const void *mem; /* the extent: struct ipc_batch_hdr, tensor table, data */
	size_t len;
	uint64_t seq, epoch, rows;
	uint32_t flags; /* IPC_BATCH_F_* */
};

/*
 * The next batch in order. Returns 1 and *ret_batch (the caller's until pl_batch_release), 0 at
 * the end of the stream, -ETIMEDOUT after timeout_ms (-1: no limit), or the pipeline's error
 * (-EBADMSG for corrupt data under on_corrupt "fail", ...) with its message, again on every
 * later call. Batches before an error are delivered first.
 */
int pl_pipeline_next(struct pl_pipeline *p, int timeout_ms, struct pl_batch **ret_batch,
		     struct io_error *err);
void pl_batch_release(struct pl_pipeline *p, struct pl_batch *b);

/*
 * The position after the last batch pl_pipeline_next() returned, as a small blob (epoch, batches
 * done, seed, fingerprint), at most PL_STATE_MAX bytes. Returns its length, or -ENOSPC.
 */
#define PL_STATE_MAX 64
int pl_pipeline_save(const struct pl_pipeline *p, void *buf, size_t cap);

/* Where a batch sits in the stream (from its header). */
struct pl_batch_pos {
	uint64_t epoch, index_in_epoch, seq;
	uint32_t flags;
};

/*
 * The state (as pl_pipeline_save() writes it) that resumes right after the batch at pos, or at
 * the pipeline's start when pos is NULL: for a server whose readers are behind the pipeline.
 * Returns its length, or -ENOSPC.
 */
/* The state of position (epoch, batches done in it, the stream's seq there): as above. */
int pl_pipeline_state_of(const struct pl_pipeline *p, uint64_t epoch, uint64_t index, uint64_t seq,
			 void *buf, size_t cap);
int pl_pipeline_state_after(const struct pl_pipeline *p, const struct pl_batch_pos *pos, void *buf,
			    size_t cap);

/*
 * The pipeline's identity (DESIGN.md §5): 128 bits over every spec value that changes which
 * batches come out (not name, parallelism, buffers, prefetch), the output tensors, and every
 * data file's path, size and mtime. Two specs with equal fingerprints give the same batches.
 */
void pl_pipeline_fingerprint(const struct pl_pipeline *p, uint8_t ret_fp[16]);
/* The same for a spec, without starting anything (it lists the dataset's files, with creds'
   rights as struct pl_pipeline_opts.creds). */
int pl_spec_fingerprint(const struct pl_spec *spec, const struct io_creds *creds,
			uint8_t ret_fp[16], struct io_error *err);

struct pl_stats {
	uint64_t files_opened;
	uint64_t records; /* framed */
	uint64_t record_bytes;
	uint64_t file_bytes;
	uint64_t direct_bytes;	/* of file_bytes, read with O_DIRECT (opts.direct) */
	uint64_t batches;	/* completed */
	uint64_t epoch_batches; /* batches per epoch: counted by the first epoch that ended, or
				 * before it as epoch_batches_ahead; 0 when not known */
	uint64_t epoch_batches_ahead; /* counted before the first epoch from the record index
				       * (or by hopping over uncompressed files); 0 not known */
	uint64_t rows;
	uint64_t skipped_records; /* on_corrupt */
	uint64_t skipped_files;
	uint64_t copied_bytes;	  /* record bytes copied out of read buffers (others: zero-copy) */
	unsigned cache_level;	  /* what the cache keeps of this pipeline's files: 0 nothing, 2
				     its records projected to the features it reads (1, whole
				     framed records, only for a record that does not decode) */
	uint64_t cache_files;	  /* files framed from the shared record cache (no reading) */
	uint64_t cache_bytes;	  /* record bytes that came from it */
	uint64_t cache_filled;	  /* files this pipeline put in it */
	uint64_t cache_followed;  /* of cache_files, those another pipeline was putting there */
	uint64_t cache_fallbacks; /* of those, files read after all from where that fill stopped */
	uint64_t cached_epochs;	  /* epochs that found every file in it decoded: run on compact
				     rows (docs/pipeline.md, "Cached epochs") */
	/*
	 * What its dataset would take in the cache (estimated from the files it filled or read
	 * there; 0 until one was), and whether that fits the budget: a dataset that does not fit
	 * keeps what fits, evicting nothing for the rest
	 */
	uint64_t cache_need;
	bool cache_fits;
	uint64_t evacuations;	/* pinned read buffers emptied to let reading go on */
	uint64_t driver_cpu_ns; /* read, frame, interleave, shuffle, assemble */
	uint64_t parse_ns;	/* time running parse tasks (monotonic clock around each) */
	uint64_t pool_task_ns;	/* of parse_ns, the pool's workers' (not the driver's) */
	uint64_t read_wait_ns;	/* time the driver was blocked waiting for reads */
	uint64_t lazy_fills;	/* fill passes that woke no worker: the driver had time to spare */
	uint64_t small_fills;	/* of them, too small to be worth a worker's wake-up */
	uint64_t next_wait_ns;	/* time pl_pipeline_next() waited */
	/* batch jobs: the driver's time waiting for (or helping) the oldest one before it was
	   done, and their latency, started to finished, summed over `batches` */
	uint64_t job_wait_ns, job_ns;
	/* the knobs as they are now (struct pl_tune; the tuner's, or the spec's) */
	unsigned prefetch, prefetch_max; /* batch jobs ready or in flight, and the most allowed */
	size_t read_chunk;		 /* bytes per read of the next file opened */
	unsigned read_depth;		 /* reads in flight per reader, for the next file opened */
	unsigned pool_weight;		 /* its tasks' queue's weight in the pool */
	const char *io_engine;		 /* "io_uring" or "pread" */
	const char *io_fallback;	 /* why not io_uring, or NULL */
	/* per stage (enum pl_stage_id; names from pl_stage_name): docs/pipeline.md */
	struct pl_stage_stats stages[PL_STAGE_COUNT_];
};
void pl_pipeline_get_stats(const struct pl_pipeline *p, struct pl_stats *ret_stats);

#endif
