/* SPDX-License-Identifier: Apache-2.0 */
/* The default batch memory: aligned blocks, a few freed ones kept for reuse. */
#ifndef SLUICE_PIPELINE_BATCHMEM_H
#define SLUICE_PIPELINE_BATCHMEM_H

#include <pthread.h>
#include <stddef.h>

#define PL_BATCHMEM_SLOTS 8

/*
 * aligned_alloc in size classes (2^k times 1, 1.25, 1.5, 1.75), with up to PL_BATCHMEM_SLOTS
 * freed blocks kept, so that a steady stream of batches does not map and fault in fresh pages
 * for every batch. Thread-safe (a mutex): the driver allocates, the consumer frees.
 */
struct pl_batchmem {
	pthread_mutex_t lock;
	void *mem[PL_BATCHMEM_SLOTS];
	size_t cls[PL_BATCHMEM_SLOTS];
	unsigned n;
	struct pl_mem *acct; /* blocks are charged to it (mem.h), or NULL */
};

void pl_batchmem_init(struct pl_batchmem *c);
void pl_batchmem_fini(struct pl_batchmem *c);
/* The pl_pipeline_opts.alloc / .free pair (ctx: the struct pl_batchmem). */
void *pl_batchmem_alloc(void *ctx, size_t len);
void pl_batchmem_free(void *ctx, void *mem, size_t len);

#endif
