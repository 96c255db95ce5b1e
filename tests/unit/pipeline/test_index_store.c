/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced's own record index (daemon/pipeline/index_store.c): the collector, the framer's hook. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/pipeline/frame.h"
#include "daemon/pipeline/index_store.h"
#include "io/tfr_index.h"

/* A temporary tree: ROOT/data (the dataset), ROOT/state (sluiced's state directory). */
struct tree {
	char root[64], data[96], state[96];
};

static void tree_make(struct tree *t)
{
	snprintf(t->root, sizeof(t->root), "/tmp/sluice-own-index-XXXXXX");
	assert_non_null(mkdtemp(t->root));
	snprintf(t->data, sizeof(t->data), "%s/data", t->root);
	snprintf(t->state, sizeof(t->state), "%s/state", t->root);
	assert_int_equal(mkdir(t->data, 0700), 0);
	assert_int_equal(mkdir(t->state, 0700), 0);
}

static void rm_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char p[512];
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		if (unlink(p) < 0)
			rm_dir(p);
	}
	closedir(d);
	rmdir(dir);
}

static void tree_remove(struct tree *t)
{
	rm_dir(t->root);
}

/* n records of len bytes each (record i's bytes a function of i) into path. */
static void write_file(const char *path, enum tfr_compression c, uint64_t n, size_t len)
{
	struct tfr_writer *w;
	uint8_t buf[256];
	assert_true(len <= sizeof(buf));
	assert_int_equal(tfr_writer_open(path, c, -1, &w), 0);
	for (uint64_t i = 0; i < n; i++) {
		for (size_t j = 0; j < len; j++)
			buf[j] = (uint8_t)(i * 13 + j);
		assert_int_equal(tfr_writer_write(w, buf, len - (i % 3)), 0);
	}
	assert_int_equal(tfr_writer_close(w), 0);
}

static void path_of(char *out, size_t n, const char *dir, const char *name)
{
	assert_true(snprintf(out, n, "%s/%s", dir, name) < (int)n);
}

/* fstat of path, as count_ahead takes it of the file it opened. */
static struct stat stat_of(const char *path)
{
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	return st;
}

/* The one index file under STATE/index, opened (NULL: there is none). */
static struct tfr_index *own_index_file(const struct tree *t, char *ret_name, size_t n)
{
	char dir[160];
	path_of(dir, sizeof(dir), t->state, "index");
	DIR *d = opendir(dir);
	if (!d)
		return NULL;
	struct dirent *de;
	struct tfr_index *ix = NULL;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		char p[512];
		path_of(p, sizeof(p), dir, de->d_name);
		assert_null(ix); /* one data directory: one file */
		struct io_error err;
		assert_int_equal(tfr_index_open(p, &ix, &err), 0);
		if (ret_name)
			snprintf(ret_name, n, "%s", de->d_name);
	}
	closedir(d);
	return ix;
}

/* The collector fed records of len bytes, laid end to end, for a file of that size. */
static void collect_fake(const char *path, uint64_t n, uint32_t len, bool in_order)
{
	struct pl_own_collect c = { 0 };
	pl_own_collect_begin(&c, NULL, path, TFR_COMPRESSION_NONE);
	for (uint64_t i = 0; i < n; i++) {
		if (!in_order && i == n / 2)
			continue; /* a record not framed: no entry */
		pl_own_collect_rec(&c, i, i * (16 + len), len);
	}
	pl_own_collect_end(&c, NULL, path, TFR_COMPRESSION_NONE);
	pl_own_collect_fini(&c);
}

static void sized_file(const char *path, uint64_t size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	close(fd);
}

/*
 * The stride rule: k the smallest power of two keeping at most PL_OWN_INDEX_OFFSETS offsets,
 * offsets[j] record j*k's, through the stride's doublings; the entry as written is read back
 * by tfr_index_open, in STATE/index/<16 hex>.sluice-index.
 */
