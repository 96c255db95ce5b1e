/* SPDX-License-Identifier: Apache-2.0 */
/* The layout of one batch in memory (DESIGN.md §3.5): header, tensor table, data. */
#ifndef SLUICE_IPC_BATCH_H
#define SLUICE_IPC_BATCH_H

#include <stddef.h>
#include <stdint.h>

/*
 * A batch is one contiguous extent, written by the pipeline engine and read by clients (in
 * shared memory) or by sluicectl run (in process). Everything is little-endian, offsets are
 * from the start of the extent, never pointers.
 *
 *   struct ipc_batch_hdr                      64 bytes
 *   struct ipc_batch_tensor[n_tensors]       104 bytes each
 *   (message, for IPC_BATCH_F_ERROR)         msg_len bytes at msg_off
 *   data                                     each block 64-byte aligned
 *
 * Per tensor, by kind:
 *   DENSE    data: rows * prod(shape[1..rank)) elements of dtype, row-major.
 *   RAGGED   shape[1] == -1: row_splits (int64[rows + 1], splits[0] = 0, non-decreasing) at
 *            splits_off; data holds splits[rows] * prod(shape[2..rank)) elements (like
 *            tf.RaggedTensor with one ragged dimension, axis 1).
 *   strings  dtype IPC_DTYPE_STRING: offsets_off holds int64[n + 1] value offsets (offsets[0]
 *            = 0, non-decreasing) into the bytes at data_off (data_len = offsets[n]), where n is
 *            the element count as for a numeric tensor (Arrow's string layout).
 * Readers check every offset and length against the extent once, into locals, before use
 * (ipc_batch_view() does it for them).
 */

#define IPC_BATCH_MAGIC	       0x54424c53u /* "SLBT" */
#define IPC_BATCH_VERSION      1
#define IPC_BATCH_MAX_RANK     8
#define IPC_BATCH_ALIGN	       64   /* every data block */
#define IPC_BATCH_EXTENT_ALIGN 4096 /* a whole batch, so that it can be registered for DMA */

/* Element types; the numbering equals io/manifest.h's enum manifest_dtype (checked there). */
enum ipc_dtype {
	IPC_DTYPE_INT8 = 0,
	IPC_DTYPE_INT16 = 1,
	IPC_DTYPE_INT32 = 2,
	IPC_DTYPE_INT64 = 3,
	IPC_DTYPE_UINT8 = 4,
	IPC_DTYPE_UINT16 = 5,
	IPC_DTYPE_UINT32 = 6,
	IPC_DTYPE_UINT64 = 7,
	IPC_DTYPE_FLOAT16 = 8,
	IPC_DTYPE_FLOAT32 = 9,
	IPC_DTYPE_FLOAT64 = 10,
	IPC_DTYPE_BOOL = 11, /* one byte, 0 or 1 */
	IPC_DTYPE_STRING = 12,
	IPC_DTYPE_BFLOAT16 = 13, /* the top half of a float32 (normalize's output) */
	IPC_DTYPE_COUNT_ = 14,
};

enum ipc_batch_flags {
	IPC_BATCH_F_END_EPOCH = 1u << 0,  /* the last batch of its epoch */
	IPC_BATCH_F_END_STREAM = 1u << 1, /* no batch follows (the last epoch ended) */
	IPC_BATCH_F_ERROR = 1u << 2,	  /* no tensors; msg holds the pipeline's error */
};

enum ipc_tensor_kind {
	IPC_TENSOR_DENSE = 0,
	IPC_TENSOR_RAGGED = 1,
};

struct ipc_batch_hdr {
	uint32_t magic;	  /* IPC_BATCH_MAGIC */
	uint16_t version; /* IPC_BATCH_VERSION */
	uint16_t n_tensors;
	uint64_t seq;	/* batch sequence number in the stream, from 0 */
	uint64_t epoch; /* from 0 */
	uint64_t rows;
	uint32_t flags;	      /* enum ipc_batch_flags */
	int32_t error;	      /* IPC_BATCH_F_ERROR: the negative errno */
	uint64_t total_bytes; /* the extent's length */
	uint32_t msg_off;     /* IPC_BATCH_F_ERROR: the message (not NUL-terminated) */
	uint32_t msg_len;
	uint64_t index_in_epoch; /* batches before this one in its epoch */
};

