/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for daemon/pipeline/pipeline.c: checkpoints, corrupt records and errors at create. */
#include "daemon/pipeline/pipeline.h"

#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/pipeline/spec.h"
#include "tests/unit/pipeline/pipeline_fixture.h"

/* ---- checkpoints ---- */

static void test_save_restore(void **state)
{
	struct spec_args a = spec_default();
	a.shuffle = true;
	a.epochs = "2";
	a.batch = 64;
	struct stream *ref = run_all(&a, NULL, true);
	size_t per_epoch = (N_RECS + 63) / 64;
	assert_int_equal(ref->n, 2 * per_epoch);
	const size_t at[] = {
		0, 1, 7, per_epoch - 1, per_epoch, per_epoch + 1, 2 * per_epoch - 1, 2 * per_epoch
	};

	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		uint8_t blob[PL_STATE_MAX];
		struct pl_pipeline_opts o;
		struct pl_pipeline *p = create(&a, NULL);
		struct stream *s = stream_new();
		int len;

		if (at[i])
			drain(p, s, at[i], false);
		assert_stream_ok(s);
		len = pl_pipeline_save(p, blob, sizeof(blob));
		assert_true(len > 0 && len <= PL_STATE_MAX);
		pl_pipeline_destroy(p);
		stream_free(s);

		pl_pipeline_opts_init(&o);
		o.state = blob;
		o.state_len = (size_t)len;
		a.parses = 1 + (int)i % 3; /* the parse threads are not part of the position */
		p = create(&a, &o);
		s = stream_new();
		drain(p, s, 0, true);
		assert_stream_ok(s);
		assert_same_batches(ref, at[i], s);
		if (s->n)
			assert_int_equal(s->b[0].seq, at[i]);
		/* save after restore and no next(): the restored position */
		pl_pipeline_destroy(p);
		stream_free(s);
	}

	/* a state saved right after create, and after a restore without next() */
	uint8_t s0[PL_STATE_MAX], s1[PL_STATE_MAX];
	struct pl_pipeline *p = create(&a, NULL);
	struct stream *s = stream_new();
	drain(p, s, 5, false);
	int l0 = pl_pipeline_save(p, s0, sizeof(s0));
	pl_pipeline_destroy(p);
	stream_free(s);
	struct pl_pipeline_opts o;
	pl_pipeline_opts_init(&o);
	o.state = s0;
	o.state_len = (size_t)l0;
	p = create(&a, &o);
	int l1 = pl_pipeline_save(p, s1, sizeof(s1));
	assert_int_equal(l0, l1);
	assert_memory_equal(s0, s1, (size_t)l0);
	pl_pipeline_destroy(p);
	stream_free(ref);
}

static int create_rc(const struct spec_args *a, const struct pl_pipeline_opts *o,
		     struct io_error *err)
{
	struct pl_spec *spec = make_spec(a);
	struct pl_pipeline *p = (struct pl_pipeline *)(uintptr_t)0x1;
	int r = pl_pipeline_create(spec, o, &p, err);

	pl_spec_destroy(spec);
	if (r == 0)
		pl_pipeline_destroy(p);
	else
		assert_ptr_equal(p, (struct pl_pipeline *)(uintptr_t)0x1); /* untouched */
	return r;
}