static void test_collect_stride(void **state)
{
	(void)state;
	static const uint64_t ns[] = { 0, 1, 5, 1023, 1024, 1025, 2047, 2048, 2049, 5000, 100001 };
	const uint32_t len = 10;
	struct tree t;
	tree_make(&t);
	assert_int_equal(pl_own_index_init(t.state), 0);
	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		char name[32], p[256];
		snprintf(name, sizeof(name), "f%zu.tfrecords", i);
		path_of(p, sizeof(p), t.data, name);
		sized_file(p, ns[i] * (16 + len));
		collect_fake(p, ns[i], len, true);
		struct stat st = stat_of(p);
		uint64_t rec = 99;
		assert_int_equal(pl_own_index_records(p, &st, TFR_COMPRESSION_NONE, &rec), 0);
		assert_int_equal(rec, ns[i]);
	}
	pl_own_index_fini(); /* writes what is left */
	char fname[300];
	struct tfr_index *ix = own_index_file(&t, fname, sizeof(fname));
	assert_non_null(ix);
	assert_int_equal(strlen(fname), 16 + strlen(TFR_INDEX_NAME));
	assert_string_equal(fname + 16, TFR_INDEX_NAME);
	assert_string_equal(tfr_index_data_dir(ix), t.data);
	assert_int_equal(tfr_index_count(ix), sizeof(ns) / sizeof(ns[0]));
	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		char name[32];
		snprintf(name, sizeof(name), "f%zu.tfrecords", i);
		const struct tfr_index_entry *e;
		struct io_error err;
		assert_int_equal(tfr_index_find(ix, name, &e, &err), 0);
		uint64_t n = ns[i], k = e->stride;
		assert_int_equal(e->records, n);
		assert_int_equal(e->payload_bytes, n * len);
		assert_int_equal(e->stream_bytes, n * (16 + len));
		assert_true(k >= 1 && (k & (k - 1)) == 0);
		assert_int_equal(e->n_offsets, (n + k - 1) / k);
		assert_true(e->n_offsets <= PL_OWN_INDEX_OFFSETS);
		if (k > 1) /* the smallest such k */
			assert_true((n + k / 2 - 1) / (k / 2) > PL_OWN_INDEX_OFFSETS);
		for (uint64_t j = 0; j < e->n_offsets; j++)
			assert_int_equal(e->offsets[j], j * k * (16 + len));
		if (n) {
			uint64_t off, skip;
			assert_int_equal(tfr_index_entry_offset(e, n - 1, &off, &skip), 0);
			assert_int_equal(off + skip * (16 + len), (n - 1) * (16 + len));
		}
	}
	tfr_index_destroy(ix);
	tree_remove(&t);
}

/* Freshness: a changed file or another compression is -ESTALE; an unknown file -ENOENT. */
static void test_stale_and_absent(void **state)
{
	(void)state;
	struct tree t;
	tree_make(&t);
	assert_int_equal(pl_own_index_init(NULL), 0); /* memory only */
	char p[256], q[256];
	path_of(p, sizeof(p), t.data, "a.tfrecords");
	path_of(q, sizeof(q), t.data, "b.tfrecords");
	sized_file(p, 100 * 26);
	sized_file(q, 100 * 26);
	collect_fake(p, 100, 10, true);
	struct stat st = stat_of(p), sq = stat_of(q);
	uint64_t rec;
	assert_int_equal(pl_own_index_records(p, &st, TFR_COMPRESSION_NONE, &rec), 0);
	assert_int_equal(rec, 100);
	assert_int_equal(pl_own_index_records(p, &st, TFR_COMPRESSION_GZIP, &rec), -ESTALE);
	assert_int_equal(pl_own_index_records(q, &sq, TFR_COMPRESSION_NONE, &rec), -ENOENT);
	/* same size, mtime moved: stale (and ctime moved too) */
	struct timespec ts[2] = { { 0, UTIME_OMIT }, { 1000000, 5 } };
	assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
	st = stat_of(p);
	assert_int_equal(pl_own_index_records(p, &st, TFR_COMPRESSION_NONE, &rec), -ESTALE);
	pl_own_index_fini();
	/* memory only: nothing anywhere, and nothing after a restart */
	struct tfr_index *ix = own_index_file(&t, NULL, 0);
	assert_null(ix);
	assert_int_equal(pl_own_index_init(NULL), 0);
	collect_fake(q, 100, 10, true);
	assert_int_equal(pl_own_index_records(q, &sq, TFR_COMPRESSION_NONE, &rec), 0);
	pl_own_index_fini();
	assert_int_equal(pl_own_index_init(NULL), 0);
	assert_int_equal(pl_own_index_records(q, &sq, TFR_COMPRESSION_NONE, &rec), -ENOENT);
	pl_own_index_fini();
	/* off (sluicectl run): nothing is collected */
	collect_fake(q, 100, 10, true);
	assert_false(pl_own_index_on());
	assert_int_equal(pl_own_index_records(q, &sq, TFR_COMPRESSION_NONE, &rec), -ENOENT);
	tree_remove(&t);
}