struct ipc_batch_tensor {
	uint32_t schema_index; /* the tensor's index in the pipeline's output schema */
	uint8_t dtype;	       /* enum ipc_dtype */
	uint8_t rank;	       /* 1 .. IPC_BATCH_MAX_RANK, the batch dimension included */
	uint8_t kind;	       /* enum ipc_tensor_kind */
	uint8_t reserved0;
	int64_t shape[IPC_BATCH_MAX_RANK]; /* shape[0] = rows; -1 for the ragged dimension */
	uint64_t data_off;
	uint64_t data_len;
	uint64_t splits_off;  /* RAGGED: int64[rows + 1]; else 0 */
	uint64_t offsets_off; /* strings: int64[n + 1]; else 0 */
};

_Static_assert(sizeof(struct ipc_batch_hdr) == 64, "batch header is one cache line");
_Static_assert(offsetof(struct ipc_batch_hdr, seq) == 8, "layout");
_Static_assert(offsetof(struct ipc_batch_hdr, total_bytes) == 40, "layout");
_Static_assert(offsetof(struct ipc_batch_hdr, index_in_epoch) == 56, "layout");
_Static_assert(sizeof(struct ipc_batch_tensor) == 104, "tensor entry");
_Static_assert(offsetof(struct ipc_batch_tensor, shape) == 8, "layout");
_Static_assert(offsetof(struct ipc_batch_tensor, data_off) == 72, "layout");
_Static_assert(offsetof(struct ipc_batch_tensor, offsets_off) == 96, "layout");

/* Bytes per element of t (0 for strings and out-of-range values). */
size_t ipc_dtype_size(unsigned t);
/* "int8" .. "string"; "?" when out of range. */
const char *ipc_dtype_name(unsigned t);

/*
 * A checked view of one tensor of a batch: every pointer lies inside the extent, counts agree
 * with the shape, splits and offsets are monotonic and in range. Valid while the extent is.
 */
struct ipc_tensor_view {
	uint32_t schema_index;
	enum ipc_dtype dtype;
	enum ipc_tensor_kind kind;
	unsigned rank;
	int64_t shape[IPC_BATCH_MAX_RANK];
	uint64_t n_elems; /* elements in data (for RAGGED: splits[rows] * inner) */
	const void *data;
	uint64_t data_len;
	const int64_t *splits;	/* RAGGED, else NULL */
	const int64_t *offsets; /* strings, else NULL */
};

struct ipc_batch_view {
	uint64_t seq, epoch, rows, index_in_epoch;
	uint32_t flags;
	int32_t error;
	const char *msg; /* IPC_BATCH_F_ERROR: not NUL-terminated */
	uint32_t msg_len;
	unsigned n_tensors;
	const struct ipc_batch_tensor *table_; /* private */
	const uint8_t *base_;
	uint64_t len_;
};

/*
 * Check the header of the extent [mem, mem + len) and fill *ret_view. Returns 0, or -EBADMSG
 * with a message in msg (may be NULL; msg_cap bytes) naming the field that is out of bounds.
 * Tensors are checked one at a time by ipc_batch_tensor().
 */
int ipc_batch_view(const void *mem, uint64_t len, struct ipc_batch_view *ret_view, char *msg,
		   size_t msg_cap);
/* Check tensor i (< n_tensors) and fill *ret_t. 0, -EINVAL (i), or -EBADMSG with msg. */
int ipc_batch_tensor(const struct ipc_batch_view *v, unsigned i, struct ipc_tensor_view *ret_t,
		     char *msg, size_t msg_cap);

#endif
