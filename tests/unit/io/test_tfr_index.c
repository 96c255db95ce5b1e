/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for io/tfr_index.c: counts and offsets against the reader, damage, staleness, merging. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/unit/skip.h"

#include "io/tfr.h"
#include "io/tfr_index.h"

/* ---- helpers ---------------------------------------------------------------------------- */

static char tmpdir[64];

static int setup_dir(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/sluice-tfridx-XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
	return system(cmd);
}

static size_t payload_len(unsigned i, unsigned seed)
{
	static const size_t lens[] = { 0, 1, 11, 12, 16, 100, 4095, 4096, 70000, 3 };

	return i < 10 ? lens[(i + seed) % 10] : (size_t)((i * 2654435761u + seed) % 3000);
}

static char *path_of(const char *name)
{
	char *p = malloc(256);

	assert_non_null(p);
	snprintf(p, 256, "%s/%s", tmpdir, name);
	return p;
}

/* n records into tmpdir/name; seed varies the lengths and bytes. Returns the path. */
static char *write_file(const char *name, enum tfr_compression c, unsigned n, unsigned seed)
{
	char *path = path_of(name);
	struct tfr_writer *w;
	uint8_t *buf = malloc(70000);

	assert_non_null(buf);
	assert_int_equal(tfr_writer_open(path, c, -1, &w), 0);
	for (unsigned i = 0; i < n; i++) {
		size_t len = payload_len(i, seed);

		for (size_t k = 0; k < len; k++)
			buf[k] = (uint8_t)(i * 31 + k * 7 + seed);
		assert_int_equal(tfr_writer_write(w, buf, len), 0);
	}
	assert_int_equal(tfr_writer_close(w), 0);
	free(buf);
	return path;
}

static uint8_t *read_all(const char *path, size_t *ret_len)
{
	struct stat st;
	int fd = open(path, O_RDONLY);
	uint8_t *b;

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	b = malloc((size_t)st.st_size + 1);
	assert_non_null(b);
	assert_int_equal(read(fd, b, (size_t)st.st_size), st.st_size);
	close(fd);
	*ret_len = (size_t)st.st_size;
	return b;
}

static void write_all(const char *path, const uint8_t *b, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, b, len), (ssize_t)len);
	close(fd);
}

/* What the reader says: every record's offset (the caller frees), count, payload bytes. */
struct truth {
	uint64_t *off;
	uint64_t n, payload;
};

static struct truth reader_truth(const char *path, enum tfr_compression c)
{
	struct tfr_reader_opts o;
	struct tfr_reader *r;
	struct tfr_record rec;
	struct io_error err;
	struct truth t = { 0 };
	size_t len;
	uint8_t *b = read_all(path, &len);
	bool fed = false;

	tfr_reader_opts_init(&o);
	o.compression = c;
	r = tfr_reader_create(&o);
	assert_non_null(r);
	t.off = malloc(sizeof(uint64_t) * 100000);
	assert_non_null(t.off);
	for (;;) {
		int rc = tfr_reader_next(r, &rec, &err);

		if (rc == TFR_NEED_INPUT) {
			if (fed) {
				tfr_reader_finish(r);
			} else {
				tfr_reader_feed(r, b, len);
				fed = true;
			}
			continue;
		}
		if (rc == TFR_END)
			break;
		assert_int_equal(rc, TFR_RECORD);
		assert_true(t.n < 100000);
		t.off[t.n++] = rec.offset;
		t.payload += rec.len;
	}
	tfr_reader_destroy(r);
	free(b);
	return t;
}

static int build(const char *path, const struct tfr_index_build_opts *o,
		 struct tfr_index_entry **ret, struct io_error *err)
{
	int fd = open(path, O_RDONLY), ret_;

	assert_true(fd >= 0);
	ret_ = tfr_index_build_fd(fd, path, o, ret, err);
	close(fd);
	return ret_;
}

static void stat_of(const char *path, struct stat *st)
{
	assert_int_equal(stat(path, st), 0);
}

/* The entry against the reader: count, payload, every indexed offset, every record's lookup. */
static void check_against_reader(const struct tfr_index_entry *e, const char *path,
				 enum tfr_compression c, uint64_t want_stride)
{
	struct truth t = reader_truth(path, c);

	assert_int_equal(e->records, t.n);
	assert_int_equal(e->payload_bytes, t.payload);
	assert_int_equal(e->stride, want_stride);
	assert_int_equal(e->compression, c);
	assert_int_equal(e->stream_bytes, 16 * t.n + t.payload);
	assert_int_equal(e->n_offsets, t.n ? (t.n - 1) / want_stride + 1 : 0);
	for (uint64_t j = 0; j < e->n_offsets; j++)
		assert_int_equal(e->offsets[j], t.off[j * want_stride]);
	for (uint64_t r = 0; r < t.n; r++) {
		uint64_t off, skip;

		assert_int_equal(tfr_index_entry_offset(e, r, &off, &skip), 0);
		assert_true(skip < want_stride);
		assert_int_equal((r - skip) % want_stride, 0);
		assert_int_equal(off, t.off[r - skip]);
	}
	{
		uint64_t off = 7, skip = 7;

		assert_int_equal(tfr_index_entry_offset(e, t.n, &off, &skip), -ERANGE);
		assert_int_equal(off, 7); /* ret_ written only on success */
	}
	free(t.off);
}