/* No entry for a file not framed whole, cleanly, unchanged, as big as its records say. */
static void test_collect_no_entry(void **state)
{
	(void)state;
	struct tree t;
	tree_make(&t);
	assert_int_equal(pl_own_index_init(t.state), 0);
	char p[256];
	uint64_t rec;
	struct stat st;

	path_of(p, sizeof(p), t.data, "gap.tfrecords"); /* a record not framed */
	sized_file(p, 100 * 26);
	collect_fake(p, 100, 10, false);
	st = stat_of(p);
	assert_int_equal(pl_own_index_records(p, &st, TFR_COMPRESSION_NONE, &rec), -ENOENT);

	path_of(p, sizeof(p), t.data, "tail.tfrecords"); /* bytes after the last record */
	sized_file(p, 100 * 26 + 3);
	collect_fake(p, 100, 10, true);
	st = stat_of(p);
	assert_int_equal(pl_own_index_records(p, &st, TFR_COMPRESSION_NONE, &rec), -ENOENT);

	path_of(p, sizeof(p), t.data, "dropped.tfrecords"); /* given up (a skip, a new epoch) */
	sized_file(p, 100 * 26);
	struct pl_own_collect c = { 0 };
	pl_own_collect_begin(&c, NULL, p, TFR_COMPRESSION_NONE);
	for (uint64_t i = 0; i < 100; i++) {
		pl_own_collect_rec(&c, i, i * 26, 10);
		if (i == 50)
			pl_own_collect_drop(&c);
	}
	pl_own_collect_end(&c, NULL, p, TFR_COMPRESSION_NONE);
	st = stat_of(p);
	assert_int_equal(pl_own_index_records(p, &st, TFR_COMPRESSION_NONE, &rec), -ENOENT);

	path_of(p, sizeof(p), t.data, "changed.tfrecords"); /* written to while it was read */
	sized_file(p, 100 * 26);
	pl_own_collect_begin(&c, NULL, p, TFR_COMPRESSION_NONE);
	for (uint64_t i = 0; i < 100; i++)
		pl_own_collect_rec(&c, i, i * 26, 10);
	struct timespec ts[2] = { { 0, UTIME_OMIT }, { 2000000, 7 } };
	assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
	pl_own_collect_end(&c, NULL, p, TFR_COMPRESSION_NONE);
	st = stat_of(p);
	assert_int_equal(pl_own_index_records(p, &st, TFR_COMPRESSION_NONE, &rec), -ENOENT);

	path_of(p, sizeof(p), t.data, "fifo.tfrecords"); /* not a regular file */
	assert_int_equal(mkfifo(p, 0600), 0);
	pl_own_collect_begin(&c, NULL, p, TFR_COMPRESSION_NONE);
	assert_false(c.on);
	pl_own_collect_fini(&c);
	pl_own_index_fini();
	assert_null(own_index_file(&t, NULL, 0)); /* nothing to write */
	tree_remove(&t);
}

/*
 * Read back at start: an index file whose name is not the hash of the directory its header
 * names is not used; nor an entry whose data file is gone; a temporary file is removed.
 */
