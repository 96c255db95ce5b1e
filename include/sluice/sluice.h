/* SPDX-License-Identifier: Apache-2.0 */
/* libsluice: attach to a pipeline of sluiced by name and read its batches zero-copy. */
#ifndef SLUICE_SLUICE_H
#define SLUICE_SLUICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A training process connects to the host's sluiced over its control socket, attaches to a
 * pipeline (by name, or by spec: the daemon runs one computation per distinct spec), and reads
 * batches that live in read-only shared memory: sluice_next() hands out a batch, whose tensors
 * point straight into that memory, until sluice_batch_release(). Every function returns 0 (or
 * a count) on success or a negative errno; where it takes a `struct sluice_error *` (may be
 * NULL) it also writes a message for a person there on failure.
 *
 * Threads: a client or reader is used by one thread at a time; different readers may be used
 * from different threads. Batches may be released from any thread.
 */

#define SLUICE_VERSION_MAJOR 0
#define SLUICE_VERSION_MINOR 1
#define SLUICE_MAX_RANK	     8
#define SLUICE_STATE_MAX     4096

struct sluice_error {
	int code;      /* the negative errno also returned */
	char msg[512]; /* "attach \"imagenet\": no such pipeline", the daemon's message, ... */
};

/* "Operation not permitted"-style text for a negative errno, or sluice's own meaning of it. */
const char *sluice_strerror(int code);

/* ---- connection ---- */

struct sluice_client;

/*
 * Connect to sluiced. socket_path NULL: $SLUICE_SOCKET, else $RUNTIME_DIRECTORY/sluice.sock
 * (under systemd; the first directory where it lists several, ':' between them), else
 * /run/sluice/sluice.sock if it exists, else $XDG_RUNTIME_DIR/sluice/sluice.sock (sluiced
 * listens in the same order but for the last two). -ENOENT / -ECONNREFUSED when no daemon listens,
 * -EPROTONOSUPPORT for a daemon of another protocol version.
 */
int sluice_connect(const char *socket_path, struct sluice_client **ret_client,
		   struct sluice_error *err);
/* Detach every reader of the client still attached and close the connection. NULL is fine. */
void sluice_disconnect(struct sluice_client *c);

/*
 * Register a pipeline spec (JSON text, DESIGN.md §3.4) so that it runs before anyone attaches.
 * An identical spec (same fingerprint) already running is that pipeline. The name (the spec's
 * "name", or one made from the fingerprint) goes to ret_name (NUL-terminated, name_cap >= 129).
 */
int sluice_register(struct sluice_client *c, const char *spec_json, char *ret_name, size_t name_cap,
		    uint8_t ret_fingerprint[16], struct sluice_error *err);
/*
 * The same, saying where the spec's relative dataset paths start: spec_dir (the directory of
 * the spec file it came from), or the caller's working directory when spec_dir is NULL (which
 * is what sluice_register does). The daemon resolves them against it, never against its own.
 */
int sluice_register_at(struct sluice_client *c, const char *spec_json, const char *spec_dir,
		       char *ret_name, size_t name_cap, uint8_t ret_fingerprint[16],
		       struct sluice_error *err);

/* ---- readers ---- */

enum sluice_mode {
	SLUICE_MODE_BROADCAST = 0, /* every reader sees every batch */
	SLUICE_MODE_SPLIT = 1,	   /* each batch goes to one reader, whoever is ready first */
	SLUICE_MODE_RANK = 2,	   /* batch k goes to the reader of rank k mod rank_count */
};

