/* SPDX-License-Identifier: Apache-2.0 */
/* A memory account: what a pipeline, a user and the whole daemon may hold (docs/security.md). */
#ifndef SLUICE_PIPELINE_MEM_H
#define SLUICE_PIPELINE_MEM_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Accounts form a tree: sluiced's --memory at the root, each uid's --user-memory below it, each
 * pipeline (within its spec's ram_budget) below its owner's, the record cache below the root
 * (charged to no user). Every byte a pipeline holds that grows with its spec or its data — ring,
 * read buffers, record blocks, shuffle slots, a record being assembled, window buffers, the
 * global shuffle's offsets — is charged before it is allocated, to the account and every one above
 * it; a charge that would take any of them past its limit is refused, and nothing is allocated.
 *
 * An account may hold a floor: bytes reserved in its parents when the pipeline is registered
 * (what its spec is known to need), which its charges use first. So a pipeline that registered
 * finds its fixed needs whatever others do later, and one that cannot is refused at register.
 *
 * A charge that the root refuses first asks the root's reclaim callback (the record cache's
 * unused entries: they go first) for the room, once, then tries again.
 *
 * One mutex (the root's) guards the tree: charges are per block (a slab, a read buffer, a
 * record of its own), not per record. Any thread.
 */
struct pl_mem {
	struct pl_mem *parent; /* NULL: a root */
	pthread_mutex_t lock;  /* the root's guards the whole tree */
	char what[96];	       /* for messages: "--memory", "uid 1000's --user-memory" */
	uint64_t limit;	       /* 0: none of its own */
	/*
	 * What this account's charges leave free in its parent: a user's charges leave root and
	 * the config dir their reserve of --memory (docs/security.md, "Shares").
	 */
	uint64_t leave;
	uint64_t floor; /* reserved in the parents whatever is used (pl_mem_set_floor) */
	uint64_t used;	/* charged and not yet uncharged */
	uint64_t peak;	/* the most used */
	/* a root: give back at least need bytes if it can (called without the lock); what it did */
	uint64_t (*reclaim)(void *ctx, uint64_t need);
	void *reclaim_ctx;
	bool no_reclaim; /* this account's charges do not ask (the cache's own, under its lock) */
	/* the first charge of pl_mem_take refused here, and what it was for (under the lock) */
	struct pl_mem_full {
		const struct pl_mem *at;
		uint64_t used, limit, ask; /* of at when it refused, what it needed there */
		uint64_t leave;		   /* what the charge had to leave free there */
	} refused;
	char refused_for[160];
};

/* An account under parent (NULL: a root) with limit bytes (0: none). what names it. */
void pl_mem_init(struct pl_mem *m, struct pl_mem *parent, uint64_t limit, const char *what);
/*
 * Done with an account that is not a parent: its floor and whatever it still uses are given
 * back to its parents. What it still used (0 when every charge was given back: a leak else).
 */
uint64_t pl_mem_fini(struct pl_mem *m);

/*
 * Charge bytes to m and its parents. 0, or -ENOMEM when one of them would go past its limit
 * (after the root's reclaim, when it has one): *ret_full (may be NULL) says which.
 * NULL m: nothing is counted (0).
 */
int pl_mem_charge(struct pl_mem *m, uint64_t bytes, struct pl_mem_full *ret_full);
/*
 * pl_mem_charge for the engine's stages: a refusal is kept in m with what the bytes were for
 * (printf-style; the first refusal stays), for the pipeline's message (pl_mem_refusal).
 */
int pl_mem_take(struct pl_mem *m, uint64_t bytes, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/*
 * m's first refusal by pl_mem_take as text into buf: "2097152 bytes of shuffle slots: 1048576
 * bytes more would pass ...". false when there was none.
 */
bool pl_mem_refusal(struct pl_mem *m, char *buf, size_t cap);
/* Set m's limit and what it leaves free in its parent (under the tree's lock). */
void pl_mem_set_limit(struct pl_mem *m, uint64_t limit, uint64_t leave);
/* Give back bytes charged to m (NULL m: nothing). */
void pl_mem_uncharge(struct pl_mem *m, uint64_t bytes);
/*
 * Reserve floor bytes for m in its parents, beyond what it uses (its charges use the floor
 * first). 0 or -ENOMEM with *ret_full. A smaller floor gives the difference back.
 */
int pl_mem_set_floor(struct pl_mem *m, uint64_t floor, struct pl_mem_full *ret_full);
/* What m holds against its parent: the larger of its floor and what it uses. */
uint64_t pl_mem_held(struct pl_mem *m);
/* m's floor (a locked read). */
uint64_t pl_mem_floor(struct pl_mem *m);
/* What m uses now, and its peak (locked reads). */
uint64_t pl_mem_used(struct pl_mem *m);
uint64_t pl_mem_peak(struct pl_mem *m);
/*
 * The most m could still be charged now: the least room left in it and its parents (their
 * limits, less what each holds and what a child leaves), not counting a reclaim.
 */
uint64_t pl_mem_room(struct pl_mem *m);
/*
 * A refusal's figures as text into buf: "1048576 bytes more would pass uid 1000's
 * --user-memory (3145728 of 4194304 in use)".
 */
void pl_mem_full_text(const struct pl_mem_full *f, char *buf, size_t cap);

#endif
