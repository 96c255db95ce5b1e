/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sluice-bench autotune's runs (bench_autotune_run.c): a fresh sluiced serving one or two
 * pipelines, each read by a reader thread, the batches counted every AT_TICK_S on an absolute
 * schedule; and the rates over those samples. bench_autotune.c builds the grid, the tuned runs
 * and the pair on them.
 */
#ifndef SLUICE_BENCH_AUTOTUNE_H
#define SLUICE_BENCH_AUTOTUNE_H

#include <stdint.h>

#define AT_TICK_S   0.25 /* the sampling period */
#define AT_WINDOW_S 5.0	 /* tuned_per_s: the rate over the run's last AT_WINDOW_S */
#define AT_REACH_S  1.0	 /* seconds_to_90: the rate over the preceding AT_REACH_S */

/* The tuner's counters read at a run's end (sluice_stats); -1 where sluiced has none. */
enum { AT_TUNE_PREFETCH, AT_TUNE_READ_BUFFER, AT_TUNE_MOVES, AT_TUNE_WEIGHT, AT_TUNE_N };

/* A pipeline of a run: its name and spec, its reader's demand; what the run measured. */
struct at_pipe {
	const char *name, *text;
	double demand; /* batches a second; 0: greedy */
	/* out */
	int64_t tune[AT_TUNE_N];
	uint64_t *count; /* count[k]: the batches taken by sample k */
	double *cpu;	 /* cpu[k]: its driver's CPU and pool tasks' time by then, s (pairs only) */
};

/* A run's samples: when each was taken, and the daemon's CPU then. */
struct at_samples {
	unsigned n;
	double seconds; /* sample k is due at min(k * AT_TICK_S, seconds) */
	double *t;	/* t[k]: when it was taken, seconds since the readers' start */
	double *cpu;	/* cpu[k]: the daemon's CPU seconds then (user + system; pairs only) */
};

/*
 * Start sluiced (at `sluiced`; extra: its options, or NULL) with np (at most 2) pipelines, read
 * each with a thread for `seconds`, counting every AT_TICK_S (and, for a pair, the daemon's and
 * each pipeline's CPU); the tuner's counters at the end. On success the caller frees the
 * samples (at_samples_free); on failure there are none.
 */
int at_run(const char *sluiced, struct at_pipe *p, unsigned np, const char *const *extra,
	   double seconds, struct at_samples *s);
void at_samples_free(struct at_samples *s, struct at_pipe *p, unsigned np);

/*
 * Over the last w seconds of the run, from the sample due w before the last (or the nearest
 * after) to the last, over the time between the two as taken: the batch rate of count, and the
 * cores (CPU seconds a second) of a cpu series (the daemon's, or a pipeline's).
 */
double at_rate_last(const struct at_samples *s, const uint64_t *count, double w);
double at_cores_last(const struct at_samples *s, const double *cpu, double w);
/* The first sample time at which the rate over the preceding AT_REACH_S reaches target, or -1. */
double at_time_to_reach(const struct at_samples *s, const uint64_t *count, double target);
/* The window of the tuned rates: AT_WINDOW_S, or half the run when it is shorter than two. */
double at_tuned_window(double seconds);

#endif
