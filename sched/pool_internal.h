/* SPDX-License-Identifier: Apache-2.0 */
/* sched pool internals: the records and the helpers pool.c and pool_lifecycle.c share. */
#ifndef SLUICE_SCHED_POOL_INTERNAL_H
#define SLUICE_SCHED_POOL_INTERNAL_H

#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sched/deque.h"
#include "sched/sched.h"
#include "sched/topo.h"

/*
 * A task record. It belongs to the free list of the worker that allocated it (owner >= 0) or to
 * the pool's outside cache (owner == -1); whoever runs it gives it back to that owner.
 */
struct sched_task {
	sched_fn fn;
	void *arg;
	struct sched_group *group;
	struct sched_task *next; /* free list, remote-free stack or injection FIFO link */
	int owner;		 /* allocating worker's index, -1: allocated outside the pool */
};

enum { SCHED_SLAB_TASKS = 64 };

/* Task records are allocated in slabs, freed only when the pool is destroyed. */
struct sched_slab {
	struct sched_slab *next;
	struct sched_task tasks[SCHED_SLAB_TASKS];
};

/*
 * Per-worker counters: written by their worker only (load + store, relaxed, except where noted),
 * read by sched_pool_stats and sched_pool_destroy. They live on the worker's own lines.
 */
struct sched_worker_ctr {
	atomic_uint_fast64_t tasks;	  /* tasks run */
	atomic_uint_fast64_t steals;	  /* tasks stolen */
	atomic_uint_fast64_t steal_fails; /* steal attempts that found nothing or lost a race */
	atomic_uint_fast64_t injected;	  /* tasks taken from injection queues */
	atomic_uint_fast64_t parks;	  /* futex waits */
	atomic_uint_fast64_t parked_ns;	  /* time in those waits */
	atomic_uint_fast64_t cpu_ns;	  /* thread CPU time at exit (while it runs: its clock) */
	atomic_uint_fast64_t dropped;	  /* tasks dropped by a cancel */
	/* The shutdown's termination count (see pool_quiescent in pool_lifecycle.c). */
	atomic_uint_fast64_t spawned; /* tasks this worker created (relaxed stores) */
	atomic_uint_fast64_t done;    /* tasks this worker ran or dropped (release stores) */
};

struct sched_worker {
	struct sched_deque deque; /* owner pushes/pops, everyone steals; own 64-byte lines */

	/* Set at creation, then read-only except the owner-only fields. */
	_Alignas(64) struct sched_pool *pool;
	unsigned index;
	atomic_int pu;	   /* PU it is pinned to, -1 if not pinned (or binding failed) */
	unsigned node;	   /* its NUMA node (from the placement, pinned or not) */
	unsigned place_pu; /* PU chosen by topo_place_workers */
	pthread_t thread;
	clockid_t cpu_clock;	  /* the thread's CPU clock, read by sched_pool_stats */
	atomic_bool cpu_clock_ok; /* set once it is known, cleared when the thread exits */
	unsigned *near;		  /* other workers on the same node: first victims */
	unsigned n_near;
	unsigned *far; /* the rest */
	unsigned n_far;
	/* Owner only. */
	uint64_t rng;
	struct sched_task *free_list;
	struct sched_slab *slabs;
	/*
	 * Owner only: finished tasks of owe_group not yet subtracted from its pending (applied in
	 * one RMW by worker_settle, or cancelled by the next spawn into the same group).
	 */
	struct sched_group *owe_group;
	uint64_t owe_n;

	_Alignas(64) struct sched_worker_ctr ctr;

	/* This worker's tasks freed by other threads: a Treiber stack, taken whole by the owner. */
	_Alignas(64) _Atomic(struct sched_task *) remote_free;
};

