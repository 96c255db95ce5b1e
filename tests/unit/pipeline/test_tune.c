/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon/pipeline/tune.c: the tuner's policy. Windows made up so that each wait is seen in
 * turn: the knob that removes it steps, within its bound, and no knob moves when the readers
 * are the limit; Plumber's allocation of a CPU budget, checked against the LP's solution.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/pipeline/tune.h"

static const struct pl_tune MAX = { .prefetch = 32, .read_chunk = 1 << 20 };

/* A window where nothing waits: the pipeline runs as it should. */
static struct pl_tune_obs calm(void)
{
	return (struct pl_tune_obs){ .batches = 100, .pool_busy = 0.3 };
}

/* A step with no trial (a trial's hold under way): the wait rules alone. */
static unsigned step(const struct pl_tune_obs *o, const struct pl_tune *now,
		     const struct pl_tune *max, struct pl_tune *next, char *why)
{
	struct pl_tune_probe pr = { .hold = { PL_TUNE_HOLD, PL_TUNE_HOLD } };
	return pl_tune_step(o, now, max, &pr, next, why, 256);
}

static void test_calm_moves_nothing(void **state)
{
	struct pl_tune now = { .prefetch = 1, .read_chunk = 65536 }, next;
	char why[256];
	struct pl_tune_obs o = calm();
	assert_int_equal(step(&o, &now, &MAX, &next, why), 0);
	assert_int_equal(next.prefetch, 1);
	assert_int_equal(next.read_chunk, 65536);
	assert_string_equal(why, "");
}

static void test_job_wait_doubles_prefetch(void **state)
{
	struct pl_tune now = { .prefetch = 1, .read_chunk = 65536 }, next;
	char why[256];
	struct pl_tune_obs o = calm();
	o.job_wait = 0.2;
	assert_int_equal(step(&o, &now, &MAX, &next, why), PL_TUNE_MOVED_PREFETCH);
	assert_int_equal(next.prefetch, 2);
	assert_int_equal(next.read_chunk, 65536);
	assert_non_null(strstr(why, "waited for batch jobs 20 %"));
	/* up to the bound, not past it */
	now.prefetch = 24;
	assert_int_equal(step(&o, &now, &MAX, &next, why), PL_TUNE_MOVED_PREFETCH);
	assert_int_equal(next.prefetch, 32);
	now.prefetch = 32;
	assert_int_equal(step(&o, &now, &MAX, &next, why), 0);
	/* a wait under the threshold is noise */
	now.prefetch = 1;
	o.job_wait = PL_TUNE_WAIT / 2;
	assert_int_equal(step(&o, &now, &MAX, &next, why), 0);
}

static void test_busy_pool_keeps_prefetch(void **state)
{
	struct pl_tune now = { .prefetch = 4, .read_chunk = 65536 }, next;
	char why[256];
	struct pl_tune_obs o = calm();
	o.job_wait = 0.5;
	o.pool_busy = 0.95; /* the cores are the limit: more jobs in flight would only wait */
	assert_int_equal(step(&o, &now, &MAX, &next, why), 0);
	assert_int_equal(next.prefetch, 4);
}

static void test_reads_grow_the_chunk(void **state)
{
	struct pl_tune now = { .prefetch = 1, .read_chunk = 65536 }, next;
	char why[256];
	struct pl_tune_obs o = calm();
	o.read_wait = 0.1;
	assert_int_equal(step(&o, &now, &MAX, &next, why), PL_TUNE_MOVED_CHUNK);
	assert_int_equal(next.read_chunk, 262144);
	assert_non_null(strstr(why, "waited for reads 10 %"));
	now.read_chunk = 524288;
	assert_int_equal(step(&o, &now, &MAX, &next, why), PL_TUNE_MOVED_CHUNK);
	assert_int_equal(next.read_chunk, 1 << 20); /* clamped */
	/* no wait, but reading takes a third of the driver: larger reads; a sixth: no */
	o = calm();
	o.read_cpu = 0.33;
	now.read_chunk = 65536;
	assert_int_equal(step(&o, &now, &MAX, &next, why), PL_TUNE_MOVED_CHUNK);
	assert_int_equal(next.read_chunk, 262144);
	assert_non_null(strstr(why, "reading took 33 %"));
	o.read_cpu = 0.16;
	assert_int_equal(step(&o, &now, &MAX, &next, why), 0);
	o.read_wait = 0.1;
	/* both at once: both move, both said */
	o.job_wait = 0.3;
	now.read_chunk = 65536;
	assert_int_equal(step(&o, &now, &MAX, &next, why),
			 PL_TUNE_MOVED_PREFETCH | PL_TUNE_MOVED_CHUNK);
	assert_non_null(strstr(why, "; "));
}

