/* SPDX-License-Identifier: Apache-2.0 */
/* sluice-bench read: decode throughput of the validate path, with memcpy and read() baselines. */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/dataset.h"
#include "sched/sched.h"
#include "tools/common/check.h"
#include "tools/common/cliarg.h"
#include "tools/common/scan.h"

#define MEMCPY_BUF	 (64ul << 20)
#define MEMCPY_MIN_BYTES (512ul << 20)
#define READ_BUF	 (1ul << 20)

static void read_usage(FILE *f)
{
	fprintf(f, "usage: sluice-bench read DIR [--threads N] [--repeat R]\n"
		   "\n"
		   "Runs the validate path (read + frame + CRC + decode and check every\n"
		   "manifest feature) over the dataset with 1 thread and with N threads (default:\n"
		   "online CPUs), and, in the same run, memcpy of the same number of bytes (a 64 "
		   "MiB\n"
		   "buffer copied repeatedly) and a plain read() loop over the same files (page\n"
		   "cache warmed first).\n"
		   "Each measurement is the best of R runs (default 3).\n");
}

/* Read every file whole with read(); returns the bytes read or a negative errno. */
static int64_t read_all_files(const struct dataset *ds, uint8_t *buf)
{
	int64_t total = 0;
	size_t i;

	for (i = 0; i < ds->n_files; i++) {
		int fd = open(ds->files[i].path, O_RDONLY | O_CLOEXEC);
		ssize_t n;

		if (fd < 0)
			return -errno;
		while ((n = read(fd, buf, READ_BUF)) > 0)
			total += n;
		if (n < 0) {
			int e = -errno;

			close(fd);
			return e;
		}
		close(fd);
	}
	return total;
}

struct timing {
	double wall_s, cpu_s;
};

static void best_of(struct timing *best, double wall, double cpu, unsigned run)
{
	if (run == 0 || wall < best->wall_s) {
		best->wall_s = wall;
		best->cpu_s = cpu;
	}
}

/* The baseline: single-thread memcpy of `bytes` bytes through a 64 MiB buffer. */
static int bench_memcpy(uint64_t bytes, unsigned repeat, double *ret_mb_per_s)
{
	volatile uint8_t sink = 0;
	struct timing best = { 0, 0 };
	uint8_t *src, *dst;
	unsigned r;

	if (bytes < MEMCPY_MIN_BYTES)
		bytes = MEMCPY_MIN_BYTES;
	src = malloc(MEMCPY_BUF);
	dst = malloc(MEMCPY_BUF);
	if (!src || !dst) {
		free(src);
		free(dst);
		return -ENOMEM;
	}
	/* Fault both buffers in before timing. */
	memset(src, 0x5a, MEMCPY_BUF);
	memset(dst, 0xa5, MEMCPY_BUF);
	for (r = 0; r < repeat; r++) {
		double t0 = scan_now_s(), c0 = scan_thread_cpu_s();
		uint64_t left = bytes;

		while (left) {
			size_t n = left < MEMCPY_BUF ? (size_t)left : MEMCPY_BUF;

			memcpy(dst, src, n);
			sink ^= dst[n - 1];
			src[0]++;
			left -= n;
		}
		best_of(&best, scan_now_s() - t0, scan_thread_cpu_s() - c0, r);
	}
	(void)sink;
	free(src);
	free(dst);
	*ret_mb_per_s = (double)bytes / best.wall_s / 1e6;
	printf("bench=baseline_memcpy bytes=%" PRIu64 " buf_bytes=%lu wall_s=%.4f mb_per_s=%.0f\n",
	       bytes, MEMCPY_BUF, best.wall_s, *ret_mb_per_s);
	return 0;
}

static int bench_read_loop(const struct dataset *ds, unsigned repeat)
{
	struct timing best = { 0, 0 };
	int64_t bytes = 0;
	uint8_t *buf;
	unsigned r;

	buf = malloc(READ_BUF);
	if (!buf)
		return -ENOMEM;
	/* Warm the page cache. */
	bytes = read_all_files(ds, buf);
	for (r = 0; r < repeat && bytes >= 0; r++) {
		double t0 = scan_now_s(), c0 = scan_thread_cpu_s();

		bytes = read_all_files(ds, buf);
		best_of(&best, scan_now_s() - t0, scan_thread_cpu_s() - c0, r);
	}
	free(buf);
	if (bytes < 0)
		return (int)bytes;
	printf("bench=baseline_read files=%zu bytes=%" PRId64 " wall_s=%.4f cpu_s=%.4f "
	       "mb_per_s=%.0f mb_per_cpu_s=%.0f\n",
	       ds->n_files, bytes, best.wall_s, best.cpu_s, (double)bytes / best.wall_s / 1e6,
	       (double)bytes / (best.cpu_s > 0 ? best.cpu_s : 1e-9) / 1e6);
	return 0;
}

/*
 * One validate-path measurement: best of `repeat` full scans, decoding on a pool of `threads`
 * workers (use_pool), or on `threads` scan threads that decode what they read.
 */
