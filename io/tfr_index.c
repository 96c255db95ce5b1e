/* SPDX-License-Identifier: Apache-2.0 */
/* Record index of TFRecord files: building by header hops, the index file's writer and reader. */
#include "tfr_index.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"
#include "file.h"

/*
 * The file, byte by byte (little-endian throughout):
 *
 *   header   0  magic "SLIDX001"
 *            8  u32 version (1)
 *           12  u32 header_len: every header byte, the CRC included
 *           16  u64 n_entries
 *           24  u32 dir_len
 *           28  dir bytes (the data directory, as the writer was given it; no NUL)
 *               n_entries rows, in name order (byte order, no duplicates):
 *                 u64 entry_offset (from the start of the file), u64 entry_len,
 *                 u32 name_len, name bytes
 *               u32 CRC32C of bytes [0, header_len - 4)
 *   entry    0  u32 name_len (the row's), 4 u32 compression (0 none, 1 gzip, 2 zlib),
 *            8  u64 size, 16 i64 mtime_ns, 24 i64 ctime_ns, 32 u64 ino,
 *           40  u64 records, 48 u64 payload_bytes, 56 u64 stream_bytes, 64 u64 stride,
 *           72  u64 n_offsets, 80 name bytes, then n_offsets u64 offsets,
 *               then u32 CRC32C of every entry byte before it
 *
 * An entry holds: stride >= 1, n_offsets = ceil(records / stride), stream_bytes = 16 * records +
 * payload_bytes (= size when uncompressed), offsets[0] = 0, each offset at least 16 * stride
 * past the one before, the last record's header inside the stream.
 */

#define HDR_FIXED   28u /* magic .. dir_len */
#define ROW_FIXED   20u /* entry_offset, entry_len, name_len */
#define ENT_FIXED   80u /* name_len .. n_offsets */
#define CRC_LEN	    4u
#define NAME_MAX_IX 4095u
#define SCAN_CAP    (1ull << 24)
#define CHUNK	    (1u << 20)

/* Records of n bytes of payload each take at least this many stream bytes. */
#define REC_MIN (TFR_HEADER_LEN + TFR_FOOTER_LEN)

static uint32_t ld32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t ld64(const uint8_t *p)
{
	return (uint64_t)ld32(p) | (uint64_t)ld32(p + 4) << 32;
}

static void st32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static void st64(uint8_t *p, uint64_t v)
{
	st32(p, (uint32_t)v);
	st32(p + 4, (uint32_t)(v >> 32));
}