static void test_read_waits_add_reads_in_flight(void **state)
{
	const struct pl_tune max = { .prefetch = 32, .read_chunk = 1 << 20, .read_depth = 16 };
	struct pl_tune now = { .prefetch = 1, .read_chunk = 65536, .read_depth = 1 }, next;
	char why[256];
	struct pl_tune_obs o = calm();
	o.read_wait = 0.2; /* waiting for reads: more of them in flight first */
	assert_int_equal(step(&o, &now, &max, &next, why), PL_TUNE_MOVED_DEPTH);
	assert_int_equal(next.read_depth, 2);
	assert_int_equal(next.read_chunk, 65536);
	/* at the most in flight, larger reads */
	now.read_depth = 16;
	assert_int_equal(step(&o, &now, &max, &next, why), PL_TUNE_MOVED_CHUNK);
	assert_int_equal(next.read_depth, 16);
	assert_int_equal(next.read_chunk, 262144);
}

/* n windows of o in which nothing may move (a trial waits for 3 windows of its setting). */
static void quiet(const struct pl_tune_obs *o, const struct pl_tune *now, const struct pl_tune *max,
		  struct pl_tune_probe *pr, int n)
{
	struct pl_tune next;
	char why[256];
	for (int w = 0; w < n; w++) {
		assert_int_equal(pl_tune_step(o, now, max, pr, &next, why, sizeof(why)), 0);
		assert_memory_equal(&next, now, sizeof(next));
	}
}

/* No wait explains the rate: a step tried (jobs in flight first, then the read size), kept
   while it pays, taken back once it does not, and that knob not tried again for a while. */
static void test_trials(void **state)
{
	struct pl_tune now = { .prefetch = 1, .read_chunk = 65536 }, next;
	struct pl_tune_probe pr = { 0 };
	char why[256];
	struct pl_tune_obs o = calm();
	o.rate = 1000;
	quiet(&o, &now, &MAX, &pr, 2);
	assert_int_equal(pl_tune_step(&o, &now, &MAX, &pr, &next, why, sizeof(why)),
			 PL_TUNE_MOVED_PREFETCH);
	assert_int_equal(next.prefetch, 2);
	assert_non_null(strstr(why, "no wait says what holds 1000 batches/s back: a trial"));
	now = next;
	o.rate = 1100; /* +10 % over both windows: kept */
	quiet(&o, &now, &MAX, &pr, PL_TUNE_PROBE_WINDOWS);
	assert_int_equal(pr.knob, 0);
	/* the next trial, 2 -> 4, from the kept trial's windows and one more */
	assert_int_equal(pl_tune_step(&o, &now, &MAX, &pr, &next, why, sizeof(why)),
			 PL_TUNE_MOVED_PREFETCH);
	assert_int_equal(next.prefetch, 4);
	now = next;
	o.rate = 1120; /* +2 %: noise, not a gain */
	quiet(&o, &now, &MAX, &pr, PL_TUNE_PROBE_WINDOWS - 1);
	assert_int_equal(pl_tune_step(&o, &now, &MAX, &pr, &next, why, sizeof(why)),
			 PL_TUNE_MOVED_PREFETCH);
	assert_int_equal(next.prefetch, 2); /* taken back */
	assert_non_null(strstr(why, "taken back"));
	now = next;
	/* jobs in flight held: the read size's trial, 64 -> 256 KiB, once 3 windows say the rate
	   at 2 jobs in flight; it does not pay either */
	quiet(&o, &now, &MAX, &pr, 2);
	assert_int_equal(pl_tune_step(&o, &now, &MAX, &pr, &next, why, sizeof(why)),
			 PL_TUNE_MOVED_CHUNK);
	assert_int_equal(next.read_chunk, 262144);
	now = next;
	o.rate = 900;
	quiet(&o, &now, &MAX, &pr, PL_TUNE_PROBE_WINDOWS - 1);
	assert_int_equal(pl_tune_step(&o, &now, &MAX, &pr, &next, why, sizeof(why)),
			 PL_TUNE_MOVED_CHUNK);
	assert_int_equal(next.read_chunk, 65536);
	assert_non_null(strstr(why, "reads of 256 KiB made 900 batches/s, of 64 KiB 1120"));
	now = next;
	/* both held: nothing until the first hold ends (it began 5 windows before the other) */
	quiet(&o, &now, &MAX, &pr, PL_TUNE_HOLD - 6);
	assert_int_equal(pl_tune_step(&o, &now, &MAX, &pr, &next, why, sizeof(why)),
			 PL_TUNE_MOVED_PREFETCH);
	/* readers that become the limit during a trial: kept */
	now = next;
	o.producer_wait = 0.8;
	assert_int_equal(pl_tune_step(&o, &now, &MAX, &pr, &next, why, sizeof(why)), 0);
	assert_int_equal(pr.knob, 0);
	assert_int_equal(next.prefetch, 4);
}

