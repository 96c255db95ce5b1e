/* SPDX-License-Identifier: Apache-2.0 */
/* iox front end: options, engine choice, file queue, in-order delivery, buffer pool, stats. */
#include "iox.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "iox_internal.h"

/*
 * How the front end works. Files get ids in the order they are added and are opened in that
 * order, at most max_open_files at a time. Each file is cut into chunks on a fixed grid
 * (chunk k covers [k * chunk_len, (k + 1) * chunk_len)), and a chunk owns one buffer from
 * the moment its read is issued until the consumer releases it. Reads are issued round-robin
 * over the open files, in chunk order within a file, while a buffer is free and fewer than
 * queue_depth reads are in flight. A short read is continued into the same buffer from where
 * it ended; a read returning 0 bytes ends the file there (so does reaching the fstat size).
 * Completed chunks wait on their file's pending list until every chunk before them has been
 * delivered; files with a deliverable chunk sit on a FIFO ready list. The end of a file is
 * its chunk last_k: either a data chunk (last = true) or a terminal pseudo-chunk with no
 * buffer (an empty file, end of file on a chunk boundary, or an error).
 *
 * Reads at offsets (iox_read_at) are iox_at.c's. When both a file and an at-read are ready,
 * iox_next alternates between them so that neither kind starves the other.
 */

void iox_opts_init(struct iox_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->size = sizeof(*opts);
	opts->engine = IOX_ENGINE_AUTO;
	opts->queue_depth = 32;
	opts->max_open_files = 8;
	opts->chunk_len = 1u << 20;
	opts->num_buffers = 0; /* 0: queue_depth + max_open_files */
	opts->direct = false;
	opts->pread_threads = 4;
	opts->fixed_buffers = true;
}

const char *iox_engine_name(enum iox_engine e)
{
	switch (e) {
	case IOX_ENGINE_AUTO:
		return "auto";
	case IOX_ENGINE_URING:
		return "io_uring";
	case IOX_ENGINE_PREAD:
		return "pread";
	}
	return "unknown";
}

const char *iox_strerror(int e, char *buf, size_t len)
{
	/* GNU strerror_r (the project builds with _GNU_SOURCE): thread-safe, returns the text. */
	return strerror_r(e, buf, len);
}

/* Copy the caller's options over the defaults and check them. */
static int iox_opts_check(const struct iox_opts *in, struct iox_opts *out, struct io_error *err)
{
	struct iox_opts o;
	size_t n;

	iox_opts_init(&o);
	if (in) {
		if (in->size < offsetof(struct iox_opts, engine) + sizeof(in->engine)) {
			io_error_set(err, "iox: opts.size %zu: call iox_opts_init() first",
				     in->size);
			return -EINVAL;
		}
		n = in->size < sizeof(o) ? in->size : sizeof(o);
		memcpy(&o, in, n);
		o.size = sizeof(o);
	}
	if (o.engine != IOX_ENGINE_AUTO && o.engine != IOX_ENGINE_URING &&
	    o.engine != IOX_ENGINE_PREAD) {
		io_error_set(err, "iox: engine %d: expected auto, uring or pread", (int)o.engine);
		return -EINVAL;
	}
	if (o.queue_depth < 1 || o.queue_depth > IOX_MAX_QUEUE_DEPTH) {
		io_error_set(err, "iox: queue_depth %u: expected 1..%u", o.queue_depth,
			     IOX_MAX_QUEUE_DEPTH);
		return -EINVAL;
	}
	if (o.max_open_files < 1 || o.max_open_files > IOX_MAX_OPEN_FILES) {
		io_error_set(err, "iox: max_open_files %u: expected 1..%u", o.max_open_files,
			     IOX_MAX_OPEN_FILES);
		return -EINVAL;
	}
	if (o.chunk_len < 1 || o.chunk_len > IOX_MAX_CHUNK) {
		io_error_set(err, "iox: chunk_len %zu: expected 1..%u", o.chunk_len, IOX_MAX_CHUNK);
		return -EINVAL;
	}
	o.chunk_len = (o.chunk_len + IOX_ALIGN - 1) & ~(size_t)(IOX_ALIGN - 1);
	if (o.num_buffers == 0) {
		o.num_buffers = o.queue_depth + o.max_open_files;
		if (o.num_buffers > IOX_MAX_BUFFERS)
			o.num_buffers = IOX_MAX_BUFFERS;
	}
	if (o.num_buffers > IOX_MAX_BUFFERS) {
		io_error_set(err, "iox: num_buffers %u: expected 1..%u", o.num_buffers,
			     IOX_MAX_BUFFERS);
		return -EINVAL;
	}
	if (o.pread_threads < 1 || o.pread_threads > IOX_MAX_THREADS) {
		io_error_set(err, "iox: pread_threads %u: expected 1..%u", o.pread_threads,
			     IOX_MAX_THREADS);
		return -EINVAL;
	}
	*out = o;
	return 0;
}

