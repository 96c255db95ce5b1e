/* SPDX-License-Identifier: Apache-2.0 */
/* Pipeline internals shared by plan.c, source.c, assemble.c and pipeline.c. */
#ifndef SLUICE_PIPELINE_PIPELINE_INTERNAL_H
#define SLUICE_PIPELINE_PIPELINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "io/dataset.h"
#include "io/iox.h"
#include "io/pbex.h"
#include "io/tfr.h"
#include "ops.h"
#include "pipeline.h"
#include "sched/sched.h"
#include "spec.h"

/* A clock for the pipeline's time stats and its drivers' slack (CLOCK_THREAD_CPUTIME_ID is a
 * system call; CLOCK_MONOTONIC a vDSO read). */
static inline uint64_t pl_clock_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- random numbers (docs/pipeline-semantics.md) ---- */

struct pl_rng {
	uint64_t s;
};

enum {
	PL_STREAM_FILES = 1,
	PL_STREAM_SHUFFLE = 2,
	PL_STREAM_WINDOWS = 3,
};

static inline uint64_t pl_mix64(uint64_t z)
{
	z ^= z >> 30;
	z *= 0xbf58476d1ce4e5b9ull;
	z ^= z >> 27;
	z *= 0x94d049bb133111ebull;
	z ^= z >> 31;
	return z;
}

static inline void pl_rng_init(struct pl_rng *r, uint64_t seed, uint64_t epoch, uint64_t stream,
			       uint64_t index)
{
	uint64_t s = pl_mix64(seed ^ 0x736c756963650000ull);
	s = pl_mix64(s ^ epoch);
	s = pl_mix64(s ^ stream);
	r->s = pl_mix64(s ^ index);
}

static inline uint64_t pl_rng_next(struct pl_rng *r)
{
	r->s += 0x9e3779b97f4a7c15ull;
	return pl_mix64(r->s);
}

static inline uint64_t pl_rng_below(struct pl_rng *r, uint64_t n)
{
	return pl_rng_next(r) % n;
}

/* ---- the plan: the spec checked against the manifest ---- */

/* Where an output tensor's values come from. */
enum pl_out_src {
	PL_OUT_FEATURE, /* a manifest feature (a primary) */
	PL_OUT_CONST,	/* a const secondary */
};

struct pl_out_step {
	unsigned n_dims;
	struct pl_slice_dim dims[PL_MAX_RANK];
	char *text; /* for messages */
};

/* One output tensor. */
struct pl_out {
	char *name;
	enum manifest_dtype dtype;
	size_t elem_size; /* 0 for strings */
	enum pl_out_src src;

	/* PL_OUT_FEATURE */
	const struct manifest_feature *feat;
	bool in_lists;	   /* decoded from the SequenceExample's feature lists */
	unsigned slot;	   /* index in the decode schema (context or lists) */
	unsigned rec_rank; /* the record shape: [-1 if var_len] + [raw_len > 1] + shape */
	int64_t rec_shape[PL_MAX_RANK];
	int64_t step_elems; /* var_len: elements per step (-1: a raw -1 inside) */

	/* PL_OUT_CONST */
	int shape_from; /* index of the primary output whose record shape is copied, or -1 */
	unsigned c_rank;
	int64_t c_shape[PL_MAX_RANK];
	uint8_t c_elem[8];
	char *c_str;
	size_t c_str_len;

	size_t n_steps;
	struct pl_out_step *steps;

	/* the row shape after the steps: -1 where it varies by record */
	unsigned row_rank;
	int64_t row_shape[PL_MAX_RANK];
	bool ragged; /* var_len step axis is still axis 0, without padding: row_splits */

	bool pad;
	int64_t pad_shape[PL_MAX_RANK]; /* -1: the batch maximum */
	uint8_t pad_elem[8];
	char *pad_str;
	size_t pad_str_len;