static void test_restore_refused(void **state)
{
	struct spec_args a = spec_default();
	struct pl_pipeline_opts o;
	struct io_error err = { { 0 } };
	uint8_t blob[PL_STATE_MAX + 16], bad[PL_STATE_MAX + 16];
	struct stream *s = stream_new();

	a.shuffle = true;
	a.batch = 30;
	struct pl_pipeline *p = create(&a, NULL);
	drain(p, s, 3, false);
	assert_int_equal(pl_pipeline_save(p, blob, 0), -ENOSPC);
	int len = pl_pipeline_save(p, blob, sizeof(blob));
	assert_true(len > 0 && len <= PL_STATE_MAX);
	assert_int_equal(pl_pipeline_save(p, bad, (size_t)len - 1), -ENOSPC);
	assert_int_equal(pl_pipeline_save(p, bad, PL_STATE_MAX), len);
	pl_pipeline_destroy(p);
	stream_free(s);

	pl_pipeline_opts_init(&o);
	o.state = blob;
	o.state_len = (size_t)len;
	assert_int_equal(create_rc(&a, &o, &err), 0);

	/* another seed, another spec */
	a.seed = 8;
	assert_int_equal(create_rc(&a, &o, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "state"));
	a.seed = 7;
	a.batch = 31;
	assert_int_equal(create_rc(&a, &o, &err), -EBADMSG);
	a.batch = 30;
	a.shuffle = false;
	assert_int_equal(create_rc(&a, &o, &err), -EBADMSG);
	a.shuffle = true;

	/* truncated, lengthened, garbage, each byte of the header */
	o.state_len = (size_t)len - 1;
	assert_int_equal(create_rc(&a, &o, &err), -EBADMSG);
	o.state_len = 0;
	assert_int_equal(create_rc(&a, &o, &err), -EBADMSG);
	memcpy(bad, blob, (size_t)len);
	bad[len] = 0;
	o.state = bad;
	o.state_len = (size_t)len + 1;
	assert_int_equal(create_rc(&a, &o, &err), -EBADMSG);
	memset(bad, 0xab, sizeof(bad));
	o.state_len = (size_t)len;
	assert_int_equal(create_rc(&a, &o, &err), -EBADMSG);
	for (int i = 0; i < 24; i++) { /* magic, version, fingerprint, seed */
		memcpy(bad, blob, (size_t)len);
		bad[i] ^= 0x10;
		err.msg[0] = 0;
		if (create_rc(&a, &o, &err) != -EBADMSG)
			fail_msg("a state with byte %d flipped was accepted", i);
		assert_true(err.msg[0] != 0);
	}
}

/* The same spec over another set of data files refuses the state. */
static void test_restore_refused_other_files(void **state)
{
	char dir[PATH_MAX], path[PATH_MAX];
	struct spec_args a = spec_default();
	struct pl_pipeline_opts o;
	struct io_error err = { { 0 } };
	uint8_t blob[PL_STATE_MAX];
	struct stream *s = stream_new();

	sub_dir("other_files", dir);
	assert_int_equal(make_dataset(dir, SPOIL_NONE, 0, 0, NULL), 0);
	a.dir = dir;
	struct pl_pipeline *p = create(&a, NULL);
	drain(p, s, 2, false);
	int len = pl_pipeline_save(p, blob, sizeof(blob));
	pl_pipeline_destroy(p);
	stream_free(s);
	/* drop the last file */
	file_path(dir, N_FILES - 1, path);
	assert_int_equal(unlink(path), 0);
	pl_pipeline_opts_init(&o);
	o.state = blob;
	o.state_len = (size_t)len;
	assert_int_equal(create_rc(&a, &o, &err), -EBADMSG);
}

/* ---- fingerprints ---- */

/* pl_spec_fingerprint of spec args a. */
static void fp_of(const struct spec_args *a, uint8_t ret[16])
{
	struct pl_spec *spec = make_spec(a);
	struct io_error err = { { 0 } };
	if (pl_spec_fingerprint(spec, NULL, ret, &err) != 0)
		fail_msg("fingerprint: %s", err.msg);
	pl_spec_destroy(spec);
}

#define FP_EQUAL(x, y)	   assert_memory_equal(x, y, 16)
#define FP_NOT_EQUAL(x, y) assert_memory_not_equal(x, y, 16)

/*
 * The fingerprint holds the interleave cycle in effect and no knob of speed: num_parallel_reads
 * counts only while it is the cycle (no cycle_length, no shuffle). Two specs that differ only
 * in num_parallel_reads under one cycle_length are one pipeline (sluiced shares it), and so is
 * cycle_length N with num_parallel_reads N without it (the same batches).
 */
