/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the in-process ring tests: a test ring, its readers, patterned batches. */
#ifndef SLUICE_TESTS_UNIT_IPC_RING_FIXTURE_H
#define SLUICE_TESTS_UNIT_IPC_RING_FIXTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "ipc/ring.h"

#define PAGE 4096u
#define MS   1000000ll

/* The two tensors every test ring declares. */
extern const struct ipc_ring_tensor test_schema[2];

/* A ring with test_schema (rank_n ranks in IPC_RING_RANK mode); fails the test if refused. */
struct ipc_ring *make_ring(enum ipc_ring_mode mode, uint64_t data, uint32_t slots, uint32_t rank_n);
/* A reader; max_lag > 0 sets its lag limit, as the daemon does, before its client attaches. */
struct ipc_ring_client *add_lag(struct ipc_ring *r, uint32_t rank, uint64_t max_lag,
				unsigned *ret_id);
/* A broadcast reader of group 0 with lag policy lag (ipc_ring_set_lag), set before it attaches. */
struct ipc_ring_client *add_policy(struct ipc_ring *r, const struct ipc_ring_lag *lag,
				   unsigned *ret_id);
/* A reader in consumer group gid (ipc_ring_group_open), without a lag limit. */
struct ipc_ring_client *add_to(struct ipc_ring *r, unsigned gid, uint32_t rank, unsigned *ret_id);
/* A reader without a lag limit. */
struct ipc_ring_client *add(struct ipc_ring *r, uint32_t rank, unsigned *ret_id);
/* A batch of len bytes: an ipc_batch header with no tensors, then the seq's pattern. */
void fill(void *mem, uint64_t len, uint64_t seq);
/* Whether b is batch seq, header and every byte of its pattern. */
bool check(const struct ipc_ring_batch *b, uint64_t seq);
/* Reserve, fill and publish a batch of len bytes; returns its seq. */
uint64_t put(struct ipc_ring *r, uint64_t len);
/* Take the next batch (must be seq) and check every byte; the caller releases it. */
struct ipc_ring_batch take(struct ipc_ring_client *c, uint64_t seq);
/* take(), then release it. */
void take_release(struct ipc_ring_client *c, uint64_t seq);

#endif /* SLUICE_TESTS_UNIT_IPC_RING_FIXTURE_H */