static void test_load(void **state)
{
	(void)state;
	struct tree t;
	tree_make(&t);
	char p[256], q[256];
	path_of(p, sizeof(p), t.data, "a.tfrecords");
	path_of(q, sizeof(q), t.data, "b.tfrecords");
	sized_file(p, 40 * 26);
	sized_file(q, 40 * 26);
	assert_int_equal(pl_own_index_init(t.state), 0);
	collect_fake(p, 40, 10, true);
	collect_fake(q, 40, 10, true);
	pl_own_index_fini();
	char fname[300], from[512], to[512];
	struct tfr_index *ix = own_index_file(&t, fname, sizeof(fname));
	assert_non_null(ix);
	assert_int_equal(tfr_index_count(ix), 2);
	tfr_index_destroy(ix);

	char tmp[512];
	snprintf(tmp, sizeof(tmp), "%s/index/%s.tmp.Ab12Cd", t.state, fname);
	sized_file(tmp, 10); /* a write cut short by a crash */
	struct stat sp = stat_of(p), sq = stat_of(q);
	uint64_t rec;
	assert_int_equal(pl_own_index_init(t.state), 0); /* a restart */
	assert_int_equal(access(tmp, F_OK), -1);	 /* removed */
	assert_int_equal(pl_own_index_records(p, &sp, TFR_COMPRESSION_NONE, &rec), 0);
	assert_int_equal(rec, 40);
	pl_own_index_fini();

	snprintf(from, sizeof(from), "%s/index/%s", t.state, fname);
	snprintf(to, sizeof(to), "%s/index/0123456789abcdef%s", t.state, TFR_INDEX_NAME);
	assert_int_equal(rename(from, to), 0);
	assert_int_equal(pl_own_index_init(t.state), 0);
	assert_int_equal(pl_own_index_records(p, &sp, TFR_COMPRESSION_NONE, &rec), -ENOENT);
	pl_own_index_fini();
	assert_int_equal(rename(to, from), 0);

	assert_int_equal(unlink(q), 0); /* gone: its entry is not read back */
	assert_int_equal(pl_own_index_init(t.state), 0);
	assert_int_equal(pl_own_index_records(q, &sq, TFR_COMPRESSION_NONE, &rec), -ENOENT);
	assert_int_equal(pl_own_index_records(p, &sp, TFR_COMPRESSION_NONE, &rec), 0);
	pl_own_index_fini();
	tree_remove(&t);
}

/* ---- the framer's hook: pl_frame over a fake reader that hands out a file's bytes ---- */

struct fake_read {
	uint8_t *buf;
	size_t len, pos, chunk;
	int abandoned;
};

static void chunk_put(struct pl_block *b)
{
	free(b->data);
	free(b);
}

static int fake_next(void *ctx, bool wait, struct pl_chunk *ret, struct io_error *err)
{
	(void)wait;
	(void)err;
	struct fake_read *f = ctx;
	if (f->pos >= f->len && f->len)
		return 0;
	size_t n = f->len - f->pos < f->chunk ? f->len - f->pos : f->chunk;
	struct pl_block *b = calloc(1, sizeof(*b));
	assert_non_null(b);
	b->data = malloc(n ? n : 1);
	assert_non_null(b->data);
	memcpy(b->data, f->buf + f->pos, n);
	b->cap = b->used = n;
	b->put = chunk_put;
	b->refs = 1;
	f->pos += n;
	if (!f->len)
		f->pos = 1; /* an empty file: one empty last chunk */
	*ret = (struct pl_chunk){ .blk = b, .last = f->pos >= f->len };
	return 1;
}

static void fake_abandon(void *ctx)
{
	((struct fake_read *)ctx)->abandoned++;
}

static void slurp(const char *path, struct fake_read *f)
{
	struct stat st = stat_of(path);
	f->len = (size_t)st.st_size;
	f->buf = malloc(f->len + 1);
	assert_non_null(f->buf);
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, f->buf, f->len), (ssize_t)f->len);
	close(fd);
	f->pos = 0;
	f->chunk = 4096 + 17;
}

struct framer {
	struct fake_read rd;
	struct pl_store store;
	struct pl_stage_stats st;
	struct pl_frame_totals tot;
	struct pl_prof prof;
	struct pl_frame *fr;
};

static int fake_validate(void *ctx, const struct pl_rec *rec)
{
	(void)ctx;
	(void)rec;
	return 0;
}

static void framer_make(struct framer *x, enum tfr_compression c, enum pl_on_corrupt oc)
{
	memset(x, 0, sizeof(*x));
	struct pl_frame_opts o = { 0 };
	o.compression = c;
	o.on_corrupt = oc;
	o.read = fake_next;
	o.abandon = fake_abandon;
	o.validate = oc == PL_ON_CORRUPT_SKIP_FILE ? fake_validate : NULL;
	o.read_ctx = &x->rd;
	o.store = &x->store;
	o.st = &x->st;
	o.tot = &x->tot;
	o.prof = &x->prof;
	assert_int_equal(pl_frame_create(&o, &x->fr), 0);
}