	bool measure;	 /* the batch layout needs each row's shape (or string bytes) first */
	bool direct;	 /* a fixed-shape numeric feature without steps or padding: decoded straight
			  * into its row, no view; ws->rec_dims is not kept for it */
	bool str_direct; /* a fixed-shape string feature of the context without steps or
			  * padding: its bytes values in order are the row's elements */
	bool list_direct;  /* a ragged numeric feature list without steps, in its native dtype
			    * (int64, float32): each step's values straight into the row's values */
	int64_t rec_elems; /* elements of the record shape (when it has no -1) */
};

struct pl_plan {
	struct pl_spec cfg; /* the spec's scalars; its pointer members are NULL */
	struct dataset *ds;
	uint32_t *files; /* indices into ds->files after the shard */
	size_t n_files;
	bool sequence_example;

	size_t n_out;
	struct pl_out *out;
	size_t n_primary;

	/* decode schemas: Examples use ctx only; SequenceExamples ctx (context) and lists */
	struct pbex_schema *ctx;
	struct pbex_schema *lists;
	size_t n_ctx, n_lists;

	bool measure;	       /* some output needs the measuring pass */
	uint64_t fingerprint;  /* checked by saved states */
	uint64_t fingerprint2; /* with it, the 128-bit identity of pl_pipeline_fingerprint() */

	/* resolved knobs */
	unsigned cycle;	   /* interleave cycle length */
	size_t read_chunk; /* iox chunk length */
	unsigned prefetch; /* batches ahead, >= 1 */
	unsigned parses;   /* workers for a pool of the pipeline's own */
};

/* Check spec against its dataset and compile it. The caller owns *ret_plan. */
int pl_plan_create(const struct pl_spec *spec, struct pl_plan **ret_plan, struct io_error *err);
void pl_plan_destroy(struct pl_plan *plan);

/* ---- records in memory ---- */

/* A block of record bytes copied out of the read buffers; freed when no record refers to it. */
/*
 * Record bytes: a heap block the records were copied into, or a read buffer of an iox that
 * the records were framed in and still point into (ix set: zero-copy; the buffer goes back to
 * its iox when the last record is dropped).
 */
struct pl_block {
	size_t refs; /* records alive in it, +1 while it is being filled / is a slot's chunk */
	size_t used, cap;
	uint8_t *data;
	struct pl_block **free_list; /* where a standard-size block goes when unused, or NULL */
	struct pl_block *next_free;
	struct pl_ioxref *ix; /* a read buffer of this iox, or NULL */
	struct iox_chunk chunk;
	uint64_t seq; /* read buffers: the slot's chunk number (age) */
};

/*
 * One element: a record (the independent loader), or a window of a sequence loader (win set:
 * its records, which it owns; for continuous_sequence the steps [win_skip, win_skip +
 * win_len) of their concatenation, for discrete_sequence all of it, win_len -1). A window's
 * file, index and offset are its first record's, for messages.
 */
struct pl_rec {
	struct pl_block *blk;
	struct pl_rec *win;
	uint32_t n_win;
	int64_t win_skip, win_len;
	const uint8_t *data; /* followed by the record's footer (its stored CRC) */
	uint32_t len;
	uint32_t file; /* index into plan->ds->files */
	bool crc_checked;
	bool decompressed;
	uint64_t index;	 /* in its file */
	uint64_t offset; /* of its header in the (decompressed) file */
};

void pl_rec_unref(struct pl_rec *r);
/* Another reference to a record (not a window). */
void pl_rec_ref(struct pl_rec *r);

/* ---- the source: files, interleave, shuffle (source.c); runs on the driver thread ---- */

struct pl_source;

struct pl_source_stats {
	uint64_t files_opened, records, record_bytes, file_bytes, skipped_records, skipped_files;
	uint64_t direct_bytes; /* of file_bytes, read with O_DIRECT */
	uint64_t copied_bytes; /* record bytes copied out of the read buffers */
	uint64_t evacuations;  /* times pinned read buffers were emptied (evacuate()) */
	uint64_t wait_ns;      /* time next() was blocked waiting for reads */
};

int pl_source_create(const struct pl_plan *plan, enum iox_engine engine, bool direct,
		     struct pl_source **ret_src, struct io_error *err);