/* ---- building --------------------------------------------------------------------------- */

static void counts_k1(enum tfr_compression c, const char *name)
{
	char *path = write_file(name, c, 57, 1);
	struct tfr_index_entry *e;
	struct io_error err;
	struct tfr_index_build_opts o;
	struct stat st;

	tfr_index_build_opts_init(&o);
	o.compression = c;
	assert_int_equal(build(path, &o, &e, &err), 0);
	check_against_reader(e, path, c, 1);
	stat_of(path, &st);
	assert_int_equal(e->size, (uint64_t)st.st_size);
	assert_int_equal(e->ino, (uint64_t)st.st_ino);
	assert_string_equal(e->name, name);
	tfr_index_entry_destroy(e);
	free(path);
}

static void test_counts_none(void **state)
{
	(void)state;
	counts_k1(TFR_COMPRESSION_NONE, "k1.tfrecord");
}

static void test_counts_gzip(void **state)
{
	(void)state;
	counts_k1(TFR_COMPRESSION_GZIP, "k1.tfrecord.gz");
}

static void test_counts_zlib(void **state)
{
	(void)state;
	counts_k1(TFR_COMPRESSION_ZLIB, "k1.tfrecord.zz");
}

/* max_offsets 4 over 10 records: k = 3 (offsets of 0, 3, 6, 9); 37 over 4: k = 10. */
static void test_stride(void **state)
{
	static const enum tfr_compression cs[] = { TFR_COMPRESSION_NONE, TFR_COMPRESSION_GZIP,
						   TFR_COMPRESSION_ZLIB };
	struct tfr_index_build_opts o;
	struct io_error err;

	(void)state;
	for (size_t i = 0; i < 3; i++) {
		char name[32];
		char *path;
		struct tfr_index_entry *e;

		snprintf(name, sizeof(name), "stride-%zu", i);
		path = write_file(name, cs[i], 10, 2);
		tfr_index_build_opts_init(&o);
		o.compression = cs[i];
		o.max_offsets = 4;
		assert_int_equal(build(path, &o, &e, &err), 0);
		check_against_reader(e, path, cs[i], 3);
		assert_int_equal(e->n_offsets, 4);
		tfr_index_entry_destroy(e);
		free(path);

		path = write_file(name, cs[i], 37, 3);
		assert_int_equal(build(path, &o, &e, &err), 0);
		check_against_reader(e, path, cs[i], 10);
		tfr_index_entry_destroy(e);
		free(path);
	}
}

/*
 * With a small scan_cap the scan thins its offsets (sampling stride 1, 2, 4, ...): k is then
 * the smallest multiple of the sampling stride keeping at most max_offsets offsets.
 */
static void test_stride_thinned(void **state)
{
	struct tfr_index_build_opts o;
	struct tfr_index_entry *e;
	struct io_error err;
	char *path = write_file("thin", TFR_COMPRESSION_NONE, 1000, 4);

	(void)state;
	tfr_index_build_opts_init(&o);
	o.max_offsets = 10;
	o.scan_cap = 64; /* 1000 records: sampled every 16th at the end; ceil(1000/10) = 100 */
	assert_int_equal(build(path, &o, &e, &err), 0);
	check_against_reader(e, path, TFR_COMPRESSION_NONE, 112);
	assert_true(e->n_offsets <= 10);
	tfr_index_entry_destroy(e);
	/* a cap that never fills: exact k */
	o.scan_cap = 4096;
	assert_int_equal(build(path, &o, &e, &err), 0);
	check_against_reader(e, path, TFR_COMPRESSION_NONE, 100);
	tfr_index_entry_destroy(e);
	free(path);
}

static void test_empty_file(void **state)
{
	static const enum tfr_compression cs[] = { TFR_COMPRESSION_NONE, TFR_COMPRESSION_GZIP,
						   TFR_COMPRESSION_ZLIB };
	struct tfr_index_build_opts o;
	struct io_error err;

	(void)state;
	for (size_t i = 0; i < 3; i++) {
		char *path = write_file("empty", cs[i], 0, 0);
		struct tfr_index_entry *e;
		uint64_t off, skip;

		tfr_index_build_opts_init(&o);
		o.compression = cs[i];
		assert_int_equal(build(path, &o, &e, &err), 0);
		assert_int_equal(e->records, 0);
		assert_int_equal(e->n_offsets, 0);
		assert_int_equal(e->stream_bytes, 0);
		assert_int_equal(tfr_index_entry_offset(e, 0, &off, &skip), -ERANGE);
		tfr_index_entry_destroy(e);
		free(path);
	}
}

/* Offsets of records in a file written by write_file(..., seed 5). */
static uint64_t offset_of(unsigned rec, unsigned seed)
{
	uint64_t off = 0;

	for (unsigned i = 0; i < rec; i++)
		off += 16 + payload_len(i, seed);
	return off;
}

