/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for daemon/pipeline/driver.c's stats: every stage's counters after whole epochs. */
#include "daemon/pipeline/pipeline.h"

#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/pipeline/read.h"
#include "daemon/pipeline/spec.h"
#include "tests/unit/pipeline/pipeline_fixture.h"

/* What a dataset holds: its files' bytes and its records' payload bytes (from its layout). */
struct totals {
	uint64_t file_bytes, record_bytes;
};

static struct totals dataset_totals(const struct dataset_layout *l)
{
	struct totals t = { 0 };
	for (unsigned k = 0; k < N_FILES; k++) {
		t.file_bytes += l->size[k];
		for (unsigned i = 0; i < FILE_RECS[k]; i++)
			t.record_bytes += l->len[k][i];
	}
	return t;
}

/* Drain spec a to its end (it must end without error) and return its stats; *ret_s: the stream. */
static void stats_of(const struct spec_args *a, struct pl_stats *ret, struct stream **ret_s)
{
	struct pl_pipeline *p = create(a, NULL);
	struct stream *s = stream_new();
	drain(p, s, 0, false);
	assert_stream_ok(s);
	assert_int_equal(s->end, 0);
	/* the driver publishes its last counters before the stream's end reaches the consumer */
	pl_pipeline_get_stats(p, ret);
	pl_pipeline_destroy(p);
	*ret_s = s;
}

/*
 * The counters the stream fixes exactly: e epochs of a dataset of `recs` records (`dropped` of
 * them dropped by parse under skip_record) in batches of `batch`, with or without the shuffle
 * stage (of `shuffle_elems`), and the legacy fields against the stages they come from.
 */
static void check_counts(const struct pl_stats *st, const struct stream *s, uint64_t e,
			 const struct totals *t, uint64_t dropped, bool shuffle,
			 uint64_t shuffle_elems, uint64_t batch)
{
	const struct pl_stage_stats *g = st->stages;
	const uint64_t recs = e * N_RECS, rows = recs - e * dropped;
	const uint64_t batches = e * ((N_RECS + batch - 1) / batch);

	assert_int_equal(g[PL_STAGE_FILES].elems_in, e * N_FILES);
	assert_int_equal(g[PL_STAGE_FILES].elems_out, e * N_FILES);
	assert_int_equal(g[PL_STAGE_FILES].buffered, 0);

	assert_int_equal(g[PL_STAGE_READ].elems_in, e * N_FILES); /* files opened */
	assert_int_equal(g[PL_STAGE_READ].bytes_out, e * t->file_bytes);
	assert_int_equal(g[PL_STAGE_READ].elems_out, g[PL_STAGE_READ].completions); /* chunks */

	assert_int_equal(g[PL_STAGE_FRAME].elems_out, recs);
	assert_int_equal(g[PL_STAGE_FRAME].bytes_out, e * t->record_bytes);
	assert_int_equal(g[PL_STAGE_FRAME].dropped, 0);

	assert_int_equal(g[PL_STAGE_WINDOW].elems_in, 0); /* the independent loader has none */
	assert_int_equal(g[PL_STAGE_WINDOW].elems_out, 0);

	assert_int_equal(g[PL_STAGE_INTERLEAVE].elems_in, recs);
	assert_int_equal(g[PL_STAGE_INTERLEAVE].elems_out, recs);
	assert_int_equal(g[PL_STAGE_INTERLEAVE].bytes_out, e * t->record_bytes);
	assert_int_equal(g[PL_STAGE_INTERLEAVE].buffered, 0); /* every slot closed */

	/* not enabled, the shuffle stage passes elements through uncounted */
	assert_int_equal(g[PL_STAGE_SHUFFLE].elems_in, shuffle ? recs : 0);
	assert_int_equal(g[PL_STAGE_SHUFFLE].elems_out, shuffle ? recs : 0);
	assert_int_equal(g[PL_STAGE_SHUFFLE].bytes_in, shuffle ? e * t->record_bytes : 0);
	assert_int_equal(g[PL_STAGE_SHUFFLE].bytes_out, shuffle ? e * t->record_bytes : 0);
	assert_int_equal(g[PL_STAGE_SHUFFLE].buffered, 0);
	assert_int_equal(g[PL_STAGE_SHUFFLE].capacity, shuffle ? shuffle_elems : 0);

	assert_int_equal(g[PL_STAGE_PARSE].elems_in, recs);
	assert_int_equal(g[PL_STAGE_PARSE].elems_out, rows);
	assert_int_equal(g[PL_STAGE_PARSE].elems_out, s->n_ids); /* the rows delivered */
	assert_int_equal(g[PL_STAGE_PARSE].dropped, e * dropped);
	assert_int_equal(g[PL_STAGE_PARSE].completions, batches);
	assert_int_equal(g[PL_STAGE_PARSE].buffered, 0); /* no job in flight */

	assert_int_equal(g[PL_STAGE_DELIVER].elems_in, batches);
	assert_int_equal(g[PL_STAGE_DELIVER].elems_in, s->n);
	assert_int_equal(g[PL_STAGE_DELIVER].elems_out, batches);
	assert_int_equal(g[PL_STAGE_DELIVER].completions, batches); /* drain released each */
	assert_int_equal(g[PL_STAGE_DELIVER].buffered, 0);
	assert_int_equal(g[PL_STAGE_DELIVER].bytes_in, g[PL_STAGE_PARSE].bytes_out);

	/* the legacy fields are the stages' */
	assert_int_equal(st->files_opened, g[PL_STAGE_READ].elems_in);
	assert_int_equal(st->records, g[PL_STAGE_FRAME].elems_out);
	assert_int_equal(st->record_bytes, g[PL_STAGE_FRAME].bytes_out);
	assert_int_equal(st->file_bytes, g[PL_STAGE_READ].bytes_out);
	assert_int_equal(st->batches, g[PL_STAGE_DELIVER].elems_in);
	assert_int_equal(st->rows, g[PL_STAGE_PARSE].elems_out);
	assert_int_equal(st->skipped_records, e * dropped);
	assert_int_equal(st->skipped_files, 0);
}

