/* SPDX-License-Identifier: Apache-2.0 */
/* Checked views of a batch extent (ipc/batch.h): every offset, length and count bounds-checked. */
#include "batch.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "errmsg.h"

/*
 * The extent may live in shared memory written by another process, which may be buggy: every
 * field is copied once into a local (the header and the tensor entry with one memcpy each, every
 * split and offset with one load each) and only the locals are checked and used. Nothing here
 * guards against a writer that keeps changing the extent after it was published; that writer
 * breaks the ring protocol, and at worst a reader sees values that no longer match, never a
 * pointer outside the extent.
 */

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ipc/batch.c reads the little-endian layout with native loads"
#endif

static const uint8_t dtype_sizes[IPC_DTYPE_COUNT_] = {
	[IPC_DTYPE_INT8] = 1,	 [IPC_DTYPE_INT16] = 2,	   [IPC_DTYPE_INT32] = 4,
	[IPC_DTYPE_INT64] = 8,	 [IPC_DTYPE_UINT8] = 1,	   [IPC_DTYPE_UINT16] = 2,
	[IPC_DTYPE_UINT32] = 4,	 [IPC_DTYPE_UINT64] = 8,   [IPC_DTYPE_FLOAT16] = 2,
	[IPC_DTYPE_FLOAT32] = 4, [IPC_DTYPE_FLOAT64] = 8,  [IPC_DTYPE_BOOL] = 1,
	[IPC_DTYPE_STRING] = 0,	 [IPC_DTYPE_BFLOAT16] = 2,
};

static const char *const dtype_names[IPC_DTYPE_COUNT_] = {
	[IPC_DTYPE_INT8] = "int8",	 [IPC_DTYPE_INT16] = "int16",
	[IPC_DTYPE_INT32] = "int32",	 [IPC_DTYPE_INT64] = "int64",
	[IPC_DTYPE_UINT8] = "uint8",	 [IPC_DTYPE_UINT16] = "uint16",
	[IPC_DTYPE_UINT32] = "uint32",	 [IPC_DTYPE_UINT64] = "uint64",
	[IPC_DTYPE_FLOAT16] = "float16", [IPC_DTYPE_FLOAT32] = "float32",
	[IPC_DTYPE_FLOAT64] = "float64", [IPC_DTYPE_BOOL] = "bool",
	[IPC_DTYPE_STRING] = "string",	 [IPC_DTYPE_BFLOAT16] = "bfloat16",
};

#define KNOWN_FLAGS (IPC_BATCH_F_END_EPOCH | IPC_BATCH_F_END_STREAM | IPC_BATCH_F_ERROR)
#define TABLE_OFF   ((uint64_t)sizeof(struct ipc_batch_hdr))

size_t ipc_dtype_size(unsigned t)
{
	return t < IPC_DTYPE_COUNT_ ? dtype_sizes[t] : 0;
}

const char *ipc_dtype_name(unsigned t)
{
	return t < IPC_DTYPE_COUNT_ ? dtype_names[t] : "?";
}

/*
 * Whether the block [off, off + len) lies inside an extent of ext bytes, without overflow.
 * A non-empty block must also lie past the header and the tensor table (table_end).
 */
static bool block_ok(uint64_t off, uint64_t len, uint64_t ext, uint64_t table_end)
{
	if (off > ext || len > ext - off)
		return false;
	return len == 0 || off >= table_end;
}