struct sched_queue {
	struct sched_pool *pool;
	unsigned weight;
	int node;
	/* Under pool->inj_mu: the injection FIFO and the round-robin state. */
	struct sched_task *head;
	struct sched_task *tail;
	size_t len;
	unsigned credit; /* takes left in its current turn */
	/*
	 * Groups of this queue whose pending is non-zero: RMWed only when a group's pending goes
	 * from 0 to 1 (the spawner) and back to 0 (the finisher), not per task.
	 */
	_Alignas(64) atomic_uint_fast64_t active;
};

enum sched_pool_state {
	SCHED_POOL_RUNNING = 0,
	SCHED_POOL_DRAINING = 1,   /* outside spawns refused, workers' spawns and all queued run */
	SCHED_POOL_CANCELLING = 2, /* every spawn refused, queued tasks dropped */
	SCHED_POOL_STOPPED = 3,	   /* nothing left: workers exit */
};

struct sched_pool {
	unsigned n_workers;
	unsigned spin_iters;
	uint64_t spin_ns;
	struct topo *topo;
	bool own_topo;
	bool multi_node;
	struct sched_worker *workers;

	/* Parking (an eventcount): producers bump epoch, parkers count themselves in sleepers. */
	_Alignas(64) atomic_uint epoch;
	_Alignas(64) atomic_uint sleepers;
	_Alignas(64) atomic_int state;

	/* Threads outside the pool waiting for a group, a queue or the pool to empty. */
	_Alignas(64) atomic_uint notify;
	atomic_uint outside_waiters;
	atomic_uint helpers; /* threads in sched_group_help: the pool is not freed under them */

	/* Injection: tasks submitted from outside, in per-queue FIFOs under one mutex. */
	_Alignas(64) atomic_size_t inj_count; /* tasks in all injection FIFOs (polled lock-free) */
	pthread_mutex_t inj_mu;
	struct sched_queue **queues;
	unsigned n_queues;
	unsigned cap_queues;
	unsigned cursor; /* the queue whose turn it is */

	/* Task records for outside threads. */
	_Alignas(64) pthread_mutex_t out_mu;
	struct sched_task *out_free;
	struct sched_slab *out_slabs;
	_Alignas(64) _Atomic(struct sched_task *) out_remote; /* freed by workers */
	atomic_uint_fast64_t out_spawned; /* seq_cst, for the termination count */
	/* seq_cst: outside spawns refused, and tasks run (or dropped) by sched_group_help */
	atomic_uint_fast64_t out_done;
};

/* ---- Shared by pool.c and pool_lifecycle.c ------------------------------------------------ */

/* pool.c: the worker thread; its argument is the struct sched_worker. */
void *sched_worker_main(void *arg);
/* pool.c: after a change of state (shutdown), every parked worker re-checks. */
void sched_pool_wake_all(struct sched_pool *pool);

static inline void futex_wait(atomic_uint *word, unsigned val, const struct timespec *timeout)
{
	/*
	 * EAGAIN (the word moved on), EINTR, ETIMEDOUT, spurious returns: the caller re-checks
	 * anyway.
	 */
	syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT_PRIVATE, val, timeout, NULL, 0);
}

/*
 * Safe on memory that may since have been freed: a private FUTEX_WAKE hashes the address and
 * never touches the word. (All our futex words live in the pool anyway.)
 */
static inline void futex_wake(atomic_uint *word, int n)
{
	syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

typedef bool (*outside_done_fn)(const void *what);

/*
 * Sleep (not a worker's thread) until done(what); see notify_outside (pool.c) for the pairing.
 * With timeout, re-check at least that often (for a condition no finisher announces by itself).
 */
static inline void outside_wait(struct sched_pool *pool, outside_done_fn done, const void *what,
				const struct timespec *timeout)
{
	if (done(what))
		return;
	atomic_fetch_add(&pool->outside_waiters, 1);
	for (;;) {
		unsigned e = atomic_load(&pool->notify);

		if (done(what))
			break;
		futex_wait(&pool->notify, e, timeout);
	}
	atomic_fetch_sub(&pool->outside_waiters, 1);
}

#endif
