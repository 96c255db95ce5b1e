/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for daemon/pipeline/gshuffle.c: shuffle "global" (a permutation of every record). */
#include "daemon/pipeline/gshuffle.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/pipeline/pipeline.h"
#include "daemon/pipeline/spec.h"
#include "tests/unit/pipeline/pipeline_fixture.h"

/* ---- the permutation ---- */

/* perm is a permutation of [0, n) for every n up to 2100 and a few large ones. */
static void test_perm_is_permutation(void **state)
{
	static const uint64_t big[] = { 4093, 65536, 65537, (1u << 20) + 3 };
	uint8_t *seen = malloc((1u << 20) + 3);
	(void)state;
	assert_non_null(seen);
	for (uint64_t n = 0; n < 2100 + 4; n++) {
		uint64_t m = n < 2100 ? n : big[n - 2100];
		struct pl_gperm p;
		pl_gperm_init(&p, m, 7 + n, n % 3);
		memset(seen, 0, m ? m : 1);
		for (uint64_t k = 0; k < m; k++) {
			uint64_t x = pl_gperm_at(&p, k);
			if (x >= m || seen[x])
				fail_msg("n %llu: perm(%llu) = %llu %s", (unsigned long long)m,
					 (unsigned long long)k, (unsigned long long)x,
					 x >= m ? "out of range" : "twice");
			seen[x] = 1;
		}
	}
	free(seen);
}

/*
 * Each epoch draws another order, the same one each time; few records stay in place and the
 * order is not its neighbour's shifted (consecutive elements come from far apart).
 */
static void test_perm_epochs(void **state)
{
	enum { N = 1000 };
	struct pl_gperm a, b, a2;
	size_t same = 0, fixed = 0, near = 0;
	(void)state;
	pl_gperm_init(&a, N, 7, 0);
	pl_gperm_init(&b, N, 7, 1);
	pl_gperm_init(&a2, N, 7, 0);
	for (uint64_t k = 0; k < N; k++) {
		uint64_t x = pl_gperm_at(&a, k);
		assert_int_equal(x, pl_gperm_at(&a2, k));
		same += x == pl_gperm_at(&b, k);
		fixed += x == k;
		if (k && (x > pl_gperm_at(&a, k - 1) ? x - pl_gperm_at(&a, k - 1)
						     : pl_gperm_at(&a, k - 1) - x) < 10)
			near++;
	}
	/* a uniform permutation: about 1 in N of each; allow 10 */
	assert_true(same < 10);
	assert_true(fixed < 10);
	assert_true(near < 60); /* about 2 % of neighbours within 10 */
}

/* ---- the engine ---- */

static int64_t ids_before(unsigned file)
{
	int64_t n = 0;
	for (unsigned f = 0; f < file; f++)
		n += FILE_RECS[f];
	return n;
}

/* The dataset's record number (across files in file order) of an id. */
static int64_t rec_number(int64_t id)
{
	for (unsigned f = 0; f < N_FILES; f++)
		for (unsigned i = 0; i < FILE_RECS[f]; i++)
			if (rec_id(f, i) == id)
				return ids_before(f) + i;
	return -1;
}

/*
 * Every record once per epoch, in the order of the permutation of (seed, epoch) over the
 * records numbered in file order; two epochs differ; the batches are those of the spec.
 */
static void test_epochs(void **state)
{
	struct spec_args a = spec_default();
	(void)state;
	a.global = true;
	a.epochs = "2";
	a.batch = 50;
	a.seed = 11;
	struct stream *s = run_all(&a, NULL, false);
	assert_stream_ok(s);
	size_t per = (N_RECS + 49) / 50;
	assert_int_equal(s->n, 2 * per);
	assert_int_equal(s->n_ids, 2 * N_RECS);
	for (unsigned e = 0; e < 2; e++) {
		struct pl_gperm p;
		pl_gperm_init(&p, N_RECS, 11, e);
		assert_permutation(s->ids + e * N_RECS, N_RECS, NULL, 0);
		for (size_t k = 0; k < N_RECS; k++)
			if ((uint64_t)rec_number(s->ids[e * N_RECS + k]) != pl_gperm_at(&p, k))
				fail_msg("epoch %u element %zu: record %lld, the permutation says "
					 "%llu",
					 e, k, (long long)rec_number(s->ids[e * N_RECS + k]),
					 (unsigned long long)pl_gperm_at(&p, k));
	}
	assert_memory_not_equal(s->ids, s->ids + N_RECS, N_RECS * sizeof(int64_t));
	stream_free(s);
}

/*
 * A restored position reads nothing before it: after batch s of epoch 0, the resumed pipeline
 * frames exactly the records of the batches left, and gives the same batches.
 */