static int64_t ts_ns(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

int tfr_index_splits(const struct tfr_index_entry *e, uint64_t records,
		     struct tfr_index_split **ret, size_t *ret_n)
{
	if (!e || !records || !ret || !ret_n || !e->stride ||
	    e->n_offsets != (e->records + e->stride - 1) / e->stride)
		return -EINVAL;
	bool whole = e->compression != TFR_COMPRESSION_NONE || e->records == 0;
	/* a multiple of the stride, the nearest to what was asked (at least one stride) */
	uint64_t step = (records + e->stride / 2) / e->stride * e->stride;
	if (step < e->stride)
		step = e->stride;
	size_t n = whole ? 1 : (size_t)((e->records + step - 1) / step);
	struct tfr_index_split *v = calloc(n, sizeof(*v));
	if (!v)
		return -ENOMEM;
	if (whole) {
		v[0] = (struct tfr_index_split){ 0, e->records, 0, e->size };
	} else {
		for (size_t i = 0; i < n; i++) {
			uint64_t first = (uint64_t)i * step;
			uint64_t end = first + step < e->records ? first + step : e->records;
			uint64_t from = e->offsets[first / e->stride];
			uint64_t to =
				end < e->records ? e->offsets[end / e->stride] : e->stream_bytes;
			if (to < from) {
				free(v);
				return -EINVAL;
			}
			v[i] = (struct tfr_index_split){ first, end - first, from, to - from };
		}
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

void tfr_index_entry_destroy(struct tfr_index_entry *e)
{
	if (!e)
		return;
	free(e->name);
	free(e->offsets);
	free(e);
}

void tfr_index_build_opts_init(struct tfr_index_build_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->size = sizeof(*opts);
	opts->compression = TFR_COMPRESSION_NONE;
	opts->max_record_len = TFR_DEFAULT_MAX_RECORD_LEN;
	opts->max_offsets = TFR_INDEX_MAX_OFFSETS;
	opts->scan_cap = SCAN_CAP;
}

/* ---- building --------------------------------------------------------------------------- */

/*
 * The offsets seen so far: those of records 0, s, 2s, ... (s = sample), at most cap of them;
 * when full, every other one goes and s doubles.
 */
struct scan {
	uint64_t *off;
	uint64_t n, alloc, cap;
	uint64_t sample;
	uint64_t records;
	uint64_t payload;
	bool hw; /* crc32c_hw_available() */
};

static int scan_add(struct scan *sc, uint64_t offset, uint64_t len)
{
	if (sc->records % sc->sample == 0) {
		if (sc->n == sc->cap) {
			uint64_t j;

			for (j = 0; 2 * j < sc->n; j++)
				sc->off[j] = sc->off[2 * j];
			sc->n = j;
			sc->sample *= 2;
		}
	}
	if (sc->records % sc->sample == 0) {
		if (sc->n == sc->alloc) {
			uint64_t a = sc->alloc ? sc->alloc * 2 : 1024;
			uint64_t *p;

			if (a > sc->cap)
				a = sc->cap;
			p = realloc(sc->off, (size_t)a * sizeof(*p));
			if (!p)
				return -ENOMEM;
			sc->off = p;
			sc->alloc = a;
		}
		sc->off[sc->n++] = offset;
	}
	sc->records++;
	sc->payload += len;
	return 0;
}

/* Choose k and move the chosen offsets into e. */
static int scan_finish(struct scan *sc, uint64_t max_offsets, struct tfr_index_entry *e)
{
	uint64_t n = sc->records, k, step, m, j;

	e->records = n;
	e->payload_bytes = sc->payload;
	if (n == 0) {
		e->stride = 1;
		e->n_offsets = 0;
		e->offsets = NULL;
		return 0;
	}
	k = n / max_offsets + (n % max_offsets != 0);
	if (k < 1)
		k = 1;
	k = (k + sc->sample - 1) / sc->sample * sc->sample;
	step = k / sc->sample;
	m = (n - 1) / k + 1;
	for (j = 0; j < m; j++) {
		assert(j * step < sc->n);
		sc->off[j] = sc->off[j * step];
	}
	e->stride = k;
	e->n_offsets = m;
	e->offsets = sc->off;
	sc->off = NULL;
	return 0;
}

/*
 * The masked CRC of a header's 8 length bytes: the SSE4.2 instruction inline where the CPU has
 * it (crc32c() costs a call and a dispatch per header, a tenth of the scan), else crc32c().
 */
#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t len_crc_hw(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return crc32c_mask(~(uint32_t)__builtin_ia32_crc32di(0xffffffffu, v));
}
#endif

static uint32_t len_crc(const uint8_t *p, bool hw)
{
#if defined(__x86_64__)
	if (hw)
		return len_crc_hw(p);
#else
	(void)hw;
#endif
	return crc32c_mask(crc32c(p, 8));
}

static int scan_none_mem(const uint8_t *p, uint64_t size, const char *path,
			 const struct tfr_index_build_opts *o, struct scan *sc,
			 struct io_error *err)
{
	uint64_t off = 0;

	while (off < size) {
		uint64_t left = size - off, len;
		uint32_t stored, want;
		int ret;

		if (left < TFR_HEADER_LEN) {
			io_error_set(err,
				     "%s: record %llu at offset %llu: truncated header (%llu of %d "
				     "bytes)",
				     path, (unsigned long long)sc->records, (unsigned long long)off,
				     (unsigned long long)left, TFR_HEADER_LEN);
			return -EBADMSG;
		}
		len = ld64(p + off);
		stored = ld32(p + off + 8);
		want = len_crc(p + off, sc->hw);
		if (want != stored) {
			io_error_set(err,
				     "%s: record %llu at offset %llu: header CRC mismatch (stored "
				     "0x%08x, computed 0x%08x over length field %llu)",
				     path, (unsigned long long)sc->records, (unsigned long long)off,
				     stored, want, (unsigned long long)len);
			return -EBADMSG;
		}
		if (len > o->max_record_len) {
			io_error_set(err,
				     "%s: record %llu at offset %llu: length %llu "
				     "exceeds the limit of %llu bytes",
				     path, (unsigned long long)sc->records, (unsigned long long)off,
				     (unsigned long long)len,
				     (unsigned long long)o->max_record_len);
			return -EMSGSIZE;
		}
		left -= TFR_HEADER_LEN;
		if (len > left || left - len < TFR_FOOTER_LEN) {
			io_error_set(err,
				     "%s: record %llu at offset %llu: length %llu "
				     "runs past the end of the file (%llu bytes left after "
				     "the header)",
				     path, (unsigned long long)sc->records, (unsigned long long)off,
				     (unsigned long long)len, (unsigned long long)left);
			return -EBADMSG;
		}
		ret = scan_add(sc, off, len);
		if (ret) {
			io_error_set(err, "%s: out of memory", path);
			return ret;
		}
		off += REC_MIN + len;
	}
	return 0;
}

/*
 * The hop from header to header is a chain of dependent loads: one cache miss per record. To
 * have several misses in flight, a file of at least PAR_MIN_BYTES is cut into PAR_CURSORS
 * segments; each segment after the first starts at the first offset from its nominal start
 * where PAR_SYNC_HEADERS headers in a row check (length CRC, fits in the file), and the cursors
 * hop in turn, each up to the next one's start. Then the chain from offset 0 is followed
 * through the cursors: cursor i's walk must land exactly on cursor i + 1's start, which makes
 * i + 1's walk the file's own (a walk from a record boundary is determined by the bytes). Any
 * doubt (a cursor that overshoots the next start, a bad header, a segment without a start, too
 * many records to keep) falls back to the plain serial scan, which is the one that reports
 * errors: the result is always exactly the serial scan's.
 */
#define PAR_CURSORS	 16
#define PAR_MIN_BYTES	 (4u << 20)
#define PAR_SYNC_HEADERS 8
#define PAR_PREFETCH	 1

struct cursor {
	uint64_t start, stop, pos; /* pos: the next header */
	uint64_t *off;
	uint64_t n, alloc;
	uint64_t payload;
	bool bad; /* a header that does not check, or out of memory */
};

/* Whether a header at off checks and its record fits; *ret_next the header after it. */
static bool header_ok(const uint8_t *p, uint64_t size, uint64_t off, uint64_t max_len, bool hw,
		      uint64_t *ret_len)
{
	uint64_t len;

	if (size - off < TFR_HEADER_LEN)
		return false;
	len = ld64(p + off);
	/* the length first: it rejects nearly every offset of random bytes without a CRC */
	if (len > max_len || len > size - off - REC_MIN ||
	    len_crc(p + off, hw) != ld32(p + off + 8))
		return false;
	*ret_len = len;
	return true;
}

/* The first offset in [from, to) where PAR_SYNC_HEADERS headers in a row check (or reach EOF). */
static bool find_sync(const uint8_t *p, uint64_t size, uint64_t from, uint64_t to, uint64_t max_len,
		      bool hw, uint64_t *ret_off)
{
	for (uint64_t q = from; q < to; q++) {
		uint64_t at = q, len;
		int k;

		for (k = 0; k < PAR_SYNC_HEADERS && at < size; k++) {
			if (!header_ok(p, size, at, max_len, hw, &len))
				break;
			at += REC_MIN + len;
		}
		if (k == PAR_SYNC_HEADERS || (at == size && k > 0)) {
			*ret_off = q;
			return true;
		}
	}
	return false;
}

static bool cursor_push(struct cursor *c, uint64_t off)
{
	if (c->n == c->alloc) {
		uint64_t a = c->alloc ? c->alloc * 2 : 4096;
		uint64_t *q = realloc(c->off, (size_t)a * sizeof(*q));

		if (!q)
			return false;
		c->off = q;
		c->alloc = a;
	}
	c->off[c->n++] = off;
	return true;
}

/* 0 with sc filled, 1 when the serial scan must decide, -ENOMEM. */
static int scan_none_par(const uint8_t *p, uint64_t size, const struct tfr_index_build_opts *o,
			 struct scan *sc)
{
	struct cursor cur[PAR_CURSORS];
	uint64_t total = 0;
	int n = 0, active, ret = 1, i;

	memset(cur, 0, sizeof(cur));
	for (i = 0; i < PAR_CURSORS; i++) {
		uint64_t from = size / PAR_CURSORS * (uint64_t)i, to = from + size / PAR_CURSORS;
		uint64_t q = 0;

		if (i > 0 && !find_sync(p, size, from, to, o->max_record_len, sc->hw, &q))
			continue; /* the cursor before goes on through this segment */
		cur[n].start = cur[n].pos = q;
		if (n > 0)
			cur[n - 1].stop = q;
		n++;
	}
	cur[n - 1].stop = size;
	/* hop in turn: each step's load is independent of the other cursors' */
	do {
		active = 0;
		for (i = 0; i < n; i++) {
			struct cursor *c = &cur[i];
			uint64_t len;

			if (c->bad || c->pos >= c->stop)
				continue;
			if (total >= o->scan_cap ||
			    !header_ok(p, size, c->pos, o->max_record_len, sc->hw, &len) ||
			    !cursor_push(c, c->pos)) {
				c->bad = true;
				continue;
			}
			total++;
			c->payload += len;
			c->pos += REC_MIN + len;
#if PAR_PREFETCH
			if (c->pos < size)
				__builtin_prefetch(p + c->pos);
#endif
			active++;
		}
	} while (active);
	/* stitch: every walk must end exactly where the next one starts */
	for (i = 0; i < n; i++) {
		if (cur[i].bad || cur[i].pos != cur[i].stop)
			goto out; /* (more than scan_cap records: the serial scan bounds memory) */
	}
	for (i = 0; i < n; i++) {
		for (uint64_t j = 0; j < cur[i].n; j++) {
			uint64_t next = j + 1 < cur[i].n ? cur[i].off[j + 1] : cur[i].pos;

			if (scan_add(sc, cur[i].off[j], next - cur[i].off[j] - REC_MIN)) {
				ret = -ENOMEM;
				goto out;
			}
		}
	}
	ret = 0;
out:
	for (i = 0; i < n; i++)
		free(cur[i].off);
	return ret;
}

static int scan_none(int fd, uint64_t size, const char *path, const struct tfr_index_build_opts *o,
		     struct scan *sc, struct io_error *err)
{
	void *map;
	int ret;

	if (size == 0)
		return 0;
	if (size > SIZE_MAX) {
		io_error_set(err, "%s: too large to map (%llu bytes)", path,
			     (unsigned long long)size);
		return -EFBIG;
	}
	map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED) {
		ret = -errno;
		io_error_set(err, "%s: mmap: %s", path, strerror(-ret));
		return ret;
	}
	(void)madvise(map, (size_t)size, MADV_SEQUENTIAL);
	ret = size >= PAR_MIN_BYTES && !o->serial ? scan_none_par(map, size, o, sc) : 1;
	if (ret == 1) {
		/* from the start again: the serial scan decides, and names what is wrong */
		sc->n = sc->records = sc->payload = 0;
		sc->sample = 1;
		ret = scan_none_mem(map, size, path, o, sc, err);
	} else if (ret) {
		io_error_set(err, "%s: out of memory", path);
	}
	munmap(map, (size_t)size);
	return ret;
}

static int scan_compressed(int fd, const char *path, const struct tfr_index_build_opts *o,
			   struct scan *sc, uint64_t *ret_stream, struct io_error *err)
{
	struct tfr_reader_opts ro;
	struct tfr_reader *r;
	struct tfr_record rec;
	uint64_t pos = 0, stream = 0;
	bool eof = false;
	uint8_t *buf;
	int ret;

	tfr_reader_opts_init(&ro);
	ro.path = path;
	ro.compression = o->compression;
	ro.max_record_len = o->max_record_len;
	ro.verify_crc = true;
	ro.defer_data_crc = true; /* header CRCs only: the payloads are not the index's business */
	buf = malloc(CHUNK);
	r = tfr_reader_create(&ro);
	if (!buf || !r) {
		ret = -ENOMEM;
		io_error_set(err, "%s: out of memory", path);
		goto out;
	}
	for (;;) {
		ret = tfr_reader_next(r, &rec, err);
		if (ret == TFR_RECORD) {
			ret = scan_add(sc, rec.offset, rec.len);
			if (ret) {
				io_error_set(err, "%s: out of memory", path);
				goto out;
			}
			stream = rec.offset + REC_MIN + rec.len;
		} else if (ret == TFR_NEED_INPUT) {
			ssize_t n;

			if (eof) { /* the reader asks for more after finish: its bug */
				assert(!"tfr_reader wants input after finish");
				ret = -EIO;
				io_error_set(err, "%s: the reader wants input after the end", path);
				goto out;
			}
			n = pread(fd, buf, CHUNK, (off_t)pos);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				ret = -errno;
				io_error_set(err, "%s: read at %llu: %s", path,
					     (unsigned long long)pos, strerror(-ret));
				goto out;
			}
			if (n == 0) {
				eof = true;
				tfr_reader_finish(r);
			} else {
				pos += (uint64_t)n;
				tfr_reader_feed(r, buf, (size_t)n);
			}
		} else if (ret == TFR_END) {
			ret = 0;
			break;
		} else {
			goto out; /* the reader's message */
		}
	}
	*ret_stream = stream;
out:
	tfr_reader_destroy(r);
	free(buf);
	return ret;
}

