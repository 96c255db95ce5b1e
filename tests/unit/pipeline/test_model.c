/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon/pipeline/model.c: windows of counters made up so that each bound binds in turn, and the
 * model must say which, name the stage, and predict the rate at another allocation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/pipeline/model.h"

#define MS 1000000ull
#define US 1000ull

/* A one-second window of 1000 batches (1000 per second delivered, whatever the costs say). */
static struct pl_model_in window(unsigned workers, double cpus, unsigned host)
{
	struct pl_model_in in;
	memset(&in, 0, sizeof(in));
	in.wall_ns = 1000 * MS;
	in.batches = 1000;
	in.workers = workers;
	in.cpus = cpus;
	in.host_cpus = host;
	in.st[PL_STAGE_PARSE].elems_out = 1000 * 256; /* rows */
	in.st[PL_STAGE_DELIVER].elems_out = 1000;
	return in;
}

/* per batch: ns of CPU of a stage over the window's 1000 batches */
static void cost(struct pl_model_in *in, unsigned stage, uint64_t ns_per_batch)
{
	in->st[stage].cpu_ns = ns_per_batch * in->batches;
}

static void test_sequential(void **state)
{
	(void)state;
	struct pl_model_in in = window(2, 2, 2);
	cost(&in, PL_STAGE_FRAME, 600 * US);
	cost(&in, PL_STAGE_SHUFFLE, 200 * US);
	cost(&in, PL_STAGE_PARSE, 200 * US);
	struct pl_model m;
	pl_model_fit(&in, &m);
	assert_float_equal(m.seq_cap, 1250, 1e-6);   /* 1 s / 800 us */
	assert_float_equal(m.pool_cap, 10000, 1e-6); /* 2 workers / 200 us */
	assert_float_equal(m.cores_cap, 2000, 1e-6); /* 2 cores / 1 ms */
	assert_float_equal(m.predicted_per_s, 1250, 1e-6);
	assert_int_equal(m.limit, PL_LIMIT_SEQUENTIAL);
	assert_int_equal(m.bottleneck, PL_STAGE_FRAME);
	assert_float_equal(m.stages[PL_STAGE_FRAME].cores, 0.6, 1e-9);
	assert_float_equal(m.stages[PL_STAGE_FRAME].share, 0.6, 1e-9);
	assert_float_equal(m.stages[PL_STAGE_PARSE].per_batch, 256, 1e-9);
	assert_float_equal(m.batches_per_s, 1000, 1e-9);
	assert_float_equal(m.cores, 1.0, 1e-9);
	/* more cores do not help a sequential stage */
	assert_float_equal(m.predicted_all_per_s, 1250, 1e-6);
	assert_string_equal(pl_limit_name(m.limit), "sequential");
}

static void test_stage_cpu_then_cores(void **state)
{
	(void)state;
	struct pl_model_in in = window(1, 2, 4);
	cost(&in, PL_STAGE_READ, 100 * US);
	cost(&in, PL_STAGE_PARSE, 1000 * US);
	cost(&in, PL_STAGE_DECODE, 500 * US);
	struct pl_model m;
	pl_model_fit(&in, &m);
	assert_float_equal(m.predicted_per_s, 1e9 / 1.5e6, 1e-6); /* one worker */
	assert_int_equal(m.limit, PL_LIMIT_STAGE_CPU);
	assert_int_equal(m.bottleneck, PL_STAGE_PARSE);
	/* with the host's 4 cores as workers: the cores bind (4 / 1.6 ms) before 4 / 1.5 ms */
	assert_float_equal(m.predicted_all_per_s, 4e9 / 1.6e6, 1e-6);
	assert_float_equal(pl_model_predict(&m, 2, 2), 2e9 / 1.6e6, 1e-6);
	/* more workers than cores: the cores bind */
	in = window(4, 1, 4);
	cost(&in, PL_STAGE_READ, 100 * US);
	cost(&in, PL_STAGE_PARSE, 1000 * US);
	cost(&in, PL_STAGE_DECODE, 500 * US);
	pl_model_fit(&in, &m);
	assert_int_equal(m.limit, PL_LIMIT_CORES);
	assert_float_equal(m.predicted_per_s, 1e9 / 1.6e6, 1e-6);
	assert_int_equal(m.bottleneck, PL_STAGE_PARSE);
}

static void test_consumer_disk_memory(void **state)
{
	(void)state;
	struct pl_model_in in = window(2, 2, 2);
	cost(&in, PL_STAGE_FRAME, 100 * US);
	cost(&in, PL_STAGE_PARSE, 100 * US);
	in.st[PL_STAGE_PARSE].wait_down_ns = 700 * MS; /* the ring was full 70 % of the time */
	struct pl_model m;
	pl_model_fit(&in, &m);
	assert_int_equal(m.limit, PL_LIMIT_CONSUMER);
	assert_true(m.predicted_per_s > 2 * m.batches_per_s); /* it could go faster */
	in.st[PL_STAGE_PARSE].wait_down_ns = 0;
	in.producer_wait_ns = 600 * MS; /* the daemon's count of the same */
	pl_model_fit(&in, &m);
	assert_int_equal(m.limit, PL_LIMIT_CONSUMER);
	in.producer_wait_ns = 0;
	in.read_wait_ns = 800 * MS; /* the driver waited for the disk */
	pl_model_fit(&in, &m);
	assert_int_equal(m.limit, PL_LIMIT_DISK);
	assert_int_equal(m.bottleneck, PL_STAGE_READ);
	assert_float_equal(m.predicted_per_s, 1000, 1e-6);
	assert_float_equal(m.predicted_all_per_s, 1000, 1e-6);
	in.read_wait_ns = 100 * MS;
	pl_model_fit(&in, &m);
	assert_int_not_equal(m.limit, PL_LIMIT_DISK);
	in.commit_failures = 1;
	pl_model_fit(&in, &m);
	assert_int_equal(m.limit, PL_LIMIT_MEMORY);
}

