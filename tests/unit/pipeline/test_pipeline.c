/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for daemon/pipeline/pipeline.c: the stream (epochs, order, shuffle, shards, threads). */
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

#include <cmocka.h>

#include "ipc/batch.h"
#include "sched/sched.h"
#include "tests/unit/pipeline/pipeline_fixture.h"

/* ---- the stream ---- */

/* Two shuffled epochs: every batch valid, each epoch a permutation, seq and flags in place. */
static void test_stream_epochs_shuffle(void **state)
{
	struct spec_args a = spec_default();
	struct pl_stats st;
	a.epochs = "2";
	a.shuffle = true;
	a.batch = 50;
	a.parses = 3;
	struct pl_pipeline *p = create(&a, NULL);
	struct stream *s = stream_new();

	assert_int_equal(pl_pipeline_n_tensors(p), 3);
	assert_string_equal(pl_pipeline_tensor(p, 0)->name, "id");
	assert_string_equal(pl_pipeline_tensor(p, 2)->name, "tag");
	assert_null(pl_pipeline_tensor(p, 3));
	drain(p, s, 0, false);
	assert_stream_ok(s);
	assert_int_equal(s->end, 0);

	/* 1007 rows per epoch: 20 batches of 50 and one of 7 */
	size_t per_epoch = (N_RECS + 49) / 50;
	assert_int_equal(s->n, 2 * per_epoch);
	for (size_t i = 0; i < s->n; i++) {
		const struct bmeta *m = &s->b[i];
		bool last_of_epoch = i % per_epoch == per_epoch - 1;
		uint32_t want = last_of_epoch ? IPC_BATCH_F_END_EPOCH : 0;
		if (i == s->n - 1)
			want |= IPC_BATCH_F_END_STREAM;
		assert_int_equal(m->seq, i);
		assert_int_equal(m->epoch, i / per_epoch);
		assert_int_equal(m->index, i % per_epoch);
		assert_int_equal(m->flags, want);
		assert_int_equal(m->rows, last_of_epoch ? N_RECS % 50 : 50);
	}
	assert_int_equal(s->n_ids, 2 * N_RECS);
	assert_permutation(s->ids, N_RECS, NULL, 0);
	assert_permutation(s->ids + N_RECS, N_RECS, NULL, 0);
	/* shuffled, and differently per epoch */
	assert_true(memcmp(s->ids, s->ids + N_RECS, N_RECS * sizeof(int64_t)) != 0);
	size_t in_order = 0;
	for (size_t i = 0; i < N_RECS; i++)
		in_order += s->ids[i] == file_order_id(i);
	assert_true(in_order < N_RECS / 2);

	/* the end is sticky */
	struct pl_batch *b = NULL;
	assert_int_equal(pl_pipeline_next(p, -1, &b, NULL), 0);
	assert_int_equal(pl_pipeline_next(p, 0, &b, NULL), 0);
	assert_null(b);

	pl_pipeline_get_stats(p, &st);
	assert_int_equal(st.rows, 2 * N_RECS);
	assert_int_equal(st.batches, 2 * per_epoch);
	assert_int_equal(st.skipped_records, 0);
	assert_int_equal(st.skipped_files, 0);
	assert_true(st.records >= 2 * N_RECS);
	assert_non_null(st.io_engine);
	print_message("default io engine: %s%s%s\n", st.io_engine,
		      st.io_fallback ? ", because " : "", st.io_fallback ? st.io_fallback : "");
	pl_pipeline_destroy(p);
	stream_free(s);
}

/*
 * A shuffle buffer that spans more read chunks than a slot may pin (records of ~8 KB; chunks
 * are 64 KiB at least, a file 2.4 MB; 2 files mixed, 16 chunks pinned per slot). 40 records:
 * zero-copy, and the stragglers of old chunks are copied out (evacuations). 900 records (7 MB,
 * more than half the pins): each record is taken into a block of its own as it enters, nothing
 * is evacuated. Either way every epoch is a permutation of the records, the same whatever the
 * pool's size and the read size (16 MiB reads: a file in one chunk, nothing runs out).
 */