static const char *base_of(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

int tfr_index_build_fd(int fd, const char *path, const struct tfr_index_build_opts *opts,
		       struct tfr_index_entry **ret_e, struct io_error *err)
{
	struct tfr_index_build_opts o;
	struct scan sc = { 0 };
	struct tfr_index_entry *e;
	struct stat st, st2;
	uint64_t stream = 0;
	int ret;

	if (opts) {
		assert(opts->size == sizeof(*opts));
		o = *opts;
	} else {
		tfr_index_build_opts_init(&o);
	}
	if (o.max_offsets < 1)
		o.max_offsets = 1;
	if (o.scan_cap < 2)
		o.scan_cap = 2;
	if (o.compression > TFR_COMPRESSION_ZLIB) {
		io_error_set(err, "%s: unknown compression %d", path, (int)o.compression);
		return -EINVAL;
	}
	if (!*base_of(path) || strlen(base_of(path)) > NAME_MAX_IX) {
		io_error_set(err, "%s: not a file name", path);
		return -EINVAL;
	}
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		io_error_set(err, "%s: fstat: %s", path, strerror(-ret));
		return ret;
	}
	if (!S_ISREG(st.st_mode)) {
		io_error_set(err, "%s: not a regular file", path);
		return -EINVAL;
	}
	e = calloc(1, sizeof(*e));
	if (e)
		e->name = strdup(base_of(path));
	if (!e || !e->name) {
		tfr_index_entry_destroy(e);
		io_error_set(err, "%s: out of memory", path);
		return -ENOMEM;
	}
	sc.cap = o.scan_cap;
	sc.sample = 1;
	sc.hw = crc32c_hw_available();
	if (o.compression == TFR_COMPRESSION_NONE) {
		ret = scan_none(fd, (uint64_t)st.st_size, path, &o, &sc, err);
		stream = (uint64_t)st.st_size;
	} else {
		ret = scan_compressed(fd, path, &o, &sc, &stream, err);
	}
	if (ret)
		goto fail;
	/* a file that changed under the scan has no trustworthy entry */
	if (fstat(fd, &st2) < 0) {
		ret = -errno;
		io_error_set(err, "%s: fstat: %s", path, strerror(-ret));
		goto fail;
	}
	if (st2.st_size != st.st_size || ts_ns(&st2.st_mtim) != ts_ns(&st.st_mtim) ||
	    ts_ns(&st2.st_ctim) != ts_ns(&st.st_ctim) || st2.st_ino != st.st_ino) {
		ret = -EAGAIN;
		io_error_set(err, "%s: the file changed while it was being indexed", path);
		goto fail;
	}
	e->size = (uint64_t)st.st_size;
	e->mtime_ns = ts_ns(&st.st_mtim);
	e->ctime_ns = ts_ns(&st.st_ctim);
	e->ino = (uint64_t)st.st_ino;
	e->compression = o.compression;
	e->stream_bytes = stream;
	scan_finish(&sc, o.max_offsets, e);
	free(sc.off);
	*ret_e = e;
	return 0;
fail:
	free(sc.off);
	tfr_index_entry_destroy(e);
	return ret;
}

