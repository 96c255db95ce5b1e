/* SPDX-License-Identifier: Apache-2.0 */
/* Checkpoints: 48 bytes of magic, version, fingerprint, seed and position. */
#include "state.h"

#include <errno.h>
#include <string.h>

#include "ipc/batch.h"

#define PL_STATE_MAGIC	 0x54534c53u /* "SLST" */
#define PL_STATE_VERSION 1

struct pl_state_blob {
	uint32_t magic, version;
	uint64_t fingerprint, seed, epoch, index, seq;
};
_Static_assert(sizeof(struct pl_state_blob) == 48, "state blob");
_Static_assert(sizeof(struct pl_state_blob) <= PL_STATE_MAX, "PL_STATE_MAX");

int pl_state_load(uint64_t fingerprint, uint64_t seed, const void *buf, size_t len,
		  struct pl_pos *ret, struct io_error *err)
{
	struct pl_state_blob s;
	if (len != sizeof(s)) {
		io_error_set(err, "state: %zu bytes, expected %zu", len, sizeof(s));
		return -EBADMSG;
	}
	memcpy(&s, buf, sizeof(s));
	if (s.magic != PL_STATE_MAGIC || s.version != PL_STATE_VERSION) {
		io_error_set(err, "state: not a sluice pipeline state (magic %08x, version %u)",
			     s.magic, s.version);
		return -EBADMSG;
	}
	if (s.fingerprint != fingerprint || s.seed != seed) {
		io_error_set(err, "state: saved by a different pipeline (the spec, seed or data "
				  "files "
				  "changed)");
		return -EBADMSG;
	}
	ret->epoch = s.epoch;
	ret->index = s.index;
	ret->seq = s.seq;
	return 0;
}

struct pl_pos pl_state_pos_after(const struct pl_batch_pos *b)
{
	struct pl_pos r;
	if (b->flags & IPC_BATCH_F_END_EPOCH) {
		r.epoch = b->epoch + 1;
		r.index = 0;
	} else {
		r.epoch = b->epoch;
		r.index = b->index_in_epoch + 1;
	}
	r.seq = b->seq + 1;
	return r;
}

int pl_state_write(uint64_t fingerprint, uint64_t seed, const struct pl_pos *pos, void *buf,
		   size_t cap)
{
	struct pl_state_blob s = { .magic = PL_STATE_MAGIC, .version = PL_STATE_VERSION };
	if (cap < sizeof(s))
		return -ENOSPC;
	s.fingerprint = fingerprint;
	s.seed = seed;
	s.epoch = pos->epoch;
	s.index = pos->index;
	s.seq = pos->seq;
	memcpy(buf, &s, sizeof(s));
	return (int)sizeof(s);
}