static void test_stream_evacuations(void **state)
{
	struct spec_args a = spec_default();
	struct pl_stats st;
	char dir[PATH_MAX];
	sub_dir("padded", dir);
	assert_int_equal(make_dataset(dir, SPOIL_PAD, 0, 0, NULL), 0);
	a.dir = dir;
	a.epochs = "2";
	a.shuffle = true;
	a.batch = 50;
	static const int elems[] = { 40, 900 };
	for (int e = 0; e < 2; e++) {
		a.shuffle_elems = elems[e];
		struct stream *s[3];
		for (int k = 0; k < 3; k++) {
			a.parses = k == 1 ? 1 : 3;
			a.read_bytes = k == 2 ? 16L << 20 : 0;
			struct pl_pipeline *p = create(&a, NULL);
			s[k] = stream_new();
			drain(p, s[k], 0, false);
			assert_stream_ok(s[k]);
			assert_int_equal(s[k]->n_ids, 2 * N_RECS);
			assert_permutation(s[k]->ids, N_RECS, NULL, 0);
			assert_permutation(s[k]->ids + N_RECS, N_RECS, NULL, 0);
			pl_pipeline_get_stats(p, &st);
			print_message("buffer %d, parses %d, reads of %ld: %llu evacuations, %llu "
				      "of "
				      "%llu record bytes copied\n",
				      elems[e], a.parses, a.read_bytes,
				      (unsigned long long)st.evacuations,
				      (unsigned long long)st.copied_bytes,
				      (unsigned long long)st.record_bytes);
			if (k < 2 && e == 0) { /* zero-copy, stragglers evacuated */
				assert_true(st.evacuations > 0);
				assert_true(st.copied_bytes > 0);
				assert_true(st.copied_bytes < st.record_bytes / 2);
			} else if (k < 2) { /* each record in a block of its own */
				assert_int_equal(st.evacuations, 0);
				assert_true(st.copied_bytes > st.record_bytes / 10 * 9);
			} else { /* big reads: nothing pinned runs out */
				assert_int_equal(st.evacuations, 0);
			}
			pl_pipeline_destroy(p);
		}
		for (int k = 1; k < 3; k++)
			assert_memory_equal(s[0]->ids, s[k]->ids, 2 * N_RECS * sizeof(int64_t));
		for (int k = 0; k < 3; k++)
			stream_free(s[k]);
	}
}

/* Without shuffle and with one read at a time, the rows are the files in path order. */
static void test_stream_file_order(void **state)
{
	struct spec_args a = spec_default();
	a.batch = 10;
	a.drop_remainder = true;
	struct stream *s = run_all(&a, NULL, false);

	assert_int_equal(s->n, N_RECS / 10);
	assert_int_equal(s->n_ids, N_RECS / 10 * 10);
	for (size_t i = 0; i < s->n_ids; i++)
		assert_int_equal(s->ids[i], file_order_id(i));
	assert_int_equal(s->b[s->n - 1].flags, IPC_BATCH_F_END_EPOCH | IPC_BATCH_F_END_STREAM);
	stream_free(s);
}

/* 1007 = 19 * 53: the epoch's last batch is a full one and still carries the flags. */
static void test_stream_exact_batches(void **state)
{
	struct spec_args a = spec_default();
	a.batch = 53;
	a.epochs = "3";
	a.shuffle = true;
	for (int drop = 0; drop < 2; drop++) {
		a.drop_remainder = drop;
		struct stream *s = run_all(&a, NULL, false);
		assert_int_equal(s->n, 3 * 19);
		for (size_t i = 0; i < s->n; i++) {
			uint32_t want = i % 19 == 18 ? IPC_BATCH_F_END_EPOCH : 0;
			if (i == s->n - 1)
				want |= IPC_BATCH_F_END_STREAM;
			assert_int_equal(s->b[i].flags, want);
			assert_int_equal(s->b[i].rows, 53);
			assert_int_equal(s->b[i].epoch, i / 19);
		}
		for (int e = 0; e < 3; e++)
			assert_permutation(s->ids + e * N_RECS, N_RECS, NULL, 0);
		stream_free(s);
	}
}

