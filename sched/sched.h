/* SPDX-License-Identifier: Apache-2.0 */
/* sched: the work-stealing task pool shared by every pipeline of the daemon (DESIGN.md §4). */
#ifndef SLUICE_SCHED_SCHED_H
#define SLUICE_SCHED_SCHED_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "topo.h"

/*
 * A pool of worker threads, one per processing unit it is given, pinned with hwloc. Each worker
 * owns a Chase-Lev deque: a task spawned from inside a task goes onto the spawning worker's
 * deque (the owner pops LIFO, thieves steal FIFO); a task submitted from outside the pool goes
 * into the injection queue of a sched_queue. An idle worker steals from a random victim on its
 * own NUMA node first, then from the others, then takes from the injection queues, spins a
 * bounded while, and parks on a futex; new work wakes a parked worker, with no lost wake-ups.
 *
 * Fairness between pipelines: each pipeline submits through its own sched_queue with a weight.
 * Workers take injected tasks from the queues in weighted round-robin (deficit) order, so a
 * pipeline with a deep backlog cannot starve another; work spawned by a running task stays on
 * the worker's deque, so a started group finishes before its worker turns to other queues.
 *
 * Tasks are small records taken from per-worker free lists (no malloc per task once warm).
 * Nothing here prints or exits; errors are negative errno values.
 */

struct sched_pool;
struct sched_queue;

typedef void (*sched_fn)(void *arg);

struct sched_pool_opts {
	size_t size;		 /* sizeof(struct sched_pool_opts), set by _init */
	unsigned workers;	 /* 0: one per processing unit of the topology */
	bool pin;		 /* pin each worker to its processing unit (default true) */
	const struct topo *topo; /* NULL: the machine's (topo_load) */
	unsigned spin_iters;	 /* at most this many idle polls before parking (default 4096) */
	unsigned spin_us;	 /* ... and at most this long, microseconds (default 5) */
};

void sched_pool_opts_init(struct sched_pool_opts *opts);

/* Starts the workers. -EINVAL, -ENOMEM, or -errno from pthread/hwloc. */
int sched_pool_create(const struct sched_pool_opts *opts, struct sched_pool **ret_pool);

enum sched_shutdown {
	SCHED_SHUTDOWN_DRAIN,  /* run every task already queued or spawned, then stop */
	SCHED_SHUTDOWN_CANCEL, /* drop tasks not yet started (their groups complete as cancelled) */
};

/*
 * Stop the workers (how: see enum), join them and free the pool and its remaining queues.
 * From the moment it is called, spawns from outside the pool fail with -ESHUTDOWN (and, under
 * CANCEL, spawns from tasks too). NULL is fine. Not from a task.
 */
void sched_pool_destroy(struct sched_pool *pool, enum sched_shutdown how);

unsigned sched_pool_workers(const struct sched_pool *pool);
/* The calling thread's worker index in pool, or -1 when it is not one of pool's workers. */
int sched_worker_index(const struct sched_pool *pool);

/*
 * A pipeline's entry into the pool. weight (>= 1) is its share of injected work under
 * contention; node (-1: any) is the NUMA node whose workers should serve it first.
 */
int sched_queue_create(struct sched_pool *pool, unsigned weight, int node,
		       struct sched_queue **ret_q);
/*
 * Change q's weight (>= 1) from its next turn on: the daemon's tuner sets each pipeline's share
 * of the pool (docs/plumber.md, "Autotuning"). -EINVAL for 0. Any thread.
 */
int sched_queue_set_weight(struct sched_queue *q, unsigned weight);
unsigned sched_queue_weight(const struct sched_queue *q);
/*
 * Waits until no task of q is queued or running, then frees it. NULL is fine. Not from a task.
 * Queues still alive when their pool is destroyed are freed with it.
 */
void sched_queue_destroy(struct sched_queue *q);

/*
 * A task group: the caller's memory. Spawn tasks into it from any thread (inside a worker they
 * go to that worker's deque, outside into the group's queue), then wait for all of them.
 */