struct sluice_attach_opts {
	size_t size;	       /* sizeof(struct sluice_attach_opts), set by _init */
	const char *name;      /* attach to this pipeline, or */
	const char *spec_json; /* register this spec (or find it running) and attach to it */
	enum sluice_mode mode; /* default broadcast */
	uint32_t rank_index;   /* SLUICE_MODE_RANK: this reader's rank, < rank_count */
	uint32_t rank_count;
	const void *state; /* resume where sluice_reader_save() said, or NULL */
	size_t state_len;
	/*
	 * After the daemon went away (a restart): attempts to re-attach, 100 ms apart. Default
	 * $SLUICE_REATTACH_S seconds' worth (decimals allowed, 0: none), else 60 s (600).
	 */
	unsigned reconnect_tries;
	/*
	 * Broadcast: what happens when this reader falls behind the others (DESIGN.md §5).
	 * SLUICE_LAG_DEFAULT (0, the default): the daemon's policy, which does not let a reader
	 * that stopped stall the others: it is moved off the shared stream once it is more than
	 * max_lag batches behind the leading other reader (0: the daemon's default, half its
	 * ring), or once it has held the others back, taking nothing and releasing nothing while
	 * the daemon waits for it, for lag_timeout_ms (0: the daemon's default, 300 s: longer
	 * than a checkpoint's save). Moved off, sluice_next goes on, without a gap or a repeat,
	 * from a pipeline of its own that starts right after the last batch it took.
	 * SLUICE_LAG_CATCH_UP: the same, with max_lag counted behind the newest batch rather than
	 * the other readers (an evaluation loop that must never hold the pipeline's prefetch).
	 * SLUICE_LAG_HOLD: it holds the others back for as long as it lags; nothing is skipped
	 * (max_lag and lag_timeout_ms must be 0).
	 */
	unsigned lag_policy;
	uint64_t max_lag;
	/*
	 * With spec_json: the directory its relative dataset paths start from (the spec file's),
	 * or NULL for the caller's working directory (docs/pipeline-spec.md, "Relative paths").
	 */
	const char *spec_dir;
	/*
	 * Split and rank: the consumer group to read in (DESIGN.md §5), at most 64 bytes; NULL or
	 * "": the pipeline's default group. Within a group each batch goes to one member (split)
	 * or to member k mod count (rank); every group sees every batch, from one computation. A
	 * group's first member sets its mode and count. Broadcast readers are groups of their own.
	 */
	const char *group;
	/* Broadcast, SLUICE_LAG_DEFAULT or _CATCH_UP: the time bound above; 0: the daemon's. */
	uint64_t lag_timeout_ms;
};

enum sluice_lag {
	SLUICE_LAG_DEFAULT = 0,	 /* the daemon's policy (above) */
	SLUICE_LAG_CATCH_UP = 1, /* moved off past max_lag batches behind the newest */
	SLUICE_LAG_HOLD = 2,	 /* holds the others back: an explicit choice, never the default */
};

void sluice_attach_opts_init(struct sluice_attach_opts *o);

struct sluice_reader;

/*
 * Attach. -ENOENT (no such pipeline), -EACCES (not allowed; says nothing about whether the
 * name exists), -EINVAL (a bad spec: err names the JSON path), -ENOSPC (a memory budget of the
 * daemon), -EUSERS (reader limit), -EBUSY (that rank is taken).
 */
int sluice_attach(struct sluice_client *c, const struct sluice_attach_opts *opts,
		  struct sluice_reader **ret_reader, struct sluice_error *err);
/* Release the reader's batches (those not released are released by the daemon) and detach. */
void sluice_detach(struct sluice_reader *r);

struct sluice_batch;

/*
 * The reader's next batch. timeout_ms < 0: wait as long as it takes; 0: do not wait. Returns 1
 * and *ret_batch, 0 at the end of the stream, -ETIMEDOUT, or the pipeline's error (with the
 * daemon's message: the file, record and feature that broke it). No system call when a batch is
 * already published. After a daemon restart, it reconnects and re-attaches within
 * reconnect_tries where it was: at the position sluiced kept in its state directory
 * (broadcast and rank: the next batch exactly; split, or a sloppy pipeline: at least once,
 * what may have come before marked by sluice_batch_redelivered), else at the last state saved
 * or given to attach. -ESTALE (sticky): the daemon kept no position for it (no --state-dir,
 * the state directory lost, the pipeline changed): it does not start over silently. -ETIME: a split
 * or rank reader that held a batch longer than the daemon's lease (sluiced --lease) was removed and
 * its batches went to the other members of its group (its later releases do nothing). -ENOLINK:
 * a rank of this reader's rank group had no reader for longer than the lease while its batches
 * held the ring (a rank was killed and did not come back): the group's members were removed.
 */
int sluice_next(struct sluice_reader *r, int timeout_ms, struct sluice_batch **ret_batch,
		struct sluice_error *err);
/* Give the batch back; its tensors' memory may be reused by the daemon afterwards. */
void sluice_batch_release(struct sluice_batch *b);

/* Where the reader is: an opaque blob (at most SLUICE_STATE_MAX bytes) for sluice_attach. */
int sluice_reader_save(struct sluice_reader *r, void *buf, size_t cap, size_t *ret_len,
		       struct sluice_error *err);