/*
 * Test hooks: SLUICE_IOX_FAKE_URING_ERRNO=N makes io_uring setup fail with -N (the fallback),
 * SLUICE_IOX_FAKE_REGISTER_ERRNO=N makes the buffer registration fail with -N (plain reads).
 */
static int iox_fake_errno(const char *name)
{
	const char *s = getenv(name);
	char *end;
	long v;

	if (!s || !*s)
		return 0;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v <= 0 || v > 4095)
		return 0;
	return (int)v;
}

/* Decide which engine to try: *ret_want is AUTO (uring, fall back), URING (must) or PREAD. */
static int iox_engine_pick(struct iox *iox, enum iox_engine *ret_want, struct io_error *err)
{
	const char *env;

	if (iox->opts.engine == IOX_ENGINE_PREAD) {
		snprintf(iox->reason, sizeof(iox->reason), "pread engine requested in options");
		*ret_want = IOX_ENGINE_PREAD;
		return 0;
	}
	if (iox->opts.engine == IOX_ENGINE_URING) {
		*ret_want = IOX_ENGINE_URING;
		return 0;
	}
	env = getenv("SLUICE_IO_ENGINE");
	if (!env || !*env || strcmp(env, "auto") == 0) {
		*ret_want = IOX_ENGINE_AUTO;
	} else if (strcmp(env, "pread") == 0) {
		snprintf(iox->reason, sizeof(iox->reason), "forced by SLUICE_IO_ENGINE=pread");
		*ret_want = IOX_ENGINE_PREAD;
	} else if (strcmp(env, "uring") == 0 || strcmp(env, "io_uring") == 0) {
		*ret_want = IOX_ENGINE_URING;
	} else {
		io_error_set(err, "SLUICE_IO_ENGINE=\"%.64s\": expected auto, uring or pread", env);
		return -EINVAL;
	}
	return 0;
}

static int iox_engine_start(struct iox *iox, struct io_error *err)
{
	enum iox_engine want;
	struct io_error uerr;
	int ret;

	ret = iox_engine_pick(iox, &want, err);
	if (ret < 0)
		return ret;
	if (want != IOX_ENGINE_PREAD) {
		uerr.msg[0] = '\0';
		ret = iox_uring_create(iox, iox_fake_errno("SLUICE_IOX_FAKE_URING_ERRNO"),
				       iox_fake_errno("SLUICE_IOX_FAKE_REGISTER_ERRNO"), &uerr);
		if (ret == 0) {
			iox->engine = IOX_ENGINE_URING;
			iox->reason[0] = '\0';
			return 0;
		}
		if (want == IOX_ENGINE_URING) {
			io_error_set(err, "%s (io_uring engine required)", uerr.msg);
			return ret;
		}
		snprintf(iox->reason, sizeof(iox->reason), "%.150s", uerr.msg);
	}
	ret = iox_pread_create(iox, err);
	if (ret < 0)
		return ret;
	iox->engine = IOX_ENGINE_PREAD;
	return 0;
}

