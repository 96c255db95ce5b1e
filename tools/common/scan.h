/* SPDX-License-Identifier: Apache-2.0 */
/* scan: read every record of a dataset on N threads, one iox and tfr_reader per thread. */
#ifndef SLUICE_TOOLS_SCAN_H
#define SLUICE_TOOLS_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/dataset.h"
#include "io/ioerr.h"
#include "io/iox.h"
#include "io/tfr.h"

/*
 * The scanner hands the dataset's files out to its threads one at a time (an atomic next-file
 * index), so a thread that got small files takes more of them. Each thread owns one struct iox
 * (engine per scan_opts.engine; AUTO honours SLUICE_IO_ENGINE=pread) with a few files queued in
 * it, and one tfr_reader per queued file. Every record is passed to scan_opts.fn on the thread
 * that framed it, with that thread's context; the record bytes are valid only during the call.
 *
 * Framing and I/O errors (bad CRC, truncation, a file that cannot be opened) are collected with
 * their file, offset and record index; they stop only the file they occur in (a data-CRC
 * mismatch not even that: the reader goes on with the next record). The callback is the
 * boundary where decoding happens: it gets nothing but the record and its own context.
 *
 * Pool mode (scan_opts.pool set): the scan threads only read and frame (header CRCs, inflate);
 * the records of each chunk go to the pool in tasks of a few dozen records, where the worker
 * checks the data CRC and calls fn with the context of that worker (thread_ctx then has one
 * entry per pool worker). A thread keeps a few chunks in flight on the pool and gives a chunk
 * back to its iox when that chunk's tasks are done.
 */

struct sched_pool;

struct scan_file {
	const char *path;
	uint32_t index; /* in dataset->files */
	uint64_t size;
};

/*
 * Called for every record. Return 0 to go on; a negative errno stops the whole scan (every
 * thread finishes the record it is on), and scan_dataset() returns it with err's message.
 */
typedef int (*scan_record_fn)(void *thread_ctx, const struct scan_file *file,
			      const struct tfr_record *rec, struct io_error *err);

struct scan_opts {
	size_t size;		/* sizeof(struct scan_opts), set by _init */
	unsigned threads;	/* scan threads; 0: the online CPUs, or in pool mode: see .c */
	unsigned files_queued;	/* files queued per thread's iox (default 2) */
	size_t chunk_len;	/* iox read size (default 1 MiB) */
	enum iox_engine engine; /* default AUTO */
	bool verify_crc;	/* default true */
	size_t max_errors;	/* framing errors kept (the first by file and offset), default 20 */
	scan_record_fn fn;	/* may be NULL: frame only */
	void *const *thread_ctx; /* scan_opts_contexts() entries, or NULL */
	struct sched_pool *pool; /* decode on this pool (pool mode), or NULL */
};

void scan_opts_init(struct scan_opts *opts);
/*
 * The number of scan threads opts asks for, resolving 0: the online CPUs; in pool mode one per
 * eight pool workers (framing is light), or one per worker when the files are compressed
 * (inflating is not), never more than the files.
 */
unsigned scan_opts_threads(const struct scan_opts *opts, const struct dataset *ds);
/* How many callback contexts thread_ctx must hold: the pool's workers, or the scan threads. */
unsigned scan_opts_contexts(const struct scan_opts *opts, const struct dataset *ds);

struct scan_counts {
	uint64_t files; /* files finished (cleanly or not) */
	uint64_t records;
	uint64_t file_bytes;   /* bytes read from the files (compressed size) */
	uint64_t record_bytes; /* payload bytes of the records */
	double cpu_s;	       /* CLOCK_THREAD_CPUTIME_ID of the thread (total: their sum) */
};

struct scan_error {
	uint32_t file_index;
	uint64_t record; /* index of the bad record in its file */
	uint64_t offset; /* byte offset of the bad record (in the decompressed stream) */
	int code;	 /* negative errno */
	char msg[512];	 /* what the reader or iox said (names the file) */
};

struct scan_result {
	unsigned threads;
	struct scan_counts *per_thread; /* threads entries */
	struct scan_counts total;
	double wall_s;
	double process_cpu_s;	   /* CLOCK_PROCESS_CPUTIME_ID across the scan */
	enum iox_engine engine;	   /* what the iox of thread 0 used */
	char fallback_reason[256]; /* "" when io_uring was used */
	uint64_t n_errors;	   /* framing / I/O errors seen */
	uint64_t files_failed;	   /* files that ended with a sticky error */
	size_t n_kept;		   /* errors[] holds the first n_kept by (file, offset) */
	struct scan_error *errors;
};

/*
 * Scan ds. Returns 0 when every file was read (framing errors in the data are not a failure
 * of the scan: they are in ret->errors), or a negative errno (setup failed, out of memory, or
 * the callback's error) with err set. ret is filled in both cases once threads ran; release it
 * with scan_result_fini().
 */
int scan_dataset(const struct dataset *ds, const struct scan_opts *opts, struct scan_result *ret,
		 struct io_error *err);
void scan_result_fini(struct scan_result *r);

/* Monotonic / CPU clocks in seconds, for the tools. */
double scan_now_s(void);
double scan_process_cpu_s(void);
double scan_thread_cpu_s(void);

#endif