int ipc_batch_view(const void *mem, uint64_t len, struct ipc_batch_view *ret_view, char *msg,
		   size_t msg_cap)
{
	struct ipc_batch_hdr h;
	struct ipc_batch_view v;
	uint64_t table_end;

	if ((uintptr_t)mem % 8) {
		if (msg && msg_cap)
			snprintf(msg, msg_cap, "batch: extent address %p is not 8-byte aligned",
				 mem);
		return -EINVAL;
	}
	if (len < sizeof(h))
		return ipc_errmsg(-EBADMSG, msg, msg_cap,
				  "batch: extent of %llu bytes is shorter than the %zu-byte "
				  "header",
				  (unsigned long long)len, sizeof(h));
	memcpy(&h, mem, sizeof(h));
	if (h.magic != IPC_BATCH_MAGIC)
		return ipc_errmsg(-EBADMSG, msg, msg_cap,
				  "batch: magic: expected 0x%08x, got 0x%08x", IPC_BATCH_MAGIC,
				  h.magic);
	if (h.version != IPC_BATCH_VERSION)
		return ipc_errmsg(-EBADMSG, msg, msg_cap, "batch: version: expected %d, got %u",
				  IPC_BATCH_VERSION, (unsigned)h.version);
	if (h.total_bytes < sizeof(h) || h.total_bytes > len)
		return ipc_errmsg(-EBADMSG, msg, msg_cap,
				  "batch: total_bytes: expected %zu..%llu (the extent), "
				  "got %llu",
				  sizeof(h), (unsigned long long)len,
				  (unsigned long long)h.total_bytes);
	if (h.flags & ~(uint32_t)KNOWN_FLAGS)
		return ipc_errmsg(-EBADMSG, msg, msg_cap, "batch: flags: unknown bits 0x%x",
				  h.flags & ~(uint32_t)KNOWN_FLAGS);
	/* n_tensors is 16 bits: no overflow below. */
	table_end = TABLE_OFF + (uint64_t)h.n_tensors * sizeof(struct ipc_batch_tensor);
	if (table_end > h.total_bytes)
		return ipc_errmsg(-EBADMSG, msg, msg_cap,
				  "batch: n_tensors: a table of %u tensors ends at byte %llu, "
				  "past total_bytes %llu",
				  (unsigned)h.n_tensors, (unsigned long long)table_end,
				  (unsigned long long)h.total_bytes);
	if (h.rows > (uint64_t)INT64_MAX)
		return ipc_errmsg(-EBADMSG, msg, msg_cap, "batch: rows: %llu is out of range",
				  (unsigned long long)h.rows);

	memset(&v, 0, sizeof(v));
	if (h.flags & IPC_BATCH_F_ERROR) {
		if (h.n_tensors)
			return ipc_errmsg(-EBADMSG, msg, msg_cap,
					  "batch: n_tensors: an error batch has no tensors, "
					  "got %u",
					  (unsigned)h.n_tensors);
		if (h.error >= 0)
			return ipc_errmsg(-EBADMSG, msg, msg_cap,
					  "batch: error: expected a negative errno, got %d",
					  (int)h.error);
		if (!block_ok(h.msg_off, h.msg_len, h.total_bytes, table_end))
			return ipc_errmsg(-EBADMSG, msg, msg_cap,
					  "batch: msg_off %u + msg_len %u: outside bytes "
					  "%llu..%llu of the extent",
					  h.msg_off, h.msg_len, (unsigned long long)table_end,
					  (unsigned long long)h.total_bytes);
		v.msg = (const char *)mem + h.msg_off;
		v.msg_len = h.msg_len;
		v.error = h.error;
	}
	v.seq = h.seq;
	v.epoch = h.epoch;
	v.rows = h.rows;
	v.index_in_epoch = h.index_in_epoch;
	v.flags = h.flags;
	v.n_tensors = h.n_tensors;
	v.table_ = (const struct ipc_batch_tensor *)((const uint8_t *)mem + TABLE_OFF);
	v.base_ = mem;
	v.len_ = h.total_bytes;
	*ret_view = v;
	return 0;
}

/* Product of dims [from, rank) of shape into *ret (each >= 0). false on overflow. */
static bool shape_product(const int64_t *shape, unsigned from, unsigned rank, uint64_t *ret)
{
	uint64_t p = 1;
	unsigned d;

	for (d = from; d < rank; d++) {
		if (__builtin_mul_overflow(p, (uint64_t)shape[d], &p))
			return false;
	}
	*ret = p;
	return true;
}

/*
 * Check an int64[n + 1] array at off (8-aligned, in bounds) that starts at 0 and never
 * decreases; *ret_last is its last value. what names the field in messages.
 */