static void test_fingerprint_cycle(void **state)
{
	struct spec_args a = spec_default();
	uint8_t r1[16], r2[16], r3[16], r4[16], rauto[16], x[16];

	/* without cycle_length: num_parallel_reads is the cycle ("auto": 4) */
	a.reads = 1;
	fp_of(&a, r1);
	a.reads = 2;
	fp_of(&a, r2);
	a.reads = 3;
	fp_of(&a, r3);
	a.reads = 4;
	fp_of(&a, r4);
	a.reads = -1;
	fp_of(&a, rauto);
	FP_NOT_EQUAL(r1, r2);
	FP_NOT_EQUAL(r2, r3);
	FP_NOT_EQUAL(r3, r4);
	FP_EQUAL(r4, rauto);
	a.reads = 3;
	a.parses = 4; /* speed only */
	a.prefetch = 7;
	fp_of(&a, x);
	FP_EQUAL(x, r3);

	/* with it: the cycle, whatever the reads in flight */
	a = spec_default();
	a.cycle_length = 3;
	const int reads[] = { 1, 2, 3, 8, 1024, -1 };
	for (size_t i = 0; i < sizeof(reads) / sizeof(reads[0]); i++) {
		a.reads = reads[i];
		fp_of(&a, x);
		FP_EQUAL(x, r3);
	}
	a.cycle_length = 2;
	a.reads = 3;
	fp_of(&a, x);
	FP_EQUAL(x, r2);
	a.cycle_length = 1;
	a.reads = 8;
	fp_of(&a, x);
	FP_EQUAL(x, r1);

	/* shuffled: num_mix_files is the cycle, num_parallel_reads never counts */
	a = spec_default();
	a.shuffle = true;
	a.reads = 1;
	fp_of(&a, r1);
	a.reads = 8;
	fp_of(&a, x);
	FP_EQUAL(x, r1);

	/* a running pipeline has its spec's fingerprint */
	a = spec_default();
	a.cycle_length = 3;
	a.reads = 8;
	struct pl_pipeline *p = create(&a, NULL);
	pl_pipeline_fingerprint(p, x);
	pl_pipeline_destroy(p);
	FP_EQUAL(x, r3);
}

/*
 * args.ram_budget bounds only what a tuner gives the buffers: it changes no batch, so it is not
 * in the fingerprint (specs that differ only in it are one pipeline under sluiced, as for
 * num_prefetch), whatever the knobs it bounds say.
 */
static void test_fingerprint_ram_budget(void **state)
{
	(void)state;
	struct spec_args a = spec_default();
	uint8_t none[16], x[16];
	fp_of(&a, none);
	const long long budgets[] = { 1LL << 20, 4LL << 20, 3000000, 1LL << 40 };
	for (size_t i = 0; i < sizeof(budgets) / sizeof(budgets[0]); i++) {
		a.ram_budget = budgets[i];
		fp_of(&a, x);
		FP_EQUAL(x, none);
	}

	/* with the knobs it bounds left "auto", under a cycle_length */
	a = spec_default();
	a.cycle_length = 2;
	a.reads = -1;
	a.prefetch = -1;
	a.read_bytes = -1;
	fp_of(&a, none);
	a.ram_budget = 1LL << 20;
	fp_of(&a, x);
	FP_EQUAL(x, none);

	/* a tuned pipeline within a budget has its spec's fingerprint */
	struct pl_pipeline_opts o;
	pl_pipeline_opts_init(&o);
	o.tune = true;
	o.defer_start = true;
	struct pl_pipeline *p = create(&a, &o);
	pl_pipeline_fingerprint(p, x);
	pl_pipeline_destroy(p);
	FP_EQUAL(x, none);
}