static void framer_destroy(struct framer *x)
{
	pl_frame_destroy(x->fr);
	pl_store_fini(&x->store);
	free(x->rd.buf);
}

/* Frame path (max records at most: then give it up): the records framed, or -errno. */
static int64_t frame_file(struct framer *x, const char *path, uint64_t max)
{
	free(x->rd.buf);
	slurp(path, &x->rd);
	struct stat st = stat_of(path);
	assert_int_equal(pl_frame_open(x->fr, 0, path, (uint64_t)st.st_size), 0);
	int64_t n = 0;
	for (;;) {
		struct pl_rec r;
		struct io_error err;
		int k = pl_frame_next(x->fr, true, &r, &err);
		if (k <= 0)
			return k < 0 ? k : n;
		pl_rec_unref(&r);
		if ((uint64_t)++n == max) {
			pl_frame_abandon(x->fr);
			return n;
		}
	}
}

/* A file framed whole: its entry is the scan's (tfr_index_build_fd), at the entry's stride. */
static void check_against_scan(const char *path, enum tfr_compression c,
			       const struct tfr_index_entry *own)
{
	struct tfr_index_build_opts bo;
	tfr_index_build_opts_init(&bo);
	bo.compression = c;
	struct tfr_index_entry *e;
	struct io_error err;
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(tfr_index_build_fd(fd, path, &bo, &e, &err), 0);
	close(fd);
	assert_int_equal(e->stride, 1);
	assert_int_equal(own->records, e->records);
	assert_int_equal(own->payload_bytes, e->payload_bytes);
	assert_int_equal(own->stream_bytes, e->stream_bytes);
	assert_int_equal(own->size, e->size);
	assert_int_equal(own->mtime_ns, e->mtime_ns);
	assert_int_equal(own->ctime_ns, e->ctime_ns);
	assert_int_equal(own->ino, e->ino);
	assert_int_equal(own->compression, c);
	for (uint64_t j = 0; j < own->n_offsets; j++)
		assert_int_equal(own->offsets[j], e->offsets[j * own->stride]);
	tfr_index_entry_destroy(e);
}

static void frame_whole(enum tfr_compression c)
{
	struct tree t;
	tree_make(&t);
	char p[256], q[256];
	path_of(p, sizeof(p), t.data, "whole.tfrecords");
	path_of(q, sizeof(q), t.data, "given-up.tfrecords");
	write_file(p, c, 3000, 40); /* 3000 records: stride 4 */
	write_file(q, c, 500, 40);
	assert_int_equal(pl_own_index_init(t.state), 0);
	struct framer x;
	framer_make(&x, c, PL_ON_CORRUPT_FAIL);
	assert_int_equal(frame_file(&x, q, 200), 200); /* a new epoch gave it up */
	assert_int_equal(frame_file(&x, p, 0), 3000);
	struct stat sp = stat_of(p), sq = stat_of(q);
	uint64_t rec;
	assert_int_equal(pl_own_index_records(p, &sp, c, &rec), 0);
	assert_int_equal(rec, 3000);
	assert_int_equal(pl_own_index_records(q, &sq, c, &rec), -ENOENT);
	assert_int_equal(frame_file(&x, q, 0), 500); /* the same framer, the whole file now */
	assert_int_equal(pl_own_index_records(q, &sq, c, &rec), 0);
	assert_int_equal(rec, 500);
	framer_destroy(&x);
	pl_own_index_fini();
	struct tfr_index *ix = own_index_file(&t, NULL, 0);
	assert_non_null(ix);
	const struct tfr_index_entry *e;
	struct io_error err;
	assert_int_equal(tfr_index_lookup(ix, "whole.tfrecords", &sp, &e, &err), 0);
	assert_int_equal(e->stride, 4);
	check_against_scan(p, c, e);
	assert_int_equal(tfr_index_lookup(ix, "given-up.tfrecords", &sq, &e, &err), 0);
	check_against_scan(q, c, e);
	tfr_index_destroy(ix);
	tree_remove(&t);
}

static void test_frame_whole_none(void **state)
{
	(void)state;
	frame_whole(TFR_COMPRESSION_NONE);
}