int iox_create(const struct iox_opts *opts, struct iox **ret_iox, struct io_error *err)
{
	struct iox *iox;
	size_t total;
	uint32_t i;
	int ret;

	if (!ret_iox)
		return -EINVAL;
	iox = calloc(1, sizeof(*iox));
	if (!iox)
		return -ENOMEM;
	ret = iox_opts_check(opts, &iox->opts, err);
	if (ret < 0)
		goto fail_free;

	total = (size_t)iox->opts.num_buffers * iox->opts.chunk_len;
	ret = -ENOMEM;
	/*
	 * Every byte read is framed, copied and checked from these buffers soon after: on huge
	 * pages where the kernel has them (THP "madvise", the default), the walks through them
	 * take no TLB misses (image pipeline, O_DIRECT: -11% CPU; docs/BENCHMARKS.md).
	 */
	if (posix_memalign((void **)&iox->mem, total >= IOX_HUGE ? IOX_HUGE : IOX_ALIGN, total) !=
	    0) {
		iox->mem = NULL;
		goto fail_free;
	}
	if (total >= IOX_HUGE)
		(void)madvise(iox->mem, total, MADV_HUGEPAGE); /* advice: EINVAL without THP */
	iox->bufs = calloc(iox->opts.num_buffers, sizeof(*iox->bufs));
	iox->cqes = calloc(iox->opts.num_buffers, sizeof(*iox->cqes));
	iox->open_ids = calloc(iox->opts.max_open_files, sizeof(*iox->open_ids));
	if (!iox->bufs || !iox->cqes || !iox->open_ids)
		goto fail_free;
	for (i = 0; i < iox->opts.num_buffers; i++) {
		iox->bufs[i].state = IOX_BUF_FREE;
		iox->bufs[i].next = i + 1 < iox->opts.num_buffers ? i + 1 : IOX_NONE;
	}
	iox->free_head = 0;
	iox->nfree = iox->opts.num_buffers;
	iox->ready_head = IOX_NONE;
	iox->ready_tail = IOX_NONE;
	iox->at_wait_head = IOX_NONE;
	iox->at_wait_tail = IOX_NONE;
	iox->at_done_head = IOX_NONE;
	iox->at_done_tail = IOX_NONE;

	ret = iox_engine_start(iox, err);
	if (ret < 0)
		goto fail_free;
	*ret_iox = iox;
	return 0;

fail_free:
	free(iox->open_ids);
	free(iox->cqes);
	free(iox->bufs);
	free(iox->mem);
	free(iox);
	return ret;
}

void iox_destroy(struct iox *iox)
{
	uint32_t i;

	if (!iox)
		return;
	/*
	 * The backend finishes the reads in flight first: they write into iox->mem. The fds and
	 * paths of iox_read_at reads are the caller's, so nothing else is left to free for them.
	 */
	if (iox->ops)
		iox->ops->destroy(iox);
	for (i = 0; i < iox->nfiles; i++) {
		if (iox->files[i].fd >= 0)
			close(iox->files[i].fd);
		free(iox->files[i].path);
	}
	free(iox->files);
	free(iox->open_ids);
	free(iox->cqes);
	free(iox->bufs);
	free(iox->mem);
	free(iox);
}

enum iox_engine iox_engine_used(const struct iox *iox)
{
	return iox->engine;
}

const char *iox_fallback_reason(const struct iox *iox)
{
	return iox->reason[0] ? iox->reason : NULL;
}

bool iox_fixed_buffers(const struct iox *iox)
{
	return iox->fixed;
}

const char *iox_fixed_note(const struct iox *iox)
{
	return iox->fixed_note[0] ? iox->fixed_note : NULL;
}

void iox_get_stats(const struct iox *iox, struct iox_stats *ret_stats)
{
	if (!iox || !ret_stats)
		return;
	*ret_stats = iox->stats;
}

static struct iox_file *iox_file_get(struct iox *iox, uint32_t id)
{
	return &iox->files[id - iox->base];
}

static uint64_t iox_buf_k(const struct iox *iox, const struct iox_buf *b)
{
	return b->off / iox->opts.chunk_len;
}

/* Drop the finished files at the front of files[], then make room for one more. */
static int iox_files_reserve(struct iox *iox)
{
	struct iox_file *nf;
	uint32_t drop = 0, ncap;

	while (drop < iox->nfiles) {
		const struct iox_file *f = &iox->files[drop];

		if (!f->delivered || f->fd >= 0 || f->inflight)
			break;
		drop++;
	}
	if (drop && (drop >= iox->nfiles / 2 || iox->nfiles == iox->cap)) {
		memmove(iox->files, iox->files + drop, (iox->nfiles - drop) * sizeof(*iox->files));
		iox->nfiles -= drop;
		iox->base += drop;
	}
	if (iox->nfiles < iox->cap)
		return 0;
	ncap = iox->cap ? iox->cap * 2 : 64;
	if (ncap < iox->cap)
		return -ENOMEM;
	nf = realloc(iox->files, (size_t)ncap * sizeof(*nf));
	if (!nf)
		return -ENOMEM;
	iox->files = nf;
	iox->cap = ncap;
	return 0;
}