/*
 * The largest target_batch_size (2^31 - 1, what the spec allows) over a small dataset: each
 * epoch is one batch of every record (issue 37 item 5: the driver took b row slots up front,
 * 128 GiB, and the reader got an empty message), and the same with a cached-free shuffle.
 */
static void test_stream_largest_batch(void **state)
{
	(void)state;
	struct spec_args a = spec_default();
	a.batch = INT32_MAX;
	a.epochs = "2";
	for (int shuf = 0; shuf < 2; shuf++) {
		a.shuffle = shuf;
		struct stream *s = run_all(&a, NULL, false);
		assert_stream_ok(s);
		assert_int_equal(s->n, 2);
		for (size_t i = 0; i < 2; i++) {
			assert_int_equal(s->b[i].rows, N_RECS);
			assert_int_equal(s->b[i].epoch, i);
			assert_permutation(s->ids + i * N_RECS, N_RECS, NULL, 0);
		}
		stream_free(s);
	}
}

/* sloppy_interleave: any order among the open files, but every record once per epoch. */
static void test_stream_sloppy(void **state)
{
	struct spec_args a = spec_default();
	a.sloppy = true;
	a.reads = 4;
	a.epochs = "2";
	a.batch = 45;
	for (int shuffle = 0; shuffle < 2; shuffle++) {
		a.shuffle = shuffle;
		struct stream *s = run_all(&a, NULL, false);
		assert_int_equal(s->n_ids, 2 * N_RECS);
		assert_permutation(s->ids, N_RECS, NULL, 0);
		assert_permutation(s->ids + N_RECS, N_RECS, NULL, 0);
		/* within a file, records keep their order (without shuffle) */
		if (!shuffle) {
			int64_t last[N_FILES] = { -1, -1, -1, -1 };
			for (size_t i = 0; i < N_RECS; i++) {
				unsigned f = (unsigned)(s->ids[i] / ID_FILE);
				assert_true(s->ids[i] > last[f]);
				last[f] = s->ids[i];
			}
		}
		stream_free(s);
	}
}

/*
 * cycle_length fixes the interleave cycle; num_parallel_reads is then only the reads in flight
 * per slot (1, 1, 3, 16 and 4 here): byte-identical batches, the same as num_parallel_reads 3
 * without cycle_length (today's rule), and another cycle_length gives another order.
 */
static void test_cycle_length(void **state)
{
	struct spec_args a = spec_default();
	a.epochs = "2";
	a.batch = 37;
	a.reads = 3;
	struct stream *ref = run_all(&a, NULL, true);
	assert_permutation(ref->ids, N_RECS, NULL, 0);
	/* three files interleaved: the second row is the second file's first record */
	assert_int_equal(ref->ids[1], rec_id(1, 0));

	const int reads[] = { 1, 2, 8, 64, -1 /* "auto" */ };
	a.cycle_length = 3;
	for (size_t i = 0; i < sizeof(reads) / sizeof(reads[0]); i++) {
		a.reads = reads[i];
		struct stream *s = run_all(&a, NULL, true);
		assert_same_batches(ref, 0, s);
		stream_free(s);
	}

	a.cycle_length = 2;
	a.reads = 3;
	struct stream *s = run_all(&a, NULL, false);
	assert_permutation(s->ids, N_RECS, NULL, 0);
	assert_int_equal(s->ids[2], rec_id(0, 1)); /* a, b, a: a cycle of two */
	stream_free(s);
	stream_free(ref);
}

/* epochs null and no batch in an epoch: an error, not an endless loop. */
static void test_stream_endless_empty_epoch(void **state)
{
	struct spec_args a = spec_default();
	struct pl_batch *b;
	struct io_error err = { { 0 } };
	a.batch = 2000;
	a.drop_remainder = true;
	a.epochs = "null";
	struct pl_pipeline *p = create(&a, NULL);
	assert_int_equal(pl_pipeline_next(p, 10000, &b, &err), -ENODATA);
	assert_non_null(strstr(err.msg, "epoch 0 produced no batch"));
	assert_int_equal(pl_pipeline_next(p, 0, &b, &err), -ENODATA);
	pl_pipeline_destroy(p);
}