/* Windows whose rate varies: a trial must beat the base by twice the noise of the comparison,
   not only by PL_TUNE_PROBE_GAIN. */
static void test_trial_noise(void **state)
{
	static const double base[] = { 900, 1100, 900, 1100 }, trial[] = { 1080, 1080 };
	for (int quiet_run = 0; quiet_run < 2; quiet_run++) {
		struct pl_tune now = { .prefetch = 2, .read_chunk = 65536 }, next;
		struct pl_tune_probe pr = { .hold = { 0, PL_TUNE_HOLD } };
		char why[256];
		struct pl_tune_obs o = calm();
		unsigned moved = 0;
		for (int w = 0; w < 4 && !moved; w++) {
			o.rate = quiet_run ? 1000 : base[w];
			moved = pl_tune_step(&o, &now, &MAX, &pr, &next, why, sizeof(why));
		}
		assert_int_equal(moved, PL_TUNE_MOVED_PREFETCH);
		now = next;
		for (int w = 0; w < PL_TUNE_PROBE_WINDOWS; w++) {
			o.rate = trial[w];
			moved = pl_tune_step(&o, &now, &MAX, &pr, &next, why, sizeof(why));
		}
		/* +8 %: a gain beside steady windows, noise beside windows 10 % apart */
		assert_int_equal(moved, quiet_run ? 0 : PL_TUNE_MOVED_PREFETCH);
		assert_int_equal(next.prefetch, quiet_run ? 4 : 2);
	}
}

/* A step for a wait that made the pipeline slower: taken back, and the wait rule held. */
static void test_wait_step_checked(void **state)
{
	const struct pl_tune max = { .prefetch = 32 };
	struct pl_tune now = { .prefetch = 8, .read_chunk = 65536 }, next;
	struct pl_tune_probe pr = { .hold = { PL_TUNE_HOLD } }; /* the read size: fixed */
	char why[256];
	struct pl_tune_obs o = calm();
	o.job_wait = 0.2;
	o.rate = 1000;
	assert_int_equal(pl_tune_step(&o, &now, &max, &pr, &next, why, sizeof(why)),
			 PL_TUNE_MOVED_PREFETCH);
	assert_int_equal(next.prefetch, 16);
	now = next;
	o.rate = 800; /* still waiting, and 20 % slower */
	quiet(&o, &now, &max, &pr, PL_TUNE_PROBE_WINDOWS - 1);
	assert_int_equal(pl_tune_step(&o, &now, &max, &pr, &next, why, sizeof(why)),
			 PL_TUNE_MOVED_PREFETCH);
	assert_int_equal(next.prefetch, 8);
	assert_non_null(strstr(why, "16 jobs in flight made 800 batches/s, 8 made 1000: taken "
				    "back"));
	now = next;
	o.rate = 1000;
	quiet(&o, &now, &max, &pr, PL_TUNE_HOLD - 1); /* the wait is still seen: held */
	assert_int_equal(pl_tune_step(&o, &now, &max, &pr, &next, why, sizeof(why)),
			 PL_TUNE_MOVED_PREFETCH);
	/* a step for a wait that costs a little (within the loss allowed): kept */
	now = next;
	o.rate = 970;
	quiet(&o, &now, &max, &pr, PL_TUNE_PROBE_WINDOWS);
	assert_int_equal(pr.knob, 0);
}