int iox_add_file(struct iox *iox, const char *path, void *user)
{
	struct iox_file *f;
	char *p;
	int ret;

	if (!iox || !path)
		return -EINVAL;
	if (iox->nadded >= INT_MAX)
		return -EOVERFLOW;
	ret = iox_files_reserve(iox);
	if (ret < 0)
		return ret;
	p = strdup(path);
	if (!p)
		return -ENOMEM;
	f = &iox->files[iox->nfiles++];
	memset(f, 0, sizeof(*f));
	f->path = p;
	f->user = user;
	f->fd = -1;
	f->last_k = UINT64_MAX;
	f->pending = IOX_NONE;
	f->ready_next = IOX_NONE;
	return (int)iox->nadded++;
}

void iox_buf_free(struct iox *iox, uint32_t idx)
{
	struct iox_buf *b = &iox->bufs[idx];

	b->state = IOX_BUF_FREE;
	b->next = iox->free_head;
	iox->free_head = idx;
	iox->nfree++;
}

static void iox_ready_push(struct iox *iox, uint32_t id)
{
	struct iox_file *f = iox_file_get(iox, id);

	if (f->in_ready)
		return;
	f->in_ready = true;
	f->ready_next = IOX_NONE;
	if (iox->ready_tail == IOX_NONE)
		iox->ready_head = id;
	else
		iox_file_get(iox, iox->ready_tail)->ready_next = id;
	iox->ready_tail = id;
}

static bool iox_file_deliverable(const struct iox *iox, const struct iox_file *f)
{
	if (f->delivered)
		return false;
	if (f->pending != IOX_NONE && iox_buf_k(iox, &iox->bufs[f->pending]) == f->deliver_k)
		return true;
	return f->term && f->deliver_k == f->last_k;
}

/* Chunks left to read: those before last_k, and last_k itself unless it is a terminal. */
static bool iox_file_more(const struct iox_file *f)
{
	return f->next_k < f->last_k || (f->next_k == f->last_k && !f->term);
}

static void iox_file_update(struct iox *iox, uint32_t id)
{
	struct iox_file *f = iox_file_get(iox, id);
	uint32_t i;

	if (iox_file_deliverable(iox, f))
		iox_ready_push(iox, id);
	/* Done reading: nothing in flight and nothing left to issue. */
	if (f->closed || f->inflight || iox_file_more(f))
		return;
	f->closed = true;
	if (f->fd >= 0) {
		close(f->fd);
		f->fd = -1;
		for (i = 0; i < iox->nopen; i++) {
			if (iox->open_ids[i] == id) {
				iox->open_ids[i] = iox->open_ids[--iox->nopen];
				break;
			}
		}
	}
}

/*
 * The file ends at chunk k: with a terminal pseudo-chunk (term: empty, or error e at off) or
 * with the data chunk k. Completed chunks past k are dropped; reads past k still in flight
 * are dropped when they complete.
 */
static void iox_file_end(struct iox *iox, struct iox_file *f, uint64_t k, bool term, int e,
			 const char *op, uint64_t off)
{
	uint32_t *pp = &f->pending;

	f->last_k = k;
	f->term = term;
	f->term_err = e;
	f->term_op = op;
	f->term_off = off;
	while (*pp != IOX_NONE) {
		uint32_t idx = *pp;

		if (iox_buf_k(iox, &iox->bufs[idx]) > k) {
			*pp = iox->bufs[idx].next;
			iox_buf_free(iox, idx);
		} else {
			pp = &iox->bufs[idx].next;
		}
	}
}