static int check_int64s(const struct ipc_batch_view *v, unsigned i, const char *what, uint64_t off,
			uint64_t n, uint64_t table_end, int64_t *ret_last, char *msg, size_t cap)
{
	const int64_t *a;
	uint64_t k, bytes;
	int64_t prev, cur;

	if (off % 8)
		return ipc_errmsg(-EBADMSG, msg, cap,
				  "tensor %u: %s_off: %llu is not 8-byte aligned", i, what,
				  (unsigned long long)off);
	if (n >= v->len_ / 8)
		return ipc_errmsg(-EBADMSG, msg, cap,
				  "tensor %u: %s_off: %llu entries cannot fit in the extent "
				  "(%llu bytes)",
				  i, what, (unsigned long long)n + 1, (unsigned long long)v->len_);
	bytes = (n + 1) * 8;
	if (!block_ok(off, bytes, v->len_, table_end))
		return ipc_errmsg(-EBADMSG, msg, cap,
				  "tensor %u: %s_off: %llu + %llu bytes is outside bytes "
				  "%llu..%llu of the extent",
				  i, what, (unsigned long long)off, (unsigned long long)bytes,
				  (unsigned long long)table_end, (unsigned long long)v->len_);
	a = (const int64_t *)(v->base_ + off);
	prev = a[0];
	if (prev != 0)
		return ipc_errmsg(-EBADMSG, msg, cap, "tensor %u: %s[0]: expected 0, got %lld", i,
				  what, (long long)prev);
	for (k = 1; k <= n; k++) {
		cur = a[k];
		if (cur < prev)
			return ipc_errmsg(-EBADMSG, msg, cap,
					  "tensor %u: %s[%llu]: %lld is less than %s[%llu] = %lld",
					  i, what, (unsigned long long)k, (long long)cur, what,
					  (unsigned long long)k - 1, (long long)prev);
		prev = cur;
	}
	*ret_last = prev;
	return 0;
}

