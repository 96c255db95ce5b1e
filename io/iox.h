/* SPDX-License-Identifier: Apache-2.0 */
/* iox: the read engine. io_uring with registered buffers; a pread thread pool when refused. */
#ifndef SLUICE_IO_IOX_H
#define SLUICE_IO_IOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "creds.h"
#include "ioerr.h"

/*
 * An iox reads whole files in chunks and hands the chunks to its one consumer thread, in
 * offset order within each file and in whatever order they complete across files. It keeps up
 * to max_open_files files open and queue_depth reads in flight, into a fixed pool of
 * num_buffers buffers of chunk_len bytes (registered with io_uring as fixed buffers). A chunk
 * belongs to the consumer until iox_release(); when the consumer holds every buffer and nothing
 * is in flight, iox_next() returns -ENOBUFS rather than wait forever. Beside whole files it
 * reads single (fd, offset, length) ranges into buffers of the same pool (iox_read_at), which
 * come back from iox_next() as they complete, mixed with the files' chunks.
 *
 * Engine choice: IOX_ENGINE_AUTO uses io_uring unless the SLUICE_IO_ENGINE environment
 * variable says "pread", or io_uring_queue_init is refused (EPERM under a seccomp profile,
 * ENOSYS on an old kernel), in which case it uses the pread pool and iox_fallback_reason()
 * says why. The io_uring engine has no threads of its own (the consumer's calls drive it); the
 * pread engine runs pread_threads threads. An iox is used by one thread at a time.
 */

enum iox_engine {
	IOX_ENGINE_AUTO = 0,
	IOX_ENGINE_URING = 1,
	IOX_ENGINE_PREAD = 2,
};

struct iox_opts {
	size_t size;		 /* sizeof(struct iox_opts), set by _init */
	enum iox_engine engine;	 /* default AUTO */
	unsigned queue_depth;	 /* reads in flight, default 32 */
	unsigned max_open_files; /* files being read at once, default 8 */
	size_t chunk_len;	 /* bytes per read, default 1 MiB (rounded up to 4096) */
	unsigned num_buffers;	 /* 0 (default): queue_depth + max_open_files */
	bool direct;		 /* O_DIRECT where the file system takes it (else buffered) */
	unsigned pread_threads;	 /* pread engine threads, default 4 */
	/*
	 * io_uring: register the buffers as fixed buffers (default true). Registering pins and
	 * faults in every buffer at creation; for buffered reads of cached files that start-up
	 * cost is larger than what fixed buffers save per read (docs/io-engine.md), so a caller
	 * may keep it for O_DIRECT only.
	 */
	bool fixed_buffers;
	/* files are opened with these rights (io/creds.h), NULL: the process's; kept by the
	   caller for the iox's life */
	const struct io_creds *creds;
};

void iox_opts_init(struct iox_opts *opts);

struct iox;

/*
 * -EINVAL for impossible options, -ENOMEM. With IOX_ENGINE_AUTO an io_uring refusal is not an
 * error (fallback); with IOX_ENGINE_URING it is.
 */
int iox_create(const struct iox_opts *opts, struct iox **ret_iox, struct io_error *err);
/* Stops reads in flight and frees everything; chunks not released become invalid. NULL ok. */
void iox_destroy(struct iox *iox);

/* IOX_ENGINE_URING or IOX_ENGINE_PREAD. */
enum iox_engine iox_engine_used(const struct iox *iox);
const char *iox_engine_name(enum iox_engine e);
/* Why io_uring is not used ("forced by SLUICE_IO_ENGINE=pread", "io_uring_queue_init: ..."), or
 * NULL. */
const char *iox_fallback_reason(const struct iox *iox);

/*
 * Queue a file to be read whole. user comes back in each of its chunks. The path is copied.
 * Returns the file's id (>= 0, in the order added) or -ENOMEM. Opening happens later: a file
 * that cannot be opened or read yields one chunk with error set.
 */
int iox_add_file(struct iox *iox, const char *path, void *user);

/* file_id of a chunk that came from iox_read_at */
#define IOX_AT_FILE UINT32_MAX

/*
 * Read len bytes (1 .. chunk_len) of fd at off into a buffer of the pool. The read comes back
 * from iox_next as a chunk with user, data, len (less than asked only where the file ended
 * first), offset = off, last = true, file_id = IOX_AT_FILE, in the order reads complete (not the
 * order asked), mixed with the chunks of added files. fd is the caller's: opened with its
 * rights, without O_DIRECT, never closed by the iox, open until its read came back. path (the
 * caller's, kept until the read came back) names the file in the error of a failed read: such
 * a read comes back as a chunk with error set (-errno), len 0, and iox_next fills err
 * ("PATH: read at offset N: <strerror>").
 * Returns 0; -EINVAL (fd < 0, len 0 or over chunk_len); -ENOBUFS when no buffer is free (each
 * read in flight, done and not yet taken, or held by the consumer, has one): take or release
 * chunks first; or, once the engine failed, the error iox_next returns.
 */
int iox_read_at(struct iox *iox, int fd, const char *path, uint64_t off, size_t len, void *user);
/* Reads of iox_read_at in flight or done and not yet taken by iox_next. */
unsigned iox_at_pending(const struct iox *iox);
/* Buffers free now (for iox_read_at). */
unsigned iox_free_buffers(const struct iox *iox);

struct iox_chunk {
	void *user;
	uint32_t file_id;
	const uint8_t *data;
	size_t len;
	uint64_t offset; /* of data[0] in the file */
	bool last;	 /* the file's last chunk (len may be 0) */
	bool direct;	 /* read with O_DIRECT (asked for, and the file system took it) */
	int error;	 /* 0, or negative errno: the file failed at offset (last is true) */
	uint32_t buf_;	 /* private */
};

/*
 * Wait up to timeout_ms (-1: forever) for the next chunk. Returns 1 and *ret_chunk; 0 when every
 * added file has been delivered to its last chunk and no read of iox_read_at is pending;
 * -ETIMEDOUT; -ENOBUFS when the consumer holds
 * every buffer; or a negative errno for an engine failure. A chunk with error set also fills err
 * ("path: open: No such file or directory").
 */
int iox_next(struct iox *iox, int timeout_ms, struct iox_chunk *ret_chunk, struct io_error *err);
/*
 * Give a chunk's buffer back (chunks with len 0 or error need no buffer but may be released).
 * Releasing a chunk twice is ignored.
 */
void iox_release(struct iox *iox, const struct iox_chunk *chunk);

struct iox_stats {
	uint64_t reads; /* read requests completed */
	uint64_t bytes; /* bytes read */
	uint64_t files_done;
	uint64_t waits; /* times iox_next had to block */
};
void iox_get_stats(const struct iox *iox, struct iox_stats *ret_stats);

#endif
