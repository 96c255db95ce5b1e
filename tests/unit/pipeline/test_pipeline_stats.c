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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stats_stages),
		cmocka_unit_test(test_stats_epochs),
		cmocka_unit_test(test_stats_dropped_record),
		cmocka_unit_test(test_stats_read_depth),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