/* A state saved under one cycle_length resumes with other reads in flight, not another cycle. */
static void test_restore_cycle_length(void **state)
{
	struct spec_args a = spec_default();
	struct pl_pipeline_opts o;
	struct io_error err = { { 0 } };
	uint8_t blob[PL_STATE_MAX];

	a.batch = 30;
	a.cycle_length = 3;
	a.reads = 1;
	struct stream *ref = run_all(&a, NULL, true);
	struct pl_pipeline *p = create(&a, NULL);
	struct stream *s = stream_new();
	drain(p, s, 5, false);
	int len = pl_pipeline_save(p, blob, sizeof(blob));
	assert_true(len > 0);
	pl_pipeline_destroy(p);
	stream_free(s);

	pl_pipeline_opts_init(&o);
	o.state = blob;
	o.state_len = (size_t)len;
	a.reads = 8;
	p = create(&a, &o);
	s = stream_new();
	drain(p, s, 0, true);
	pl_pipeline_destroy(p);
	assert_stream_ok(s);
	assert_same_batches(ref, 5, s);
	stream_free(s);
	stream_free(ref);

	a.cycle_length = 2;
	assert_int_equal(create_rc(&a, &o, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "state"));
}

/* ---- on_corrupt ---- */

/* A copy of the main dataset in a new directory, the record (file, index) spoiled. */
static void spoiled_dataset(const char *name, enum spoil spoil, unsigned file, unsigned index,
			    char *dir)
{
	sub_dir(name, dir);
	assert_int_equal(make_dataset(dir, spoil, file, index, NULL), 0);
}

static void flip_byte(const char *dir, unsigned file, uint64_t off)
{
	char path[PATH_MAX];
	FILE *f;
	int c;

	file_path(dir, file, path);
	f = fopen(path, "r+b");
	assert_non_null(f);
	assert_int_equal(fseek(f, (long)off, SEEK_SET), 0);
	c = fgetc(f);
	assert_true(c != EOF);
	assert_int_equal(fseek(f, (long)off, SEEK_SET), 0);
	assert_true(fputc(c ^ 0x01, f) != EOF);
	assert_int_equal(fclose(f), 0);
}

/* Position of record (file, index) in the file-order stream. */
static size_t file_order_pos(unsigned file, unsigned index)
{
	size_t pos = index;
	for (unsigned k = 0; k < file; k++)
		pos += FILE_RECS[k];
	return pos;
}

/*
 * Under "fail": the batches before the one holding the bad record come out (file order, so
 * exactly the first pos / batch * batch rows), then the error, again on every call.
 */
static void expect_fail_at(const char *dir, size_t pos, int batch, bool no_tag, int want_rc,
			   const char *want1, const char *want2)
{
	struct spec_args a = spec_default();
	a.dir = dir;
	a.batch = batch;
	a.no_tag = no_tag;
	a.prefetch = 4;
	struct pl_pipeline *p = create(&a, NULL);
	struct stream *s = stream_new();
	struct io_error err = { { 0 } };
	struct pl_batch *b;

	drain(p, s, 0, false);
	if (s->bad)
		fail_msg("%s", s->why);
	if (s->end != want_rc)
		fail_msg("stream ended with %d (%s), expected %d", s->end, s->err.msg, want_rc);
	if (!strstr(s->err.msg, want1) || !strstr(s->err.msg, want2))
		fail_msg("message \"%s\" does not name \"%s\" and \"%s\"", s->err.msg, want1,
			 want2);
	size_t want_rows = pos / (size_t)batch * (size_t)batch;
	if (s->n_ids != want_rows)
		fail_msg("%zu rows delivered before the error, expected the %zu rows of the "
			 "batches "
			 "before the bad record (position %zu)",
			 s->n_ids, want_rows, pos);
	for (size_t i = 0; i < s->n_ids; i++)
		assert_int_equal(s->ids[i], file_order_id(i));
	assert_int_equal(pl_pipeline_next(p, -1, &b, &err), want_rc);
	assert_string_equal(err.msg, s->err.msg);
	assert_int_equal(pl_pipeline_next(p, 0, &b, NULL), want_rc);
	pl_pipeline_destroy(p);
	stream_free(s);
}