/* ---- writing ---------------------------------------------------------------------------- */

static int name_cmp(const void *pa, const void *pb)
{
	const struct tfr_index_entry *a = *(const struct tfr_index_entry *const *)pa;
	const struct tfr_index_entry *b = *(const struct tfr_index_entry *const *)pb;

	return strcmp(a->name, b->name);
}

static bool name_ok(const char *s, size_t len)
{
	return len > 0 && len <= NAME_MAX_IX && !memchr(s, '/', len) && strcmp(s, ".") &&
	       strcmp(s, "..");
}

static uint64_t entry_len(const struct tfr_index_entry *e)
{
	return ENT_FIXED + strlen(e->name) + 8 * e->n_offsets + CRC_LEN;
}

static int write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* One entry's bytes into buf (entry_len(e) of them). */
static void entry_serialize(const struct tfr_index_entry *e, uint8_t *buf)
{
	size_t nl = strlen(e->name), at;

	st32(buf, (uint32_t)nl);
	st32(buf + 4, (uint32_t)e->compression);
	st64(buf + 8, e->size);
	st64(buf + 16, (uint64_t)e->mtime_ns);
	st64(buf + 24, (uint64_t)e->ctime_ns);
	st64(buf + 32, e->ino);
	st64(buf + 40, e->records);
	st64(buf + 48, e->payload_bytes);
	st64(buf + 56, e->stream_bytes);
	st64(buf + 64, e->stride);
	st64(buf + 72, e->n_offsets);
	memcpy(buf + ENT_FIXED, e->name, nl);
	at = ENT_FIXED + nl;
	for (uint64_t i = 0; i < e->n_offsets; i++, at += 8)
		st64(buf + at, e->offsets[i]);
	st32(buf + at, crc32c(buf, at));
}