static void test_corrupt_header(void **state)
{
	char *path = write_file("bad.tfrecord", TFR_COMPRESSION_NONE, 8, 5);
	struct tfr_index_entry *e = NULL;
	struct io_error err;
	char want[128];
	size_t len;
	uint8_t *b = read_all(path, &len);

	(void)state;
	/* record 3's length field */
	b[offset_of(3, 5) + 2] ^= 0x40;
	write_all(path, b, len);
	assert_int_equal(build(path, NULL, &e, &err), -EBADMSG);
	assert_null(e);
	snprintf(want, sizeof(want), "%s: record 3 at offset %llu: header CRC mismatch", path,
		 (unsigned long long)offset_of(3, 5));
	assert_non_null(strstr(err.msg, want));

	/* cut inside record 6's payload: the header says more than the file holds */
	b[offset_of(3, 5) + 2] ^= 0x40;
	write_all(path, b, (size_t)offset_of(6, 5) + 13);
	assert_int_equal(build(path, NULL, &e, &err), -EBADMSG);
	snprintf(want, sizeof(want), "%s: record 6 at offset %llu: length", path,
		 (unsigned long long)offset_of(6, 5));
	assert_non_null(strstr(err.msg, want));
	assert_non_null(strstr(err.msg, "runs past the end"));

	/* cut inside record 6's header */
	write_all(path, b, (size_t)offset_of(6, 5) + 5);
	assert_int_equal(build(path, NULL, &e, &err), -EBADMSG);
	snprintf(want, sizeof(want), "%s: record 6 at offset %llu: truncated header", path,
		 (unsigned long long)offset_of(6, 5));
	assert_non_null(strstr(err.msg, want));

	/* a length over the cap */
	write_all(path, b, len);
	{
		struct tfr_index_build_opts o;

		tfr_index_build_opts_init(&o);
		o.max_record_len = 50000;
		assert_int_equal(build(path, &o, &e, &err), -EMSGSIZE);
		assert_non_null(strstr(err.msg, "exceeds the limit"));
	}
	free(b);
	free(path);
}

static void test_corrupt_gzip(void **state)
{
	char *path = write_file("bad.gz", TFR_COMPRESSION_GZIP, 20, 6);
	struct tfr_index_build_opts o;
	struct tfr_index_entry *e = NULL;
	struct io_error err;
	size_t len;
	uint8_t *b = read_all(path, &len);

	(void)state;
	write_all(path, b, len / 2);
	tfr_index_build_opts_init(&o);
	o.compression = TFR_COMPRESSION_GZIP;
	assert_int_equal(build(path, &o, &e, &err), -EBADMSG);
	assert_null(e);
	assert_non_null(strstr(err.msg, path));
	free(b);
	free(path);
}

static void assert_entry_equal(const struct tfr_index_entry *a, const struct tfr_index_entry *b);

/* ---- the interleaved scan of large uncompressed files ------------------------------------ */

/*
 * n records written by gen(i, buf) -> len into tmpdir/name; returns the path. The file is
 * large enough (over 4 MiB) for the interleaved scan.
 */
typedef size_t (*gen_fn)(unsigned i, uint8_t *buf);

static char *write_gen(const char *name, unsigned n, gen_fn gen)
{
	char *path = path_of(name);
	struct tfr_writer *w;
	uint8_t *buf = malloc(1 << 20);

	assert_non_null(buf);
	assert_int_equal(tfr_writer_open(path, TFR_COMPRESSION_NONE, -1, &w), 0);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(tfr_writer_write(w, buf, gen(i, buf)), 0);
	assert_int_equal(tfr_writer_close(w), 0);
	free(buf);
	return path;
}

static size_t gen_varied(unsigned i, uint8_t *buf)
{
	size_t len = (size_t)((i * 2654435761u) % 9000);

	for (size_t k = 0; k < len; k++)
		buf[k] = (uint8_t)(i * 13 + k * 3);
	return len;
}

/* Payloads that are TFRecord streams themselves: every segment start syncs on a false chain. */
static size_t gen_nested(unsigned i, uint8_t *buf)
{
	size_t at = 0;

	for (unsigned j = 0; j < 300 + i % 97; j++) {
		size_t len = 20 + (i + j) % 50;

		tfr_frame_header(buf + at, len);
		memset(buf + at + TFR_HEADER_LEN, (int)(i + j), len);
		tfr_frame_footer(buf + at + TFR_HEADER_LEN + len, buf + at + TFR_HEADER_LEN, len);
		at += TFR_HEADER_LEN + len + TFR_FOOTER_LEN;
	}
	return at;
}

static void par_vs_serial(const char *path, uint64_t max_offsets)
{
	struct tfr_index_build_opts o;
	struct tfr_index_entry *a, *b;
	struct io_error err;
	struct stat st;

	stat_of(path, &st);
	assert_true(st.st_size >= (4 << 20));
	tfr_index_build_opts_init(&o);
	o.max_offsets = max_offsets;
	assert_int_equal(build(path, &o, &a, &err), 0);
	o.serial = true;
	assert_int_equal(build(path, &o, &b, &err), 0);
	assert_entry_equal(a, b);
	check_against_reader(a, path, TFR_COMPRESSION_NONE, a->stride);
	tfr_index_entry_destroy(a);
	tfr_index_entry_destroy(b);
}