static int bench_decode(const struct dataset *ds, const char *name, unsigned threads, bool use_pool,
			unsigned repeat, double memcpy_mb_per_s)
{
	struct sched_pool *pool = NULL;
	struct check_run best_run;
	struct io_error err;
	bool have = false;
	double cpu_s, mbs_cpu;
	unsigned r;
	int rc;

	memset(&best_run, 0, sizeof(best_run));
	if (use_pool) {
		struct sched_pool_opts po;

		sched_pool_opts_init(&po);
		po.workers = threads;
		rc = sched_pool_create(&po, &pool);
		if (rc < 0) {
			fprintf(stderr, "sluice-bench read: cannot start the pool: %s\n",
				strerror(-rc));
			return rc;
		}
	}
	for (r = 0; r < repeat; r++) {
		struct scan_opts so;
		struct check_run run;

		scan_opts_init(&so);
		if (use_pool)
			so.pool = pool;
		else
			so.threads = threads;
		err.msg[0] = '\0';
		rc = check_dataset(ds, &so, 1, &run, &err);
		if (rc < 0) {
			fprintf(stderr, "sluice-bench read: %s\n", err.msg);
			check_run_fini(&run);
			if (have)
				check_run_fini(&best_run);
			sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
			return rc;
		}
		if (!have || run.scan.wall_s < best_run.scan.wall_s) {
			if (have)
				check_run_fini(&best_run);
			best_run = run;
			have = true;
		} else {
			check_run_fini(&run);
		}
	}
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
	cpu_s = best_run.scan.process_cpu_s > 0 ? best_run.scan.process_cpu_s : 1e-9;
	mbs_cpu = (double)best_run.scan.total.file_bytes / cpu_s / 1e6;
	printf("bench=%s threads=%u io_threads=%u files=%" PRIu64 " records=%" PRIu64
	       " bytes=%" PRIu64 " problems=%" PRIu64 " wall_s=%.4f records_per_s=%.0f "
	       "mb_per_s=%.1f cpu_s=%.4f "
	       "records_per_cpu_s=%.0f mb_per_cpu_s=%.1f baseline_mb_per_s=%.0f ratio=%.3f "
	       "engine=%s\n",
	       name, threads, best_run.scan.threads, best_run.scan.total.files,
	       best_run.scan.total.records, best_run.scan.total.file_bytes, best_run.problems_total,
	       best_run.scan.wall_s, (double)best_run.scan.total.records / best_run.scan.wall_s,
	       (double)best_run.scan.total.file_bytes / best_run.scan.wall_s / 1e6, cpu_s,
	       (double)best_run.scan.total.records / cpu_s, mbs_cpu, memcpy_mb_per_s,
	       mbs_cpu / memcpy_mb_per_s, iox_engine_name(best_run.scan.engine));
	if (best_run.problems_total)
		fprintf(stderr,
			"sluice-bench read: warning: the dataset has %" PRIu64 " problems (run "
			"sluicectl "
			"validate)\n",
			best_run.problems_total);
	check_run_fini(&best_run);
	return 0;
}

int bench_read(int argc, char **argv)
{
	uint64_t threads = 0, repeat = 3;
	const char *dir = NULL;
	struct dataset *ds = NULL;
	struct scan_opts so;
	struct io_error err;
	double memcpy_mbs = 0;
	uint64_t bytes = 0;
	size_t i;
	int rc, a;

	static const struct option opts[] = {
		{ "threads", required_argument, NULL, 't' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *name;
	optind = 0;
	while ((a = bench_getopt(argc, argv, opts, &name)) != -1) {
		if (a == 'h') {
			read_usage(stdout);
			return 0;
		}
		if (a == '?')
			return 2;
		if (cli_parse_u64(optarg, 4096, a == 't' ? &threads : &repeat) < 0) {
			fprintf(stderr, "sluice-bench read: --%s needs a positive number\n", name);
			return 2;
		}
	}
	if (argc - optind != 1) {
		read_usage(stderr);
		return 2;
	}
	dir = argv[optind];
	err.msg[0] = '\0';
	rc = dataset_open_dir(dir, NULL, &ds, &err);
	if (rc < 0) {
		fprintf(stderr, "sluice-bench read: %s\n", err.msg[0] ? err.msg : strerror(-rc));
		return 1;
	}
	for (i = 0; i < ds->n_files; i++)
		bytes += ds->files[i].size;
	scan_opts_init(&so);
	so.threads = (unsigned)threads;
	threads = scan_opts_threads(&so, ds);

	rc = bench_read_loop(ds, (unsigned)repeat);
	if (!rc)
		rc = bench_memcpy(bytes, (unsigned)repeat, &memcpy_mbs);
	if (!rc)
		rc = bench_decode(ds, "read_1t", 1, true, (unsigned)repeat, memcpy_mbs);
	if (!rc)
		rc = bench_decode(ds, "read_all", (unsigned)threads, true, (unsigned)repeat,
				  memcpy_mbs);
	if (!rc)
		rc = bench_decode(ds, "read_all_nopool", (unsigned)threads, false, (unsigned)repeat,
				  memcpy_mbs);
	if (rc < 0)
		fprintf(stderr, "sluice-bench read: %s\n", strerror(-rc));
	dataset_destroy(ds);
	return rc < 0 ? 1 : 0;
}
