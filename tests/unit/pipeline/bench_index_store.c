/* SPDX-License-Identifier: Apache-2.0 */
/* What sluiced's own index costs the framer (docs/BENCHMARKS.md "index"): the store on vs off. */

/*
 * Not a test (built on demand: ninja -C BUILD tests/unit/pipeline/bench_own_index), one line of
 * key=value results per run; the off arm is the baseline, alternated with the on arm round by
 * round (medians):
 *   bench_own_index frame none|gzip|zlib ROUNDS FILE...  the framing loop alone (pl_frame over
 *       the files' bytes in memory, 1 MiB chunks, records pinned: no read, no copy)
 *   bench_own_index epoch SPEC ROUNDS                      one epoch of the pipeline in process
 *                                                          (as sluicectl run SPEC)
 * The store is on (pl_own_index_init(NULL): memory only) and empty at the start of each on
 * round, so every file is collected, as in a first epoch. SLUICE_BENCH_AA=1: both arms off (the
 * noise floor); SLUICE_BENCH_ONLY=on|off: every round that arm (for an instruction count under
 * valgrind --tool=cachegrind).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "daemon/pipeline/frame.h"
#include "daemon/pipeline/index_store.h"
#include "daemon/pipeline/pipeline.h"
#include "daemon/pipeline/spec.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double epoch(const char *spec_path)
{
	struct pl_spec *spec;
	struct io_error err;
	if (pl_spec_load_file(spec_path, &spec, &err) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		exit(1);
	}
	struct pl_pipeline_opts po;
	pl_pipeline_opts_init(&po);
	struct pl_pipeline *p;
	double t0 = now();
	if (pl_pipeline_create(spec, &po, &p, &err) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		exit(1);
	}
	pl_spec_destroy(spec);
	for (;;) {
		struct pl_batch *b;
		int r = pl_pipeline_next(p, 10000, &b, &err);
		if (r == 0)
			break;
		if (r < 0) {
			fprintf(stderr, "next: %s\n", err.msg);
			exit(1);
		}
		pl_batch_release(p, b);
	}
	pl_pipeline_destroy(p);
	return now() - t0;
}

/* ---- the framing loop alone, over files in memory ---- */
struct mem {
	uint8_t *buf;
	size_t len, pos;
	struct pl_block blk;
};
static void noput(struct pl_block *b)
{
	(void)b;
}
static int mnext(void *ctx, bool wait, struct pl_chunk *ret, struct io_error *err)
{
	(void)wait;
	(void)err;
	struct mem *m = ctx;
	if (m->pos >= m->len)
		return 0;
	size_t n = m->len - m->pos < (1u << 20) ? m->len - m->pos : (1u << 20);
	m->blk = (struct pl_block){
		.data = m->buf + m->pos, .cap = n, .used = n, .put = noput, .pin = true, .refs = 1
	};
	m->pos += n;
	*ret = (struct pl_chunk){ .blk = &m->blk, .last = m->pos >= m->len };
	return 1;
}
static void mab(void *ctx)
{
	(void)ctx;
}

static double frame_all(char **paths, int n, uint8_t **bufs, size_t *lens, enum tfr_compression c,
			uint64_t *ret_recs)
{
	struct mem m = { 0 };
	struct pl_store store = { 0 };
	struct pl_stage_stats st = { 0 };
	struct pl_frame_totals tot = { 0 };
	struct pl_prof prof = { 0 };
	struct pl_frame_opts o = { 0 };
	o.compression = c;
	o.read = mnext;
	o.abandon = mab;
	o.read_ctx = &m;
	o.store = &store;
	o.st = &st;
	o.tot = &tot;
	o.prof = &prof;
	struct pl_frame *fr;
	if (pl_frame_create(&o, &fr) < 0)
		exit(1);
	uint64_t recs = 0;
	double t0 = now();
	for (int i = 0; i < n; i++) {
		m.buf = bufs[i];
		m.len = lens[i];
		m.pos = 0;
		if (pl_frame_open(fr, 0, paths[i], lens[i]) < 0)
			exit(1);
		struct pl_rec r;
		struct io_error err;
		int k;
		while ((k = pl_frame_next(fr, true, &r, &err)) == 1) {
			recs++;
			pl_rec_unref(&r);
		}
		if (k < 0) {
			fprintf(stderr, "frame: %s\n", err.msg);
			exit(1);
		}
	}
	double t = now() - t0;
	pl_frame_destroy(fr);
	pl_store_fini(&store);
	*ret_recs = recs;
	return t;
}