static void test_interleaved_equals_serial(void **state)
{
	char *path = write_gen("big.tfrecord", 1500, gen_varied);

	(void)state;
	par_vs_serial(path, TFR_INDEX_MAX_OFFSETS);
	par_vs_serial(path, 7); /* k > 1 */
	free(path);
}

static void test_interleaved_false_sync(void **state)
{
	char *path = write_gen("nested.tfrecord", 400, gen_nested);

	(void)state;
	par_vs_serial(path, TFR_INDEX_MAX_OFFSETS);
	free(path);
}

/* A bad header late in a large file: the serial scan's message (global index and offset). */
static void test_interleaved_corrupt(void **state)
{
	char *path = write_gen("bigbad.tfrecord", 1500, gen_varied);
	struct tfr_index_entry *e = NULL;
	struct io_error err;
	uint64_t off = 0;
	char want[160];
	size_t len;
	uint8_t *b = read_all(path, &len);

	(void)state;
	for (unsigned i = 0; i < 1400; i++)
		off += 16 + (size_t)((i * 2654435761u) % 9000);
	b[off + 9] ^= 0x01; /* record 1400's length CRC */
	write_all(path, b, len);
	assert_int_equal(build(path, NULL, &e, &err), -EBADMSG);
	assert_null(e);
	snprintf(want, sizeof(want), "%s: record 1400 at offset %llu: header CRC mismatch", path,
		 (unsigned long long)off);
	assert_non_null(strstr(err.msg, want));
	free(b);
	free(path);
}

/* ---- the index file --------------------------------------------------------------------- */

/* Files a, b, c (b gzip) and their entries; an index of them at tmpdir/NAME. */
struct three {
	char *path[3];
	struct tfr_index_entry *e[3];
	char *index;
};

static void three_make(struct three *t, const char *index_name)
{
	static const char *names[3] = { "a.tfrecord", "b.tfrecord.gz", "c.tfrecord" };
	struct tfr_index_build_opts o;
	struct io_error err;

	for (int i = 0; i < 3; i++) {
		enum tfr_compression c = i == 1 ? TFR_COMPRESSION_GZIP : TFR_COMPRESSION_NONE;

		t->path[i] = write_file(names[i], c, 20 + 5 * (unsigned)i, (unsigned)i);
		tfr_index_build_opts_init(&o);
		o.compression = c;
		assert_int_equal(build(t->path[i], &o, &t->e[i], &err), 0);
	}
	t->index = path_of(index_name);
	/* out of order on purpose: the writer sorts */
	{
		const struct tfr_index_entry *es[3] = { t->e[2], t->e[0], t->e[1] };

		assert_int_equal(tfr_index_write(t->index, tmpdir, es, 3, &err), 0);
	}
}

static void three_free(struct three *t)
{
	for (int i = 0; i < 3; i++) {
		free(t->path[i]);
		tfr_index_entry_destroy(t->e[i]);
	}
	unlink(t->index);
	free(t->index);
}

static void assert_entry_equal(const struct tfr_index_entry *a, const struct tfr_index_entry *b)
{
	assert_string_equal(a->name, b->name);
	assert_int_equal(a->size, b->size);
	assert_int_equal(a->mtime_ns, b->mtime_ns);
	assert_int_equal(a->ctime_ns, b->ctime_ns);
	assert_int_equal(a->ino, b->ino);
	assert_int_equal(a->compression, b->compression);
	assert_int_equal(a->records, b->records);
	assert_int_equal(a->payload_bytes, b->payload_bytes);
	assert_int_equal(a->stream_bytes, b->stream_bytes);
	assert_int_equal(a->stride, b->stride);
	assert_int_equal(a->n_offsets, b->n_offsets);
	for (uint64_t i = 0; i < a->n_offsets; i++)
		assert_int_equal(a->offsets[i], b->offsets[i]);
}

/* Index entry i of t as read back, with a fresh stat: 0, or the lookup's error. */
static int lookup(const struct tfr_index *ix, const struct three *t, int i,
		  const struct tfr_index_entry **ret, struct io_error *err)
{
	struct stat st;

	stat_of(t->path[i], &st);
	return tfr_index_lookup(ix, t->e[i]->name, &st, ret, err);
}

static void test_roundtrip(void **state)
{
	struct three t;
	struct tfr_index *ix;
	const struct tfr_index_entry *e;
	const char *name;
	struct io_error err;
	struct stat st;

	(void)state;
	three_make(&t, ".sluice-index");
	stat_of(t.index, &st);
	assert_int_equal(st.st_mode & 0777, 0644);
	assert_int_equal(tfr_index_open(t.index, &ix, &err), 0);
	assert_string_equal(tfr_index_data_dir(ix), tmpdir);
	assert_int_equal(tfr_index_count(ix), 3);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(lookup(ix, &t, i, &e, &err), 0);
		assert_entry_equal(e, t.e[i]);
		assert_int_equal(tfr_index_entry_at(ix, (size_t)i, &name, &e, &err), 0);
		assert_string_equal(name, t.e[i]->name); /* name order */
	}
	assert_int_equal(tfr_index_find(ix, "nope", &e, &err), -ENOENT);
	assert_int_equal(tfr_index_entry_at(ix, 3, &name, &e, &err), -ERANGE);
	tfr_index_destroy(ix);
	{
		const struct tfr_index_entry *dup[2] = { t.e[0], t.e[0] };

		assert_int_equal(tfr_index_write(t.index, tmpdir, dup, 2, &err), -EINVAL);
		assert_non_null(strstr(err.msg, "two entries"));
	}
	/* an empty index */
	assert_int_equal(tfr_index_write(t.index, tmpdir, NULL, 0, &err), 0);
	assert_int_equal(tfr_index_open(t.index, &ix, &err), 0);
	assert_int_equal(tfr_index_count(ix), 0);
	tfr_index_destroy(ix);
	three_free(&t);
}