static void test_resume_reads_nothing_before(void **state)
{
	struct spec_args a = spec_default();
	(void)state;
	a.global = true;
	a.batch = 64;
	struct stream *ref = run_all(&a, NULL, true);
	size_t per = (N_RECS + 63) / 64;
	assert_int_equal(ref->n, per);
	const size_t at[] = { 1, 5, per - 1 };
	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		uint8_t blob[PL_STATE_MAX];
		struct pl_pipeline *p = create(&a, NULL);
		struct stream *s = stream_new();
		drain(p, s, at[i], false);
		int len = pl_pipeline_save(p, blob, sizeof(blob));
		assert_true(len > 0);
		pl_pipeline_destroy(p);
		stream_free(s);

		struct pl_pipeline_opts o;
		pl_pipeline_opts_init(&o);
		o.state = blob;
		o.state_len = (size_t)len;
		p = create(&a, &o);
		s = stream_new();
		drain(p, s, 0, true);
		assert_stream_ok(s);
		assert_same_batches(ref, at[i], s);
		struct pl_stats st;
		pl_pipeline_get_stats(p, &st);
		assert_int_equal(st.records, N_RECS - 64 * at[i]);
		pl_pipeline_destroy(p);
		stream_free(s);
	}
	stream_free(ref);
}

/* A data file rewritten in place between epochs: the next epoch fails, naming it. */
static void test_file_changed(void **state)
{
	char dir[PATH_MAX], path[PATH_MAX];
	struct spec_args a = spec_default();
	(void)state;
	sub_dir("gs_changed", dir);
	assert_int_equal(make_dataset(dir, SPOIL_NONE, 0, 0, NULL), 0);
	a.dir = dir;
	a.global = true;
	a.epochs = "2";
	a.batch = 64;
	struct pl_pipeline *p = create(&a, NULL);
	struct stream *s = stream_new();
	size_t per = (N_RECS + 63) / 64;
	drain(p, s, per, false); /* epoch 0 read whole: the next is begun after it */
	assert_stream_ok(s);
	/* the same size, other bytes: file 1 rewritten in place */
	file_path(dir, 1, path);
	int fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "\xff\xff\xff\xff", 4, 40), 4);
	close(fd);
	drain(p, s, 0, false);
	assert_true(s->end < 0);
	if (!strstr(s->err.msg, path) || !strstr(s->err.msg, "changed"))
		fail_msg("the error does not name the changed file: %s", s->err.msg);
	pl_pipeline_destroy(p);
	stream_free(s);
}

/* shuffle "global" over a compressed dataset is refused at create, saying why. */
static void test_refusals(void **state)
{
	(void)state;
	struct io_error err = { { 0 } };
	struct pl_spec *spec = NULL;
	static const char *const bad[] = {
		"{\"type\": \"independent\", \"args\": {\"dataset\": {\"type\": \"dir\", \"args\": "
		"{\"data_dir\": \"/x\"}}, \"target_batch_size\": 4, \"drop_remainder\": false, "
		"\"epochs\": 1, \"num_read_buffer_bytes\": 4096, \"num_prefetch\": 1, \"shuffle\": "
		"\"global\", "
		"\"cycle_length\": 2, \"primary_features\": [{\"from_name\": \"id\", \"to_name\": "
		"\"id\"}]}}",
		"{\"type\": \"independent\", \"args\": {\"dataset\": {\"type\": \"dir\", \"args\": "
		"{\"data_dir\": \"/x\"}}, \"target_batch_size\": 4, \"drop_remainder\": false, "
		"\"epochs\": 1, \"num_read_buffer_bytes\": 4096, \"num_prefetch\": 1, \"shuffle\": "
		"\"global\", "
		"\"on_corrupt\": \"skip_file\", \"primary_features\": [{\"from_name\": \"id\", "
		"\"to_name\": \"id\"}]}}",
		"{\"type\": \"independent\", \"args\": {\"dataset\": {\"type\": \"dir\", \"args\": "
		"{\"data_dir\": \"/x\"}}, \"target_batch_size\": 4, \"drop_remainder\": false, "
		"\"epochs\": 1, \"num_read_buffer_bytes\": 4096, \"num_prefetch\": 1, \"shuffle\": "
		"\"globally\", "
		"\"primary_features\": [{\"from_name\": \"id\", \"to_name\": \"id\"}]}}",
	};
	static const char *const why[] = { "args.cycle_length: not allowed when shuffle is "
					   "\"global\"",
					   "args.on_corrupt: \"skip_file\" is not allowed",
					   "args.shuffle: expected true, false or \"global\"" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err.msg[0] = 0;
		assert_true(pl_spec_parse(bad[i], strlen(bad[i]), "spec.json", &spec, &err) < 0);
		if (!strstr(err.msg, why[i]))
			fail_msg("spec %zu: %s", i, err.msg);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_perm_is_permutation),
		cmocka_unit_test(test_perm_epochs),
		cmocka_unit_test(test_epochs),
		cmocka_unit_test(test_resume_reads_nothing_before),
		cmocka_unit_test(test_file_changed),
		cmocka_unit_test(test_refusals),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
