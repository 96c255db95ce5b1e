/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the in-process ring tests: a test ring, its readers, patterned batches. */
#include "ring_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "ipc/batch.h"

const struct ipc_ring_tensor test_schema[2] = {
	{ .name = "image", .dtype = IPC_DTYPE_UINT8, .rank = 4, .shape = { -1, 32, 32, 3 } },
	{ .name = "tokens", .dtype = IPC_DTYPE_INT64, .rank = 2, .ragged = 1, .shape = { -1, -1 } },
};

struct ipc_ring *make_ring(enum ipc_ring_mode mode, uint64_t data, uint32_t slots, uint32_t rank_n)
{
	struct ipc_ring_opts o;
	struct ipc_ring *r = NULL;
	char msg[256] = "";

	ipc_ring_opts_init(&o);
	o.mode = mode;
	o.data_bytes = data;
	o.n_slots = slots;
	o.rank_n = rank_n;
	o.schema = test_schema;
	o.n_schema = 2;
	o.name = "test-ring";
	if (ipc_ring_create(&o, &r, msg, sizeof(msg)))
		fail_msg("ipc_ring_create: %s", msg);
	return r;
}

/* A reader; max_lag > 0 sets its lag limit, as the daemon does, before its client attaches. */
static struct ipc_ring_client *add_in(struct ipc_ring *r, unsigned gid, uint32_t rank,
				      uint64_t max_lag, unsigned *ret_id)
{
	struct ipc_ring_client *c = NULL;
	char msg[256] = "";
	unsigned id;
	int cb_fd;

	assert_int_equal(ipc_ring_add_reader_to(r, gid, rank, &id, &cb_fd), 0);
	if (max_lag)
		assert_int_equal(ipc_ring_set_max_lag(r, id, max_lag), 0);
	if (ipc_ring_client_attach(ipc_ring_data_fd(r), cb_fd, &c, msg, sizeof(msg)))
		fail_msg("attach: %s", msg);
	assert_int_equal(ipc_ring_client_id(c), id);
	if (ret_id)
		*ret_id = id;
	return c;
}

struct ipc_ring_client *add_lag(struct ipc_ring *r, uint32_t rank, uint64_t max_lag,
				unsigned *ret_id)
{
	return add_in(r, 0, rank, max_lag, ret_id);
}

struct ipc_ring_client *add_policy(struct ipc_ring *r, const struct ipc_ring_lag *lag,
				   unsigned *ret_id)
{
	struct ipc_ring_client *c = NULL;
	char msg[256] = "";
	unsigned id;
	int cb_fd;

	assert_int_equal(ipc_ring_add_reader(r, 0, &id, &cb_fd), 0);
	assert_int_equal(ipc_ring_set_lag(r, id, lag), 0);
	if (ipc_ring_client_attach(ipc_ring_data_fd(r), cb_fd, &c, msg, sizeof(msg)))
		fail_msg("attach: %s", msg);
	if (ret_id)
		*ret_id = id;
	return c;
}

struct ipc_ring_client *add_to(struct ipc_ring *r, unsigned gid, uint32_t rank, unsigned *ret_id)
{
	return add_in(r, gid, rank, 0, ret_id);
}

struct ipc_ring_client *add(struct ipc_ring *r, uint32_t rank, unsigned *ret_id)
{
	return add_in(r, 0, rank, 0, ret_id);
}

static uint8_t pat(uint64_t seq, uint64_t i)
{
	return (uint8_t)(seq * 131u + i * 7u + (i >> 9));
}

/* A batch of len bytes: an ipc_batch header with no tensors, then the seq's pattern. */
void fill(void *mem, uint64_t len, uint64_t seq)
{
	struct ipc_batch_hdr h = { .magic = IPC_BATCH_MAGIC,
				   .version = IPC_BATCH_VERSION,
				   .seq = seq,
				   .total_bytes = len };
	uint8_t *p = mem;

	assert_true(len >= sizeof(h));
	memcpy(p, &h, sizeof(h));
	for (uint64_t i = sizeof(h); i < len; i++)
		p[i] = pat(seq, i);
}

bool check(const struct ipc_ring_batch *b, uint64_t seq)
{
	const uint8_t *p = b->mem;
	struct ipc_batch_view v;

	if (b->seq != seq || ipc_batch_view(b->mem, b->len, &v, NULL, 0) || v.seq != seq)
		return false;
	for (uint64_t i = sizeof(struct ipc_batch_hdr); i < b->len; i++)
		if (p[i] != pat(seq, i))
			return false;
	return true;
}

/* Reserve, fill and publish a batch of len bytes; returns its seq. */
uint64_t put(struct ipc_ring *r, uint64_t len)
{
	struct ipc_ring_extent e;
	struct ipc_ring_info info;
	uint64_t seq;

	ipc_ring_get_info(r, &info);
	assert_int_equal(ipc_ring_reserve(r, len, &e), 0);
	assert_true(e.cap >= len && e.cap % PAGE == 0 && e.off % PAGE == 0);
	assert_true(((uintptr_t)e.mem % PAGE) == 0);
	fill(e.mem, len, info.head);
	assert_int_equal(ipc_ring_publish(r, &e, len, 7, 0, &seq), 0);
	assert_int_equal(seq, info.head);
	return seq;
}

/* Take the next batch (must be seq) and check every byte. */
struct ipc_ring_batch take(struct ipc_ring_client *c, uint64_t seq)
{
	struct ipc_ring_batch b;
	int rc = ipc_ring_client_next(c, 0, &b);

	if (rc)
		fail_msg("next: %d (%s), expected seq %llu", rc, strerror(-rc),
			 (unsigned long long)seq);
	assert_int_equal(b.seq, seq);
	assert_int_equal(b.epoch, 7);
	assert_true(check(&b, seq));
	return b;
}

void take_release(struct ipc_ring_client *c, uint64_t seq)
{
	struct ipc_ring_batch b = take(c, seq);

	assert_int_equal(ipc_ring_client_release(c, &b), 0);
}
