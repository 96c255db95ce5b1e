/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tuner's policy (issue 20; docs/plumber.md, "Autotuning"): from one window of a pipeline's
 * counters, the next values of the knobs its spec left "auto"; and, across the pipelines of a
 * host, the batch rates Plumber's linear program gives them within a CPU budget, as the pool's
 * weights. No I/O and no clock: sluiced's tune.c feeds it windows and applies what it says.
 */
#ifndef SLUICE_PIPELINE_TUNE_H
#define SLUICE_PIPELINE_TUNE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipeline.h"

/* One window of a pipeline, as fractions of its wall time (0..1 each). */
struct pl_tune_obs {
	uint64_t batches;     /* made in the window */
	double job_wait;      /* the driver waited for the oldest batch job (prefetch too small) */
	double read_wait;     /* the driver blocked for reads */
	double producer_wait; /* the engine waited for room in the ring: the readers are the limit */
	double pool_busy;     /* the pool's task time over (window x workers) */
	double read_cpu;      /* the read stage's share of the driver thread's CPU */
	bool memory_refused;  /* a ring growth was refused in the window */
	double rate;	      /* batches a second made */
};

/*
 * A trial step of a knob no wait points at (jobs in flight first, then the read size) where
 * nothing says what holds the pipeline back: its driver neither waiting nor a core's worth of
 * busy (the kernel's scheduling of the driver, the workers it wakes and the readers on too few
 * cores), or reads that cost more in calls than larger ones would, or less in cache misses than
 * larger ones do. Kept if the rate over the next PL_TUNE_PROBE_WINDOWS windows beats the rate
 * before it (the mean of up to PL_TUNE_HIST windows at the setting it left; a trial waits for 3)
 * by PL_TUNE_PROBE_GAIN and by the noise of that difference (one standard error, from the
 * windows' spread before the trial: on a shared VM one window's rate varies by 5 - 15 %, and a
 * trial kept on noise stays; with the 5 % a step that does nothing is kept about 6 % of the
 * time, one that gains 15 % about half), else taken back, and that knob not tried again for
 * PL_TUNE_HOLD windows, doubled for each trial of it taken back in a row (up to
 * PL_TUNE_HOLD_MAX).
 *
 * A step of the jobs in flight for a wait is checked the same way, the other way round: taken
 * back if its windows fall under the rate before it by 1 - PL_TUNE_PROBE_LOSS and the
 * noise (a wait says more jobs would help, not that they do: where the pool's workers and the
 * driver share too few cores, more jobs in flight can be slower), and that wait rule held as a
 * trial would be. The caller's, zeroed at first.
 */
#define PL_TUNE_PROBE_WINDOWS 2
#define PL_TUNE_PROBE_GAIN    1.05
#define PL_TUNE_PROBE_LOSS    0.95
#define PL_TUNE_HIST	      4
#define PL_TUNE_HOLD	      20
#define PL_TUNE_HOLD_MAX      600 /* 5 minutes */
struct pl_tune_probe {
	unsigned knob;		   /* the knob on trial (enum pl_tune_moved); 0: none */
	bool waited;		   /* the step was for a wait: taken back only if it was slower */
	size_t from;		   /* its value before the trial */
	unsigned windows;	   /* the trial's windows so far */
	double base;		   /* the rate before it */
	double noise;		   /* the relative standard error of the base and trial means */
	double hist[PL_TUNE_HIST]; /* the last windows' rates at the current setting */
	unsigned n_hist;	   /* how many (the oldest first) */
	unsigned hold[3];	   /* windows before jobs in flight, the read size, may be tried
				      again; [2]: before the wait rule may step jobs in flight */
	unsigned held[3];	   /* the last hold of each (doubled after each taken back) */
};

/* The thresholds of pl_tune_step (fractions of the window). */
#define PL_TUNE_WAIT	 0.05 /* a wait this long is worth a step */
#define PL_TUNE_BUSY	 0.90 /* a pool this busy: more jobs in flight cannot help */
#define PL_TUNE_READ_CPU 0.25 /* reading this much of the driver's CPU: larger reads */
#define PL_TUNE_CONSUMER 0.50 /* the engine waited this long for room: readers are the limit */

enum pl_tune_moved {
	PL_TUNE_MOVED_PREFETCH = 1u << 0,
	PL_TUNE_MOVED_CHUNK = 1u << 1,
	PL_TUNE_MOVED_DEPTH = 1u << 2,
};

/*
 * Whether the window o is one in which the pipeline, not its readers, was the limit: it made
 * batches and did not wait PL_TUNE_CONSUMER of it for room. Only such a window steps a knob
 * (pl_tune_step); by the third of a run of them one steps (a trial, if no wait said which)
 * where a knob may: the read size below its bound and not held, say.
 */
bool pl_tune_pipeline_limited(const struct pl_tune_obs *o);

/*
 * The knobs for the next window, from now and the window o (max: pl_pipeline_tunable's, 0 for
 * a fixed knob). Steps up, by doubling the jobs in flight or the reads in flight and
 * quadrupling the read size, while the pipeline, not its readers, is the limit and the wait
 * that knob removes was seen (for reads waited for: more in flight, else larger ones; larger
 * ones too where reading takes PL_TUNE_READ_CPU of the driver);
 * halves the jobs in flight when the ring could not grow; where no wait explains the rate, tries
 * a step (struct pl_tune_probe). Returns the knobs that moved (enum
 * pl_tune_moved), and in why (cap bytes) what made them move.
 */
unsigned pl_tune_step(const struct pl_tune_obs *o, const struct pl_tune *now,
		      const struct pl_tune *max, struct pl_tune_probe *pr, struct pl_tune *next,
		      char *why, size_t cap);

/* One pipeline as the allocation sees it (pl_tune_allocate). */
struct pl_tune_alloc_in {
	double demand;	  /* batches/s its readers ask for; 0: as many as they can get */
	double pool_cost; /* core-seconds of the pool a batch takes */
	double drv_cost;  /* core-seconds of its driver thread a batch takes */
	double seq_cap;	  /* the most batches/s its driver can do (sequential stages); 0: none */
};

/*
 * Plumber's allocation of `cores` of the host between n pipelines: a batch of pipeline i
 * takes pool_cost + drv_cost of them (the drivers run on the same cores as the pool), and it
 * can do at most seq_cap batches/s. Maximises the smallest rate[i] / demand[i] over the
 * pipelines with a demand (each given at most its demand and its seq_cap: water-filling, so a
 * pipeline its own driver holds back leaves the rest to the others); what is left goes to those
 * without one, in equal cores, each at most its seq_cap (max-min fair). ret_rate[i]: the batch
 * rate it gives pipeline i (0 for one left nothing). Returns the proportion of the demands met
 * (1 when the host can give them all).
 */
double pl_tune_allocate(size_t n, const struct pl_tune_alloc_in *in, double cores,
			double *ret_rate);

/*
 * The pool's weights (>= 1) that give n pipelines batches at the rates in rate[]: the pool takes
 * tasks from the queues in weighted turns, and a batch is about as many tasks in every pipeline
 * (two per worker), so a weight is proportional to its rate; the fastest gets PL_TUNE_WEIGHT.
 */
#define PL_TUNE_WEIGHT 64
void pl_tune_weights(size_t n, const double *rate, unsigned *ret_weight);

#endif