/* A shard keeps exactly its files. */
static void test_shard(void **state)
{
	struct spec_args a = spec_default();
	a.shard = "{\"index\": 1, \"count\": 2}";
	struct stream *s = run_all(&a, NULL, false);
	size_t n = 0;
	for (size_t i = 0; i < s->n_ids; i++) {
		unsigned file = (unsigned)(s->ids[i] / ID_FILE);
		assert_true(file == 1 || file == 3);
		n++;
	}
	assert_int_equal(n, FILE_RECS[1] + FILE_RECS[3]);
	stream_free(s);
}

/* ---- parallelism ---- */

/* num_parallel_parses 1 and 4, shared pools of 1 and 4 workers: byte-identical batches. */
static void test_parallelism_identical(void **state)
{
	struct spec_args a = spec_default();
	struct count_alloc c;
	struct pl_pipeline_opts o;

	a.shuffle = true;
	a.epochs = "2";
	a.batch = 37;
	a.parses = 1;
	struct stream *ref = run_all(&a, NULL, true);
	assert_permutation(ref->ids, N_RECS, NULL, 0);

	a.parses = 4;
	struct stream *s = run_all(&a, NULL, true);
	assert_same_batches(ref, 0, s);
	stream_free(s);

	/* poisoned fresh memory: the pipeline writes every byte of the extent */
	ca_init(&c);
	opts_with(&o, &c);
	s = run_all(&a, &o, true);
	assert_same_batches(ref, 0, s);
	stream_free(s);
	assert_int_equal(ca_live(&c), 0);
	ca_fini(&c);

	/*
	 * A slow allocator (a ring full of unread batches): the driver has time to spare, fill
	 * passes wake no worker and the driver runs them itself. The same batches.
	 */
	ca_init(&c);
	c.delay_us = 10000; /* well above the driver's own time per batch, even under TSan */
	opts_with(&o, &c);
	struct pl_pipeline *lp = create(&a, &o);
	s = stream_new();
	drain(lp, s, 0, true);
	assert_stream_ok(s);
	struct pl_stats lst;
	pl_pipeline_get_stats(lp, &lst);
	/*
	 * Lazy from the second batch on (the first has no history); a lazy batch the driver
	 * finds not done yet is its own to run, not a pool falling behind (that woke workers for
	 * the next PL_BEHIND_BATCHES: about one batch in 17 was lazy).
	 */
	assert_true(lst.lazy_fills < lst.batches);
	assert_true(lst.lazy_fills * 2 > lst.batches);
	pl_pipeline_destroy(lp);
	assert_same_batches(ref, 0, s);
	stream_free(s);
	assert_int_equal(ca_live(&c), 0);
	ca_fini(&c);

	for (unsigned w = 1; w <= 4; w += 3) {
		struct sched_pool_opts po;
		struct sched_pool *pool;
		sched_pool_opts_init(&po);
		po.workers = w;
		po.pin = false;
		assert_int_equal(sched_pool_create(&po, &pool), 0);
		pl_pipeline_opts_init(&o);
		o.pool = pool;
		a.parses = (int)(5 - w);
		s = run_all(&a, &o, true);
		assert_same_batches(ref, 0, s);
		stream_free(s);
		sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
	}

	/* the pread engine gives the same batches */
	pl_pipeline_opts_init(&o);
	o.engine = IOX_ENGINE_PREAD;
	struct pl_pipeline *p = create(&a, &o);
	s = stream_new();
	drain(p, s, 0, true);
	assert_stream_ok(s);
	struct pl_stats st;
	pl_pipeline_get_stats(p, &st);
	assert_string_equal(st.io_engine, "pread");
	pl_pipeline_destroy(p);
	assert_same_batches(ref, 0, s);
	stream_free(s);
	stream_free(ref);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stream_epochs_shuffle),
		cmocka_unit_test(test_stream_evacuations),
		cmocka_unit_test(test_stream_file_order),
		cmocka_unit_test(test_stream_exact_batches),
		cmocka_unit_test(test_stream_largest_batch),
		cmocka_unit_test(test_stream_sloppy),
		cmocka_unit_test(test_cycle_length),
		cmocka_unit_test(test_stream_endless_empty_epoch),
		cmocka_unit_test(test_parallelism_identical),
		cmocka_unit_test(test_shard),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
