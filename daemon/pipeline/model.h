/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Where a pipeline's time goes, and what it would do with more cores (issue 20; Plumber,
 * MLSys 2022; docs/plumber.md). From a window of a pipeline's counters: each stage's rate, CPU
 * per batch and cores used; the rate its readers ask for; and, as a linear model of the
 * resources, the largest batch rate the pipeline could reach at an allocation: one core at most
 * for the driver's sequential stages, the pool's workers for the parallel ones, the cores of the
 * budget for both together, and the disk where the driver waited for it. The bound that binds
 * names the limit and the bottleneck stage.
 */
#ifndef SLUICE_PIPELINE_MODEL_H
#define SLUICE_PIPELINE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stage.h"

/* What bounds the rate (pl_model.limit). */
enum pl_limit {
	PL_LIMIT_UNKNOWN,    /* no batch in the window */
	PL_LIMIT_CONSUMER,   /* the readers: the engine waited for room in the ring */
	PL_LIMIT_SEQUENTIAL, /* a stage of the driver thread (one core at most) */
	PL_LIMIT_STAGE_CPU,  /* a parallel stage on the pool's workers */
	PL_LIMIT_CORES,	     /* every core of the budget is busy */
	PL_LIMIT_DISK,	     /* the driver waited for reads */
	PL_LIMIT_MEMORY,     /* the ring could not grow for a batch */
};
/* "consumer", "sequential", ... */
const char *pl_limit_name(enum pl_limit l);

/* Is the stage run by the driver thread alone (sequential), or by the pool's workers? */
bool pl_stage_sequential(unsigned stage);

/* A reader over the window: batches taken, and time spent waiting in next for one. */
struct pl_model_reader {
	uint64_t taken;
	uint64_t wait_ns;
	uint64_t window_ns; /* the part of the window it was attached (0: all of it) */
};

/* One window of a pipeline's counters (the differences between two readings, or since start). */
struct pl_model_in {
	uint64_t wall_ns;
	uint64_t batches;			   /* made in the window */
	struct pl_stage_stats st[PL_STAGE_COUNT_]; /* their differences */
	uint64_t read_wait_ns;			   /* the driver blocked on reads */
	/*
	 * The threads' CPU: the driver's (every stage it ran, the parse tasks it ran itself
	 * included) and the pool workers' task time. 0 and 0: unknown, the stages' split is used.
	 */
	uint64_t driver_cpu_ns, pool_task_ns;
	uint64_t producer_wait_ns; /* the engine blocked for room in the ring (0 in process) */
	uint64_t job_wait_ns;	   /* the driver waited for (or helped) its oldest batch job */
	uint64_t commit_failures;  /* ring growths refused */
	const struct pl_model_reader *readers;
	size_t n_readers;
	/* the allocation: the pool's workers, the cores the daemon may use, and the host's */
	unsigned workers;
	double cpus;
	unsigned host_cpus;
};

struct pl_model_stage {
	double elems_per_s; /* elements out per second */
	double per_batch;   /* elements per batch (Plumber's visit ratio) */
	double cpu_per_batch_ns;
	double cores; /* CPU-seconds per second */
	double share; /* of the pipeline's CPU */
};

struct pl_model {
	struct pl_model_stage stages[PL_STAGE_COUNT_];
	double batches_per_s; /* delivered */
	double cores;	      /* CPU-seconds per second, every stage */
	/*
	 * The readers' demand: the batch rate the slowest of them takes when it does not wait
	 * (taken / (wall - wait)); 0 when every reader waits nearly always (it takes what it
	 * gets: as fast as it can) or there is none.
	 */
	double demand_per_s;
	/* the model's bounds on the batch rate (0: no bound from it) */
	double seq_cap, pool_cap, cores_cap, disk_cap;
	double predicted_per_s;	    /* at this allocation: the smallest bound */
	double predicted_all_per_s; /* with every core of the host, workers included */
	enum pl_limit limit;
	int bottleneck; /* the stage that bounds it (enum pl_stage_id), or -1 */
	/* per batch: the driver thread's CPU and the pool workers' (0, 0: not known) */
	double drv_ns_per_batch, pool_ns_per_batch;
};

struct pl_stats; /* pipeline.h */
/*
 * The window between two readings of an in-process pipeline's stats (a NULL: since it
 * started), wall_ns apart, in *in (readers, producer waits and the allocation left 0).
 */
void pl_model_in_from_stats(const struct pl_stats *a, const struct pl_stats *b, uint64_t wall_ns,
			    struct pl_model_in *in);

/*
 * The allocation's measures, read twice around a window: the host's busy CPU time so far
 * (/proc/stat, every state but idle and iowait; 0: unknown) and this process's, in ns. What
 * the host's other processes used is the first's difference less the second's.
 */
uint64_t pl_model_host_busy_ns(void);
uint64_t pl_model_own_cpu_ns(void);

/*
 * How long in the window the engine waited for room (the ring, the prefetch queue): the
 * readers' share of the limit (PL_LIMIT_CONSUMER when half the window or more).
 */
uint64_t pl_model_room_ns(const struct pl_model_in *in);

/* The model of one window. */
void pl_model_fit(const struct pl_model_in *in, struct pl_model *ret);
/* The largest batch rate at an allocation of workers and cpus (cores), by m's costs. */
double pl_model_predict(const struct pl_model *m, unsigned workers, double cpus);

#endif