/*
 * The CPU split: the driver's time is shared out between its stages (and parse also gets the
 * pool's task time), so the stages together never hold more than the driver's and the tasks'
 * time; parse did work, so it has some.
 */
static void check_cpu(const struct pl_stats *st)
{
	uint64_t sum = 0;
	for (unsigned i = 0; i < PL_STAGE_COUNT_; i++)
		sum += st->stages[i].cpu_ns;
	assert_true(st->driver_cpu_ns > 0);
	assert_true(st->stages[PL_STAGE_PARSE].cpu_ns > 0);
	assert_true(sum <= st->driver_cpu_ns + st->parse_ns);
}

/* One epoch, in file order and shuffled, two reads and two parses: every stage's counters. */
static void test_stats_stages(void **state)
{
	(void)state;
	const struct totals t = dataset_totals(&g_layout);
	for (int shuffle = 0; shuffle < 2; shuffle++) {
		struct spec_args a = spec_default();
		a.shuffle = shuffle;
		a.shuffle_elems = 300;
		a.reads = 2;
		struct pl_stats st;
		struct stream *s;
		stats_of(&a, &st, &s);
		assert_int_equal(s->n_ids, N_RECS);
		check_counts(&st, s, 1, &t, 0, shuffle, 300, 64);
		check_cpu(&st);
		stream_free(s);
	}
}

/* Two epochs: the counters run on across epochs (the files again, the reads again). */
static void test_stats_epochs(void **state)
{
	(void)state;
	const struct totals t = dataset_totals(&g_layout);
	struct spec_args a = spec_default();
	a.epochs = "2";
	a.shuffle = true;
	a.batch = 50;
	struct pl_stats st;
	struct stream *s;
	stats_of(&a, &st, &s);
	check_counts(&st, s, 2, &t, 0, true, 100, 50);
	check_cpu(&st);
	stream_free(s);
}

/* A record parse drops under skip_record: parse's dropped, the rows and skipped_records agree. */
static void test_stats_dropped_record(void **state)
{
	(void)state;
	char dir[PATH_MAX];
	struct dataset_layout l;
	sub_dir("no_id", dir);
	assert_int_equal(make_dataset(dir, SPOIL_NO_ID, 2, 17, &l), 0);
	const struct totals t = dataset_totals(&l);
	struct spec_args a = spec_default();
	a.dir = dir;
	a.on_corrupt = "skip_record";
	struct pl_stats st;
	struct stream *s;
	stats_of(&a, &st, &s);
	assert_int_equal(s->n_ids, N_RECS - 1);
	check_counts(&st, s, 1, &t, 1, false, 0, 64);
	stream_free(s);
}

/*
 * The read stage's capacity is every slot's buffers: its reads in flight + 1 + PL_PIN_CHUNKS.
 * Without cycle_length, 4 reads in flight per slot of num_parallel_reads slots (as before the
 * key); with it, num_parallel_reads shared by the cycle's slots, ceil(reads / cycle) each
 * within 1 .. 16, and "auto" 4 each.
 */