/* Where entry i (name order) starts and ends in the index bytes. */
static void entry_span(const uint8_t *b, int i, const struct three *t, size_t *ret_from,
		       size_t *ret_to)
{
	size_t at = (size_t)b[12] | (size_t)b[13] << 8 | (size_t)b[14] << 16;

	for (int j = 0; j <= i; j++) {
		size_t el = 84 + strlen(t->e[j]->name) + 8 * t->e[j]->n_offsets;

		if (j == i) {
			*ret_from = at;
			*ret_to = at + el;
		}
		at += el;
	}
}

static void test_entry_flipped_byte(void **state)
{
	struct three t;
	struct tfr_index *ix;
	const struct tfr_index_entry *e;
	struct io_error err;
	size_t len, from, to;
	uint8_t *b;

	(void)state;
	three_make(&t, "flip-index");
	b = read_all(t.index, &len);
	entry_span(b, 1, &t, &from, &to);
	/* one byte in each field of entry 1 in turn, and in its offsets */
	for (size_t p = from; p < to; p += 7) {
		b[p] ^= 0x10;
		assert_int_equal(tfr_index_parse(b, len, t.index, &ix, &err), 0);
		assert_int_equal(lookup(ix, &t, 1, &e, &err), -EBADMSG);
		assert_non_null(strstr(err.msg, t.index));
		assert_non_null(strstr(err.msg, "entry 1 ('b.tfrecord.gz')"));
		assert_int_equal(lookup(ix, &t, 0, &e, &err), 0);
		assert_entry_equal(e, t.e[0]);
		assert_int_equal(lookup(ix, &t, 2, &e, &err), 0);
		assert_entry_equal(e, t.e[2]);
		tfr_index_destroy(ix);
		b[p] ^= 0x10;
	}
	/* any byte of the header: the whole index is refused */
	for (size_t p = 0; p < ((size_t)b[12] | (size_t)b[13] << 8); p++) {
		b[p] ^= 0x01;
		ix = NULL;
		assert_int_equal(tfr_index_parse(b, len, t.index, &ix, &err), -EBADMSG);
		assert_null(ix);
		assert_non_null(strstr(err.msg, t.index));
		b[p] ^= 0x01;
	}
	free(b);
	three_free(&t);
}

/*
 * Every single-byte change anywhere: the header refuses the index, or exactly the entry that
 * holds the byte is damaged. Also every truncation: no crash, no entry read past the end.
 */
static void test_index_every_byte(void **state)
{
	struct three t;
	struct tfr_index *ix;
	const struct tfr_index_entry *e;
	struct io_error err;
	size_t len, hlen;
	uint8_t *b;

	(void)state;
	three_make(&t, "every-index");
	b = read_all(t.index, &len);
	hlen = (size_t)b[12] | (size_t)b[13] << 8;
	for (size_t p = 0; p < len; p++) {
		b[p] ^= 0xff;
		if (p < hlen) {
			assert_int_equal(tfr_index_parse(b, len, "x", &ix, &err), -EBADMSG);
		} else {
			int bad = 0;

			assert_int_equal(tfr_index_parse(b, len, "x", &ix, &err), 0);
			for (int i = 0; i < 3; i++)
				bad += lookup(ix, &t, i, &e, &err) == -EBADMSG;
			assert_int_equal(bad, 1);
			tfr_index_destroy(ix);
		}
		b[p] ^= 0xff;
	}
	for (size_t cut = 0; cut < len; cut++) {
		int rc = tfr_index_parse(b, cut, "x", &ix, &err);

		if (cut < hlen) {
			assert_int_equal(rc, -EBADMSG);
			continue;
		}
		assert_int_equal(rc, 0);
		assert_int_equal(lookup(ix, &t, 2, &e, &err), -EBADMSG); /* the last one */
		tfr_index_destroy(ix);
	}
	free(b);
	three_free(&t);
}

static void test_truncated_index(void **state)
{
	struct three t;
	struct tfr_index *ix = NULL;
	const struct tfr_index_entry *e;
	struct io_error err;
	size_t len;
	uint8_t *b;

	(void)state;
	three_make(&t, "trunc-index");
	b = read_all(t.index, &len);
	write_all(t.index, b, len - 10);
	assert_int_equal(tfr_index_open(t.index, &ix, &err), 0);
	assert_int_equal(lookup(ix, &t, 2, &e, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "truncated"));
	assert_non_null(strstr(err.msg, "'c.tfrecord'"));
	assert_int_equal(lookup(ix, &t, 0, &e, &err), 0);
	assert_int_equal(lookup(ix, &t, 1, &e, &err), 0);
	tfr_index_destroy(ix);
	ix = NULL;
	write_all(t.index, b, 20);
	assert_int_equal(tfr_index_open(t.index, &ix, &err), -EBADMSG);
	assert_null(ix);
	assert_non_null(strstr(err.msg, t.index));
	assert_non_null(strstr(err.msg, "truncated"));
	write_all(t.index, b, 0);
	assert_int_equal(tfr_index_open(t.index, &ix, &err), -EBADMSG);
	memcpy(b, "NOTANIDX", 8);
	write_all(t.index, b, len);
	assert_int_equal(tfr_index_open(t.index, &ix, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "magic"));
	unlink(t.index);
	assert_int_equal(tfr_index_open(t.index, &ix, &err), -ENOENT);
	free(b);
	three_free(&t);
}

