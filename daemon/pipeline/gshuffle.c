/* SPDX-License-Identifier: Apache-2.0 */
/* Stage "global shuffle": every record of the epoch in a permutation, each read by its offset. */
#include "gshuffle.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/creds.h"
#include "io/tfr.h"
#include "io/tfr_index.h"
#include "mem.h"
#include "rng.h"

/*
 * Files kept open at once: a dataset of more files opens them again as its records come (the
 * one closed is the least recently used with no read in flight). Each file opened again is
 * checked to be the one scanned (inode, size, mtime, ctime), as every file is at each epoch.
 */
#define GS_MAX_FDS 64
/* The most reads in flight (struct pl_gshuffle_opts.depth is bounded to it). */
#define GS_MAX_DEPTH 1024

/* One data file of the plan: its records' offsets and what it was when scanned. */
struct gs_file {
	const char *path;  /* the plan's */
	uint32_t ds_file;  /* index into the dataset's files */
	uint64_t first;	   /* its first record's number across the files */
	uint64_t records;  /* offsets[records] is the end of its last record */
	uint64_t *offsets; /* records + 1 */
	uint64_t charged;  /* of them, to the pipeline's memory account */
	struct stat id;	   /* at the scan */
	int fd;		   /* -1: not open */
	uint32_t inflight; /* reads of it in flight */
	uint64_t used;	   /* when it was last read (a counter): the LRU's order */
};

/* A read of the window: element k of the epoch, its record, and its chunk once read. */
struct gs_read {
	uint64_t k;
	uint32_t file; /* into files[] */
	uint64_t index;
	uint32_t len; /* header + payload + footer */
	bool issued, done;
	struct iox_chunk ch;
};

struct pl_gshuffle {
	struct pl_gshuffle_opts o;
	struct gs_file *files;
	size_t n_files;
	uint64_t n;	  /* records in all */
	uint32_t max_len; /* the longest record's frame */
	bool scanned;
	struct iox *iox;
	unsigned depth;
	struct gs_read *win; /* depth entries: element k sits at k % depth */
	uint64_t next_k;     /* the next element to hand out */
	uint64_t issue_k;    /* the next element to read */
	uint64_t epoch;
	struct pl_gperm perm;
	unsigned n_open;
	uint64_t tick;
	struct io_error err; /* the first failed read's (it comes with its chunk) */
};

/* ---- the permutation (semantics doc, 4g) ---- */

void pl_gperm_init(struct pl_gperm *p, uint64_t n, uint64_t seed, uint64_t epoch)
{
	struct pl_rng r;
	unsigned h = 1;
	while (h < 32 && (1ull << (2 * h)) < n)
		h++;
	p->n = n;
	p->h = h;
	p->mask = (1ull << h) - 1;
	pl_rng_init(&r, seed, epoch, 4, 0);
	for (int j = 0; j < 6; j++)
		p->k[j] = pl_rng_next(&r);
}

static uint64_t gperm_enc(const struct pl_gperm *p, uint64_t x)
{
	uint64_t l = x >> p->h, r = x & p->mask;
	for (int j = 0; j < 6; j++) {
		uint64_t t = r;
		r = l ^ (pl_mix64(r ^ p->k[j]) & p->mask);
		l = t;
	}
	return l << p->h | r;
}

uint64_t pl_gperm_at(const struct pl_gperm *p, uint64_t k)
{
	uint64_t x = gperm_enc(p, k);
	while (x >= p->n) /* cycle walking: fewer than 4 steps on average (4^h < 4n) */
		x = gperm_enc(p, x);
	return x;
}

/* ---- files ---- */