/*
 * The state of a position of the pipeline the reader reads, for any mode: epoch, the batches
 * done in it (index_in_epoch) and the stream's seq there (the seq of the epoch's first batch
 * plus index_in_epoch: sluice_batch_seq - sluice_batch_index_in_epoch of any of its batches).
 * For a rank group that steps together: after S steps of count ranks every rank took its
 * batches below index S * count, so that position resumes the group, with any count.
 */
int sluice_reader_save_at(struct sluice_reader *r, uint64_t epoch, uint64_t index_in_epoch,
			  uint64_t seq, void *buf, size_t cap, size_t *ret_len,
			  struct sluice_error *err);
/*
 * The same for a process that holds no reader of the pipeline: the state of that position of
 * pipeline `name` (read with this client's rights, as sluice_stats). The main process of a
 * DataLoader whose workers read saves the position its loop consumed this way.
 */
int sluice_state_at(struct sluice_client *c, const char *name, uint64_t epoch,
		    uint64_t index_in_epoch, uint64_t seq, void *buf, size_t cap, size_t *ret_len,
		    struct sluice_error *err);

/* ---- batches and tensors ---- */

enum sluice_dtype {
	SLUICE_INT8 = 0,
	SLUICE_INT16,
	SLUICE_INT32,
	SLUICE_INT64,
	SLUICE_UINT8,
	SLUICE_UINT16,
	SLUICE_UINT32,
	SLUICE_UINT64,
	SLUICE_FLOAT16,
	SLUICE_FLOAT32,
	SLUICE_FLOAT64,
	SLUICE_BOOL,
	SLUICE_STRING,
	SLUICE_BFLOAT16, /* 2 bytes: the top half of an IEEE float32 (the image steps' normalize) */
};

/* A tensor of a batch: views into read-only shared memory, valid until the batch is released. */
struct sluice_tensor {
	const char *name;
	enum sluice_dtype dtype;
	unsigned rank;			/* the batch dimension included */
	int64_t shape[SLUICE_MAX_RANK]; /* shape[0] = rows; -1 at a ragged axis (axis 1) */
	const void *data;		/* numbers row-major, or the strings' bytes */
	uint64_t nbytes;
	const int64_t *row_splits; /* ragged: rows + 1 entries, else NULL */
	const int64_t *offsets;	   /* strings: elements + 1 entries into data, else NULL */
	uint64_t n_elems;
};

uint64_t sluice_batch_seq(const struct sluice_batch *b);
uint64_t sluice_batch_epoch(const struct sluice_batch *b);
uint64_t sluice_batch_rows(const struct sluice_batch *b);
bool sluice_batch_end_of_epoch(const struct sluice_batch *b);
/* Batches before this one in its epoch (0 for its first). */
uint64_t sluice_batch_index_in_epoch(const struct sluice_batch *b);
/*
 * Split and rank: another member of the reader's group took this batch before and went away
 * without releasing it (it may have used it): delivery is at least once, as in a Kafka group.
 * After a daemon restart (split readers, sloppy pipelines): the batch may have been delivered
 * before the restart.
 */
bool sluice_batch_redelivered(const struct sluice_batch *b);
size_t sluice_batch_num_tensors(const struct sluice_batch *b);
/* By index (schema order) or name. 0, -ENOENT (no such tensor), -EBADMSG (a corrupt batch). */
int sluice_batch_tensor_at(const struct sluice_batch *b, size_t i, struct sluice_tensor *ret);
int sluice_batch_tensor(const struct sluice_batch *b, const char *name, struct sluice_tensor *ret);

/* Everything about a batch at once (for bindings: one call instead of 5 + n). */
struct sluice_batch_info {
	uint64_t seq;
	uint64_t epoch;
	uint64_t rows;
	uint32_t end_of_epoch; /* 1 for the last batch of its epoch */
	uint32_t n_tensors;    /* sluice_batch_num_tensors() */
	const void *extent;    /* the batch's whole extent in shared memory: every */
	uint64_t extent_len;   /* tensor's data, row_splits and offsets lie inside */
};

/*
 * Fill *ret_info and, when tensors is not NULL, tensors[0 .. min(cap, n_tensors)) in schema
 * order (as sluice_batch_tensor_at). Returns the number of tensors written, or -EBADMSG (a
 * corrupt batch; *ret_info is left alone, tensors[] may be partly written).
 */
int sluice_batch_describe(const struct sluice_batch *b, struct sluice_batch_info *ret_info,
			  struct sluice_tensor *tensors, size_t cap);