void pl_source_destroy(struct pl_source *src);
/* Start epoch e: file order, interleave slots, shuffle buffer. */
int pl_source_begin_epoch(struct pl_source *src, uint64_t epoch, struct io_error *err);
/*
 * The epoch's next element: 1 and *ret_rec (the caller owns one reference), 0 at the end of the
 * epoch, or -errno (a framing or I/O error under on_corrupt "fail", -ECANCELED when stopped).
 */
int pl_source_next(struct pl_source *src, struct pl_rec *ret_rec, struct io_error *err);
void pl_source_stop(struct pl_source *src); /* makes a blocked next() return -ECANCELED */
/*
 * Before next() blocks for reads it calls idle(ctx) while that returns > 0 (it did some work),
 * polling the reads between calls: the driver runs its queued parse tasks there (NULL: none).
 */
void pl_source_set_idle(struct pl_source *src, int (*idle)(void *ctx), void *ctx);
void pl_source_get_stats(const struct pl_source *src, struct pl_source_stats *ret);
const char *pl_source_engine(const struct pl_source *src);
const char *pl_source_fallback(const struct pl_source *src);

/* ---- batch assembly (assemble.c): parse rows straight into the batch ---- */

struct pl_bjob;

struct pl_asm_ctx {
	const struct pl_plan *plan;
	struct sched_pool *pool;
	struct sched_queue *q;
	unsigned n_workers;
	void *(*alloc)(void *ctx, size_t len);
	void (*free)(void *ctx, void *mem, size_t len);
	void *alloc_ctx;
	struct pl_worker_scratch **scratch;    /* per pool worker, created on first use */
	struct pl_worker_scratch *drv_scratch; /* the driver's, for the tasks it runs itself */
	unsigned behind; /* driver only: batches left in which every fill task wakes a worker */
	/*
	 * Driver only: how much of its time the driver spends blocked (for reads, for room, in
	 * alloc), which decides whether a fill pass wakes a worker (pl_asm_idle, pl_bjob_start).
	 * blocked_ns is kept up to date by the driver (the source's wait_ns, its waits for room)
	 * and by the layout (alloc); slack_blocked / slack_total, both smoothed, is its share.
	 */
	uint64_t blocked_ns, alloc_ns, last_blocked_ns, last_t_ns;
	double slack_blocked, slack_total;
	bool lazy;
	atomic_uint_fast64_t lazy_fills; /* fill passes that woke no worker (lazy) */
	atomic_uint_fast64_t parse_ns;
	atomic_uint_fast64_t skipped_records;
};

/*
 * Start assembling a batch of rows (the job takes the rows' references). The measuring pass, if
 * the plan needs one, runs before this returns (the calling driver runs its tasks itself unless
 * a worker is free to take some); the fill pass runs on the pool afterwards. The driver thread
 * only: start and finish run parse tasks on it (sched_group_help, with ax->drv_scratch).
 */
/* The driver's idle hook for pl_source_set_idle (ctx: the struct pl_asm_ctx): one queued task. */
int pl_asm_idle(void *ctx);
int pl_bjob_start(struct pl_asm_ctx *ax, struct pl_rec *rows, size_t n_rows, uint64_t seq,
		  uint64_t epoch, uint64_t index_in_epoch, uint32_t flags, struct pl_bjob **ret_job,
		  struct io_error *err);
bool pl_bjob_done(const struct pl_bjob *job);
/*
 * Wait for the fill pass (running its tasks still queued, and those of later jobs, on the
 * calling driver meanwhile), write the header, drop the rows. 0 and the batch (mem, len; the
 * caller frees it with ax->free), or the rows' error (on_corrupt fail) with its message.
 * Frees the job either way.
 */
int pl_bjob_finish(struct pl_asm_ctx *ax, struct pl_bjob *job, struct pl_batch *ret_batch,
		   struct io_error *err);
void pl_asm_ctx_fini(struct pl_asm_ctx *ax);

#endif