/* Under a skip mode: every record but those in minus, and the counters. */
static void expect_skip(const char *dir, const char *mode, bool no_tag, bool shuffle,
			const int64_t *minus, size_t n_minus, uint64_t skipped_records,
			uint64_t skipped_files)
{
	struct spec_args a = spec_default();
	struct pl_stats st;
	a.dir = dir;
	a.batch = 16;
	a.on_corrupt = mode;
	a.no_tag = no_tag;
	a.shuffle = shuffle;
	a.parses = 3;
	struct pl_pipeline *p = create(&a, NULL);
	struct stream *s = stream_new();

	drain(p, s, 0, false);
	assert_stream_ok(s);
	assert_int_equal(s->end, 0);
	if (s->n_ids != N_RECS - n_minus)
		fail_msg("on_corrupt %s: %zu rows, expected %zu (all but %zu)", mode, s->n_ids,
			 N_RECS - n_minus, n_minus);
	assert_permutation(s->ids, s->n_ids, minus, n_minus);
	pl_pipeline_get_stats(p, &st);
	if (skipped_records != UINT64_MAX)
		assert_int_equal(st.skipped_records, skipped_records);
	if (skipped_files != UINT64_MAX)
		assert_int_equal(st.skipped_files, skipped_files);
	assert_int_equal(st.rows, N_RECS - n_minus);
	uint64_t rows = 0;
	for (size_t i = 0; i < s->n; i++)
		rows += s->b[i].rows;
	assert_int_equal(rows, N_RECS - n_minus);
	pl_pipeline_destroy(p);
	stream_free(s);
}

static void test_corrupt_data_crc(void **state)
{
	char dir[PATH_MAX], path[PATH_MAX], rec[32];
	const unsigned file = 1, index = 137;
	const int64_t bad = rec_id(file, index);

	spoiled_dataset("crc", SPOIL_NONE, 0, 0, dir);
	flip_byte(dir, file, g_layout.off[file][index] + g_layout.len[file][index] / 2);
	file_path(dir, file, path);
	snprintf(rec, sizeof(rec), "record %u", index);
	for (int no_tag = 0; no_tag < 2; no_tag++) {
		expect_fail_at(dir, file_order_pos(file, index), 10, no_tag, -EBADMSG, path, rec);
		expect_fail_at(dir, file_order_pos(file, index), 64, no_tag, -EBADMSG, path, rec);
		expect_skip(dir, "skip_record", no_tag, false, &bad, 1, 1, 0);
		expect_skip(dir, "skip_record", no_tag, true, &bad, 1, 1, 0);
	}
}

/* A truncated last record: under "fail" an error, under the skip modes the file ends there. */
static void test_corrupt_truncated_file(void **state)
{
	char dir[PATH_MAX], path[PATH_MAX], rec[32];
	const unsigned file = N_FILES - 1, index = FILE_RECS[N_FILES - 1] - 1;
	const int64_t bad = rec_id(file, index);

	spoiled_dataset("truncated", SPOIL_NONE, 0, 0, dir);
	file_path(dir, file, path);
	assert_int_equal(truncate(path, (off_t)g_layout.size[file] - 3), 0);
	snprintf(rec, sizeof(rec), "record %u", index);
	for (int no_tag = 0; no_tag < 2; no_tag++) {
		expect_skip(dir, "skip_file", no_tag, false, &bad, 1, 0, 1);
		expect_skip(dir, "skip_record", no_tag, true, &bad, 1, 0, 1);
	}
	expect_fail_at(dir, file_order_pos(file, index), 10, false, -EBADMSG, path, rec);
}