/* Trials of one knob taken back again and again: each hold twice the last, up to the most. */
static void test_trial_backoff(void **state)
{
	const struct pl_tune max = { .prefetch = 32 }; /* the read size fixed */
	struct pl_tune now = { .prefetch = 2 }, next;
	struct pl_tune_probe pr = { 0 };
	char why[256];
	struct pl_tune_obs o = calm();
	o.rate = 1000;
	unsigned want = PL_TUNE_HOLD;
	for (int round = 0; round < 8; round++) {
		unsigned waited = 0;
		while (pl_tune_step(&o, &now, &max, &pr, &next, why, sizeof(why)) == 0)
			waited++;
		assert_int_equal(next.prefetch, 4); /* a trial */
		if (round)
			assert_int_equal(waited, want - 1);
		for (int w = 1; w < PL_TUNE_PROBE_WINDOWS; w++)
			assert_int_equal(
				pl_tune_step(&o, &next, &max, &pr, &next, why, sizeof(why)), 0);
		assert_int_equal(pl_tune_step(&o, &next, &max, &pr, &next, why, sizeof(why)),
				 PL_TUNE_MOVED_PREFETCH);
		assert_int_equal(next.prefetch, 2); /* taken back */
		want = round ? (want * 2 < PL_TUNE_HOLD_MAX ? want * 2 : PL_TUNE_HOLD_MAX) : want;
		assert_int_equal(pr.hold[0], want);
	}
	assert_int_equal(pr.hold[0], PL_TUNE_HOLD_MAX);
}

static void test_fixed_knobs_stay(void **state)
{
	struct pl_tune now = { .prefetch = 2, .read_chunk = 1 << 20 }, next, fixed = { 0 };
	char why[256];
	struct pl_tune_obs o = calm();
	o.job_wait = o.read_wait = 0.5;
	o.memory_refused = true;
	assert_int_equal(step(&o, &now, &fixed, &next, why), 0);
	assert_int_equal(next.prefetch, 2);
	assert_int_equal(next.read_chunk, 1 << 20);
}

static void test_consumer_limit_moves_nothing(void **state)
{
	struct pl_tune now = { .prefetch = 1, .read_chunk = 65536 }, next;
	char why[256];
	struct pl_tune_obs o = calm();
	o.job_wait = o.read_wait = 0.3;
	o.producer_wait = 0.6; /* the readers take less than it makes */
	assert_int_equal(step(&o, &now, &MAX, &next, why), 0);
	o.producer_wait = 0;
	o.batches = 1; /* nothing to learn from */
	assert_int_equal(step(&o, &now, &MAX, &next, why), 0);
}

static void test_memory_halves_prefetch(void **state)
{
	struct pl_tune now = { .prefetch = 16, .read_chunk = 65536 }, next;
	char why[256];
	struct pl_tune_obs o = calm();
	o.memory_refused = true;
	o.job_wait = 0.5; /* would step up otherwise */
	assert_int_equal(step(&o, &now, &MAX, &next, why), PL_TUNE_MOVED_PREFETCH);
	assert_int_equal(next.prefetch, 8);
	assert_non_null(strstr(why, "could not grow"));
	now.prefetch = 1;
	assert_int_equal(step(&o, &now, &MAX, &next, why), 0);
}

/* ---- the allocation ---- */

/* pipelines of pool cost only (no driver cost, no cap): Plumber's allocation of the pool */
static double alloc(size_t n, const double *dem, const double *cost, double cores, double *rate)
{
	struct pl_tune_alloc_in in[4];
	for (size_t i = 0; i < n; i++)
		in[i] = (struct pl_tune_alloc_in){ .demand = dem[i], .pool_cost = cost[i] };
	return pl_tune_allocate(n, in, cores, rate);
}

static void test_demands_fit(void **state)
{
	/* 2 cores: A asks 100/s at 5 ms (0.5 core), B as much as it can at 10 ms, C at 2 ms */
	double dem[] = { 100, 0, 0 }, cost[] = { 0.005, 0.010, 0.002 }, rate[3];
	assert_float_equal(alloc(3, dem, cost, 2, rate), 1, 1e-12);
	assert_float_equal(rate[0], 100, 1e-9);
	/* 1.5 cores left, 0.75 each */
	assert_float_equal(rate[1], 75, 1e-9);
	assert_float_equal(rate[2], 375, 1e-9);
	unsigned w[3];
	pl_tune_weights(3, rate, w);
	assert_int_equal(w[2], PL_TUNE_WEIGHT);
	assert_int_equal(w[0], 17); /* 64 * 100 / 375 */
	assert_int_equal(w[1], 13);
}

static void test_demands_exceed(void **state)
{
	/* 1 core: A asks 200/s at 5 ms (1 core), B 100/s at 10 ms (1 core): each gets half of
	   its demand (the LP's max-min of delivered over demanded), a greedy C nothing */
	double dem[] = { 200, 100, 0 }, cost[] = { 0.005, 0.010, 0.001 }, rate[3];
	assert_float_equal(alloc(3, dem, cost, 1, rate), 0.5, 1e-9);
	assert_float_equal(rate[0], 100, 1e-9);
	assert_float_equal(rate[1], 50, 1e-9);
	assert_float_equal(rate[2], 0, 1e-9);
	unsigned w[3];
	pl_tune_weights(3, rate, w);
	assert_int_equal(w[0], PL_TUNE_WEIGHT);
	assert_int_equal(w[1], PL_TUNE_WEIGHT / 2);
	assert_int_equal(w[2], 1); /* never 0: the pool's weights are >= 1 */
	/* the cores used are the budget */
	assert_float_equal(rate[0] * cost[0] + rate[1] * cost[1], 1, 1e-9);
}