int tfr_index_write(const char *index_path, const char *data_dir,
		    const struct tfr_index_entry *const *entries, size_t n, struct io_error *err)
{
	const struct tfr_index_entry **sorted = NULL;
	size_t dir_len = strlen(data_dir), i, hlen, at;
	uint8_t *hdr = NULL, *ebuf = NULL;
	size_t ebuf_cap = 0;
	uint64_t off;
	char *tmp = NULL;
	int fd = -1, ret;

	sorted = malloc((n ? n : 1) * sizeof(*sorted));
	tmp = malloc(strlen(index_path) + 16);
	if (!sorted || !tmp) {
		ret = -ENOMEM;
		io_error_set(err, "%s: out of memory", index_path);
		goto out;
	}
	tmp[0] = '\0';
	if (n)
		memcpy(sorted, entries, n * sizeof(*sorted));
	qsort(sorted, n, sizeof(*sorted), name_cmp);
	if (dir_len > UINT32_MAX / 2) {
		ret = -EINVAL;
		io_error_set(err, "%s: data directory name too long", index_path);
		goto out;
	}
	hlen = HDR_FIXED + dir_len + CRC_LEN;
	for (i = 0; i < n; i++) {
		const struct tfr_index_entry *e = sorted[i];
		size_t nl = strlen(e->name);

		if (!name_ok(e->name, nl)) {
			ret = -EINVAL;
			io_error_set(err, "%s: entry %zu: bad file name '%s'", index_path, i,
				     e->name);
			goto out;
		}
		if (i && !strcmp(e->name, sorted[i - 1]->name)) {
			ret = -EINVAL;
			io_error_set(err, "%s: two entries for '%s'", index_path, e->name);
			goto out;
		}
		if (e->stride < 1 ||
		    e->n_offsets != (e->records ? (e->records - 1) / e->stride + 1 : 0)) {
			ret = -EINVAL;
			io_error_set(err, "%s: entry '%s': offsets do not match the stride",
				     index_path, e->name);
			goto out;
		}
		hlen += ROW_FIXED + nl;
	}
	hdr = malloc(hlen);
	if (!hdr) {
		ret = -ENOMEM;
		io_error_set(err, "%s: out of memory", index_path);
		goto out;
	}
	memcpy(hdr, TFR_INDEX_MAGIC, 8);
	st32(hdr + 8, TFR_INDEX_VERSION);
	st32(hdr + 12, (uint32_t)hlen);
	st64(hdr + 16, n);
	st32(hdr + 24, (uint32_t)dir_len);
	memcpy(hdr + HDR_FIXED, data_dir, dir_len);
	at = HDR_FIXED + dir_len;
	off = hlen;
	for (i = 0; i < n; i++) {
		size_t nl = strlen(sorted[i]->name);
		uint64_t el = entry_len(sorted[i]);

		st64(hdr + at, off);
		st64(hdr + at + 8, el);
		st32(hdr + at + 16, (uint32_t)nl);
		memcpy(hdr + at + ROW_FIXED, sorted[i]->name, nl);
		at += ROW_FIXED + nl;
		off += el;
	}
	st32(hdr + at, crc32c(hdr, at));

	snprintf(tmp, strlen(index_path) + 16, "%s.tmp.XXXXXX", index_path);
	fd = mkstemp(tmp);
	if (fd < 0) {
		ret = -errno;
		io_error_set(err, "%s: creating a temporary file: %s", index_path, strerror(-ret));
		tmp[0] = '\0';
		goto out;
	}
	if (fchmod(fd, 0644) < 0) {
		ret = -errno;
		io_error_set(err, "%s: chmod: %s", tmp, strerror(-ret));
		goto out;
	}
	ret = write_all(fd, hdr, hlen);
	for (i = 0; !ret && i < n; i++) {
		uint64_t el = entry_len(sorted[i]);

		if (el > SIZE_MAX) {
			ret = -EFBIG;
			break;
		}
		if (el > ebuf_cap) {
			uint8_t *p = realloc(ebuf, (size_t)el);

			if (!p) {
				ret = -ENOMEM;
				break;
			}
			ebuf = p;
			ebuf_cap = (size_t)el;
		}
		entry_serialize(sorted[i], ebuf);
		ret = write_all(fd, ebuf, (size_t)el);
	}
	if (!ret && fsync(fd) < 0)
		ret = -errno;
	if (ret) {
		io_error_set(err, "%s: writing: %s", tmp, strerror(-ret));
		goto out;
	}
	if (close(fd) < 0) {
		fd = -1;
		ret = -errno;
		io_error_set(err, "%s: close: %s", tmp, strerror(-ret));
		goto out;
	}
	fd = -1;
	if (rename(tmp, index_path) < 0) {
		ret = -errno;
		io_error_set(err, "%s: rename from %s: %s", index_path, tmp, strerror(-ret));
		goto out;
	}
	tmp[0] = '\0';
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	if (tmp && tmp[0] && ret)
		unlink(tmp);
	free(tmp);
	free(ebuf);
	free(hdr);
	free(sorted);
	return ret;
}