struct sched_group {
	struct sched_queue *q;
	atomic_uint_fast64_t pending; /* tasks spawned and not finished */
	atomic_bool cancelled;	      /* some task of it was dropped by a cancel */
};
/*
 * (No futex word in the group: a waiter may return, and the group's memory go, the moment
 * pending reaches 0, so the last finisher must not touch the group after its decrement. Outside
 * waiters sleep on a futex word of the pool instead; see docs/sched.md.)
 */

void sched_group_init(struct sched_group *g, struct sched_queue *q);
/* 0, or -ENOMEM, or -ESHUTDOWN when the pool is stopping. */
int sched_spawn(struct sched_group *g, sched_fn fn, void *arg);

enum sched_spawn_flag {
	/*
	 * Do not wake a parked worker for this task: a worker that is running or spinning takes
	 * it when it next looks for work. From outside the pool the caller must then call
	 * sched_group_help(g), which runs every task of the queue still waiting, so the task
	 * cannot be stranded. For work the caller expects to run mostly itself, where waking a
	 * worker would cost more than the task (a wake-up is a system call on each side).
	 */
	SCHED_SPAWN_NO_WAKE = 1u << 0,
};
/* sched_spawn with flags (enum sched_spawn_flag); sched_spawn is flags 0. */
int sched_spawn_flags(struct sched_group *g, sched_fn fn, void *arg, unsigned flags);
/*
 * Wait until every task of g has finished. On a worker thread this runs tasks (its own deque,
 * then steals) while it waits, so recursive spawn/wait never deadlocks; elsewhere it sleeps on
 * a futex. Returns 0, or -ECANCELED when tasks of g were dropped by a cancel.
 */
int sched_group_wait(struct sched_group *g);

/*
 * Wait for g like sched_group_wait, but from a thread outside the pool, first run the tasks
 * still waiting in g's queue (its injection FIFO, oldest first; tasks of other groups of the
 * same queue included) on the calling thread, and sleep only for what workers are running. So
 * a queue's tasks must be fine to run on the thread that helps (sched_worker_index() is -1
 * there, and a spawn from such a task is an outside spawn: refused once the pool is stopping).
 * On a worker it is sched_group_wait. Returns 0, or -ECANCELED as sched_group_wait.
 */
int sched_group_help(struct sched_group *g);

/*
 * From a thread outside the pool: run the oldest task waiting in q's injection FIFO, if there is
 * one, on the calling thread, as sched_group_help would (the same rules for what the task may
 * do). Returns 1 if it ran (or, while cancelling, dropped) a task, 0 if none was waiting or the
 * caller is a worker, -EINVAL. For a thread with time on its hands (waiting for I/O) that would
 * rather do its queue's work itself than have a worker woken for it.
 */
int sched_queue_help_one(struct sched_queue *q);

/*
 * Run fn(arg, lo, hi) over [begin, end) in chunks of at least grain (0: pick one), split
 * recursively on the pool; returns when all are done. Callable from workers and other threads.
 */
int sched_parallel_for(struct sched_queue *q, size_t begin, size_t end, size_t grain,
		       void (*fn)(void *arg, size_t lo, size_t hi), void *arg);

/* Per-worker statistics, cheap enough to leave on. */
struct sched_worker_stats {
	uint64_t tasks;	      /* tasks run */
	uint64_t steals;      /* tasks stolen from other workers */
	uint64_t steal_fails; /* steal attempts that found nothing or lost a race */
	uint64_t injected;    /* tasks taken from injection queues */
	uint64_t parks;	      /* times parked on the futex */
	uint64_t parked_ns;   /* time spent parked */
	uint64_t cpu_ns;      /* thread CPU time (CLOCK_THREAD_CPUTIME_ID) */
	int pu;		      /* the processing unit it is pinned to, -1 if not pinned */
	int node;	      /* its NUMA node */
};

/* Fill stats[0 .. min(n, workers)); returns the number filled. */
unsigned sched_pool_stats(const struct sched_pool *pool, struct sched_worker_stats *stats,
			  unsigned n);

#endif