static void test_all_greedy_share_equally(void **state)
{
	double dem[] = { 0, 0 }, cost[] = { 0.001, 0.004 }, rate[2];
	alloc(2, dem, cost, 2, rate);
	/* a core each */
	assert_float_equal(rate[0], 1000, 1e-9);
	assert_float_equal(rate[1], 250, 1e-9);
}

static void test_driver_counted(void **state)
{
	/* a batch of A takes 5 ms of the pool and 5 of its driver, B 2.5 and 2.5: at their
	   demands (100/s, 200/s) a core each. 2 cores give both; 1.5 give each 3/4 of it (by the
	   pool's cost alone, 0.75 core, both would have seemed to fit) */
	struct pl_tune_alloc_in in[] = {
		{ .demand = 100, .pool_cost = 0.005, .drv_cost = 0.005 },
		{ .demand = 200, .pool_cost = 0.0025, .drv_cost = 0.0025 },
	};
	double rate[2];
	assert_float_equal(pl_tune_allocate(2, in, 2, rate), 1, 1e-12);
	assert_float_equal(rate[0], 100, 1e-9);
	assert_float_equal(rate[1], 200, 1e-9);
	assert_float_equal(pl_tune_allocate(2, in, 1.5, rate), 0.75, 1e-9);
	assert_float_equal(rate[0], 75, 1e-9);
	assert_float_equal(rate[1], 150, 1e-9);
}

static void test_seq_cap_leaves_the_rest(void **state)
{
	/*
	 * 2 cores. A asks 300/s at 1 + 3 ms, but its driver does at most 150/s; B asks 500/s at
	 * 2 + 1 ms (1.5 cores). In proportion, both would get 2 / 2.7 = 74 % of their demands,
	 * and A could not take its share: A gets what its driver can do (0.6 core) and B the
	 * rest, 1.4 cores, 93 % of its demand.
	 */
	struct pl_tune_alloc_in in[] = {
		{ .demand = 300, .pool_cost = 0.001, .drv_cost = 0.003, .seq_cap = 150 },
		{ .demand = 500, .pool_cost = 0.002, .drv_cost = 0.001 },
	};
	double rate[2];
	assert_float_equal(pl_tune_allocate(2, in, 2, rate), 1.4 / 1.5, 1e-9);
	assert_float_equal(rate[0], 150, 1e-9);
	assert_float_equal(rate[1], 500 * 1.4 / 1.5, 1e-6);
	assert_float_equal(rate[0] * 0.004 + rate[1] * 0.003, 2, 1e-9);

	/* greedy: equal cores, but no more than a driver can use: A's 0.5 core, B the rest */
	struct pl_tune_alloc_in g[] = {
		{ .pool_cost = 0.001, .drv_cost = 0.004, .seq_cap = 100 },
		{ .pool_cost = 0.005, .drv_cost = 0.005 },
	};
	pl_tune_allocate(2, g, 2, rate);
	assert_float_equal(rate[0], 100, 1e-9);
	assert_float_equal(rate[1], 150, 1e-6);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_calm_moves_nothing),
		cmocka_unit_test(test_job_wait_doubles_prefetch),
		cmocka_unit_test(test_busy_pool_keeps_prefetch),
		cmocka_unit_test(test_reads_grow_the_chunk),
		cmocka_unit_test(test_read_waits_add_reads_in_flight),
		cmocka_unit_test(test_trials),
		cmocka_unit_test(test_trial_noise),
		cmocka_unit_test(test_wait_step_checked),
		cmocka_unit_test(test_trial_backoff),
		cmocka_unit_test(test_fixed_knobs_stay),
		cmocka_unit_test(test_consumer_limit_moves_nothing),
		cmocka_unit_test(test_memory_halves_prefetch),
		cmocka_unit_test(test_demands_fit),
		cmocka_unit_test(test_demands_exceed),
		cmocka_unit_test(test_all_greedy_share_equally),
		cmocka_unit_test(test_driver_counted),
		cmocka_unit_test(test_seq_cap_leaves_the_rest),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