/* ROUNDS: 1..64, else 0 */
static int rounds_arg(const char *s)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	return errno || *end || v < 1 || v > 64 ? 0 : (int)v;
}

int main(int argc, char **argv)
{
	int rounds = argc < 4 ? 0 : rounds_arg(argv[3]);
	if (!rounds) {
		fprintf(stderr, "usage: bench_own_index epoch SPEC ROUNDS | frame none|gzip|zlib "
				"ROUNDS FILE... (ROUNDS 1..64)\n");
		return 2;
	}
	double on[64], off[64];
	bool aa = getenv("SLUICE_BENCH_AA") != NULL;
	const char *only = getenv("SLUICE_BENCH_ONLY");
	if (!strcmp(argv[1], "epoch")) {
		epoch(argv[2]); /* warm */
		for (int i = 0; i < rounds; i++) {
			for (int j = 0; j < 2; j++) {
				bool is_on = only ? !strcmp(only, "on") : (i + j) % 2;
				if (is_on && !aa)
					pl_own_index_init(NULL);
				double t = epoch(argv[2]);
				if (is_on && !aa)
					pl_own_index_fini();
				(is_on ? on : off)[i] = t;
			}
		}
		qsort(on, rounds, sizeof(double), cmp);
		qsort(off, rounds, sizeof(double), cmp);
		printf("bench=own_index_epoch spec=%s off_s=%.4f on_s=%.4f on_vs_off=%.4f runs=%d "
		       "aa=%d\n",
		       argv[2], off[rounds / 2], on[rounds / 2], on[rounds / 2] / off[rounds / 2],
		       rounds, aa);
		return 0;
	}
	enum tfr_compression c;
	if (tfr_compression_parse(argv[2], &c) < 0) {
		fprintf(stderr, "bench_own_index: %s: not none, gzip or zlib\n", argv[2]);
		return 2;
	}
	int n = argc - 4;
	uint8_t **bufs = calloc(n, sizeof(*bufs));
	size_t *lens = calloc(n, sizeof(*lens));
	if (!bufs || !lens)
		return 1;
	for (int i = 0; i < n; i++) {
		struct stat st;
		int fd = open(argv[4 + i], O_RDONLY | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st) < 0) {
			perror(argv[4 + i]);
			return 1;
		}
		lens[i] = st.st_size;
		bufs[i] = malloc(lens[i] ? lens[i] : 1);
		if (!bufs[i])
			return 1;
		size_t got = 0;
		while (got < lens[i]) {
			ssize_t k = read(fd, bufs[i] + got, lens[i] - got);
			if (k <= 0)
				return 1;
			got += k;
		}
		close(fd);
	}
	uint64_t recs;
	frame_all(argv + 4, n, bufs, lens, c, &recs); /* warm */
	for (int i = 0; i < rounds; i++)
		for (int j = 0; j < 2; j++) {
			bool is_on = only ? !strcmp(only, "on") : (i + j) % 2;
			if (is_on && !aa)
				pl_own_index_init(NULL);
			double t = frame_all(argv + 4, n, bufs, lens, c, &recs);
			if (is_on && !aa) {
				uint64_t got;
				struct stat st;
				stat(argv[4], &st);
				if (pl_own_index_records(argv[4], &st, c, &got) < 0) {
					fprintf(stderr, "no entry made\n");
					return 1;
				}
				pl_own_index_fini();
			}
			(is_on ? on : off)[i] = t;
		}
	qsort(on, rounds, sizeof(double), cmp);
	qsort(off, rounds, sizeof(double), cmp);
	printf("bench=own_index_frame compression=%s files=%d records=%llu off_s=%.4f on_s=%.4f "
	       "off_ns_per_record=%.2f on_ns_per_record=%.2f delta_ns_per_record=%.3f "
	       "on_vs_off=%.4f runs=%d aa=%d\n",
	       argv[2], n, (unsigned long long)recs, off[rounds / 2], on[rounds / 2],
	       off[rounds / 2] * 1e9 / recs, on[rounds / 2] * 1e9 / recs,
	       (on[rounds / 2] - off[rounds / 2]) * 1e9 / recs, on[rounds / 2] / off[rounds / 2],
	       rounds, aa);
	return 0;
}