/* A record without "id": an error naming the feature under "fail", a skipped row otherwise. */
static void test_corrupt_missing_feature(void **state)
{
	char dir[PATH_MAX], path[PATH_MAX], rec[32];
	const unsigned file = 2, index = 5;
	const int64_t bad = rec_id(file, index);

	spoiled_dataset("missing", SPOIL_NO_ID, file, index, dir);
	file_path(dir, file, path);
	snprintf(rec, sizeof(rec), "record %u", index);
	for (int no_tag = 0; no_tag < 2; no_tag++) {
		expect_fail_at(dir, file_order_pos(file, index), 16, no_tag, -EBADMSG,
			       "feature \"id\"", rec);
		expect_fail_at(dir, file_order_pos(file, index), 16, no_tag, -EBADMSG, path, rec);
		expect_skip(dir, "skip_record", no_tag, true, &bad, 1, 1, 0);
	}
}

/*
 * skip_file: "the file ends at its first error" (docs/pipeline-semantics.md; plref.py's
 * _records stops the file at the first record that fails): a record with a bad data CRC or a
 * missing feature drops it and every later record of its file, the records before it stay.
 */
static void test_corrupt_skip_file_ends_file(void **state)
{
	char dir[PATH_MAX];
	const unsigned file = 1, index = 137;
	int64_t minus[300];
	size_t n_minus = 0;

	for (unsigned i = index; i < FILE_RECS[file]; i++)
		minus[n_minus++] = rec_id(file, i);
	spoiled_dataset("crc_skip_file", SPOIL_NONE, 0, 0, dir);
	flip_byte(dir, file, g_layout.off[file][index] + g_layout.len[file][index] / 2);
	expect_skip(dir, "skip_file", false, false, minus, n_minus, UINT64_MAX, UINT64_MAX);
	expect_skip(dir, "skip_file", true, true, minus, n_minus, UINT64_MAX, UINT64_MAX);

	spoiled_dataset("missing_skip_file", SPOIL_NO_ID, file, index, dir);
	expect_skip(dir, "skip_file", false, false, minus, n_minus, UINT64_MAX, UINT64_MAX);
}

/* ---- errors at create ---- */

static void test_create_errors(void **state)
{
	struct spec_args a = spec_default();
	struct io_error err = { { 0 } };
	char dir[PATH_MAX];

	a.id_from = "nope";
	assert_int_equal(create_rc(&a, NULL, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "args.primary_features[0].from_name"));
	assert_non_null(strstr(err.msg, "nope"));

	a = spec_default();
	a.shard = "{\"index\": 5, \"count\": 8}";
	assert_int_equal(create_rc(&a, NULL, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "args.shard"));
	a.shard = "{\"index\": 3, \"count\": 4}";
	assert_int_equal(create_rc(&a, NULL, &err), 0);

	/* a directory with a manifest and no data files */
	sub_dir("empty", dir);
	assert_int_equal(make_dataset(dir, SPOIL_NONE, 0, 0, NULL), 0);
	for (unsigned k = 0; k < N_FILES; k++) {
		char path[PATH_MAX];
		file_path(dir, k, path);
		assert_int_equal(unlink(path), 0);
	}
	a = spec_default();
	a.dir = dir;
	assert_int_equal(create_rc(&a, NULL, &err), -ENOENT);

	/* no such directory */
	snprintf(dir, sizeof(dir), "%s/does-not-exist", g_tmp);
	a.dir = dir;
	assert_true(create_rc(&a, NULL, &err) < 0);
	assert_non_null(strstr(err.msg, "args.dataset"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_save_restore),
		cmocka_unit_test(test_restore_refused),
		cmocka_unit_test(test_restore_refused_other_files),
		cmocka_unit_test(test_fingerprint_cycle),
		cmocka_unit_test(test_fingerprint_ram_budget),
		cmocka_unit_test(test_restore_cycle_length),
		cmocka_unit_test(test_corrupt_data_crc),
		cmocka_unit_test(test_corrupt_truncated_file),
		cmocka_unit_test(test_corrupt_missing_feature),
		cmocka_unit_test(test_corrupt_skip_file_ends_file),
		cmocka_unit_test(test_create_errors),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
