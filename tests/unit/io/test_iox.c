/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for iox: every test runs on the io_uring engine (skipped where refused) and on pread. */
#include "io/iox.h"

#include <dirent.h>
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/unit/skip.h"

#include "io/iox_internal.h"
#include "tests/unit/io/iox_fixture.h"

/*
 * The data set: NFILES files whose byte i is byte (i % 8) of mix(seed_j + i / 8), so that any
 * chunk can be checked at any offset. The sizes mix random ones up to 3 MiB with the edges:
 * 0, 1, exact multiples of every chunk_len the tests use, and one off either side.
 */
#define NFILES	 50
#define MAX_SIZE (3u << 20)

struct tfile {
	char path[PATH_MAX + 16];
	uint64_t size;
	uint64_t seed;
	/* filled while reading */
	uint64_t next_off;
	uint64_t got;
	int last_seen;
	int error;
};

static char g_dir[PATH_MAX];
static struct tfile g_files[NFILES];
static uint8_t *g_expect; /* scratch for expected bytes */

static const enum iox_engine eng_uring = IOX_ENGINE_URING;
static const enum iox_engine eng_pread = IOX_ENGINE_PREAD;

static int group_setup(void **state)
{
	static const uint64_t edges[] = { 0,	 1,    4096, 65536,    3 * 65536, 65535,
					  65537, 4095, 4097, MAX_SIZE, 8192 * 5,  12345 };
	const char *tmp = getenv("TMPDIR");
	uint64_t r = 42;
	unsigned i;

	snprintf(g_dir, sizeof(g_dir), "%s/test_iox.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(g_dir))
		return -1;
	for (i = 0; i < NFILES; i++) {
		struct tfile *t = &g_files[i];

		r = mix64(r);
		t->seed = r;
		if (i < sizeof(edges) / sizeof(edges[0]))
			t->size = edges[i];
		else
			t->size = mix64(r ^ 7) % (MAX_SIZE + 1);
		snprintf(t->path, sizeof(t->path), "%s/f%02u.bin", g_dir, i);
		write_pattern(t->path, t->seed, t->size);
	}
	g_expect = malloc(1u << 20);
	return g_expect ? 0 : -1;
}

static void rm_tree(const char *dir)
{
	char p[PATH_MAX + 300];
	struct dirent *de;
	DIR *d = opendir(dir);

	if (!d)
		return;
	while ((de = readdir(d))) {
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
			rm_tree(p);
		else
			unlink(p);
	}
	closedir(d);
	rmdir(dir);
}

static int group_teardown(void **state)
{
	rm_tree(g_dir);
	free(g_expect);
	return 0;
}

static void reset_files(void)
{
	unsigned i;

	for (i = 0; i < NFILES; i++) {
		g_files[i].next_off = 0;
		g_files[i].got = 0;
		g_files[i].last_seen = 0;
		g_files[i].error = 0;
	}
}

/* Check one chunk against its file: order, grid, bytes, last. */
static void check_chunk(const struct iox_opts *o, const struct iox_chunk *c, uint64_t size)
{
	size_t chunk_len = (o->chunk_len + 4095) & ~(size_t)4095;
	struct tfile *t = c->user;

	assert_non_null(t);
	assert_int_equal(t->last_seen, 0);
	assert_int_equal(c->error, 0);
	assert_true(c->offset == t->next_off);
	assert_true(c->offset % chunk_len == 0);
	assert_true(c->len <= chunk_len);
	assert_true(c->offset + c->len <= size);
	if (!c->last)
		assert_true(c->len == chunk_len);
	if (c->len) {
		pattern_fill(t->seed, c->offset, g_expect, c->len);
		assert_memory_equal(c->data, g_expect, c->len);
	}
	t->next_off += c->len;
	t->got += c->len;
	if (c->last) {
		t->last_seen = 1;
		assert_true(t->got == size);
	}
}

/* Read everything, releasing each chunk at once; returns the number of chunks. */
static unsigned drain(struct iox *iox, const struct iox_opts *o)
{
	struct iox_chunk c;
	unsigned n = 0;
	int ret;

	while ((ret = iox_next(iox, 5000, &c, NULL)) == 1) {
		struct tfile *t = c.user;

		check_chunk(o, &c, t->size);
		iox_release(iox, &c);
		n++;
	}
	assert_int_equal(ret, 0);
	return n;
}

static void test_many_files(void **state)
{
	static const size_t chunks[] = { 4096, 65536, 20000 };
	unsigned ci, i;

	for (ci = 0; ci < sizeof(chunks) / sizeof(chunks[0]); ci++) {
		struct iox_opts o;
		struct iox_stats st;
		struct iox *iox;
		uint64_t total = 0;

		iox_opts_init(&o);
		o.chunk_len = chunks[ci];
		o.queue_depth = 8;
		o.max_open_files = 4;
		o.num_buffers = 6;
		o.pread_threads = 3;
		iox = make_iox(state, &o);
		reset_files();
		for (i = 0; i < NFILES; i++) {
			assert_int_equal(iox_add_file(iox, g_files[i].path, &g_files[i]), (int)i);
			total += g_files[i].size;
		}
		drain(iox, &o);
		for (i = 0; i < NFILES; i++)
			assert_int_equal(g_files[i].last_seen, 1);
		iox_get_stats(iox, &st);
		assert_int_equal(st.files_done, NFILES);
		assert_true(st.bytes == total);
		assert_true(st.reads >= total / ((o.chunk_len + 4095) & ~(size_t)4095));
		iox_destroy(iox);
	}
}

static void test_missing_and_bad_files(void **state)
{
	char missing[PATH_MAX + 16], dir[PATH_MAX + 16];
	struct tfile tmiss = { .size = 0 }, tdir = { .size = 0 };
	int got_missing = 0, got_dir = 0, ret;
	struct io_error err;
	struct iox_chunk c;
	struct iox_opts o;
	struct iox *iox;

	snprintf(missing, sizeof(missing), "%s/no-such-file", g_dir);
	snprintf(dir, sizeof(dir), "%s/subdir", g_dir);
	assert_int_equal(mkdir(dir, 0755), 0);
	iox_opts_init(&o);
	o.chunk_len = 8192;
	o.queue_depth = 4;
	o.max_open_files = 2;
	iox = make_iox(state, &o);
	reset_files();
	assert_int_equal(iox_add_file(iox, g_files[9].path, &g_files[9]), 0);
	assert_int_equal(iox_add_file(iox, missing, &tmiss), 1);
	assert_int_equal(iox_add_file(iox, g_files[14].path, &g_files[14]), 2);
	assert_int_equal(iox_add_file(iox, dir, &tdir), 3);
	assert_int_equal(iox_add_file(iox, g_files[6].path, &g_files[6]), 4);
	for (;;) {
		memset(&err, 0, sizeof(err));
		ret = iox_next(iox, 5000, &c, &err);
		if (ret != 1)
			break;
		if (c.user == &tmiss) {
			assert_int_equal(c.error, -ENOENT);
			assert_true(c.last);
			assert_int_equal(c.len, 0);
			assert_int_equal(c.file_id, 1);
			assert_non_null(strstr(err.msg, missing));
			assert_non_null(strstr(err.msg, ": open: No such file or directory"));
			got_missing++;
		} else if (c.user == &tdir) {
			/* A directory is refused when it is opened (data files are regular). */
			assert_true(c.last);
			assert_int_equal(c.error, -EISDIR);
			assert_non_null(strstr(err.msg, dir));
			assert_non_null(strstr(err.msg, "open: Is a directory"));
			got_dir++;
		} else {
			check_chunk(&o, &c, ((struct tfile *)c.user)->size);
		}
		iox_release(iox, &c);
	}
	assert_int_equal(ret, 0);
	assert_int_equal(got_missing, 1);
	assert_int_equal(got_dir, 1);
	assert_int_equal(g_files[9].last_seen, 1);
	assert_int_equal(g_files[14].last_seen, 1);
	assert_int_equal(g_files[6].last_seen, 1);
	iox_destroy(iox);
	assert_int_equal(rmdir(dir), 0);
}

/* The consumer keeps max_open_files chunks and releases the oldest late; no deadlock. */
static void test_hold_chunks(void **state)
{
	enum { HOLD = 3 };
	struct iox_chunk held[HOLD], c;
	unsigned nheld = 0, i;
	struct iox_opts o;
	struct iox *iox;
	int ret;

	iox_opts_init(&o);
	o.chunk_len = 4096;
	o.queue_depth = 8;
	o.max_open_files = HOLD;
	o.num_buffers = HOLD + 1;
	iox = make_iox(state, &o);
	reset_files();
	for (i = 0; i < 20; i++)
		assert_true(iox_add_file(iox, g_files[i].path, &g_files[i]) >= 0);
	while ((ret = iox_next(iox, 5000, &c, NULL)) == 1) {
		check_chunk(&o, &c, ((struct tfile *)c.user)->size);
		if (nheld == HOLD) {
			struct tfile *t = held[0].user;

			/* The held bytes must be intact when we finally let go. */
			if (held[0].len) {
				pattern_fill(t->seed, held[0].offset, g_expect, held[0].len);
				assert_memory_equal(held[0].data, g_expect, held[0].len);
			}
			iox_release(iox, &held[0]);
			memmove(held, held + 1, sizeof(held[0]) * (HOLD - 1));
			nheld--;
		}
		held[nheld++] = c;
	}
	assert_int_equal(ret, 0);
	for (i = 0; i < nheld; i++)
		iox_release(iox, &held[i]);
	for (i = 0; i < 20; i++)
		assert_int_equal(g_files[i].last_seen, 1);
	iox_destroy(iox);
}

/* Holding every buffer cannot make progress: -ENOBUFS, not a hang; releasing resumes. */
static void test_all_buffers_held(void **state)
{
	struct iox_chunk a, b, c;
	struct iox_opts o;
	struct iox *iox;

	iox_opts_init(&o);
	o.chunk_len = 4096;
	o.num_buffers = 2;
	iox = make_iox(state, &o);
	reset_files();
	assert_int_equal(iox_add_file(iox, g_files[9].path, &g_files[9]), 0); /* 3 MiB */
	assert_int_equal(iox_next(iox, -1, &a, NULL), 1);
	assert_int_equal(iox_next(iox, -1, &b, NULL), 1);
	assert_int_equal(iox_next(iox, -1, &c, NULL), -ENOBUFS);
	/* A second release of the same chunk is ignored, not a double free. */
	iox_release(iox, &a);
	iox_release(iox, &a);
	assert_int_equal(iox->nfree, 1);
	assert_int_equal(iox_next(iox, -1, &c, NULL), 1);
	assert_true(c.offset == 2 * 4096);
	iox_release(iox, &a); /* stale: the buffer now belongs to c */
	assert_int_equal(iox->nfree, 0);
	iox_release(iox, &b);
	iox_release(iox, &c);
	iox_destroy(iox);
}

static void test_direct(void **state)
{
	struct iox_opts o;
	struct iox *iox;
	unsigned i;
	int fd;

	bool fs_direct;

	fd = open(g_files[9].path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	fs_direct = fd >= 0;
	if (fd < 0)
		print_message("O_DIRECT refused in %s (%s): testing the buffered fallback\n", g_dir,
			      strerror(errno));
	else
		close(fd);
	/* Each chunk says how it was read: direct where asked and taken, buffered otherwise. */
	for (int want = 0; want < 2; want++) {
		struct iox_chunk c;
		struct io_error err;

		assert_true(g_files[9].size > 0);
		iox_opts_init(&o);
		o.direct = want;
		iox = make_iox(state, &o);
		assert_int_equal(iox_add_file(iox, g_files[9].path, NULL), 0);
		assert_int_equal(iox_next(iox, -1, &c, &err), 1);
		assert_int_equal(c.error, 0);
		assert_true(c.len > 0);
		assert_int_equal(c.direct, want && fs_direct);
		iox_release(iox, &c);
		iox_destroy(iox);
	}
	iox_opts_init(&o);
	o.direct = true;
	o.chunk_len = 5000; /* rounded up to 8192 */
	o.queue_depth = 6;
	o.max_open_files = 3;
	iox = make_iox(state, &o);
	assert_int_equal(iox->opts.chunk_len, 8192);
	o.chunk_len = iox->opts.chunk_len;
	reset_files();
	for (i = 0; i < 16; i++)
		assert_true(iox_add_file(iox, g_files[i].path, &g_files[i]) >= 0);
	drain(iox, &o);
	for (i = 0; i < 16; i++)
		assert_int_equal(g_files[i].last_seen, 1);
	iox_destroy(iox);
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void test_timeouts(void **state)
{
	struct iox_stats st;
	struct iox_chunk c;
	struct iox_opts o;
	struct iox *iox;
	int64_t t0, dt;
	int ret;

	iox_opts_init(&o);
	o.chunk_len = 65536;
	iox = make_iox(state, &o);
	/* Nothing added: done at once, whatever the timeout. */
	assert_int_equal(iox_next(iox, 0, &c, NULL), 0);
	assert_int_equal(iox_next(iox, -1, &c, NULL), 0);
	assert_int_equal(iox_next(iox, -2, &c, NULL), -EINVAL);

	gate_install(iox);
	g_gate.closed = 1;
	reset_files();
	assert_int_equal(iox_add_file(iox, g_files[10].path, &g_files[10]), 0);
	t0 = now_ms();
	assert_int_equal(iox_next(iox, 0, &c, NULL), -ETIMEDOUT);
	assert_true(now_ms() - t0 < 500);
	t0 = now_ms();
	assert_int_equal(iox_next(iox, 120, &c, NULL), -ETIMEDOUT);
	dt = now_ms() - t0;
	assert_true(dt >= 110);
	assert_true(dt < 3000);
	iox_get_stats(iox, &st);
	assert_true(st.waits >= 1);
	assert_true(g_gate.nheld > 0);

	/* Reads go through: a poll-only consumer gets everything. */
	gate_open(iox);
	while ((ret = iox_next(iox, 0, &c, NULL)) != 0) {
		if (ret == -ETIMEDOUT)
			continue;
		assert_int_equal(ret, 1);
		check_chunk(&o, &c, g_files[10].size);
		iox_release(iox, &c);
	}
	assert_int_equal(g_files[10].last_seen, 1);

	/* Files may be added after the engine reported done. */
	assert_int_equal(iox_add_file(iox, g_files[1].path, &g_files[1]), 1);
	assert_int_equal(iox_next(iox, 1000, &c, NULL), 1);
	check_chunk(&o, &c, 1);
	iox_release(iox, &c);
	assert_int_equal(iox_next(iox, 1000, &c, NULL), 0);
	iox_destroy(iox);
}

/* Every read comes back short: each chunk is continued from where its read ended. */
static void test_short_reads(void **state)
{
	struct iox_opts o;
	struct iox *iox;
	unsigned i;

	iox_opts_init(&o);
	o.chunk_len = 16384;
	o.queue_depth = 5;
	o.max_open_files = 3;
	iox = make_iox(state, &o);
	gate_install(iox);
	g_gate.shorten = 1;
	reset_files();
	for (i = 0; i < 14; i++)
		assert_true(iox_add_file(iox, g_files[i].path, &g_files[i]) >= 0);
	drain(iox, &o);
	for (i = 0; i < 14; i++)
		assert_int_equal(g_files[i].last_seen, 1);
	assert_true(g_gate.cut > 100);
	iox_destroy(iox);
}

/* A file cut short after open: end of file is where a read returns 0 bytes. */
static void test_truncated_after_open(void **state)
{
	static const uint64_t cuts[] = { 3 * 16384, 3 * 16384 + 77, 5 };
	unsigned ci;

	/* ci >= 3: the same with O_DIRECT, where a read ending mid-block restarts at the block. */
	for (ci = 0; ci < 6; ci++) {
		char path[PATH_MAX + 16];
		struct tfile t = { .seed = 99 + ci, .size = 10 * 16384 + 3 };
		uint64_t cut = cuts[ci % 3];
		struct iox_chunk c;
		struct iox_opts o;
		struct iox *iox;
		int ret;

		snprintf(path, sizeof(path), "%s/trunc.bin", g_dir);
		write_pattern(path, t.seed, t.size);
		iox_opts_init(&o);
		o.chunk_len = 16384;
		o.direct = ci >= 3;
		iox = make_iox(state, &o);
		gate_install(iox);
		g_gate.closed = 1;
		assert_int_equal(iox_add_file(iox, path, &t), 0);
		assert_int_equal(iox_next(iox, 0, &c, NULL), -ETIMEDOUT); /* opened, reads held */
		assert_int_equal(truncate(path, (off_t)cut), 0);
		gate_open(iox);
		while ((ret = iox_next(iox, 5000, &c, NULL)) == 1) {
			check_chunk(&o, &c, cut);
			iox_release(iox, &c);
		}
		assert_int_equal(ret, 0);
		assert_int_equal(t.last_seen, 1);
		assert_true(t.got == cut);
		iox_destroy(iox);
		unlink(path);
	}
}

static void test_fake_refusal_fallback(void **state)
{
	struct io_error err = { "" };
	struct iox_chunk c;
	struct iox_opts o;
	struct iox *iox = NULL;

	(void)state;
	unsetenv("SLUICE_IO_ENGINE");
	setenv("SLUICE_IOX_FAKE_URING_ERRNO", "1", 1);
	iox_opts_init(&o);
	o.chunk_len = 4096;
	assert_int_equal(iox_create(&o, &iox, &err), 0);
	assert_int_equal(iox_engine_used(iox), IOX_ENGINE_PREAD);
	assert_non_null(iox_fallback_reason(iox));
	assert_string_equal(iox_fallback_reason(iox), "io_uring_queue_init: Operation not "
						      "permitted");
	reset_files();
	assert_int_equal(iox_add_file(iox, g_files[7].path, &g_files[7]), 0);
	while (iox_next(iox, 5000, &c, NULL) == 1) {
		check_chunk(&o, &c, g_files[7].size);
		iox_release(iox, &c);
	}
	assert_int_equal(g_files[7].last_seen, 1);
	iox_destroy(iox);

	/* When io_uring is required the refusal is an error. */
	iox = NULL;
	o.engine = IOX_ENGINE_URING;
	assert_int_equal(iox_create(&o, &iox, &err), -EPERM);
	assert_null(iox);
	assert_non_null(strstr(err.msg, "io_uring_queue_init: Operation not permitted"));
	o.engine = IOX_ENGINE_AUTO;
	setenv("SLUICE_IO_ENGINE", "uring", 1);
	setenv("SLUICE_IOX_FAKE_URING_ERRNO", "38", 1);
	assert_int_equal(iox_create(&o, &iox, &err), -ENOSYS);
	unsetenv("SLUICE_IO_ENGINE");
	unsetenv("SLUICE_IOX_FAKE_URING_ERRNO");
}

static void test_env_forces_pread(void **state)
{
	struct io_error err = { "" };
	struct iox_opts o;
	struct iox *iox = NULL;

	(void)state;
	iox_opts_init(&o);
	o.chunk_len = 4096;
	setenv("SLUICE_IO_ENGINE", "pread", 1);
	assert_int_equal(iox_create(&o, &iox, &err), 0);
	assert_int_equal(iox_engine_used(iox), IOX_ENGINE_PREAD);
	assert_string_equal(iox_fallback_reason(iox), "forced by SLUICE_IO_ENGINE=pread");
	assert_string_equal(iox_engine_name(iox_engine_used(iox)), "pread");
	iox_destroy(iox);

	iox = NULL;
	setenv("SLUICE_IO_ENGINE", "mmap", 1);
	assert_int_equal(iox_create(&o, &iox, &err), -EINVAL);
	assert_null(iox);
	assert_non_null(strstr(err.msg, "SLUICE_IO_ENGINE"));
	unsetenv("SLUICE_IO_ENGINE");

	/* The env var only steers AUTO. */
	setenv("SLUICE_IO_ENGINE", "uring", 1);
	o.engine = IOX_ENGINE_PREAD;
	assert_int_equal(iox_create(&o, &iox, &err), 0);
	assert_int_equal(iox_engine_used(iox), IOX_ENGINE_PREAD);
	iox_destroy(iox);
	unsetenv("SLUICE_IO_ENGINE");
}

static void test_bad_opts(void **state)
{
	struct io_error err = { "" };
	struct iox *iox = NULL;
	struct iox_opts o;

	iox_opts_init(&o);
	o.engine = *(const enum iox_engine *)*state;
	o.queue_depth = 0;
	assert_int_equal(iox_create(&o, &iox, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "queue_depth"));
	iox_opts_init(&o);
	o.max_open_files = 0;
	assert_int_equal(iox_create(&o, &iox, &err), -EINVAL);
	iox_opts_init(&o);
	o.chunk_len = 0;
	assert_int_equal(iox_create(&o, &iox, &err), -EINVAL);
	iox_opts_init(&o);
	o.num_buffers = 20000;
	assert_int_equal(iox_create(&o, &iox, &err), -EINVAL);
	iox_opts_init(&o);
	o.size = 0;
	assert_int_equal(iox_create(&o, &iox, &err), -EINVAL);
	iox_opts_init(&o);
	o.engine = (enum iox_engine)7;
	assert_int_equal(iox_create(&o, &iox, &err), -EINVAL);
	assert_null(iox);
	assert_int_equal(iox_add_file(NULL, "x", NULL), -EINVAL);
	iox_destroy(NULL);
}

/* Destroy with reads in flight and chunks held: threads stop, nothing leaks (ASan/TSan). */
static void test_destroy_in_flight(void **state)
{
	struct iox_chunk c;
	struct iox_opts o;
	struct iox *iox;
	unsigned i;

	iox_opts_init(&o);
	o.chunk_len = 65536;
	o.queue_depth = 16;
	o.pread_threads = 6;
	iox = make_iox(state, &o);
	reset_files();
	for (i = 0; i < NFILES; i++)
		assert_true(iox_add_file(iox, g_files[i].path, &g_files[i]) >= 0);
	assert_int_equal(iox_next(iox, 5000, &c, NULL), 1);
	iox_destroy(iox);

	iox = make_iox(state, &o);
	for (i = 0; i < NFILES; i++)
		assert_true(iox_add_file(iox, g_files[i].path, &g_files[i]) >= 0);
	iox_destroy(iox); /* never read */
}

static void test_registered_buffers(void **state)
{
	struct iox_opts o;
	struct iox *iox;
	unsigned i;

	iox_opts_init(&o);
	o.chunk_len = 4096;
	o.num_buffers = 8;
	iox = make_iox(state, &o);
	if (iox_engine_used(iox) == IOX_ENGINE_URING) {
		/* 32 KiB is under any RLIMIT_MEMLOCK: registration must have worked. */
		if (!iox_fixed_buffers(iox))
			print_message("not registered: %s\n", iox_fixed_note(iox));
		assert_true(iox_fixed_buffers(iox));
		assert_null(iox_fixed_note(iox));
	} else {
		assert_false(iox_fixed_buffers(iox));
	}
	iox_destroy(iox);

	/* Registration refused (RLIMIT_MEMLOCK): plain reads, the reason recorded. */
	setenv("SLUICE_IOX_FAKE_REGISTER_ERRNO", "12", 1);
	iox = make_iox(state, &o);
	unsetenv("SLUICE_IOX_FAKE_REGISTER_ERRNO");
	assert_false(iox_fixed_buffers(iox));
	if (iox_engine_used(iox) == IOX_ENGINE_URING)
		assert_string_equal(iox_fixed_note(iox), "io_uring_register_buffers: Cannot "
							 "allocate memory");
	reset_files();
	for (i = 0; i < 12; i++)
		assert_true(iox_add_file(iox, g_files[i].path, &g_files[i]) >= 0);
	drain(iox, &o);
	for (i = 0; i < 12; i++)
		assert_int_equal(g_files[i].last_seen, 1);
	iox_destroy(iox);
}

#define BOTH(f)                                           \
	cmocka_unit_test_prestate(f, (void *)&eng_uring), \
		cmocka_unit_test_prestate(f, (void *)&eng_pread)

int main(void)
{
	const struct CMUnitTest tests[] = {
		BOTH(test_many_files),
		BOTH(test_missing_and_bad_files),
		BOTH(test_hold_chunks),
		BOTH(test_all_buffers_held),
		BOTH(test_direct),
		BOTH(test_timeouts),
		BOTH(test_short_reads),
		BOTH(test_truncated_after_open),
		BOTH(test_fake_refusal_fallback),
		BOTH(test_env_forces_pread),
		BOTH(test_bad_opts),
		BOTH(test_destroy_in_flight),
		BOTH(test_registered_buffers),
	};

	unsetenv("SLUICE_IO_ENGINE");
	unsetenv("SLUICE_IOX_FAKE_URING_ERRNO");
	unsetenv("SLUICE_IOX_FAKE_REGISTER_ERRNO");
	return SL_RUN_GROUP(tests, group_setup, group_teardown);
}