/*
 * The last indexed offset must leave room for every record after it (16 bytes at least each):
 * at stride 4 over 10 records, offsets[2] is record 8's and records 8 and 9 follow. An offset
 * 16 bytes before the stream's end holds one record header only (found by fuzz_tfr_index).
 */
static void test_offset_leaves_no_room(void **state)
{
	char *path = write_file("room.tfrecord", TFR_COMPRESSION_NONE, 10, 5);
	char *index = path_of("room-index");
	struct tfr_index_entry *e, fake;
	const struct tfr_index_entry *got, *es[1] = { &fake };
	struct tfr_index *ix;
	struct io_error err;
	uint64_t offs[3];

	(void)state;
	assert_int_equal(build(path, NULL, &e, &err), 0);
	assert_int_equal(e->records, 10);
	fake = *e;
	fake.stride = 4;
	fake.n_offsets = 3;
	fake.offsets = offs;
	offs[0] = e->offsets[0];
	offs[1] = e->offsets[4];
	/* the true offset, then the most room two records leave, both intact */
	for (int k = 0; k < 3; k++) {
		offs[2] = k == 0   ? e->offsets[8]
			  : k == 1 ? e->stream_bytes - 32
				   : e->stream_bytes - 16;
		assert_int_equal(tfr_index_write(index, tmpdir, es, 1, &err), 0);
		assert_int_equal(tfr_index_open(index, &ix, &err), 0);
		if (k < 2) {
			assert_int_equal(tfr_index_find(ix, e->name, &got, &err), 0);
			assert_int_equal(got->offsets[2], offs[2]);
		} else {
			assert_int_equal(tfr_index_find(ix, e->name, &got, &err), -EBADMSG);
			assert_non_null(strstr(err.msg, "offset 2"));
		}
		tfr_index_destroy(ix);
	}
	/* past the stream's end altogether */
	offs[2] = e->stream_bytes + 16;
	assert_int_equal(tfr_index_write(index, tmpdir, es, 1, &err), 0);
	assert_int_equal(tfr_index_open(index, &ix, &err), 0);
	assert_int_equal(tfr_index_find(ix, e->name, &got, &err), -EBADMSG);
	tfr_index_destroy(ix);
	unlink(index);
	free(index);
	tfr_index_entry_destroy(e);
	free(path);
}

/* Rewrite path in place to the same size with other bytes; put its mtime back. */
static void rewrite_same_size_restore_mtime(const char *path)
{
	struct stat st;
	struct timespec ts[2];
	size_t len;
	uint8_t *b = read_all(path, &len);
	int fd;

	stat_of(path, &st);
	b[len - 1] ^= 0x5a; /* the last record's data CRC: framing intact */
	fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, b, len, 0), (ssize_t)len);
	ts[0] = st.st_atim;
	ts[1] = st.st_mtim;
	assert_int_equal(futimens(fd, ts), 0);
	close(fd);
	free(b);
}

static void test_stale_ctime(void **state)
{
	struct three t;
	struct tfr_index *ix;
	const struct tfr_index_entry *e;
	struct io_error err;
	struct stat st;
	int tries = 0;

	(void)state;
	three_make(&t, "stale-index");
	assert_int_equal(tfr_index_open(t.index, &ix, &err), 0);
	/*
	 * ctime moves with the kernel's coarse clock: rewrite until it has moved (the event the
	 * test is about), at most a few seconds.
	 */
	do {
		struct timespec ms = { 0, 2000000 };

		rewrite_same_size_restore_mtime(t.path[0]);
		stat_of(t.path[0], &st);
		if (st.st_ctim.tv_sec * 1000000000ll + st.st_ctim.tv_nsec != t.e[0]->ctime_ns)
			break;
		nanosleep(&ms, NULL); /* poll: until ctime has moved */
	} while (++tries < 2000);
	assert_true(tries < 2000);
	/* size and mtime are what was indexed: only ctime tells */
	assert_int_equal((uint64_t)st.st_size, t.e[0]->size);
	assert_int_equal(st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec, t.e[0]->mtime_ns);
	assert_int_equal(tfr_index_lookup(ix, "a.tfrecord", &st, &e, &err), -ESTALE);
	assert_non_null(strstr(err.msg, t.index));
	assert_non_null(strstr(err.msg, "a.tfrecord"));
	assert_non_null(strstr(err.msg, "ctime_ns changed"));
	/* the others are fresh */
	assert_int_equal(lookup(ix, &t, 1, &e, &err), 0);

	/* each field alone */
	stat_of(t.path[2], &st);
	assert_int_equal(tfr_index_lookup(ix, "c.tfrecord", &st, &e, &err), 0);
	{
		struct stat s2 = st;

		s2.st_ino++;
		assert_int_equal(tfr_index_entry_check(e, &s2, &err), -ESTALE);
		assert_non_null(strstr(err.msg, "ino changed"));
		s2 = st;
		s2.st_size++;
		assert_int_equal(tfr_index_entry_check(e, &s2, &err), -ESTALE);
		assert_non_null(strstr(err.msg, "size changed"));
		s2 = st;
		s2.st_mtim.tv_nsec ^= 1;
		assert_int_equal(tfr_index_entry_check(e, &s2, &err), -ESTALE);
		assert_non_null(strstr(err.msg, "mtime_ns changed"));
		s2 = st;
		s2.st_ctim.tv_nsec ^= 1;
		assert_int_equal(tfr_index_entry_check(e, &s2, &err), -ESTALE);
		assert_non_null(strstr(err.msg, "ctime_ns changed"));
	}
	tfr_index_destroy(ix);
	three_free(&t);
}