/* ---- GPU ---- */

/*
 * Copy every tensor of the batch (its data, and row_splits / string offsets where it has
 * them) into device memory with cudaMemcpyAsync on `stream` (a cudaStream_t, NULL: the default
 * stream), straight from the shared memory: the ring's data area is registered with
 * cudaHostRegister once per reader (read-only), so the copy is DMA from pinned memory.
 * dst[i] receives tensor i's bytes (sluice_tensor.nbytes), dst_aux[i] its row_splits or
 * offsets; a NULL dst[i] / dst_aux[i] (or a NULL dst_aux) skips that part (e.g. strings kept on
 * the host). The batch is not given
 * back to the daemon before the copies are done: sluice_batch_release() waits for the event
 * recorded after them. The CUDA runtime is loaded with dlopen at first use: -ENODEV without a
 * GPU or without libcudart, -EINVAL for a bad argument, -EIO for a CUDA error (in err).
 */
int sluice_batch_copy_to_cuda(struct sluice_batch *b, void *const *dst, void *const *dst_aux,
			      void *stream, struct sluice_error *err);

/* The library's version, "MAJOR.MINOR.PATCH" (sluiced's and the Python package's are the same). */
const char *sluice_version(void);

/* ---- what the daemon runs (for tools and monitoring) ---- */

#define SLUICE_NAME_MAX 255 /* bytes of a pipeline name, without the NUL */

enum sluice_pipeline_status {
	SLUICE_PIPELINE_RUNNING = 0,
	SLUICE_PIPELINE_FINISHED = 1,
	SLUICE_PIPELINE_FAILED = 2,
};

/* A pipeline as sluice_list() sees it. */
struct sluice_pipeline_info {
	char name[SLUICE_NAME_MAX + 1];
	uint8_t fingerprint[16];
	enum sluice_pipeline_status status;
	uint32_t n_readers;
	uint64_t batches_published;
	uint32_t ring_slots_used; /* ring occupancy: ring_slots_used of ring_slots */
	uint32_t ring_slots;
	/*
	 * Who registered it: a uid (root's 0 included), SLUICE_OWNER_HOST for a pipeline of the
	 * daemon's config dir, or SLUICE_OWNER_UNKNOWN from a daemon too old to say.
	 */
	uint32_t owner_uid;
};
#define SLUICE_OWNER_HOST    UINT32_MAX
#define SLUICE_OWNER_UNKNOWN (UINT32_MAX - 1)

/*
 * The pipelines the daemon serves that this client may read: *ret_list (*ret_n entries, the
 * caller frees it with sluice_list_free; NULL when there are none) or a negative errno.
 */
int sluice_list(struct sluice_client *c, struct sluice_pipeline_info **ret_list, size_t *ret_n,
		struct sluice_error *err);
void sluice_list_free(struct sluice_pipeline_info *list);

/*
 * A pipeline's statistics: named integer counters, the daemon's ("batches_published",
 * "records", "stage.parse.cpu_ns", "reader.3.wait_ns", ...: docs/pipeline.md and the README list
 * them), so that new ones need no change here. -ENOENT: no such pipeline (or none this client may
 * read). The caller frees *ret_stats with sluice_stats_free.
 */
struct sluice_stats;
int sluice_stats(struct sluice_client *c, const char *name, struct sluice_stats **ret_stats,
		 struct sluice_error *err);
/* How many counters; counter i's key (NULL past the end, valid until free) and *ret_value. */
size_t sluice_stats_count(const struct sluice_stats *s);
const char *sluice_stats_at(const struct sluice_stats *s, size_t i, int64_t *ret_value);
/* The value of key: 0 and *ret_value, or -ENOENT. */
int sluice_stats_get(const struct sluice_stats *s, const char *key, int64_t *ret_value);
/* The pipeline's name as the daemon gave it. */
const char *sluice_stats_name(const struct sluice_stats *s);
void sluice_stats_free(struct sluice_stats *s);

/*
 * Remove pipeline name from the daemon (sluicectl rm): its engine stops, and each of its
 * readers' next sluice_next fails with -EIDRM ("... was removed by uid N"). Only its owner or
 * root may (-EACCES), and only root a pipeline of the daemon's config dir. -ENOENT (the
 * message lists the names that come close, among those this client may read).
 */
int sluice_remove(struct sluice_client *c, const char *name, struct sluice_error *err);

#ifdef __cplusplus
}
#endif

#endif