static void test_stats_read_depth(void **state)
{
	(void)state;
	const struct {
		int reads, cycle_length;
		bool shuffle;
		uint64_t slots, depth;
	} cases[] = {
		{ 1, 0, false, 1, 4 },	 { 2, 0, false, 2, 4 },	    { -1, 0, false, 4, 4 },
		{ 1, 0, true, 2, 4 },	 { 8, 0, true, 2, 4 },	    { 1, 2, false, 2, 1 },
		{ 2, 2, false, 2, 1 },	 { 3, 2, false, 2, 2 },	    { 8, 2, false, 2, 4 },
		{ 64, 2, false, 2, 16 }, { 1024, 3, false, 3, 16 }, { -1, 2, false, 2, 4 },
		{ 5, 4, false, 4, 2 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct spec_args a = spec_default();
		a.reads = cases[i].reads;
		a.cycle_length = cases[i].cycle_length;
		a.shuffle = cases[i].shuffle; /* num_mix_files 2 */
		struct pl_stats st;
		struct stream *s;
		stats_of(&a, &st, &s);
		assert_int_equal(s->n_ids, N_RECS);
		assert_int_equal(st.stages[PL_STAGE_INTERLEAVE].capacity, cases[i].slots);
		uint64_t want = cases[i].slots * (cases[i].depth + 1 + PL_PIN_CHUNKS);
		if (st.stages[PL_STAGE_READ].capacity != want)
			fail_msg("reads %d, cycle_length %d, shuffle %d: read capacity %llu, "
				 "expected %llu (%llu slots of %llu reads in flight)",
				 cases[i].reads, cases[i].cycle_length, cases[i].shuffle,
				 (unsigned long long)st.stages[PL_STAGE_READ].capacity,
				 (unsigned long long)want, (unsigned long long)cases[i].slots,
				 (unsigned long long)cases[i].depth);
		stream_free(s);
	}
}

/*
 * What a tuner may give a pipeline (pl_pipeline_tunable), from its spec: the knobs left "auto"
 * and their bounds, and within args.ram_budget B the cycle's read buffers (slots x (depth + 1 +
 * PL_PIN_CHUNKS) x read size) and the batch jobs in flight (x the batch's bytes) each within
 * B / 2, a knob that cannot fit keeping its least; explicit values never bounded. The
 * pipelines are created without starting: the bounds are set at creation.
 */
static void test_tune_bounds(void **state)
{
	(void)state;
	const long long M = 1LL << 20;
	/* a batch of "id" and "vec" (no "tag": a size known): the layout's bound, 4096 for the
	   header and table, each tensor's rows and 4096 of alignment */
#define BATCH_BYTES(rows) (4096 + ((uint64_t)(rows)*8 + 4096) + ((uint64_t)(rows)*8 + 4096))
	const struct {
		const char *what;
		bool tune;
		long long budget;
		int batch; /* 0: 64 rows with "tag" (no fixed batch size) */
		int prefetch, reads, cycle_length;
		long read_bytes; /* -1: "auto" */
		bool shuffle;
		unsigned prefetch_max;
		size_t chunk_max;
		unsigned depth_max;
		unsigned stat_prefetch_max; /* pl_stats.prefetch_max */
	} cases[] = {
		/* without a tuner nothing moves: "auto" is its fixed value (2 jobs, 1 MiB) */
		{ "untuned", false, 0, 0, -1, -1, 2, -1, false, 0, 0, 0, 2 },
		{ "untuned, a budget", false, M, 1024, -1, -1, 2, -1, false, 0, 0, 0, 2 },
		/* no budget: 32 jobs, 4 MiB reads within 256 MiB at 4 reads in flight, 16 */
		{ "no budget", true, 0, 1024, -1, 1, 0, -1, false, 32, 4 * M, 0, 32 },
		{ "no budget, cycle 8", true, 0, 0, -1, -1, 8, -1, false, 32, M, 16, 32 },
		{ "no budget, shuffled", true, 0, 0, -1, 4, 0, -1, true, 32, 4 * M, 0, 32 },
		/* 1 MiB: 512 KiB of jobs is 18 of 28672 bytes; 2 x (1 + 1 + 16) x 64 KiB is
		   over 512 KiB, so 1 read in flight of 64 KiB, the least */
		{ "1 MiB", true, M, 1024, -1, -1, 2, -1, false, 18, 64 << 10, 1, 18 },
		/* a batch of 32768 rows (536576 bytes) over 512 KiB: 1 job, the least, below the
		   2 of "auto" untuned (the most the stats show follows) */
		{ "1 MiB, big batches", true, M, 32768, -1, -1, 2, -1, false, 1, 64 << 10, 1, 1 },
		/* batches of no fixed size: the jobs' bound is 32 alone */
		{ "1 MiB, no batch size", true, M, 0, -1, -1, 2, -1, false, 32, 64 << 10, 1, 32 },
		/* 4 MiB, one slot: 15 + 1 + 16 chunks of 64 KiB are 2 MiB */
		{ "4 MiB", true, 4 * M, 1024, -1, -1, 1, -1, false, 32, 64 << 10, 15, 32 },
		/* 16 MiB, one slot: 16 reads in flight; 8 MiB / 33 chunks: 128 KiB reads */
		{ "16 MiB", true, 16 * M, 0, -1, -1, 1, -1, false, 32, 128 << 10, 16, 32 },
		/* 64 MiB, 2 slots: 32 MiB / 66 chunks: 256 KiB */
		{ "64 MiB", true, 64 * M, 0, -1, -1, 2, -1, false, 32, 256 << 10, 16, 32 },
		/* shuffled, 2 slots of 4 reads in flight (fixed): 6 MiB / 42 chunks: 128 KiB;
		   6 MiB of jobs: 219 of them, 32 */
		{ "12 MiB, shuffled", true, 12 * M, 1024, -1, 4, 0, -1, true, 32, 128 << 10, 0,
		  32 },
		/* a budget above 512 MiB takes the place of the 256 MiB default for reads */
		{ "1 TiB, cycle 8", true, 1LL << 40, 0, -1, -1, 8, -1, false, 32, 4 * M, 16, 32 },
		{ "256 MiB, cycle 8", true, 256 * M, 0, -1, -1, 8, -1, false, 32, 256 << 10, 16,
		  32 },
		/* explicit values stay: 100 jobs of 28672 bytes over a 1 MiB budget, and 1 MiB
		   reads; the reads in flight are bounded at that size (1: even 18 MiB of buffers
		   are over 512 KiB, or 8 MiB) */
		{ "explicit", true, M, 1024, 100, -1, 1, 1L << 20, false, 0, 0, 1, 100 },
		{ "explicit reads", true, 16 * M, 1024, -1, -1, 1, 1L << 20, false, 32, 0, 1, 32 },
	};
	assert_true(BATCH_BYTES(1024) == 28672);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct spec_args a = spec_default();
		if (cases[i].batch) {
			a.batch = cases[i].batch;
			a.no_tag = true;
		}
		a.prefetch = cases[i].prefetch;
		a.reads = cases[i].reads;
		a.cycle_length = cases[i].cycle_length;
		a.read_bytes = cases[i].read_bytes;
		a.shuffle = cases[i].shuffle;
		a.ram_budget = cases[i].budget;
		struct pl_pipeline_opts o;
		pl_pipeline_opts_init(&o);
		o.tune = cases[i].tune;
		o.defer_start = true;
		struct pl_pipeline *p = create(&a, &o);
		struct pl_tune max;
		struct pl_stats st;
		unsigned pf;
		pl_pipeline_tunable(p, &max);
		pl_pipeline_get_stats(p, &st);
		uint64_t bb = pl_pipeline_batch_bytes(p, &pf);
		pl_pipeline_destroy(p);
		if (max.prefetch != cases[i].prefetch_max || max.read_chunk != cases[i].chunk_max ||
		    max.read_depth != cases[i].depth_max ||
		    st.prefetch_max != cases[i].stat_prefetch_max)
			fail_msg("%s: bounds prefetch %u, read size %zu, reads in flight %u, stats "
				 "prefetch_max %u; expected %u, %zu, %u, %u",
				 cases[i].what, max.prefetch, max.read_chunk, max.read_depth,
				 st.prefetch_max, cases[i].prefetch_max, cases[i].chunk_max,
				 cases[i].depth_max, cases[i].stat_prefetch_max);
		assert_true(max.weight == UINT_MAX);
		assert_true(bb == (cases[i].batch ? BATCH_BYTES(cases[i].batch) : 0));
		if (!cases[i].tune || !cases[i].budget)
			continue;
		/* what the bounds allow fits the budget, unless at the knobs' least */
		uint64_t half = (uint64_t)cases[i].budget / 2;
		if (max.prefetch > 1 && bb)
			assert_true(max.prefetch * bb <= half);
		unsigned slots = cases[i].shuffle ? 2 : (unsigned)cases[i].cycle_length;
		unsigned depth = max.read_depth ? max.read_depth : st.read_depth;
		size_t chunk = max.read_chunk ? max.read_chunk : st.read_chunk;
		if (max.read_depth > 1 || max.read_chunk > (64 << 10))
			assert_true((uint64_t)slots * (depth + 1 + PL_PIN_CHUNKS) * chunk <= half);
		/* explicit values as the spec gave them */
		if (cases[i].prefetch >= 0)
			assert_int_equal(st.prefetch, cases[i].prefetch);
		if (cases[i].read_bytes > 0)
			assert_int_equal(st.read_chunk, cases[i].read_bytes);
	}
#undef BATCH_BYTES
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stats_stages),
		cmocka_unit_test(test_stats_epochs),
		cmocka_unit_test(test_stats_dropped_record),
		cmocka_unit_test(test_stats_read_depth),
		cmocka_unit_test(test_tune_bounds),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
