/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for iox_read_at: each test runs on io_uring (skipped where refused) and on pread. */
#include "io/iox.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
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

#include "tests/unit/skip.h"

#include "io/iox_internal.h"
#include "tests/unit/io/iox_fixture.h"

/*
 * The data: files whose byte at offset pos is byte (pos % 8) of mix(seed + pos / 8), so that
 * any range read can be checked wherever it starts. g_data is the file the reads at offsets
 * go to; g_whole[] are read whole (iox_add_file) beside them in the mixed test.
 */
#define DATA_SIZE  ((3u << 20) + 12345u)
#define DATA_SEED  0x5eedu
#define NWHOLE	   6
#define BAD_FD_NUM 1000000 /* above any RLIMIT_NOFILE a test runs under: never open */

struct tfile {
	char path[PATH_MAX + 16];
	uint64_t size;
	uint64_t seed;
	/* filled while reading */
	uint64_t next_off;
	int last_seen;
};

/* One read at an offset, as asked and as seen. */
struct req {
	uint64_t off;
	size_t len;
	int issued;
	int seen;
};

static char g_dir[PATH_MAX];
static struct tfile g_data;
static struct tfile g_whole[NWHOLE];
static uint8_t *g_expect; /* scratch for expected bytes, 1 MiB */

static const enum iox_engine eng_uring = IOX_ENGINE_URING;
static const enum iox_engine eng_pread = IOX_ENGINE_PREAD;

static void write_file(struct tfile *t, const char *name, uint64_t seed, uint64_t size)
{
	int w = snprintf(t->path, sizeof(t->path), "%s/%s", g_dir, name);
	assert_true(w > 0 && (size_t)w < sizeof(t->path));
	t->seed = seed;
	t->size = size;
	write_pattern(t->path, seed, size);
}