static void test_by_thread(void **state)
{
	(void)state;
	/* the stages say parse is parallel, but the driver ran most of it itself (lazy fills):
	   by thread, the driver's 400 us a batch bind at 2500/s, not the pool */
	struct pl_model_in in = window(2, 2, 2);
	cost(&in, PL_STAGE_READ, 100 * US);
	cost(&in, PL_STAGE_PARSE, 400 * US);
	in.driver_cpu_ns = 400 * US * in.batches; /* read + 300 us of parse */
	in.pool_task_ns = 100 * US * in.batches;
	in.producer_wait_ns = 400 * MS; /* the rest of its time it waited for room, */
	in.read_wait_ns = 200 * MS;	/* and reads */
	struct pl_model m;
	pl_model_fit(&in, &m);
	assert_float_equal(m.seq_cap, 2500, 1e-6);
	assert_float_equal(m.pool_cap, 20000, 1e-6);
	assert_float_equal(m.cores_cap, 4000, 1e-6);
	assert_int_equal(m.limit, PL_LIMIT_SEQUENTIAL);
	assert_int_equal(m.bottleneck, PL_STAGE_PARSE); /* the driver's share of it */
	/* idle for no reason a change removes (waits for jobs the pool, 5 % busy, had room for:
	   wake-ups; preemption): the driver works 40 % of the time, and will with more workers */
	in.producer_wait_ns = in.read_wait_ns = 0;
	in.job_wait_ns = 500 * MS;
	pl_model_fit(&in, &m);
	assert_float_equal(m.seq_cap, 1000, 1e-6);
	assert_float_equal(m.predicted_per_s, 1000, 1e-6);
	assert_int_equal(m.limit, PL_LIMIT_SEQUENTIAL);
	/* the same waits with the pool saturated: more workers would start its jobs */
	in.pool_task_ns = 1900 * MS;
	pl_model_fit(&in, &m);
	assert_float_equal(m.seq_cap, 2250, 1e-6); /* (0.4 + 0.5) / 400 us */
	/* reads waited for: the disk's, not the driver's */
	in.pool_task_ns = 100 * US * in.batches;
	in.job_wait_ns = 0;
	in.read_wait_ns = 200 * MS;
	pl_model_fit(&in, &m);
	assert_float_equal(m.seq_cap, 1500, 1e-6);
	in.read_wait_ns = 0;
	/* without the split by thread, the stages' classes: the pool binds at 2 / 400 us */
	in.driver_cpu_ns = in.pool_task_ns = 0;
	pl_model_fit(&in, &m);
	assert_float_equal(m.seq_cap, 10000, 1e-6);
	assert_float_equal(m.predicted_per_s, 4000, 1e-6);
}

static void test_demand(void **state)
{
	(void)state;
	struct pl_model_in in = window(2, 2, 2);
	cost(&in, PL_STAGE_PARSE, 100 * US);
	struct pl_model_reader r[] = {
		{ .taken = 100, .wait_ns = 0 },	       /* 100 a second, never waiting */
		{ .taken = 50, .wait_ns = 500 * MS },  /* 50 in half a second: 100 */
		{ .taken = 900, .wait_ns = 950 * MS }, /* always waiting: takes all it gets */
		{ .taken = 60, .wait_ns = 400 * MS },  /* 60 in 0.6 s: 100 */
		{ .taken = 40, .wait_ns = 200 * MS },  /* 40 in 0.8 s: 50, the slowest */
	};
	in.readers = r;
	in.n_readers = 4;
	struct pl_model m;
	pl_model_fit(&in, &m);
	assert_float_equal(m.demand_per_s, 100, 1e-6);
	in.n_readers = 5;
	pl_model_fit(&in, &m);
	assert_float_equal(m.demand_per_s, 50, 1e-6);
	/* attached for the last 0.4 s of the window: 40 in 0.4 s is 100, not 40 */
	struct pl_model_reader late = { .taken = 40, .wait_ns = 0, .window_ns = 400 * MS };
	in.readers = &late;
	in.n_readers = 1;
	pl_model_fit(&in, &m);
	assert_float_equal(m.demand_per_s, 100, 1e-6);
	in.readers = &r[2];
	in.n_readers = 1;
	pl_model_fit(&in, &m);
	assert_float_equal(m.demand_per_s, 0, 1e-9);
}

static void test_empty(void **state)
{
	(void)state;
	struct pl_model_in in = window(2, 2, 2);
	in.batches = 0;
	struct pl_model m;
	pl_model_fit(&in, &m);
	assert_int_equal(m.limit, PL_LIMIT_UNKNOWN);
	assert_int_equal(m.bottleneck, -1);
	assert_float_equal(m.predicted_per_s, 0, 1e-9);
	in.wall_ns = 0;
	pl_model_fit(&in, &m);
	assert_float_equal(m.batches_per_s, 0, 1e-9);
	assert_true(pl_stage_sequential(PL_STAGE_FRAME));
	assert_false(pl_stage_sequential(PL_STAGE_DECODE));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sequential),
		cmocka_unit_test(test_stage_cpu_then_cores),
		cmocka_unit_test(test_consumer_disk_memory),
		cmocka_unit_test(test_by_thread),
		cmocka_unit_test(test_demand),
		cmocka_unit_test(test_empty),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