static void iox_file_open(struct iox *iox, uint32_t id)
{
	struct iox_file *f = iox_file_get(iox, id);
	struct stat st;
	int fd;

	f->opened = true;
	f->direct = iox->opts.direct;
	/*
	 * O_NONBLOCK, regular files only: a FIFO (or a device) put in a data file's place since
	 * the dataset was listed would block this thread in open, and every reader of the
	 * pipeline with it (the file is named in the error instead).
	 */
	fd = io_creds_open_file(iox->opts.creds, f->path, f->direct ? O_DIRECT : 0, &st);
	if (fd == -EINVAL && f->direct) {
		/* The file system does not take O_DIRECT (tmpfs on older kernels, some FUSE). */
		f->direct = false;
		fd = io_creds_open_file(iox->opts.creds, f->path, 0, &st);
	}
	if (fd < 0) {
		iox_file_end(iox, f, 0, true, fd,
			     fd == -EINVAL ? "open (not a regular file: it was one when the "
					     "dataset was listed)"
					   : "open",
			     0);
		f->closed = true;
		iox_file_update(iox, id);
		return;
	}
	f->fd = fd;
	iox->open_ids[iox->nopen++] = id;
	if (S_ISREG(st.st_mode)) {
		f->size = (uint64_t)st.st_size;
		if (f->size == 0)
			iox_file_end(iox, f, 0, true, 0, NULL, 0);
		else
			f->last_k = (f->size - 1) / iox->opts.chunk_len;
	} else {
		/* Not a regular file: no size to trust, read until a read returns 0 bytes. */
		f->size = UINT64_MAX;
	}
	iox_file_update(iox, id);
}

/* Hand the rest of buffer idx's chunk to the backend. */
static int iox_buf_read(struct iox *iox, const struct iox_file *f, uint32_t idx)
{
	struct iox_buf *b = &iox->bufs[idx];
	uint32_t from = b->filled;
	struct iox_rd rd;

	if (f->direct)
		from &= ~(IOX_ALIGN - 1); /* O_DIRECT: restart at the block where the read ended */
	rd.fd = f->fd;
	rd.buf = idx;
	rd.addr = iox->mem + (size_t)idx * iox->opts.chunk_len + from;
	rd.len = b->want - from;
	rd.off = b->off + from;
	return iox->ops->queue(iox, &rd);
}

/* Issue chunk f->next_k into a free buffer. */
static int iox_file_issue(struct iox *iox, uint32_t id)
{
	struct iox_file *f = iox_file_get(iox, id);
	uint32_t idx = iox->free_head;
	struct iox_buf *b = &iox->bufs[idx];
	uint64_t off = f->next_k * iox->opts.chunk_len;

	iox->free_head = b->next;
	iox->nfree--;
	b->state = IOX_BUF_INFLIGHT;
	b->file_id = id;
	b->off = off;
	b->filled = 0;
	b->next = IOX_NONE;
	b->want = (uint32_t)iox->opts.chunk_len;
	if (!f->direct && f->size - off < iox->opts.chunk_len)
		b->want = (uint32_t)(f->size - off);
	f->next_k++;
	f->inflight++;
	iox->inflight++;
	iox->unstarted++;
	return iox_buf_read(iox, f, idx);
}

static bool iox_file_can_issue(const struct iox_file *f)
{
	return !f->closed && f->fd >= 0 && iox_file_more(f);
}

/* Open files and issue reads while slots and buffers allow (waiting at-reads first). */
static int iox_pump(struct iox *iox)
{
	uint32_t tried;
	int ret;

	ret = iox_at_pump(iox);
	if (ret < 0)
		return ret;

	while (iox->nopen < iox->opts.max_open_files && iox->next_open < iox->nadded)
		iox_file_open(iox, iox->next_open++);
	while (iox->inflight < iox->opts.queue_depth && iox->nfree > 0 && iox->nopen > 0) {
		for (tried = 0; tried < iox->nopen; tried++) {
			if (iox->rr >= iox->nopen)
				iox->rr = 0;
			if (iox_file_can_issue(iox_file_get(iox, iox->open_ids[iox->rr])))
				break;
			iox->rr++;
		}
		if (tried == iox->nopen)
			break;
		ret = iox_file_issue(iox, iox->open_ids[iox->rr]);
		iox->rr++;
		if (ret < 0)
			return ret;
	}
	return 0;
}

static void iox_pending_insert(struct iox *iox, struct iox_file *f, uint32_t idx)
{
	uint64_t k = iox_buf_k(iox, &iox->bufs[idx]);
	uint32_t *pp = &f->pending;

	while (*pp != IOX_NONE && iox_buf_k(iox, &iox->bufs[*pp]) < k)
		pp = &iox->bufs[*pp].next;
	iox->bufs[idx].next = *pp;
	iox->bufs[idx].state = IOX_BUF_PENDING;
	*pp = idx;
}

