/* SPDX-License-Identifier: Apache-2.0 */
/* libsluice: a batch's header fields and its tensors (checked views), sluice_strerror,
 * sluice_version. */
#include "client_internal.h"

#include <errno.h>
#include <string.h>

_Static_assert(SLUICE_MAX_RANK == IPC_BATCH_MAX_RANK, "rank limits agree");
_Static_assert((int)SLUICE_INT8 == IPC_DTYPE_INT8 && (int)SLUICE_UINT64 == IPC_DTYPE_UINT64 &&
		       (int)SLUICE_FLOAT16 == IPC_DTYPE_FLOAT16 &&
		       (int)SLUICE_BOOL == IPC_DTYPE_BOOL &&
		       (int)SLUICE_STRING == IPC_DTYPE_STRING &&
		       (int)SLUICE_BFLOAT16 == IPC_DTYPE_BFLOAT16,
	       "dtype numbers agree");
_Static_assert((int)SLUICE_MODE_BROADCAST == IPC_CTL_MODE_BROADCAST &&
		       (int)SLUICE_MODE_SPLIT == IPC_CTL_MODE_SPLIT &&
		       (int)SLUICE_MODE_RANK == IPC_CTL_MODE_RANK,
	       "mode numbers agree");
_Static_assert(SLUICE_STATE_MAX == IPC_CTL_STATE_MAX, "state limits agree");

uint64_t sluice_batch_seq(const struct sluice_batch *b)
{
	return b->v.seq;
}

uint64_t sluice_batch_epoch(const struct sluice_batch *b)
{
	return b->v.epoch;
}

uint64_t sluice_batch_rows(const struct sluice_batch *b)
{
	return b->v.rows;
}

bool sluice_batch_end_of_epoch(const struct sluice_batch *b)
{
	return b->v.flags & IPC_BATCH_F_END_EPOCH;
}

uint64_t sluice_batch_index_in_epoch(const struct sluice_batch *b)
{
	return b->v.index_in_epoch;
}

bool sluice_batch_redelivered(const struct sluice_batch *b)
{
	return (b->rb.flags & IPC_RING_BATCH_REDELIVERED) || b->resumed_again;
}

size_t sluice_batch_num_tensors(const struct sluice_batch *b)
{
	return b->ring->n_schema; /* next() checked that the batch has as many */
}

/* Check table entry k of the batch; 1 when it is schema index i, 0 when not, or -EBADMSG. */
static int try_entry(const struct sluice_batch *b, unsigned k, unsigned i,
		     struct ipc_tensor_view *ret)
{
	if (ipc_batch_tensor(&b->v, k, ret, NULL, 0) < 0)
		return -EBADMSG;
	return ret->schema_index == i;
}

/* The batch's table entry of schema index i, checked against the schema. */
static int find_tensor(const struct sluice_batch *b, unsigned i, struct ipc_tensor_view *ret)
{
	const struct ipc_ring_tensor *s = &b->ring->schema[i];
	struct ipc_tensor_view t;
	unsigned k, n = b->v.n_tensors;
	int rc = 0;

	/* The table is in schema order in every batch the daemon writes: try entry i first. */
	if (i < n)
		rc = try_entry(b, i, i, &t);
	for (k = 0; rc == 0 && k < n; k++)
		if (k != i)
			rc = try_entry(b, k, i, &t);
	if (rc <= 0)
		return -EBADMSG; /* a bad entry, or the batch lacks a tensor of the schema */
	if ((unsigned)t.dtype != s->dtype || t.rank != s->rank ||
	    (t.kind == IPC_TENSOR_RAGGED) != (bool)s->ragged)
		return -EBADMSG;
	*ret = t;
	return 0;
}

int sluice_batch_tensor_at(const struct sluice_batch *b, size_t i, struct sluice_tensor *ret)
{
	struct ipc_tensor_view t;
	struct sluice_tensor out;
	int rc;

	if (!b || !ret)
		return -EINVAL;
	if (i >= b->ring->n_schema)
		return -ENOENT;
	rc = find_tensor(b, (unsigned)i, &t);
	if (rc < 0)
		return rc;
	memset(&out, 0, sizeof(out));
	out.name = b->ring->schema[i].name;
	out.dtype = (enum sluice_dtype)t.dtype;
	out.rank = t.rank;
	memcpy(out.shape, t.shape, t.rank * sizeof(int64_t));
	out.data = t.data;
	out.nbytes = t.data_len;
	out.row_splits = t.splits;
	out.offsets = t.offsets;
	out.n_elems = t.n_elems;
	*ret = out;
	return 0;
}

int sluice_batch_describe(const struct sluice_batch *b, struct sluice_batch_info *ret_info,
			  struct sluice_tensor *tensors, size_t cap)
{
	struct sluice_batch_info info;
	size_t i, n;
	int rc;

	if (!b || !ret_info || (!tensors && cap))
		return -EINVAL;
	n = b->ring->n_schema;
	if (n > cap)
		n = cap;
	/* Every entry checked before anything is written: all or nothing. */
	for (i = 0; i < n; i++) {
		rc = sluice_batch_tensor_at(b, i, &tensors[i]);
		if (rc < 0)
			return rc;
	}
	info.seq = b->v.seq;
	info.epoch = b->v.epoch;
	info.rows = b->v.rows;
	info.end_of_epoch = sluice_batch_end_of_epoch(b) ? 1 : 0;
	info.n_tensors = (uint32_t)b->ring->n_schema;
	info.extent = b->rb.mem;
	info.extent_len = b->rb.len;
	*ret_info = info;
	return (int)n;
}

int sluice_batch_tensor(const struct sluice_batch *b, const char *name, struct sluice_tensor *ret)
{
	int i;

	if (!b || !name || !ret)
		return -EINVAL;
	i = lc_schema_find(b->ring, name);
	if (i < 0)
		return i;
	return sluice_batch_tensor_at(b, (size_t)i, ret);
}

const char *sluice_strerror(int code)
{
	switch (code < 0 ? -code : code) {
	case 0:
		return "success";
	case ENOENT:
		return "no such pipeline";
	case EACCES:
		return "not allowed to read this pipeline";
	case EUSERS:
		return "the pipeline has as many readers as it allows";
	case EBUSY:
		return "that rank is taken by another reader";
	case ENODATA:
		return "end of the stream";
	case ECONNRESET:
		return "the connection to sluiced was lost";
	case ECONNREFUSED:
		return "sluiced is not listening (is it running?)";
	case ECONNABORTED:
		return "sluiced removed this reader";
	case ETIME:
		return "sluiced removed this reader: it held a batch past the lease";
	case ENOLINK:
		return "sluiced removed this reader: a rank of its group was gone past the lease";
	case EIDRM:
		return "the pipeline was removed (sluicectl rm)";
	case EPROTONOSUPPORT:
		return "sluiced speaks another protocol version";
	case ETIMEDOUT:
		return "timed out";
	case EBADMSG:
		return "a malformed message, ring or batch from sluiced";
	case ENOSPC:
		return "a memory budget of sluiced is exhausted";
	case EINVAL:
		return "invalid argument or pipeline spec";
	case ENOBUFS:
		return "the buffer is too small";
	case EMSGSIZE:
		return "too large for a message of the control socket";
	case ENAMETOOLONG:
		return "the socket path is too long";
	default:
		return strerror(code < 0 ? -code : code);
	}
}

#ifndef SLUICE_VERSION
#error "SLUICE_VERSION is defined by libclient/meson.build (the project's version)"
#endif

const char *sluice_version(void)
{
	return SLUICE_VERSION;
}