static bool same_file(const struct stat *a, const struct stat *b)
{
	return a->st_ino == b->st_ino && a->st_dev == b->st_dev && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
	       a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

static int stale(const struct gs_file *f, struct io_error *err)
{
	io_error_set(err,
		     "%s: changed since its records were indexed for the global shuffle (inode, "
		     "size, mtime or ctime): its offsets no longer hold (recreate the pipeline)",
		     f->path);
	return -ESTALE;
}

/* Close the least recently used file with no read in flight; false if none. */
static bool close_one(struct pl_gshuffle *g)
{
	struct gs_file *lru = NULL;
	for (size_t i = 0; i < g->n_files; i++) {
		struct gs_file *f = &g->files[i];
		if (f->fd >= 0 && !f->inflight && (!lru || f->used < lru->used))
			lru = f;
	}
	if (!lru)
		return false;
	close(lru->fd);
	lru->fd = -1;
	g->n_open--;
	return true;
}

/* f's fd, opened (with the plan's rights) and checked when it is not open. */
static int file_fd(struct pl_gshuffle *g, struct gs_file *f, struct io_error *err)
{
	f->used = ++g->tick;
	if (f->fd >= 0)
		return f->fd;
	if (g->n_open >= GS_MAX_FDS && !close_one(g))
		return -EAGAIN; /* every open file has reads in flight: wait for one */
	struct stat st;
	int fd = io_creds_open_file(g->o.plan->creds, f->path, 0, &st);
	if (fd < 0) {
		io_error_set(err, "%s: open: %s", f->path, strerror(-fd));
		return fd;
	}
	if (!same_file(&st, &f->id)) {
		close(fd);
		return stale(f, err);
	}
	f->fd = fd;
	g->n_open++;
	g->o.st_read->elems_in++; /* files opened */
	return fd;
}

/*
 * Under skip_record, a file whose framing breaks keeps its records before the break (as the
 * framer keeps them: semantics doc, on_corrupt): hop their headers again, one pread each (the
 * rare case: tfr_index_build_fd gives no offsets when it fails). 0 or -ENOMEM.
 */
static int scan_prefix(int fd, uint64_t size, struct gs_file *f)
{
	uint64_t off = 0, n = 0, cap = 64;
	uint64_t *v = malloc(cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (;;) {
		uint8_t h[TFR_HEADER_LEN];
		uint64_t len;
		if (size - off < TFR_HEADER_LEN + TFR_FOOTER_LEN ||
		    pread(fd, h, sizeof(h), (off_t)off) != (ssize_t)sizeof(h))
			break;
		if (!tfr_frame_header_check(h, &len) ||
		    len > size - off - TFR_HEADER_LEN - TFR_FOOTER_LEN ||
		    len > TFR_DEFAULT_MAX_RECORD_LEN)
			break;
		if (n + 1 >= cap) {
			uint64_t *nv = realloc(v, 2 * cap * sizeof(*v));
			if (!nv) {
				free(v);
				return -ENOMEM;
			}
			v = nv;
			cap *= 2;
		}
		v[n++] = off;
		off += TFR_HEADER_LEN + len + TFR_FOOTER_LEN;
	}
	v[n] = off; /* the end of the last whole record */
	f->offsets = v;
	f->records = n;
	return 0;
}

/*
 * Scan every file into the table. A file whose framing is broken fails the pipeline, or under
 * skip_record keeps its records before the break (counted in skipped_files).
 */
static int scan(struct pl_gshuffle *g, struct io_error *err)
{
	const struct pl_plan *plan = g->o.plan;
	struct tfr_index_build_opts bo;
	tfr_index_build_opts_init(&bo);
	bo.compression = TFR_COMPRESSION_NONE;
	bo.max_offsets = UINT64_MAX; /* every record's offset: stride 1 */
	bo.scan_cap = UINT64_MAX;
	uint64_t total = 0;
	for (size_t i = 0; i < g->n_files; i++) {
		struct gs_file *f = &g->files[i];
		f->first = total;
		struct stat st;
		int fd = io_creds_open_file(plan->creds, f->path, 0, &st);
		if (fd < 0) {
			io_error_set(err, "%s: open: %s", f->path, strerror(-fd));
			return fd;
		}
		g->o.st_read->elems_in++; /* files opened */
		struct tfr_index_entry *e = NULL;
		int r = tfr_index_build_fd(fd, f->path, &bo, &e, err);
		if (r < 0) {
			if (r == -ENOMEM || plan->cfg.on_corrupt == PL_ON_CORRUPT_FAIL ||
			    !S_ISREG(st.st_mode)) {
				close(fd);
				return r;
			}
			if (g->o.skipped_files)
				(*g->o.skipped_files)++;
			err->msg[0] = 0;
			r = scan_prefix(fd, (uint64_t)st.st_size, f);
			if (r < 0) {
				close(fd);
				io_error_set(err, "out of memory");
				return r;
			}
			f->id = st;
			goto keep;
		}
		if (e->stride != 1 || e->n_offsets != e->records) {
			io_error_set(err, "%s: the scan kept every %llu-th offset, not every one",
				     f->path, (unsigned long long)e->stride);
			tfr_index_entry_destroy(e);
			close(fd);
			return -EOVERFLOW;
		}
		f->id = st;
		f->records = e->records;
		/* the scan's offsets, taken over, with the end of the last record after them */
		f->offsets = realloc(e->offsets, (e->records + 1) * sizeof(*f->offsets));
		if (!f->offsets) {
			tfr_index_entry_destroy(e);
			close(fd);
			io_error_set(err, "out of memory");
			return -ENOMEM;
		}
		e->offsets = NULL;
		f->offsets[e->records] = e->stream_bytes;
		tfr_index_entry_destroy(e);
	keep:
		/* charged once made: a file's table is at most half its size (16-byte records) */
		if (pl_mem_take(plan->mem, (f->records + 1) * sizeof(*f->offsets),
				"the global shuffle's offsets of %s (%llu records)", f->path,
				(unsigned long long)f->records) < 0) {
			close(fd);
			io_error_set(err, "out of memory");
			return -ENOMEM;
		}
		f->charged = (f->records + 1) * sizeof(*f->offsets);
		for (uint64_t k = 0; k < f->records; k++) {
			uint64_t len = f->offsets[k + 1] - f->offsets[k];
			if (len > g->max_len)
				g->max_len =
					(uint32_t)len; /* a record is under 2^32 (max_record_len) */
		}
		if (g->n_open < GS_MAX_FDS) { /* kept open for the reads */
			f->fd = fd;
			f->used = ++g->tick;
			g->n_open++;
		} else {
			close(fd);
		}
		total += f->records;
	}
	g->n = total;
	return 0;
}

/* The iox for reads of at most max_len bytes, depth of them in flight within read_bytes. */
static int make_iox(struct pl_gshuffle *g, struct io_error *err)
{
	size_t chunk = ((size_t)g->max_len + 4095) & ~(size_t)4095;
	if (chunk == 0)
		chunk = 4096;
	unsigned depth = g->o.depth ? g->o.depth : 1;
	if (depth > GS_MAX_DEPTH)
		depth = GS_MAX_DEPTH;
	while (depth > 1 && (uint64_t)depth * chunk > g->o.read_bytes)
		depth /= 2;
	struct iox_opts io;
	iox_opts_init(&io);
	io.engine = g->o.engine;
	io.queue_depth = depth;
	io.num_buffers = depth + 1; /* the one being copied out */
	io.chunk_len = chunk;
	io.fixed_buffers = false; /* buffered reads (docs/io-engine.md) */
	io.creds = g->o.plan->creds;
	int r = iox_create(&io, &g->iox, err);
	if (r < 0)
		return r;
	g->depth = depth;
	g->win = calloc(depth, sizeof(*g->win));
	if (!g->win) {
		io_error_set(err, "out of memory");
		return -ENOMEM;
	}
	g->o.read_tot->engine = iox_engine_name(iox_engine_used(g->iox));
	const char *why = iox_fallback_reason(g->iox);
	if (why && !g->o.read_tot->have_fallback) {
		snprintf(g->o.read_tot->fallback, sizeof(g->o.read_tot->fallback), "%s", why);
		g->o.read_tot->have_fallback = true;
	}
	g->o.st_read->capacity = depth;
	return 0;
}

int pl_gshuffle_create(const struct pl_gshuffle_opts *opts, struct pl_gshuffle **ret,
		       struct io_error *err)
{
	const struct pl_plan *plan = opts->plan;
	struct pl_gshuffle *g = calloc(1, sizeof(*g));
	if (!g || !(g->files = calloc(plan->n_files ? plan->n_files : 1, sizeof(*g->files)))) {
		free(g);
		io_error_set(err, "out of memory");
		return -ENOMEM;
	}
	g->o = *opts;
	g->n_files = plan->n_files;
	for (size_t i = 0; i < g->n_files; i++) {
		g->files[i].ds_file = plan->files[i];
		g->files[i].path = plan->ds->files[plan->files[i]].path;
		g->files[i].fd = -1;
	}
	*ret = g;
	return 0;
}

/* Drop the window's reads: those done are released, those in flight are waited for. */
static void drain(struct pl_gshuffle *g)
{
	for (unsigned i = 0; g->win && i < g->depth; i++) {
		struct gs_read *rd = &g->win[i];
		if (rd->done)
			iox_release(g->iox, &rd->ch);
		rd->done = false;
	}
	while (g->iox && iox_at_pending(g->iox)) {
		struct iox_chunk ch;
		struct io_error e;
		if (iox_next(g->iox, -1, &ch, &e) != 1)
			break;
		iox_release(g->iox, &ch);
	}
	for (unsigned i = 0; g->win && i < g->depth; i++)
		g->win[i].issued = false;
	for (size_t i = 0; i < g->n_files; i++)
		g->files[i].inflight = 0;
}

void pl_gshuffle_destroy(struct pl_gshuffle *g)
{
	if (!g)
		return;
	drain(g);
	iox_destroy(g->iox);
	for (size_t i = 0; i < g->n_files; i++) {
		if (g->files[i].fd >= 0)
			close(g->files[i].fd);
		free(g->files[i].offsets);
		pl_mem_uncharge(g->o.plan->mem, g->files[i].charged);
	}
	free(g->files);
	free(g->win);
	free(g);
}

int pl_gshuffle_begin_epoch(struct pl_gshuffle *g, uint64_t epoch, uint64_t skip,
			    struct io_error *err)
{
	unsigned prev = pl_prof_enter(g->o.prof, PL_STAGE_FRAME);
	int r = 0;
	drain(g);
	if (!g->scanned) {
		r = scan(g, err);
		if (r == 0)
			r = make_iox(g, err);
		g->scanned = r == 0;
	} else {
		/* a file rewritten in place since the scan: its offsets no longer hold */
		for (size_t i = 0; r == 0 && i < g->n_files; i++) {
			struct gs_file *f = &g->files[i];
			struct stat st;
			if (f->records && f->fd >= 0 &&
			    (fstat(f->fd, &st) < 0 || !same_file(&st, &f->id)))
				r = stale(f, err);
		}
	}
	if (r == 0) {
		g->epoch = epoch;
		pl_gperm_init(&g->perm, g->n, g->o.plan->cfg.seed, epoch);
		g->next_k = g->issue_k = skip < g->n ? skip : g->n;
		g->o.st_shuffle->capacity = g->depth;
	}
	pl_prof_leave(g->o.prof, prev);
	return r;
}

/* The file holding record number r (binary search over the files' first records). */
static uint32_t file_of(const struct pl_gshuffle *g, uint64_t r)
{
	size_t lo = 0, hi = g->n_files;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (g->files[mid].first <= r)
			lo = mid;
		else
			hi = mid;
	}
	while (lo + 1 < g->n_files && g->files[lo].records == 0) /* empty files share a first */
		lo++;
	return (uint32_t)lo;
}

/* Issue reads for the elements ahead while the window and the buffers have room. */
static int issue(struct pl_gshuffle *g, struct io_error *err)
{
	while (g->issue_k < g->n && g->issue_k - g->next_k < g->depth &&
	       iox_free_buffers(g->iox) > 1) {
		uint64_t rec = pl_gperm_at(&g->perm, g->issue_k);
		uint32_t fi = file_of(g, rec);
		struct gs_file *f = &g->files[fi];
		uint64_t idx = rec - f->first;
		int fd = file_fd(g, f, err);
		if (fd == -EAGAIN)
			return 0; /* after a read completes */
		if (fd < 0)
			return fd;
		struct gs_read *rd = &g->win[g->issue_k % g->depth];
		*rd = (struct gs_read){ .k = g->issue_k,
					.file = fi,
					.index = idx,
					.len = (uint32_t)(f->offsets[idx + 1] - f->offsets[idx]),
					.issued = true };
		int r = iox_read_at(g->iox, fd, f->path, f->offsets[idx], rd->len, rd);
		if (r == -ENOBUFS) {
			rd->issued = false;
			return 0;
		}
		if (r < 0) {
			io_error_set(err, "%s: read at offset %llu: %s", f->path,
				     (unsigned long long)f->offsets[idx], strerror(-r));
			return r;
		}
		f->inflight++;
		g->issue_k++;
	}
	return 0;
}

/* Wait until element next_k's read is done. */
static int wait_head(struct pl_gshuffle *g, struct io_error *err)
{
	struct gs_read *head = &g->win[g->next_k % g->depth];
	while (!(head->issued && head->done && head->k == g->next_k)) {
		if (atomic_load_explicit(g->o.stop, memory_order_relaxed))
			return -ECANCELED;
		int r = issue(g, err);
		if (r < 0)
			return r;
		struct iox_chunk ch;
		/*
		 * Without waiting first: this submits the reads issued, and a read of the page
		 * cache completes during the submit (the kernel's copy: CPU, not a wait). Only
		 * the time blocked after that is the disk's: counted as the driver's wait, it
		 * tells the driver it has slack to parse batches itself (assemble.c), which
		 * time spent copying is not.
		 */
		r = iox_next(g->iox, 0, &ch, &g->err);
		if (r == -ETIMEDOUT) {
			uint64_t t0 = pl_clock_ns(CLOCK_MONOTONIC);
			r = iox_next(g->iox, 100, &ch, &g->err);
			g->o.st_read->wait_up_ns += pl_clock_ns(CLOCK_MONOTONIC) - t0;
		}
		if (r == -ETIMEDOUT)
			continue; /* to look at stop */
		if (r <= 0) {
			if (r == 0) {
				io_error_set(err,
					     "global shuffle: the read of element %llu was lost",
					     (unsigned long long)g->next_k);
				return -EIO;
			}
			*err = g->err;
			return r;
		}
		struct gs_read *rd = ch.user;
		rd->ch = ch;
		rd->done = true;
		g->files[rd->file].inflight--;
		g->o.st_read->completions++;
		g->o.st_read->bytes_out += ch.len;
		if (ch.error) { /* a failed read: the iox named the file */
			*err = g->err;
			return ch.error;
		}
	}
	return 0;
}

/*
 * The head's record checked (its frame: length and its CRC, against the scan's) into *ret.
 * 1, 0: a broken frame dropped under skip_record, or -errno.
 */
static int take_head(struct pl_gshuffle *g, struct pl_rec *ret, struct io_error *err)
{
	struct gs_read *rd = &g->win[g->next_k % g->depth];
	const struct gs_file *f = &g->files[rd->file];
	uint64_t off = f->offsets[rd->index];
	const uint8_t *p = rd->ch.data;
	int r = 1;
	if (rd->ch.len != rd->len) {
		r = stale(f, err);
	} else {
		uint64_t len;
		bool crc_ok = tfr_frame_header_check(p, &len);
		if (!crc_ok || len + TFR_HEADER_LEN + TFR_FOOTER_LEN != rd->len) {
			io_error_set(err,
				     "%s: record %llu at offset %llu: %s (the file changed since "
				     "it was indexed for the global shuffle?)",
				     f->path, (unsigned long long)rd->index,
				     (unsigned long long)off,
				     !crc_ok ? "header CRC mismatch" : "length differs");
			r = -EBADMSG;
		} else {
			const uint8_t *data;
			struct pl_block *blk;
			if (pl_store_copy(g->o.store, p + TFR_HEADER_LEN, len + TFR_FOOTER_LEN, len,
					  &blk, &data) < 0) {
				io_error_set(err, "out of memory");
				r = -ENOMEM;
			} else {
				*ret = (struct pl_rec){ .blk = blk,
							.data = data,
							.win_len = -1,
							.len = (uint32_t)len,
							.file = f->ds_file,
							.index = rd->index,
							.offset = off };
				g->o.st_frame->elems_out++;
				g->o.st_frame->bytes_out += len;
			}
		}
	}
	iox_release(g->iox, &rd->ch);
	rd->done = rd->issued = false;
	g->next_k++;
	if (r == -EBADMSG && g->o.plan->cfg.on_corrupt != PL_ON_CORRUPT_FAIL) {
		g->o.st_frame->dropped++;
		return 0;
	}
	return r;
}

int pl_gshuffle_next(struct pl_gshuffle *g, struct pl_rec *ret, struct io_error *err)
{
	unsigned prev = pl_prof_enter(g->o.prof, PL_STAGE_READ);
	int r = 0;
	while (g->next_k < g->n) {
		r = wait_head(g, err);
		if (r < 0)
			break;
		r = take_head(g, ret, err);
		if (r != 0)
			break;
	}
	if (r == 1) {
		g->o.st_shuffle->elems_in++;
		g->o.st_shuffle->elems_out++;
		g->o.st_shuffle->buffered = g->issue_k - g->next_k;
		/* read ahead now, so that the disk works while the batch is made */
		int e = issue(g, err);
		if (e < 0) {
			pl_rec_unref(ret);
			r = e;
		}
	}
	pl_prof_leave(g->o.prof, prev);
	return r;
}