/* ---- reading ---------------------------------------------------------------------------- */

struct row {
	char *name;
	struct tfr_index_entry *e; /* NULL when damaged */
	char *why;		   /* what is wrong with a damaged entry */
	size_t pos;		   /* position in the file's table, for messages */
};

struct tfr_index {
	char *path; /* for messages */
	char *data_dir;
	size_t n;
	struct row *rows; /* name order */
};

void tfr_index_destroy(struct tfr_index *ix)
{
	if (!ix)
		return;
	for (size_t i = 0; i < ix->n; i++) {
		free(ix->rows[i].name);
		free(ix->rows[i].why);
		tfr_index_entry_destroy(ix->rows[i].e);
	}
	free(ix->rows);
	free(ix->data_dir);
	free(ix->path);
	free(ix);
}

/* Parse entry bytes p[0, len) for the row's name; 0, -EBADMSG with *why, -ENOMEM. */
static int entry_parse(const uint8_t *p, uint64_t len, const char *name,
		       struct tfr_index_entry **ret, char *why, size_t why_cap)
{
	struct tfr_index_entry *e;
	uint64_t nl = strlen(name), want_n, at, prev = 0;
	uint32_t stored, crc;

	if (len < ENT_FIXED + CRC_LEN) {
		snprintf(why, why_cap, "truncated (%llu bytes)", (unsigned long long)len);
		return -EBADMSG;
	}
	stored = ld32(p + len - CRC_LEN);
	crc = crc32c(p, (size_t)(len - CRC_LEN));
	if (stored != crc) {
		snprintf(why, why_cap,
			 "CRC mismatch (stored 0x%08x, computed 0x%08x over %llu bytes)", stored,
			 crc, (unsigned long long)(len - CRC_LEN));
		return -EBADMSG;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->compression = (enum tfr_compression)ld32(p + 4);
	e->size = ld64(p + 8);
	e->mtime_ns = (int64_t)ld64(p + 16);
	e->ctime_ns = (int64_t)ld64(p + 24);
	e->ino = ld64(p + 32);
	e->records = ld64(p + 40);
	e->payload_bytes = ld64(p + 48);
	e->stream_bytes = ld64(p + 56);
	e->stride = ld64(p + 64);
	e->n_offsets = ld64(p + 72);
	if (ld32(p) != nl || len - ENT_FIXED - CRC_LEN < nl || memcmp(p + ENT_FIXED, name, nl)) {
		snprintf(why, why_cap, "holds another file's name");
		goto bad;
	}
	if (ld32(p + 4) > TFR_COMPRESSION_ZLIB) {
		snprintf(why, why_cap, "unknown compression %u", ld32(p + 4));
		goto bad;
	}
	if (e->stride < 1) {
		snprintf(why, why_cap, "stride 0");
		goto bad;
	}
	want_n = e->records ? (e->records - 1) / e->stride + 1 : 0;
	if (e->n_offsets != want_n) {
		snprintf(why, why_cap, "%llu offsets for %llu records at stride %llu",
			 (unsigned long long)e->n_offsets, (unsigned long long)e->records,
			 (unsigned long long)e->stride);
		goto bad;
	}
	if (e->n_offsets > (len - ENT_FIXED - CRC_LEN - nl) / 8 ||
	    len != ENT_FIXED + nl + 8 * e->n_offsets + CRC_LEN) {
		snprintf(why, why_cap, "length %llu does not hold %llu offsets",
			 (unsigned long long)len, (unsigned long long)e->n_offsets);
		goto bad;
	}
	if (e->records > e->stream_bytes / REC_MIN ||
	    e->payload_bytes != e->stream_bytes - REC_MIN * e->records) {
		snprintf(why, why_cap,
			 "%llu records of %llu payload bytes do not make a stream of %llu bytes",
			 (unsigned long long)e->records, (unsigned long long)e->payload_bytes,
			 (unsigned long long)e->stream_bytes);
		goto bad;
	}
	if (e->compression == TFR_COMPRESSION_NONE && e->stream_bytes != e->size) {
		snprintf(why, why_cap, "stream of %llu bytes in an uncompressed file of %llu",
			 (unsigned long long)e->stream_bytes, (unsigned long long)e->size);
		goto bad;
	}
	e->name = strdup(name);
	if (e->n_offsets) {
		e->offsets = malloc((size_t)e->n_offsets * sizeof(*e->offsets));
		if (!e->offsets) {
			tfr_index_entry_destroy(e);
			return -ENOMEM;
		}
	}
	if (!e->name) {
		tfr_index_entry_destroy(e);
		return -ENOMEM;
	}
	at = ENT_FIXED + nl;
	for (uint64_t i = 0; i < e->n_offsets; i++, at += 8) {
		uint64_t o = ld64(p + at);
		/* records i * k .. records - 1 start at o (i * k < records: n_offsets is checked) */
		uint64_t after = e->records - i * e->stride;

		/*
		 * offsets[0] = 0; each next at least stride records of 16 bytes further on; the
		 * records from i * k on, 16 bytes at least each, all inside the stream
		 */
		if ((i == 0 && o != 0) || (i > 0 && (o < prev || o - prev < REC_MIN * e->stride)) ||
		    o > e->stream_bytes || after > (e->stream_bytes - o) / REC_MIN) {
			snprintf(why, why_cap, "offset %llu (%llu) out of order or past the stream",
				 (unsigned long long)i, (unsigned long long)o);
			goto bad;
		}
		e->offsets[i] = o;
		prev = o;
	}
	*ret = e;
	return 0;
bad:
	tfr_index_entry_destroy(e);
	return -EBADMSG;
}

static int row_cmp(const void *pa, const void *pb)
{
	return strcmp(((const struct row *)pa)->name, ((const struct row *)pb)->name);
}

int tfr_index_parse(const void *buf, size_t len, const char *name, struct tfr_index **ret_ix,
		    struct io_error *err)
{
	const uint8_t *p = buf;
	struct tfr_index *ix;
	uint32_t hlen, dlen, stored, crc;
	uint64_t n, at;
	char why[200];
	int ret;