/* One read finished: advance its chunk, continue it, end the file, or park it as pending. */
static int iox_complete(struct iox *iox, const struct iox_cqe *c)
{
	struct iox_buf *b;
	struct iox_file *f;
	uint32_t id, from;
	uint64_t k, end;

	if (c->buf >= iox->opts.num_buffers || iox->bufs[c->buf].state != IOX_BUF_INFLIGHT)
		return -EIO; /* the backend returned something we never gave it */
	b = &iox->bufs[c->buf];
	if (b->file_id == IOX_AT_FILE)
		return iox_at_complete(iox, c);
	id = b->file_id;
	f = iox_file_get(iox, id);
	k = iox_buf_k(iox, b);
	f->inflight--;
	iox->inflight--;
	iox->stats.reads++;

	if (k > f->last_k || f->delivered) {
		/* Past the end found meanwhile (an error or a shorter file): drop it. */
		iox_buf_free(iox, c->buf);
	} else if (c->res == -EINTR || c->res == -EAGAIN) {
		f->inflight++;
		iox->inflight++;
		iox->unstarted++;
		return iox_buf_read(iox, f, c->buf);
	} else if (c->res < 0) {
		iox_file_end(iox, f, k, true, c->res, "read", b->off + b->filled);
		iox_buf_free(iox, c->buf);
	} else {
		iox->stats.bytes += (uint64_t)c->res;
		from = f->direct ? (b->filled & ~(IOX_ALIGN - 1)) : b->filled;
		end = (uint64_t)from + (uint64_t)c->res;
		if (end > b->want)
			end = b->want; /* cannot happen: the kernel reads at most len */
		if (c->res == 0 || end <= b->filled) {
			/* End of file inside this chunk. */
			if (b->filled == 0) {
				iox_file_end(iox, f, k, true, 0, NULL, b->off);
				iox_buf_free(iox, c->buf);
			} else {
				iox_file_end(iox, f, k, false, 0, NULL, 0);
				iox_pending_insert(iox, f, c->buf);
			}
		} else {
			b->filled = (uint32_t)end;
			if (f->size != UINT64_MAX && b->off + b->filled >= f->size) {
				b->filled = (uint32_t)(f->size - b->off); /* reached the size */
				iox_pending_insert(iox, f, c->buf);
			} else if (b->filled == b->want) {
				iox_pending_insert(iox, f, c->buf);
			} else {
				/* A partial read: continue from where it ended. */
				f->inflight++;
				iox->inflight++;
				iox->unstarted++;
				return iox_buf_read(iox, f, c->buf);
			}
		}
	}
	iox_file_update(iox, id);
	return 0;
}

static void iox_err_fill(const struct iox *iox, const struct iox_file *f, struct io_error *err)
{
	char eb[128];
	const char *msg = iox_strerror(-f->term_err, eb, sizeof(eb));
	const char *op = f->term_op ? f->term_op : "read";

	if (strcmp(op, "read") == 0)
		io_error_set(err, "%s: %s: %s (at offset %" PRIu64 ")", f->path,
			     iox->engine == IOX_ENGINE_PREAD ? "pread" : "read", msg, f->term_off);
	else
		io_error_set(err, "%s: %s: %s", f->path, op, msg);
}