int ipc_batch_tensor(const struct ipc_batch_view *v, unsigned i, struct ipc_tensor_view *ret_t,
		     char *msg, size_t msg_cap)
{
	struct ipc_batch_tensor e;
	struct ipc_tensor_view t;
	uint64_t table_end, inner, n_elems, esize;
	int64_t last;
	unsigned d;
	int r;

	if (i >= v->n_tensors) {
		if (msg && msg_cap)
			snprintf(msg, msg_cap, "tensor %u: the batch has %u tensors", i,
				 v->n_tensors);
		return -EINVAL;
	}
	table_end = TABLE_OFF + (uint64_t)v->n_tensors * sizeof(e);
	memcpy(&e, v->base_ + TABLE_OFF + (uint64_t)i * sizeof(e), sizeof(e));

	if (e.dtype >= IPC_DTYPE_COUNT_)
		return ipc_errmsg(-EBADMSG, msg, msg_cap,
				  "tensor %u: dtype: %u is not a dtype (0..%d)", i,
				  (unsigned)e.dtype, IPC_DTYPE_COUNT_ - 1);
	if (e.rank < 1 || e.rank > IPC_BATCH_MAX_RANK)
		return ipc_errmsg(-EBADMSG, msg, msg_cap, "tensor %u: rank: expected 1..%d, got %u",
				  i, IPC_BATCH_MAX_RANK, (unsigned)e.rank);
	if (e.kind != IPC_TENSOR_DENSE && e.kind != IPC_TENSOR_RAGGED)
		return ipc_errmsg(-EBADMSG, msg, msg_cap,
				  "tensor %u: kind: expected 0 (dense) or 1 (ragged), got %u", i,
				  (unsigned)e.kind);
	if (e.shape[0] < 0 || (uint64_t)e.shape[0] != v->rows)
		return ipc_errmsg(-EBADMSG, msg, msg_cap,
				  "tensor %u: shape[0]: expected rows = %llu, got %lld", i,
				  (unsigned long long)v->rows, (long long)e.shape[0]);
	if (e.kind == IPC_TENSOR_RAGGED) {
		if (e.rank < 2)
			return ipc_errmsg(-EBADMSG, msg, msg_cap,
					  "tensor %u: rank: a ragged tensor has rank >= 2, "
					  "got %u",
					  i, (unsigned)e.rank);
		if (e.shape[1] != -1)
			return ipc_errmsg(-EBADMSG, msg, msg_cap,
					  "tensor %u: shape[1]: expected -1 (ragged), got %lld", i,
					  (long long)e.shape[1]);
	}
	for (d = e.kind == IPC_TENSOR_RAGGED ? 2 : 1; d < e.rank; d++) {
		if (e.shape[d] < 0)
			return ipc_errmsg(-EBADMSG, msg, msg_cap,
					  "tensor %u: shape[%u]: expected >= 0, got %lld", i, d,
					  (long long)e.shape[d]);
	}

	memset(&t, 0, sizeof(t));
	if (e.kind == IPC_TENSOR_RAGGED) {
		if (!shape_product(e.shape, 2, e.rank, &inner))
			return ipc_errmsg(-EBADMSG, msg, msg_cap,
					  "tensor %u: shape: the element count overflows", i);
		r = check_int64s(v, i, "splits", e.splits_off, v->rows, table_end, &last, msg,
				 msg_cap);
		if (r < 0)
			return r;
		if (__builtin_mul_overflow((uint64_t)last, inner, &n_elems))
			return ipc_errmsg(-EBADMSG, msg, msg_cap,
					  "tensor %u: splits[%llu]: %lld rows of %llu elements "
					  "overflow",
					  i, (unsigned long long)v->rows, (long long)last,
					  (unsigned long long)inner);
		t.splits = (const int64_t *)(v->base_ + e.splits_off);
	} else {
		if (!shape_product(e.shape, 0, e.rank, &n_elems))
			return ipc_errmsg(-EBADMSG, msg, msg_cap,
					  "tensor %u: shape: the element count overflows", i);
		if (e.splits_off)
			return ipc_errmsg(-EBADMSG, msg, msg_cap,
					  "tensor %u: splits_off: expected 0 for a dense "
					  "tensor, got %llu",
					  i, (unsigned long long)e.splits_off);
	}

	if (e.data_off % IPC_BATCH_ALIGN)
		return ipc_errmsg(-EBADMSG, msg, msg_cap,
				  "tensor %u: data_off: %llu is not %d-byte aligned", i,
				  (unsigned long long)e.data_off, IPC_BATCH_ALIGN);
	if (!block_ok(e.data_off, e.data_len, v->len_, table_end))
		return ipc_errmsg(-EBADMSG, msg, msg_cap,
				  "tensor %u: data_off %llu + data_len %llu: outside bytes "
				  "%llu..%llu of the extent",
				  i, (unsigned long long)e.data_off, (unsigned long long)e.data_len,
				  (unsigned long long)table_end, (unsigned long long)v->len_);

	if (e.dtype == IPC_DTYPE_STRING) {
		r = check_int64s(v, i, "offsets", e.offsets_off, n_elems, table_end, &last, msg,
				 msg_cap);
		if (r < 0)
			return r;
		if ((uint64_t)last != e.data_len)
			return ipc_errmsg(-EBADMSG, msg, msg_cap,
					  "tensor %u: offsets[%llu]: expected data_len = %llu, "
					  "got %lld",
					  i, (unsigned long long)n_elems,
					  (unsigned long long)e.data_len, (long long)last);
		t.offsets = (const int64_t *)(v->base_ + e.offsets_off);
	} else {
		esize = dtype_sizes[e.dtype];
		if (e.offsets_off)
			return ipc_errmsg(-EBADMSG, msg, msg_cap,
					  "tensor %u: offsets_off: expected 0 for a %s tensor, "
					  "got %llu",
					  i, dtype_names[e.dtype],
					  (unsigned long long)e.offsets_off);
		/* data_len is in bounds, so a count whose bytes overflow cannot match it. */
		if (n_elems > e.data_len / esize || n_elems * esize != e.data_len)
			return ipc_errmsg(-EBADMSG, msg, msg_cap,
					  "tensor %u: data_len: expected %llu elements of %llu "
					  "bytes, got %llu bytes",
					  i, (unsigned long long)n_elems, (unsigned long long)esize,
					  (unsigned long long)e.data_len);
	}

	t.schema_index = e.schema_index;
	t.dtype = (enum ipc_dtype)e.dtype;
	t.kind = (enum ipc_tensor_kind)e.kind;
	t.rank = e.rank;
	for (d = 0; d < e.rank; d++)
		t.shape[d] = e.shape[d];
	t.n_elems = n_elems;
	t.data = v->base_ + e.data_off;
	t.data_len = e.data_len;
	*ret_t = t;
	return 0;
}