static int group_setup(void **state)
{
	static const uint64_t sizes[NWHOLE] = { 0, 1, 16384, 100000, 3 * 16384 + 5, 1u << 20 };
	const char *tmp = getenv("TMPDIR");
	char name[32];
	unsigned i;

	(void)state;
	snprintf(g_dir, sizeof(g_dir), "%s/test_iox_at.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(g_dir))
		return -1;
	write_file(&g_data, "data.bin", DATA_SEED, DATA_SIZE);
	for (i = 0; i < NWHOLE; i++) {
		snprintf(name, sizeof(name), "w%u.bin", i);
		write_file(&g_whole[i], name, 1000 + i, sizes[i]);
	}
	g_expect = malloc(1u << 20);
	return g_expect ? 0 : -1;
}

static int group_teardown(void **state)
{
	unsigned i;

	(void)state;
	unlink(g_data.path);
	for (i = 0; i < NWHOLE; i++)
		unlink(g_whole[i].path);
	rmdir(g_dir);
	free(g_expect);
	return 0;
}

static int open_data(void)
{
	int fd = open(g_data.path, O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	return fd;
}

/* What a read of len bytes at off of g_data must return: clipped at the end of the file. */
static size_t expect_len(uint64_t off, size_t len)
{
	if (off >= DATA_SIZE)
		return 0;
	return DATA_SIZE - off < len ? (size_t)(DATA_SIZE - off) : len;
}

/* Check an at-chunk against its request (c->user) and the pattern; marks the request seen. */
static void check_at(const struct iox_chunk *c, struct req *reqs, size_t nreqs)
{
	struct req *r = c->user;
	size_t want;

	assert_true(r >= reqs && r < reqs + nreqs);
	assert_true(r->issued);
	assert_false(r->seen);
	assert_int_equal(c->file_id, IOX_AT_FILE);
	assert_true(c->last);
	assert_false(c->direct);
	assert_int_equal(c->error, 0);
	assert_true(c->offset == r->off);
	want = expect_len(r->off, r->len);
	assert_int_equal(c->len, want);
	if (want) {
		assert_non_null(c->data);
		pattern_fill(DATA_SEED, r->off, g_expect, want);
		assert_memory_equal(c->data, g_expect, want);
	}
	r->seen = 1;
}

/* The bytes of an at-chunk of g_data, again (a held chunk must not change). */
static void check_bytes(const struct iox_chunk *c)
{
	if (c->len) {
		pattern_fill(DATA_SEED, c->offset, g_expect, c->len);
		assert_memory_equal(c->data, g_expect, c->len);
	}
}

/* Random requests over g_data: one in eight meets its end, one in sixteen is wholly past it. */
static void make_reqs(struct req *reqs, size_t n, size_t max_len, uint64_t seed)
{
	size_t i;

	for (i = 0; i < n; i++) {
		uint64_t r = mix64(seed + i);

		reqs[i].len = 1 + (size_t)(mix64(r) % max_len);
		if (r % 8 == 0)
			reqs[i].off = DATA_SIZE - (r >> 8) % (reqs[i].len + 1);
		else if (r % 16 == 1)
			reqs[i].off = DATA_SIZE + (r >> 8) % 100000;
		else
			reqs[i].off = (r >> 8) % DATA_SIZE;
		reqs[i].issued = 0;
		reqs[i].seen = 0;
	}
}

/*
 * Run nreqs reads through iox, keeping as many in flight as the buffers allow and holding up
 * to hold chunks before releasing them. Checks every chunk, the queue_depth limit, and that
 * iox_next says done (0) only once every read came back.
 */
static void run_reqs(struct iox *iox, int fd, struct req *reqs, size_t nreqs, unsigned hold,
		     unsigned *ret_waited)
{
	struct iox_chunk held[9], c;
	size_t next = 0, seen = 0;
	unsigned nheld = 0, waited = 0, i;
	int ret;

	assert_true(hold <= 8);
	for (;;) {
		while (next < nreqs) {
			ret = iox_read_at(iox, fd, g_data.path, reqs[next].off, reqs[next].len,
					  &reqs[next]);
			if (ret == -ENOBUFS) {
				assert_int_equal(iox_free_buffers(iox), 0);
				break;
			}
			assert_int_equal(ret, 0);
			reqs[next++].issued = 1;
			assert_true(iox->inflight <= iox->opts.queue_depth);
			if (iox->at_wait_head != UINT32_MAX)
				waited++;
		}
		ret = iox_next(iox, 5000, &c, NULL);
		if (ret == 0)
			break;
		assert_int_equal(ret, 1);
		assert_true(iox->inflight <= iox->opts.queue_depth);
		check_at(&c, reqs, nreqs);
		seen++;
		held[nheld++] = c;
		if (nheld > hold) {
			/* The oldest held bytes must still be intact when we let go. */
			check_bytes(&held[0]);
			iox_release(iox, &held[0]);
			memmove(held, held + 1, sizeof(held[0]) * (nheld - 1));
			nheld--;
		}
	}
	for (i = 0; i < nheld; i++)
		iox_release(iox, &held[i]);
	assert_int_equal(seen, nreqs);
	assert_int_equal(next, nreqs);
	for (i = 0; i < nreqs; i++)
		assert_true(reqs[i].seen);
	assert_int_equal(iox_at_pending(iox), 0);
	assert_int_equal(iox_free_buffers(iox), iox->opts.num_buffers);
	if (ret_waited)
		*ret_waited = waited;
}

static void test_random_reads(void **state)
{
	static const struct {
		size_t chunk;
		unsigned qd, nbuf, hold;
		bool fixed;
	} cfg[] = {
		{ 65536, 8, 24, 3, true },
		{ 4096, 3, 8, 2, true },
		{ 16384, 4, 16, 0, false },
	};
	enum { N = 1500 };
	struct req *reqs = calloc(N, sizeof(*reqs));
	unsigned ci;
	int fd = open_data();

	assert_non_null(reqs);
	for (ci = 0; ci < sizeof(cfg) / sizeof(cfg[0]); ci++) {
		struct iox_stats st;
		struct iox_opts o;
		struct iox *iox;
		uint64_t bytes = 0;
		unsigned waited, i;

		iox_opts_init(&o);
		o.chunk_len = cfg[ci].chunk;
		o.queue_depth = cfg[ci].qd;
		o.num_buffers = cfg[ci].nbuf;
		o.fixed_buffers = cfg[ci].fixed;
		iox = make_iox(state, &o);
		if (iox_engine_used(iox) == IOX_ENGINE_URING && cfg[ci].chunk == 4096) {
			/* 32 KiB is under any RLIMIT_MEMLOCK: reads go through read_fixed. */
			assert_true(iox_fixed_buffers(iox));
		}
		make_reqs(reqs, N, cfg[ci].chunk, 77 + ci);
		for (i = 0; i < N; i++)
			bytes += expect_len(reqs[i].off, reqs[i].len);
		run_reqs(iox, fd, reqs, N, cfg[ci].hold, &waited);
		/* More reads than queue_depth: some had to wait in the front end. */
		assert_true(waited > 0);
		iox_get_stats(iox, &st);
		assert_true(st.bytes == bytes);
		assert_true(st.reads >= N);
		assert_int_equal(st.files_done, 0);
		/* Done is done until more is asked. */
		assert_int_equal(iox_next(iox, 0, &(struct iox_chunk){ 0 }, NULL), 0);
		iox_destroy(iox);
	}
	/* The iox never closes the caller's fd. */
	assert_int_equal(fcntl(fd, F_GETFD) >= 0, 1);
	close(fd);
	free(reqs);
}

/* Every read comes back short: each is continued into its buffer from where it ended. */
static void test_short_reads(void **state)
{
	enum { N = 300 };
	struct req *reqs = calloc(N, sizeof(*reqs));
	struct iox_opts o;
	struct iox *iox;
	int fd = open_data();

	assert_non_null(reqs);
	iox_opts_init(&o);
	o.chunk_len = 65536;
	o.queue_depth = 5;
	o.num_buffers = 9;
	iox = make_iox(state, &o);
	gate_install(iox);
	g_gate.shorten = 1;
	make_reqs(reqs, N, 65536, 5);
	run_reqs(iox, fd, reqs, N, 1, NULL);
	assert_true(g_gate.cut > 2 * N);
	iox_destroy(iox);
	close(fd);
	free(reqs);
}

/* Reads that meet the end of the file: clipped, or empty (no buffer kept), never an error. */
static void test_end_of_file(void **state)
{
	struct req reqs[4] = {
		{ .off = DATA_SIZE - 100, .len = 4096 }, /* crosses the end: 100 bytes */
		{ .off = DATA_SIZE + 10, .len = 10 },	 /* wholly past it */
		{ .off = DATA_SIZE, .len = 1 },		 /* starts at it */
		{ .off = DATA_SIZE - 1, .len = 1 },	 /* the last byte, exactly */
	};
	struct io_error err;
	struct iox_chunk c;
	struct iox_opts o;
	struct iox *iox;
	unsigned i, got = 0;
	int fd = open_data(), ret;

	iox_opts_init(&o);
	o.chunk_len = 8192;
	o.num_buffers = 4;
	iox = make_iox(state, &o);
	for (i = 0; i < 4; i++) {
		assert_int_equal(
			iox_read_at(iox, fd, g_data.path, reqs[i].off, reqs[i].len, &reqs[i]), 0);
		reqs[i].issued = 1;
	}
	assert_int_equal(iox_free_buffers(iox), 0);
	assert_int_equal(iox_at_pending(iox), 4);
	while ((ret = iox_next(iox, 5000, &c, &err)) == 1) {
		struct req *r = c.user;
		unsigned nfree = iox_free_buffers(iox);

		check_at(&c, reqs, 4);
		if (r == &reqs[0])
			assert_int_equal(c.len, 100);
		if (r == &reqs[3])
			assert_int_equal(c.len, 1);
		if (c.len == 0) {
			/* An empty chunk keeps no buffer: it went back on delivery. */
			assert_true(r == &reqs[1] || r == &reqs[2]);
			iox_release(iox, &c);
			assert_int_equal(iox_free_buffers(iox), nfree);
		} else {
			iox_release(iox, &c);
			assert_int_equal(iox_free_buffers(iox), nfree + 1);
		}
		got++;
	}
	assert_int_equal(ret, 0);
	assert_int_equal(got, 4);
	assert_int_equal(iox_free_buffers(iox), 4);
	iox_destroy(iox);
	close(fd);
}

/* A read on a closed fd or a directory: a chunk with the error, and err names the path. */
static void test_bad_fd(void **state)
{
	struct req reqs[3] = { { .off = 123, .len = 100 },
			       { .off = 4096, .len = 10 },
			       { .off = 7, .len = 1 } };
	int dfd = open(g_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct io_error err;
	struct iox_chunk c;
	struct iox_opts o;
	struct iox *iox;
	unsigned got = 0;
	int ret;

	assert_true(dfd >= 0);
	assert_int_equal(fcntl(BAD_FD_NUM, F_GETFD), -1);
	iox_opts_init(&o);
	o.chunk_len = 4096;
	o.num_buffers = 4;
	iox = make_iox(state, &o);
	assert_int_equal(iox_read_at(iox, BAD_FD_NUM, "/no/such/bad-fd", 123, 100, &reqs[0]), 0);
	assert_int_equal(iox_read_at(iox, dfd, g_dir, 4096, 10, &reqs[1]), 0);
	assert_int_equal(iox_read_at(iox, BAD_FD_NUM, NULL, 7, 1, &reqs[2]), 0);
	for (;;) {
		memset(&err, 0, sizeof(err));
		ret = iox_next(iox, 5000, &c, &err);
		if (ret != 1)
			break;
		assert_int_equal(c.file_id, IOX_AT_FILE);
		assert_true(c.last);
		assert_int_equal(c.len, 0);
		assert_true(c.buf_ == IOX_NO_BUF);
		if (c.user == &reqs[0]) {
			assert_int_equal(c.error, -EBADF);
			assert_true(c.offset == 123);
			assert_string_equal(err.msg, "/no/such/bad-fd: read at offset 123: Bad "
						     "file "
						     "descriptor");
		} else if (c.user == &reqs[1]) {
			char want[PATH_MAX + 64];

			assert_int_equal(c.error, -EISDIR);
			assert_true(c.offset == 4096);
			snprintf(want, sizeof(want), "%s: read at offset 4096: Is a directory",
				 g_dir);
			assert_string_equal(err.msg, want);
		} else {
			assert_ptr_equal(c.user, &reqs[2]);
			assert_int_equal(c.error, -EBADF);
			assert_non_null(strstr(err.msg, "read at offset 7: Bad file descriptor"));
		}
		iox_release(iox, &c); /* no buffer: a no-op */
		got++;
	}
	assert_int_equal(ret, 0);
	assert_int_equal(got, 3);
	assert_int_equal(iox_free_buffers(iox), 4);
	/* The engine goes on after failed reads. */
	{
		int fd = open_data();
		struct req r = { .off = 1000, .len = 50, .issued = 1 };

		assert_int_equal(iox_read_at(iox, fd, g_data.path, r.off, r.len, &r), 0);
		assert_int_equal(iox_next(iox, 5000, &c, NULL), 1);
		check_at(&c, &r, 1);
		iox_release(iox, &c);
		assert_int_equal(iox_next(iox, 0, &c, NULL), 0);
		close(fd);
	}
	iox_destroy(iox);
	/* The iox never closes the caller's fd. */
	assert_true(fcntl(dfd, F_GETFD) >= 0);
	close(dfd);
}

static void test_einval_enobufs(void **state)
{
	struct req reqs[4] = { { 0 } };
	struct iox_chunk c[3], x;
	struct iox_opts o;
	struct iox *iox;
	unsigned i;
	int fd = open_data();

	iox_opts_init(&o);
	o.chunk_len = 5000; /* rounded up to 8192: the limit on len */
	o.num_buffers = 3;
	iox = make_iox(state, &o);
	assert_int_equal(iox->opts.chunk_len, 8192);
	assert_int_equal(iox_read_at(NULL, fd, g_data.path, 0, 1, NULL), -EINVAL);
	assert_int_equal(iox_read_at(iox, -1, g_data.path, 0, 1, NULL), -EINVAL);
	assert_int_equal(iox_read_at(iox, fd, g_data.path, 0, 0, NULL), -EINVAL);
	assert_int_equal(iox_read_at(iox, fd, g_data.path, 0, 8193, NULL), -EINVAL);
	assert_int_equal(iox_at_pending(iox), 0);
	assert_int_equal(iox_free_buffers(iox), 3);

	/* Each read takes a buffer from the ask to the release. */
	for (i = 0; i < 3; i++) {
		reqs[i].off = (uint64_t)i * 100000;
		reqs[i].len = 8192;
		reqs[i].issued = 1;
		assert_int_equal(iox_read_at(iox, fd, g_data.path, reqs[i].off, 8192, &reqs[i]), 0);
		assert_int_equal(iox_free_buffers(iox), 2 - i);
		assert_int_equal(iox_at_pending(iox), i + 1);
	}
	reqs[3].off = 1;
	reqs[3].len = 1;
	reqs[3].issued = 1;
	assert_int_equal(iox_read_at(iox, fd, g_data.path, 1, 1, &reqs[3]), -ENOBUFS);
	for (i = 0; i < 3; i++) {
		assert_int_equal(iox_next(iox, 5000, &c[i], NULL), 1);
		check_at(&c[i], reqs, 4);
		assert_int_equal(iox_at_pending(iox), 2 - i);
	}
	/* Consumer holds them all: still no buffer; iox_next is done (no file, nothing pending). */
	assert_int_equal(iox_read_at(iox, fd, g_data.path, 1, 1, &reqs[3]), -ENOBUFS);
	assert_int_equal(iox_next(iox, 0, &x, NULL), 0);

	/* With a file still to read, holding every buffer is -ENOBUFS, not a hang. */
	assert_int_equal(iox_add_file(iox, g_whole[5].path, &g_whole[5]), 0);
	assert_int_equal(iox_next(iox, -1, &x, NULL), -ENOBUFS);
	iox_release(iox, &c[0]);
	iox_release(iox, &c[0]); /* twice: ignored */
	assert_int_equal(iox_free_buffers(iox), 1);
	assert_int_equal(iox_read_at(iox, fd, g_data.path, 1, 1, &reqs[3]), 0);
	assert_int_equal(iox_free_buffers(iox), 0);
	/* One read in flight while the consumer holds the rest: it comes back, no -ENOBUFS. */
	assert_int_equal(iox_next(iox, 5000, &x, NULL), 1);
	check_at(&x, reqs, 4);
	iox_release(iox, &c[0]); /* stale: the buffer now belongs to x */
	assert_int_equal(iox_free_buffers(iox), 0);
	assert_int_equal(iox_next(iox, -1, &c[0], NULL), -ENOBUFS);
	/* Releasing lets the file go on, to its end. */
	iox_release(iox, &x);
	iox_release(iox, &c[1]);
	iox_release(iox, &c[2]);
	for (;;) {
		int ret = iox_next(iox, 5000, &x, NULL);

		if (ret == 0)
			break;
		assert_int_equal(ret, 1);
		assert_ptr_equal(x.user, &g_whole[5]);
		assert_int_equal(x.file_id, 0);
		iox_release(iox, &x);
		if (x.last)
			g_whole[5].last_seen = 1;
	}
	assert_int_equal(g_whole[5].last_seen, 1);
	g_whole[5].last_seen = 0;
	assert_int_equal(iox_free_buffers(iox), 3);
	iox_destroy(iox);
	close(fd);
}

/* While an at-read is out, iox_next waits (times out) rather than say done. */
static void test_not_done_while_pending(void **state)
{
	struct req r = { .off = 5555, .len = 3000, .issued = 1 };
	struct iox_chunk c;
	struct iox_opts o;
	struct iox *iox;
	int fd = open_data();

	iox_opts_init(&o);
	o.chunk_len = 4096;
	iox = make_iox(state, &o);
	gate_install(iox);
	g_gate.closed = 1;
	assert_int_equal(iox_read_at(iox, fd, g_data.path, r.off, r.len, &r), 0);
	assert_int_equal(iox_at_pending(iox), 1);
	assert_int_equal(iox_next(iox, 0, &c, NULL), -ETIMEDOUT);
	assert_int_equal(iox_next(iox, 30, &c, NULL), -ETIMEDOUT);
	assert_int_equal(iox_at_pending(iox), 1);
	gate_open(iox);
	assert_int_equal(iox_next(iox, 5000, &c, NULL), 1);
	check_at(&c, &r, 1);
	assert_int_equal(iox_at_pending(iox), 0);
	iox_release(iox, &c);
	assert_int_equal(iox_next(iox, 0, &c, NULL), 0);
	iox_destroy(iox);
	close(fd);
}

/* Check a whole-file chunk: in order within its file, the bytes, the end. */
static void check_whole(const struct iox_chunk *c, size_t chunk_len)
{
	struct tfile *t = c->user;

	assert_true(t >= g_whole && t < g_whole + NWHOLE);
	assert_int_equal(c->file_id, (uint32_t)(t - g_whole));
	assert_int_equal(t->last_seen, 0);
	assert_int_equal(c->error, 0);
	assert_true(c->offset == t->next_off);
	assert_true(c->len <= chunk_len);
	if (c->len) {
		pattern_fill(t->seed, c->offset, g_expect, c->len);
		assert_memory_equal(c->data, g_expect, c->len);
	}
	t->next_off += c->len;
	if (c->last) {
		assert_true(t->next_off == t->size);
		t->last_seen = 1;
	}
}

/* At-reads and whole files in one iox: both delivered in full, interleaved; 0 only at the end. */
static void test_mixed_with_files(void **state)
{
	enum { N = 1200 };
	struct req *reqs = calloc(N, sizeof(*reqs));
	struct iox_stats st;
	struct iox_chunk c;
	struct iox_opts o;
	struct iox *iox;
	size_t next = 0, seen = 0, files_left = NWHOLE;
	uint64_t bytes = 0;
	unsigned i, at_between = 0;
	int fd = open_data(), ret;

	assert_non_null(reqs);
	iox_opts_init(&o);
	o.chunk_len = 16384;
	o.queue_depth = 6;
	o.max_open_files = 3;
	o.num_buffers = 12;
	iox = make_iox(state, &o);
	make_reqs(reqs, N, 16384, 901);
	for (i = 0; i < N; i++)
		bytes += expect_len(reqs[i].off, reqs[i].len);
	for (i = 0; i < NWHOLE; i++) {
		g_whole[i].next_off = 0;
		g_whole[i].last_seen = 0;
		bytes += g_whole[i].size;
		assert_int_equal(iox_add_file(iox, g_whole[i].path, &g_whole[i]), (int)i);
	}
	for (;;) {
		/* Keep two buffers for the files, so that at-reads never crowd them out. */
		while (next < N && iox_free_buffers(iox) > 2) {
			assert_int_equal(iox_read_at(iox, fd, g_data.path, reqs[next].off,
						     reqs[next].len, &reqs[next]),
					 0);
			reqs[next++].issued = 1;
			assert_true(iox->inflight <= o.queue_depth);
		}
		ret = iox_next(iox, 5000, &c, NULL);
		if (ret == 0)
			break;
		assert_int_equal(ret, 1);
		if (c.file_id == IOX_AT_FILE) {
			check_at(&c, reqs, N);
			seen++;
			if (files_left && files_left < NWHOLE)
				at_between++;
		} else {
			check_whole(&c, 16384);
			if (c.last)
				files_left--;
		}
		iox_release(iox, &c);
	}
	/* 0 came only once every file and every at-read was delivered. */
	assert_int_equal(next, N);
	assert_int_equal(seen, N);
	assert_int_equal(files_left, 0);
	for (i = 0; i < NWHOLE; i++)
		assert_int_equal(g_whole[i].last_seen, 1);
	/* The two kinds were delivered interleaved, not one after the other. */
	assert_true(at_between > 0);
	iox_get_stats(iox, &st);
	assert_true(st.bytes == bytes);
	assert_int_equal(st.files_done, NWHOLE);
	assert_int_equal(iox_free_buffers(iox), 12);
	assert_int_equal(iox_at_pending(iox), 0);

	/* More may be asked after done: a read, then done again. */
	assert_int_equal(iox_read_at(iox, fd, g_data.path, 0, 16384, &reqs[0]), 0);
	reqs[0].seen = 0;
	reqs[0].off = 0;
	reqs[0].len = 16384;
	assert_int_equal(iox_next(iox, 5000, &c, NULL), 1);
	check_at(&c, reqs, N);
	iox_release(iox, &c);
	assert_int_equal(iox_next(iox, 0, &c, NULL), 0);
	iox_destroy(iox);
	close(fd);
	free(reqs);
}

/* Destroy with at-reads in flight, waiting, done and held: nothing leaks (ASan/TSan). */
static void test_destroy_in_flight(void **state)
{
	enum { N = 64 };
	struct req reqs[N];
	struct iox_chunk c;
	struct iox_opts o;
	struct iox *iox;
	unsigned i;
	int fd = open_data();

	iox_opts_init(&o);
	o.chunk_len = 65536;
	o.queue_depth = 4;
	o.num_buffers = 32;
	o.pread_threads = 6;
	make_reqs(reqs, N, 65536, 3);
	/* Waiting in the front end (past queue_depth) and in flight, one held. */
	iox = make_iox(state, &o);
	for (i = 0; i < 32; i++)
		assert_int_equal(
			iox_read_at(iox, fd, g_data.path, reqs[i].off, reqs[i].len, &reqs[i]), 0);
	assert_true(iox->at_wait_head != UINT32_MAX);
	assert_int_equal(iox_next(iox, 5000, &c, NULL), 1);
	iox_destroy(iox);

	/* Never reaped, with whole files beside them. */
	iox = make_iox(state, &o);
	for (i = 0; i < NWHOLE; i++)
		assert_true(iox_add_file(iox, g_whole[i].path, &g_whole[i]) >= 0);
	for (i = 0; i < 16; i++)
		assert_int_equal(
			iox_read_at(iox, fd, g_data.path, reqs[i].off, reqs[i].len, &reqs[i]), 0);
	iox_destroy(iox);

	/* Held back by the gate (queued to no backend) and in the front end. */
	iox = make_iox(state, &o);
	gate_install(iox);
	g_gate.closed = 1;
	for (i = 0; i < 10; i++)
		assert_int_equal(
			iox_read_at(iox, fd, g_data.path, reqs[i].off, reqs[i].len, &reqs[i]), 0);
	assert_int_equal(iox_next(iox, 0, &c, NULL), -ETIMEDOUT);
	iox_destroy(iox);

	/* The caller's fd outlives the iox. */
	assert_true(fcntl(fd, F_GETFD) >= 0);
	close(fd);
}

#define BOTH(f)                                           \
	cmocka_unit_test_prestate(f, (void *)&eng_uring), \
		cmocka_unit_test_prestate(f, (void *)&eng_pread)

int main(void)
{
	const struct CMUnitTest tests[] = {
		BOTH(test_random_reads),     BOTH(test_short_reads),
		BOTH(test_end_of_file),	     BOTH(test_bad_fd),
		BOTH(test_einval_enobufs),   BOTH(test_not_done_while_pending),
		BOTH(test_mixed_with_files), BOTH(test_destroy_in_flight),
	};

	unsetenv("SLUICE_IO_ENGINE");
	unsetenv("SLUICE_IOX_FAKE_URING_ERRNO");
	unsetenv("SLUICE_IOX_FAKE_REGISTER_ERRNO");
	return SL_RUN_GROUP(tests, group_setup, group_teardown);
}