static void test_merge_on_rewrite(void **state)
{
	struct three t;
	struct tfr_index *ix;
	const struct tfr_index_entry *e;
	struct tfr_index_entry *a2, *c2;
	struct io_error err;
	size_t kept = 99;
	char *path;

	(void)state;
	three_make(&t, ".sluice-index");
	/* c grows (stale), b goes: indexing a again keeps nothing but a */
	path = write_file("c.tfrecord", TFR_COMPRESSION_NONE, 31, 2);
	free(path);
	unlink(t.path[1]);
	assert_int_equal(build(t.path[0], NULL, &a2, &err), 0);
	{
		const struct tfr_index_entry *es[1] = { a2 };

		assert_int_equal(tfr_index_update(t.index, tmpdir, es, 1, &kept, &err), 0);
	}
	assert_int_equal(kept, 0);
	assert_int_equal(tfr_index_open(t.index, &ix, &err), 0);
	assert_int_equal(tfr_index_count(ix), 1);
	assert_int_equal(lookup(ix, &t, 0, &e, &err), 0);
	tfr_index_destroy(ix);

	/* indexing c keeps a (fresh) */
	assert_int_equal(build(t.path[2], NULL, &c2, &err), 0);
	{
		const struct tfr_index_entry *es[1] = { c2 };

		assert_int_equal(tfr_index_update(t.index, tmpdir, es, 1, &kept, &err), 0);
	}
	assert_int_equal(kept, 1);
	assert_int_equal(tfr_index_open(t.index, &ix, &err), 0);
	assert_int_equal(tfr_index_count(ix), 2);
	assert_int_equal(lookup(ix, &t, 0, &e, &err), 0);
	assert_entry_equal(e, a2);
	assert_int_equal(lookup(ix, &t, 2, &e, &err), 0);
	assert_entry_equal(e, c2);
	assert_int_equal(e->records, 31);
	tfr_index_destroy(ix);

	/* a damaged old index is replaced */
	write_all(t.index, (const uint8_t *)"garbage", 7);
	{
		const struct tfr_index_entry *es[1] = { c2 };

		assert_int_equal(tfr_index_update(t.index, tmpdir, es, 1, &kept, &err), 0);
	}
	assert_int_equal(kept, 0);
	tfr_index_entry_destroy(a2);
	tfr_index_entry_destroy(c2);
	three_free(&t);
}