static void test_frame_whole_gzip(void **state)
{
	(void)state;
	frame_whole(TFR_COMPRESSION_GZIP);
}

/* A framing error skipped (skip_record loses the rest of the file), a truncated gzip: none. */
static void test_frame_corrupt(void **state)
{
	(void)state;
	struct tree t;
	tree_make(&t);
	char p[256], g[256];
	path_of(p, sizeof(p), t.data, "bad-header.tfrecords");
	path_of(g, sizeof(g), t.data, "cut.tfrecords");
	write_file(p, TFR_COMPRESSION_NONE, 100, 40);
	write_file(g, TFR_COMPRESSION_GZIP, 100, 40);
	/* record 10's length CRC (after records of 40, 39, 38, ... bytes) */
	uint64_t off = 0;
	for (uint64_t i = 0; i < 10; i++)
		off += 16 + 40 - (i % 3);
	int fd = open(p, O_RDWR);
	assert_true(fd >= 0);
	uint8_t b;
	assert_int_equal(pread(fd, &b, 1, (off_t)off + 8), 1);
	b ^= 0x55;
	assert_int_equal(pwrite(fd, &b, 1, (off_t)off + 8), 1);
	close(fd);
	struct stat sg = stat_of(g);
	assert_int_equal(truncate(g, sg.st_size - 20), 0);
	assert_int_equal(pl_own_index_init(NULL), 0);
	struct framer x;
	framer_make(&x, TFR_COMPRESSION_NONE, PL_ON_CORRUPT_SKIP_RECORD);
	assert_int_equal(frame_file(&x, p, 0), 10); /* the rest of the file is skipped */
	struct stat sp = stat_of(p);
	uint64_t rec;
	assert_int_equal(pl_own_index_records(p, &sp, TFR_COMPRESSION_NONE, &rec), -ENOENT);
	framer_destroy(&x);
	framer_make(&x, TFR_COMPRESSION_GZIP, PL_ON_CORRUPT_SKIP_FILE);
	assert_true(frame_file(&x, g, 0) < 100);
	sg = stat_of(g);
	assert_int_equal(pl_own_index_records(g, &sg, TFR_COMPRESSION_GZIP, &rec), -ENOENT);
	framer_destroy(&x);
	pl_own_index_fini();
	tree_remove(&t);
}

/* Framers on threads (one per thread, as in the pipeline) and lookups meanwhile (for TSan). */
struct worker {
	const struct tree *t;
	int k;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	for (int i = 0; i < 8; i++) {
		char name[64], p[256];
		snprintf(name, sizeof(name), "t%d-%d.tfrecords", w->k, i);
		path_of(p, sizeof(p), w->t->data, name);
		sized_file(p, 2000 * 26);
		collect_fake(p, 2000, 10, true);
		struct stat st = stat_of(p);
		uint64_t rec = 0;
		if (pl_own_index_records(p, &st, TFR_COMPRESSION_NONE, &rec) != 0 || rec != 2000)
			return (void *)1;
	}
	return NULL;
}

static void test_threads(void **state)
{
	(void)state;
	struct tree t;
	tree_make(&t);
	assert_int_equal(pl_own_index_init(t.state), 0);
	pthread_t th[4];
	struct worker w[4];
	for (int k = 0; k < 4; k++) {
		w[k] = (struct worker){ &t, k };
		assert_int_equal(pthread_create(&th[k], NULL, work, &w[k]), 0);
	}
	for (int k = 0; k < 4; k++) {
		void *r;
		assert_int_equal(pthread_join(th[k], &r), 0);
		assert_null(r);
	}
	pl_own_index_fini();
	struct tfr_index *ix = own_index_file(&t, NULL, 0);
	assert_non_null(ix);
	assert_int_equal(tfr_index_count(ix), 32);
	tfr_index_destroy(ix);
	tree_remove(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_collect_stride),	 cmocka_unit_test(test_stale_and_absent),
		cmocka_unit_test(test_collect_no_entry), cmocka_unit_test(test_load),
		cmocka_unit_test(test_frame_whole_none), cmocka_unit_test(test_frame_whole_gzip),
		cmocka_unit_test(test_frame_corrupt),	 cmocka_unit_test(test_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
