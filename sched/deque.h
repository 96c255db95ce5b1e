/* SPDX-License-Identifier: Apache-2.0 */
/* sched_deque: the Chase-Lev work-stealing deque, with the C11 orders of Lê et al. (PPoPP 2013). */
#ifndef SLUICE_SCHED_DEQUE_H
#define SLUICE_SCHED_DEQUE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/*
 * One owner thread pushes and pops at the bottom (LIFO); any thread steals from the top (FIFO).
 * Items are non-NULL pointers. The array grows (doubling) when the owner pushes onto a full one;
 * old arrays stay allocated until _fini, since a thief may still be reading one.
 */
struct sched_deque_array;

struct sched_deque {
	_Alignas(64) atomic_size_t top;	   /* thieves advance it with a CAS */
	_Alignas(64) atomic_size_t bottom; /* written by the owner only */
	_Atomic(struct sched_deque_array *) array;
	struct sched_deque_array *retired; /* arrays replaced by growth, freed at _fini */
};

enum {
	SCHED_DEQUE_EMPTY = 0,
	SCHED_DEQUE_ABORT = 1, /* lost a race with the owner or another thief: try again */
};

/* capacity is rounded up to a power of two (at least 16). -ENOMEM. */
int sched_deque_init(struct sched_deque *d, size_t capacity);
/* Frees the arrays; the deque must be empty or its items are dropped. */
void sched_deque_fini(struct sched_deque *d);

/* Owner only. 0, or -ENOMEM when a full deque cannot grow. */
int sched_deque_push(struct sched_deque *d, void *item);
/* Owner only. The most recently pushed item, or NULL when empty. */
void *sched_deque_pop(struct sched_deque *d);
/*
 * Any thread. The oldest item, or NULL with *ret_status = SCHED_DEQUE_EMPTY or
 * SCHED_DEQUE_ABORT (a race was lost; the deque may still hold items).
 */
void *sched_deque_steal(struct sched_deque *d, int *ret_status);
/* Approximate number of items (racy; for statistics and heuristics). */
size_t sched_deque_size(const struct sched_deque *d);

#endif