/* The TensorFlow-written files: the build agrees with the reader on every one. */
static void test_testdata(void **state)
{
	const char *dir = sl_testdata_dir();
	char tsv[600], line[1024];
	FILE *f;
	int n = 0;

	(void)state;
	if (!dir) {
		SL_SKIP("[testdata] no ../shared/testdata here");
		return;
	}
	snprintf(tsv, sizeof(tsv), "%s/files.tsv", dir);
	f = fopen(tsv, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		char *name = line, *kind, *comp, *save = NULL, path[1200];
		struct tfr_index_build_opts o;
		struct tfr_index_entry *e;
		struct io_error err;

		if (line[0] == '#')
			continue;
		name = strtok_r(line, "\t\n", &save);
		kind = strtok_r(NULL, "\t\n", &save);
		comp = strtok_r(NULL, "\t\n", &save);
		if (!name || !kind || !comp || !strcmp(kind, "corrupt"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		tfr_index_build_opts_init(&o);
		assert_int_equal(tfr_compression_parse(comp, &o.compression), 0);
		assert_int_equal(build(path, &o, &e, &err), 0);
		check_against_reader(e, path, o.compression, 1);
		tfr_index_entry_destroy(e);
		n++;
	}
	fclose(f);
	assert_true(n > 20);
}

/* ---- record-range splits ---- */

/* The records framed out of bytes [from, from + n) of b alone: their count; each payload's
   first byte checked against write_file's pattern for record first + i. */
static uint64_t frame_range(const uint8_t *b, uint64_t from, uint64_t n, uint64_t first,
			    unsigned seed)
{
	struct tfr_reader_opts o;
	struct tfr_record rec;
	struct io_error err;
	uint64_t got = 0;
	bool fed = false;

	tfr_reader_opts_init(&o);
	struct tfr_reader *r = tfr_reader_create(&o);
	assert_non_null(r);
	for (;;) {
		int rc = tfr_reader_next(r, &rec, &err);
		if (rc == TFR_NEED_INPUT) {
			if (fed)
				tfr_reader_finish(r);
			else
				tfr_reader_feed(r, b + from, (size_t)n);
			fed = true;
			continue;
		}
		if (rc == TFR_END)
			break;
		if (rc != TFR_RECORD)
			fail_msg("range at %llu: %s", (unsigned long long)from, err.msg);
		unsigned i = (unsigned)(first + got);
		assert_int_equal(rec.len, payload_len(i, seed));
		if (rec.len)
			assert_int_equal(rec.data[0], (uint8_t)(i * 31 + seed));
		got++;
	}
	tfr_reader_destroy(r);
	return got;
}

/*
 * Splits of an uncompressed file at strides 1, 3 and 8 for several sizes asked: each starts at
 * a multiple of the stride, their byte ranges tile the file, and each range framed alone gives
 * exactly its records (the right ones, in order). A compressed file and an empty one are one
 * split; 0 records asked is refused.
 */
static void test_splits(void **state)
{
	struct tfr_index_build_opts o;
	struct io_error err;
	(void)state;
	char *path = write_file("splits", TFR_COMPRESSION_NONE, 100, 5);
	size_t len;
	uint8_t *b = read_all(path, &len);
	static const uint64_t maxo[] = { 100, 34, 13 };
	static const uint64_t asks[] = { 1, 2, 7, 10, 33, 99, 100, 1000 };
	for (size_t m = 0; m < 3; m++) {
		struct tfr_index_entry *e;
		tfr_index_build_opts_init(&o);
		o.max_offsets = maxo[m];
		assert_int_equal(build(path, &o, &e, &err), 0);
		for (size_t a = 0; a < sizeof(asks) / sizeof(asks[0]); a++) {
			struct tfr_index_split *v;
			size_t n;
			assert_int_equal(tfr_index_splits(e, asks[a], &v, &n), 0);
			uint64_t rec = 0, off = 0;
			for (size_t i = 0; i < n; i++) {
				assert_int_equal(v[i].first, rec);
				assert_int_equal(v[i].offset, off);
				assert_int_equal(v[i].first % e->stride, 0);
				assert_true(v[i].count > 0);
				if (i + 1 < n)
					assert_int_equal(v[i].count % e->stride, 0);
				assert_int_equal(frame_range(b, v[i].offset, v[i].bytes, v[i].first,
							     5),
						 v[i].count);
				rec += v[i].count;
				off += v[i].bytes;
			}
			assert_int_equal(rec, 100);
			assert_int_equal(off, len);
			free(v);
		}
		assert_int_equal(tfr_index_splits(e, 0, &(struct tfr_index_split *){ NULL },
						  &(size_t){ 0 }),
				 -EINVAL);
		tfr_index_entry_destroy(e);
	}
	free(b);
	free(path);

	/* compressed, empty: one split, the whole file */
	static const enum tfr_compression cs[] = { TFR_COMPRESSION_GZIP, TFR_COMPRESSION_NONE };
	static const unsigned ns[] = { 50, 0 };
	for (size_t i = 0; i < 2; i++) {
		struct tfr_index_entry *e;
		struct tfr_index_split *v;
		size_t n;
		struct stat st;
		path = write_file(i ? "splits-empty" : "splits-gz", cs[i], ns[i], 2);
		tfr_index_build_opts_init(&o);
		o.compression = cs[i];
		o.max_offsets = 4;
		assert_int_equal(build(path, &o, &e, &err), 0);
		assert_int_equal(tfr_index_splits(e, 3, &v, &n), 0);
		stat_of(path, &st);
		assert_int_equal(n, 1);
		assert_int_equal(v[0].first, 0);
		assert_int_equal(v[0].count, ns[i]);
		assert_int_equal(v[0].offset, 0);
		assert_int_equal(v[0].bytes, (uint64_t)st.st_size);
		free(v);
		tfr_index_entry_destroy(e);
		free(path);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counts_none),
		cmocka_unit_test(test_counts_gzip),
		cmocka_unit_test(test_counts_zlib),
		cmocka_unit_test(test_stride),
		cmocka_unit_test(test_stride_thinned),
		cmocka_unit_test(test_empty_file),
		cmocka_unit_test(test_corrupt_header),
		cmocka_unit_test(test_corrupt_gzip),
		cmocka_unit_test(test_interleaved_equals_serial),
		cmocka_unit_test(test_interleaved_false_sync),
		cmocka_unit_test(test_interleaved_corrupt),
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_entry_flipped_byte),
		cmocka_unit_test(test_index_every_byte),
		cmocka_unit_test(test_truncated_index),
		cmocka_unit_test(test_offset_leaves_no_room),
		cmocka_unit_test(test_splits),
		cmocka_unit_test(test_stale_ctime),
		cmocka_unit_test(test_merge_on_rewrite),
		cmocka_unit_test(test_testdata),
	};

	return SL_RUN_GROUP(tests, setup_dir, teardown_dir);
}