	if (!name)
		name = "<index>";
	if (len < HDR_FIXED + CRC_LEN) {
		io_error_set(err, "%s: truncated index header (%zu bytes)", name, len);
		return -EBADMSG;
	}
	if (memcmp(p, TFR_INDEX_MAGIC, 8)) {
		io_error_set(err, "%s: not a sluice record index (bad magic)", name);
		return -EBADMSG;
	}
	if (ld32(p + 8) != TFR_INDEX_VERSION) {
		io_error_set(err, "%s: index version %u (this program reads %u)", name, ld32(p + 8),
			     TFR_INDEX_VERSION);
		return -EBADMSG;
	}
	hlen = ld32(p + 12);
	if (hlen < HDR_FIXED + CRC_LEN || hlen > len) {
		io_error_set(err, "%s: truncated index header (header of %u bytes, file of %zu)",
			     name, hlen, len);
		return -EBADMSG;
	}
	stored = ld32(p + hlen - CRC_LEN);
	crc = crc32c(p, hlen - CRC_LEN);
	if (stored != crc) {
		io_error_set(err, "%s: index header CRC mismatch (stored 0x%08x, computed 0x%08x)",
			     name, stored, crc);
		return -EBADMSG;
	}
	n = ld64(p + 16);
	dlen = ld32(p + 24);
	if (dlen > hlen - HDR_FIXED - CRC_LEN ||
	    n > (hlen - HDR_FIXED - CRC_LEN - dlen) / ROW_FIXED) {
		io_error_set(err,
			     "%s: index header: %llu entries and a directory of %u bytes do "
			     "not fit in %u bytes",
			     name, (unsigned long long)n, dlen, hlen);
		return -EBADMSG;
	}
	ix = calloc(1, sizeof(*ix));
	if (!ix)
		goto nomem;
	ix->path = strdup(name);
	ix->data_dir = strndup((const char *)p + HDR_FIXED, dlen);
	ix->rows = calloc(n ? n : 1, sizeof(*ix->rows));
	if (!ix->path || !ix->data_dir || !ix->rows)
		goto nomem;
	if (memchr(p + HDR_FIXED, '\0', dlen)) {
		io_error_set(err, "%s: index header: a NUL in the directory name", name);
		ret = -EBADMSG;
		goto fail;
	}
	at = HDR_FIXED + dlen;
	for (uint64_t i = 0; i < n; i++) {
		struct row *r = &ix->rows[i];
		uint64_t eoff, elen;
		uint32_t nl;

		if (hlen - CRC_LEN - at < ROW_FIXED)
			goto bad_table;
		eoff = ld64(p + at);
		elen = ld64(p + at + 8);
		nl = ld32(p + at + 16);
		at += ROW_FIXED;
		if (nl > hlen - CRC_LEN - at)
			goto bad_table;
		r->name = strndup((const char *)p + at, nl);
		if (!r->name)
			goto nomem;
		ix->n = i + 1;
		r->pos = i;
		if (strlen(r->name) != nl || !name_ok(r->name, nl))
			goto bad_table;
		at += nl;
		why[0] = '\0';
		if (eoff < hlen || eoff > len) {
			snprintf(why, sizeof(why), "offset %llu outside the file of %zu bytes",
				 (unsigned long long)eoff, len);
			ret = -EBADMSG;
		} else if (elen > len - eoff) {
			snprintf(why, sizeof(why),
				 "truncated (%llu bytes at offset %llu, the file ends at %zu)",
				 (unsigned long long)elen, (unsigned long long)eoff, len);
			ret = -EBADMSG;
		} else {
			ret = entry_parse(p + eoff, elen, r->name, &r->e, why, sizeof(why));
		}
		if (ret == -ENOMEM)
			goto nomem;
		if (ret) {
			r->why = strdup(why);
			if (!r->why)
				goto nomem;
		}
	}
	if (at != hlen - CRC_LEN)
		goto bad_table;
	qsort(ix->rows, ix->n, sizeof(*ix->rows), row_cmp);
	for (size_t i = 1; i < ix->n; i++) {
		if (!strcmp(ix->rows[i].name, ix->rows[i - 1].name)) {
			io_error_set(err, "%s: index header: two entries for '%s'", name,
				     ix->rows[i].name);
			ret = -EBADMSG;
			goto fail;
		}
	}
	*ret_ix = ix;
	return 0;
bad_table:
	io_error_set(err, "%s: index header: bad entry table at byte %llu", name,
		     (unsigned long long)at);
	ret = -EBADMSG;
	goto fail;
nomem:
	io_error_set(err, "%s: out of memory", name);
	ret = -ENOMEM;
fail:
	tfr_index_destroy(ix);
	return ret;
}

int tfr_index_open(const char *index_path, struct tfr_index **ret_ix, struct io_error *err)
{
	char *buf;
	size_t len;
	int ret;

	/* the offsets of 1 << 20 records per file, for many files: allow a large file */
	ret = io_file_read(index_path, (size_t)1 << 34, &buf, &len, err);
	if (ret)
		return ret;
	ret = tfr_index_parse(buf, len, index_path, ret_ix, err);
	free(buf);
	return ret;
}

const char *tfr_index_data_dir(const struct tfr_index *ix)
{
	return ix->data_dir;
}

size_t tfr_index_count(const struct tfr_index *ix)
{
	return ix->n;
}

static int row_result(const struct tfr_index *ix, const struct row *r,
		      const struct tfr_index_entry **ret_e, struct io_error *err)
{
	if (!r->e) {
		io_error_set(err, "%s: entry %zu ('%s') is damaged: %s", ix->path, r->pos, r->name,
			     r->why ? r->why : "?");
		return -EBADMSG;
	}
	*ret_e = r->e;
	return 0;
}

int tfr_index_entry_at(const struct tfr_index *ix, size_t i, const char **ret_name,
		       const struct tfr_index_entry **ret_e, struct io_error *err)
{
	if (i >= ix->n) {
		io_error_set(err, "%s: no entry %zu (%zu entries)", ix->path, i, ix->n);
		return -ERANGE;
	}
	*ret_name = ix->rows[i].name;
	return row_result(ix, &ix->rows[i], ret_e, err);
}

int tfr_index_find(const struct tfr_index *ix, const char *name,
		   const struct tfr_index_entry **ret_e, struct io_error *err)
{
	struct row key = { .name = (char *)name };
	const struct row *r = bsearch(&key, ix->rows, ix->n, sizeof(*ix->rows), row_cmp);

	if (!r) {
		io_error_set(err, "%s: no entry for '%s'", ix->path, name);
		return -ENOENT;
	}
	return row_result(ix, r, ret_e, err);
}

int tfr_index_entry_check(const struct tfr_index_entry *e, const struct stat *st,
			  struct io_error *err)
{
	const char *what;
	long long was, now;