/* Take the next chunk of the first ready file. */
static void iox_deliver(struct iox *iox, struct iox_chunk *ret_chunk, struct io_error *err)
{
	uint32_t id = iox->ready_head;
	struct iox_file *f = iox_file_get(iox, id);
	struct iox_chunk c;

	iox->ready_head = f->ready_next;
	if (iox->ready_head == IOX_NONE)
		iox->ready_tail = IOX_NONE;
	f->in_ready = false;

	memset(&c, 0, sizeof(c));
	c.user = f->user;
	c.file_id = id;
	c.buf_ = IOX_NO_BUF;
	if (f->pending != IOX_NONE && iox_buf_k(iox, &iox->bufs[f->pending]) == f->deliver_k) {
		uint32_t idx = f->pending;
		struct iox_buf *b = &iox->bufs[idx];

		f->pending = b->next;
		b->next = IOX_NONE;
		c.data = iox->mem + (size_t)idx * iox->opts.chunk_len;
		c.len = b->filled;
		c.offset = b->off;
		c.last = f->deliver_k == f->last_k;
		c.direct = f->direct;
		b->state = IOX_BUF_HELD;
		b->gen_ = b->gen_ >= IOX_GEN_MAX ? 0 : b->gen_ + 1;
		c.buf_ = ((uint32_t)b->gen_ << IOX_BUF_BITS) | idx;
	} else {
		/* The terminal pseudo-chunk: empty end of file, or the error. */
		c.offset = f->term_off;
		c.last = true;
		c.error = f->term_err;
		if (c.error)
			iox_err_fill(iox, f, err);
	}
	if (c.last) {
		f->delivered = true;
		iox->ndelivered++;
		iox->stats.files_done++;
		free(f->path);
		f->path = NULL;
	} else {
		f->deliver_k++;
	}
	iox_file_update(iox, id);
	*ret_chunk = c;
}

static int64_t iox_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Start the queued reads now unless enough are running to keep the device busy. */
static int iox_maybe_flush(struct iox *iox)
{
	uint32_t started = iox->inflight - iox->unstarted;
	int ret;

	if (!iox->unstarted || started >= (iox->opts.queue_depth + 1) / 2)
		return 0;
	ret = iox->ops->flush(iox);
	if (ret < 0)
		return ret;
	iox->unstarted = 0;
	return 0;
}

int iox_next(struct iox *iox, int timeout_ms, struct iox_chunk *ret_chunk, struct io_error *err)
{
	int64_t deadline = 0;
	int wait, n, i, ret;

	if (!iox || !ret_chunk || timeout_ms < -1)
		return -EINVAL;
	if (iox->failed)
		return iox->failed;
	if (timeout_ms > 0)
		deadline = iox_now_ms() + timeout_ms;
	for (;;) {
		ret = iox_pump(iox);
		if (ret < 0)
			goto fail;
		if (iox->ready_head != IOX_NONE || iox->at_done_head != IOX_NONE) {
			ret = iox_maybe_flush(iox);
			if (ret < 0)
				goto fail;
			if (iox->at_done_head != IOX_NONE &&
			    (iox->ready_head == IOX_NONE || iox->at_turn)) {
				iox_at_deliver(iox, ret_chunk, err);
				iox->at_turn = false;
			} else {
				iox_deliver(iox, ret_chunk, err);
				iox->at_turn = true;
			}
			return 1;
		}
		if (iox->ndelivered == iox->nadded && iox->at_pending == 0)
			return 0;
		if (iox->inflight == 0) {
			/* Nothing can move: every buffer is held by the consumer. */
			return iox->nfree == 0 ? -ENOBUFS : -EIO;
		}
		if (timeout_ms < 0) {
			wait = -1;
		} else if (timeout_ms == 0) {
			wait = 0;
		} else {
			int64_t left = deadline - iox_now_ms();

			wait = left <= 0 ? 0 : (int)left;
		}
		n = iox->ops->reap(iox, wait, iox->cqes, iox->opts.num_buffers);
		if (n < 0) {
			ret = n;
			goto fail;
		}
		iox->unstarted = 0;
		for (i = 0; i < n; i++) {
			ret = iox_complete(iox, &iox->cqes[i]);
			if (ret < 0)
				goto fail;
		}
		if (n == 0 && wait == 0)
			return -ETIMEDOUT;
	}

fail:
	iox->failed = ret;
	return ret;
}

void iox_release(struct iox *iox, const struct iox_chunk *chunk)
{
	uint32_t idx, gen;
	struct iox_buf *b;

	if (!iox || !chunk || chunk->buf_ == IOX_NO_BUF)
		return;
	idx = chunk->buf_ & (IOX_MAX_BUFFERS - 1);
	gen = chunk->buf_ >> IOX_BUF_BITS;
	if (idx >= iox->opts.num_buffers)
		return;
	b = &iox->bufs[idx];
	if (b->state != IOX_BUF_HELD || b->gen_ != gen)
		return; /* released twice, or not ours: ignore */
	iox_buf_free(iox, idx);
}