	if ((uint64_t)st->st_size != e->size) {
		what = "size";
		was = (long long)e->size;
		now = (long long)st->st_size;
	} else if (ts_ns(&st->st_mtim) != e->mtime_ns) {
		what = "mtime_ns";
		was = e->mtime_ns;
		now = ts_ns(&st->st_mtim);
	} else if (ts_ns(&st->st_ctim) != e->ctime_ns) {
		what = "ctime_ns";
		was = e->ctime_ns;
		now = ts_ns(&st->st_ctim);
	} else if ((uint64_t)st->st_ino != e->ino) {
		what = "ino";
		was = (long long)e->ino;
		now = (long long)st->st_ino;
	} else {
		return 0;
	}
	io_error_set(err, "%s: stale index entry: %s changed (indexed %lld, now %lld)", e->name,
		     what, was, now);
	return -ESTALE;
}

int tfr_index_lookup(const struct tfr_index *ix, const char *name, const struct stat *st,
		     const struct tfr_index_entry **ret_e, struct io_error *err)
{
	const struct tfr_index_entry *e;
	int ret = tfr_index_find(ix, name, &e, err);

	assert(st);
	if (ret)
		return ret;
	ret = tfr_index_entry_check(e, st, err);
	if (ret) {
		io_error_prefix(err, "%s: ", ix->path);
		return ret;
	}
	*ret_e = e;
	return 0;
}

int tfr_index_update(const char *index_path, const char *data_dir,
		     const struct tfr_index_entry *const *entries, size_t n, size_t *ret_kept,
		     struct io_error *err)
{
	const struct tfr_index_entry **all = NULL;
	struct tfr_index *old = NULL;
	size_t n_all = 0, kept = 0;
	int ret, dfd = -1;

	ret = tfr_index_open(index_path, &old, err);
	if (ret == -ENOENT || ret == -EBADMSG)
		old = NULL; /* nothing to keep */
	else if (ret)
		return ret;
	all = malloc((n + (old ? old->n : 0) + 1) * sizeof(*all));
	if (!all) {
		ret = -ENOMEM;
		io_error_set(err, "%s: out of memory", index_path);
		goto out;
	}
	if (n)
		memcpy(all, entries, n * sizeof(*all));
	qsort(all, n, sizeof(*all), name_cmp); /* for the bsearch below */
	n_all = n;
	if (old && old->n) {
		dfd = open(data_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0) {
			ret = -errno;
			io_error_set(err, "%s: %s", data_dir, strerror(-ret));
			goto out;
		}
	}
	for (size_t i = 0; old && i < old->n; i++) {
		const struct row *r = &old->rows[i];
		struct tfr_index_entry key;
		const struct tfr_index_entry *keyp = &key;
		struct stat st;

		if (!r->e)
			continue;
		key.name = r->name;
		if (bsearch(&keyp, all, n, sizeof(*all), name_cmp))
			continue;
		if (fstatat(dfd, r->name, &st, 0) < 0 || !S_ISREG(st.st_mode) ||
		    tfr_index_entry_check(r->e, &st, NULL))
			continue;
		all[n_all++] = r->e;
		kept++;
	}
	ret = tfr_index_write(index_path, data_dir, all, n_all, err);
	if (!ret && ret_kept)
		*ret_kept = kept;
out:
	if (dfd >= 0)
		close(dfd);
	free(all);
	tfr_index_destroy(old);
	return ret;
}

int tfr_index_entry_offset(const struct tfr_index_entry *e, uint64_t record, uint64_t *ret_offset,
			   uint64_t *ret_skip)
{
	uint64_t i;

	if (record >= e->records)
		return -ERANGE;
	i = record / e->stride;
	assert(i < e->n_offsets);
	*ret_offset = e->offsets[i];
	*ret_skip = record - i * e->stride;
	return 0;
}
