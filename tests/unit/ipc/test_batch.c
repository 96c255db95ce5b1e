/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for ipc/batch.c: valid batches built by hand, then every field corrupted one at a time. */
#include "ipc/batch.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* ---- a batch builder ---- */

#define BB_CAP (1u << 16)

/* Where the builder put things, so that tests can corrupt them. */
struct bb {
	uint8_t *mem; /* BB_CAP bytes, 4096-aligned, zeroed */
	uint64_t used;
	unsigned n;
	uint64_t splits_off[8], offsets_off[8], data_off[8];
};

static void bb_begin(struct bb *b, unsigned n_tensors, uint64_t rows, uint32_t flags)
{
	struct ipc_batch_hdr *h;

	memset(b, 0, sizeof(*b));
	b->mem = aligned_alloc(IPC_BATCH_EXTENT_ALIGN, BB_CAP);
	assert_non_null(b->mem);
	memset(b->mem, 0, BB_CAP);
	h = (struct ipc_batch_hdr *)b->mem;
	h->magic = IPC_BATCH_MAGIC;
	h->version = IPC_BATCH_VERSION;
	h->n_tensors = (uint16_t)n_tensors;
	h->seq = 5;
	h->epoch = 1;
	h->rows = rows;
	h->flags = flags;
	h->index_in_epoch = 2;
	b->n = n_tensors;
	b->used = sizeof(*h) + (uint64_t)n_tensors * sizeof(struct ipc_batch_tensor);
}

/* Append len bytes at the next multiple of align; returns their offset. */
static uint64_t bb_put(struct bb *b, const void *src, uint64_t len, unsigned align)
{
	uint64_t off = (b->used + align - 1) / align * align;

	assert_true(off + len <= BB_CAP);
	if (len)
		memcpy(b->mem + off, src, len);
	b->used = off + len;
	return off;
}

static struct ipc_batch_tensor *bb_t(struct bb *b, unsigned i)
{
	return (struct ipc_batch_tensor *)(b->mem + sizeof(struct ipc_batch_hdr)) + i;
}

/* Fill tensor i's entry; shape has rank entries. */
static void bb_tensor(struct bb *b, unsigned i, enum ipc_dtype dtype, enum ipc_tensor_kind kind,
		      unsigned rank, const int64_t *shape)
{
	struct ipc_batch_tensor *t = bb_t(b, i);

	t->schema_index = i;
	t->dtype = (uint8_t)dtype;
	t->kind = (uint8_t)kind;
	t->rank = (uint8_t)rank;
	memcpy(t->shape, shape, rank * sizeof(int64_t));
}

static void bb_data(struct bb *b, unsigned i, const void *src, uint64_t len)
{
	b->data_off[i] = bb_put(b, src, len, IPC_BATCH_ALIGN);
	bb_t(b, i)->data_off = b->data_off[i];
	bb_t(b, i)->data_len = len;
}

static void bb_splits(struct bb *b, unsigned i, const int64_t *s, uint64_t n)
{
	b->splits_off[i] = bb_put(b, s, n * 8, IPC_BATCH_ALIGN);
	bb_t(b, i)->splits_off = b->splits_off[i];
}

static void bb_offsets(struct bb *b, unsigned i, const int64_t *o, uint64_t n)
{
	b->offsets_off[i] = bb_put(b, o, n * 8, IPC_BATCH_ALIGN);
	bb_t(b, i)->offsets_off = b->offsets_off[i];
}

/* The extent ends at the next multiple of 64. Returns its length. */
static uint64_t bb_end(struct bb *b)
{
	b->used = (b->used + IPC_BATCH_ALIGN - 1) / IPC_BATCH_ALIGN * IPC_BATCH_ALIGN;
	((struct ipc_batch_hdr *)b->mem)->total_bytes = b->used;
	return b->used;
}

/*
 * The mixed batch, 3 rows:
 *   0 dense float32 [3, 2]
 *   1 ragged int64 [3, -1, 2], splits 0 1 1 4 (8 values)
 *   2 dense string [3], "abc" "" "de\0\xff!"
 *   3 ragged string [3, -1], splits 0 2 2 3: "a" "bc" | | "def"
 *   4 dense bool [3]
 *   5 dense float16 [3, 0] (empty, data_off 0)
 */
static const float t0_data[6] = { 1.5f, -2.0f, 0.0f, 3.25f, 1e30f, -0.0f };
static const int64_t t1_splits[4] = { 0, 1, 1, 4 };
static const int64_t t1_data[8] = { 1, 2, 3, 4, 5, 6, -7, INT64_MIN };
static const int64_t t2_offsets[4] = { 0, 3, 3, 8 };
static const char t2_data[8] = { 'a', 'b', 'c', 'd', 'e', 0, (char)0xff, '!' };
static const int64_t t3_splits[4] = { 0, 2, 2, 3 };
static const int64_t t3_offsets[4] = { 0, 1, 3, 6 };
static const char t3_data[6] = "abcdef";
static const uint8_t t4_data[3] = { 0, 1, 1 };

static uint64_t build_mixed(struct bb *b)
{
	const int64_t s0[] = { 3, 2 }, s1[] = { 3, -1, 2 }, s2[] = { 3 }, s3[] = { 3, -1 },
		      s4[] = { 3 }, s5[] = { 3, 0 };

	bb_begin(b, 6, 3, IPC_BATCH_F_END_EPOCH);
	bb_tensor(b, 0, IPC_DTYPE_FLOAT32, IPC_TENSOR_DENSE, 2, s0);
	bb_data(b, 0, t0_data, sizeof(t0_data));
	bb_tensor(b, 1, IPC_DTYPE_INT64, IPC_TENSOR_RAGGED, 3, s1);
	bb_splits(b, 1, t1_splits, 4);
	bb_data(b, 1, t1_data, sizeof(t1_data));
	bb_tensor(b, 2, IPC_DTYPE_STRING, IPC_TENSOR_DENSE, 1, s2);
	bb_offsets(b, 2, t2_offsets, 4);
	bb_data(b, 2, t2_data, sizeof(t2_data));
	bb_tensor(b, 3, IPC_DTYPE_STRING, IPC_TENSOR_RAGGED, 2, s3);
	bb_splits(b, 3, t3_splits, 4);
	bb_offsets(b, 3, t3_offsets, 4);
	bb_data(b, 3, t3_data, sizeof(t3_data));
	bb_tensor(b, 4, IPC_DTYPE_BOOL, IPC_TENSOR_DENSE, 1, s4);
	bb_data(b, 4, t4_data, sizeof(t4_data));
	bb_tensor(b, 5, IPC_DTYPE_FLOAT16, IPC_TENSOR_DENSE, 2, s5);
	return bb_end(b);
}

static const char err_text[] = "data.tfrecord: record 7 (offset 4096): data CRC mismatch";

static uint64_t build_error(struct bb *b)
{
	struct ipc_batch_hdr *h;
	uint64_t off;

	bb_begin(b, 0, 0, IPC_BATCH_F_ERROR | IPC_BATCH_F_END_STREAM);
	off = bb_put(b, err_text, sizeof(err_text) - 1, 1);
	h = (struct ipc_batch_hdr *)b->mem;
	h->error = -EBADMSG;
	h->msg_off = (uint32_t)off;
	h->msg_len = sizeof(err_text) - 1;
	return bb_end(b);
}

/* ---- checking ---- */

/*
 * View the extent and every tensor. Returns the first failure (or 0) with its message; when
 * everything passes, checks that every pointer of every view lies in [mem, mem + len) and reads
 * every byte they cover (so that ASan sees a bad pointer).
 */
static int check_all(const void *mem, uint64_t len, char *msg, size_t cap)
{
	const uint8_t *lo = mem, *hi = lo + len;
	struct ipc_batch_view v;
	struct ipc_tensor_view t;
	volatile uint64_t sink = 0;
	unsigned i;
	uint64_t k, nsp;
	int r;

	if (msg && cap)
		msg[0] = '\0';
	r = ipc_batch_view(mem, len, &v, msg, cap);
	if (r < 0)
		return r;
	if (v.flags & IPC_BATCH_F_ERROR) {
		assert_true((const uint8_t *)v.msg >= lo &&
			    (const uint8_t *)v.msg + v.msg_len <= hi);
		for (k = 0; k < v.msg_len; k++)
			sink += (uint8_t)v.msg[k];
	}
	for (i = 0; i < v.n_tensors; i++) {
		r = ipc_batch_tensor(&v, i, &t, msg, cap);
		if (r < 0)
			return r;
		assert_true((const uint8_t *)t.data >= lo && (const uint8_t *)t.data <= hi);
		assert_true(t.data_len <= (uint64_t)(hi - (const uint8_t *)t.data));
		for (k = 0; k < t.data_len; k++)
			sink += ((const uint8_t *)t.data)[k];
		if (t.kind == IPC_TENSOR_RAGGED) {
			assert_non_null(t.splits);
			nsp = v.rows + 1;
			assert_true((const uint8_t *)t.splits >= lo &&
				    (const uint8_t *)(t.splits + nsp) <= hi);
			assert_int_equal(t.splits[0], 0);
			for (k = 1; k < nsp; k++)
				assert_true(t.splits[k] >= t.splits[k - 1]);
		} else {
			assert_null(t.splits);
		}
		if (t.dtype == IPC_DTYPE_STRING) {
			assert_non_null(t.offsets);
			assert_true((const uint8_t *)t.offsets >= lo &&
				    (const uint8_t *)(t.offsets + t.n_elems + 1) <= hi);
			assert_int_equal(t.offsets[t.n_elems], t.data_len);
		} else {
			assert_null(t.offsets);
			assert_int_equal(t.n_elems * ipc_dtype_size(t.dtype), t.data_len);
		}
	}
	(void)sink;
	return 0;
}

/* A copy of the first len bytes of src in a heap block of exactly len bytes (ASan's bounds). */
static uint8_t *exact_copy(const uint8_t *src, uint64_t len)
{
	uint8_t *p = malloc(len ? len : 1);

	assert_non_null(p);
	memcpy(p, src, len);
	return p;
}

/* Patch size bytes at off of a copy of the valid extent; the check must fail with want_msg. */
static void corrupt(const struct bb *b, uint64_t len, uint64_t off, unsigned size, uint64_t value,
		    const char *want_msg)
{
	uint8_t *p = exact_copy(b->mem, len);
	char msg[256];
	int r;

	assert_true(off + size <= len);
	memcpy(p + off, &value, size);
	r = check_all(p, len, msg, sizeof(msg));
	if (r != -EBADMSG || !strstr(msg, want_msg))
		print_message("patch at %llu = 0x%llx: got %d \"%s\", want -EBADMSG \"%s\"\n",
			      (unsigned long long)off, (unsigned long long)value, r, msg, want_msg);
	assert_int_equal(r, -EBADMSG);
	assert_non_null(strstr(msg, want_msg));
	/* No message buffer: the same answer, no crash. */
	assert_int_equal(check_all(p, len, NULL, 0), -EBADMSG);
	free(p);
}

#define HDR(field) offsetof(struct ipc_batch_hdr, field), sizeof(((struct ipc_batch_hdr *)0)->field)
#define TEN(i, field)                                                           \
	(sizeof(struct ipc_batch_hdr) + (i) * sizeof(struct ipc_batch_tensor) + \
	 offsetof(struct ipc_batch_tensor, field)),                             \
		sizeof(((struct ipc_batch_tensor *)0)->field)
#define SHAPE(i, d)                                                             \
	(sizeof(struct ipc_batch_hdr) + (i) * sizeof(struct ipc_batch_tensor) + \
	 offsetof(struct ipc_batch_tensor, shape) + (d)*8),                     \
		8

/* ---- tests ---- */

static void test_dtypes(void **state)
{
	(void)state;
	assert_int_equal(ipc_dtype_size(IPC_DTYPE_INT8), 1);
	assert_int_equal(ipc_dtype_size(IPC_DTYPE_INT16), 2);
	assert_int_equal(ipc_dtype_size(IPC_DTYPE_UINT32), 4);
	assert_int_equal(ipc_dtype_size(IPC_DTYPE_UINT64), 8);
	assert_int_equal(ipc_dtype_size(IPC_DTYPE_FLOAT16), 2);
	assert_int_equal(ipc_dtype_size(IPC_DTYPE_FLOAT64), 8);
	assert_int_equal(ipc_dtype_size(IPC_DTYPE_BOOL), 1);
	assert_int_equal(ipc_dtype_size(IPC_DTYPE_STRING), 0);
	assert_int_equal(ipc_dtype_size(IPC_DTYPE_COUNT_), 0);
	assert_int_equal(ipc_dtype_size(1000), 0);
	assert_string_equal(ipc_dtype_name(IPC_DTYPE_INT8), "int8");
	assert_string_equal(ipc_dtype_name(IPC_DTYPE_FLOAT32), "float32");
	assert_string_equal(ipc_dtype_name(IPC_DTYPE_BOOL), "bool");
	assert_string_equal(ipc_dtype_name(IPC_DTYPE_STRING), "string");
	assert_string_equal(ipc_dtype_name(IPC_DTYPE_COUNT_), "?");
	assert_string_equal(ipc_dtype_name(~0u), "?");
}

static void test_valid_mixed(void **state)
{
	struct bb b;
	uint64_t len = build_mixed(&b);
	struct ipc_batch_view v;
	struct ipc_tensor_view t;
	char msg[256] = "untouched";
	const int64_t *sp;

	(void)state;
	assert_int_equal(check_all(b.mem, len, msg, sizeof(msg)), 0);
	msg[0] = 'u';
	assert_int_equal(ipc_batch_view(b.mem, len, &v, msg, sizeof(msg)), 0);
	assert_int_equal(msg[0], 'u'); /* untouched on success */
	assert_int_equal(v.seq, 5);
	assert_int_equal(v.epoch, 1);
	assert_int_equal(v.rows, 3);
	assert_int_equal(v.index_in_epoch, 2);
	assert_int_equal(v.flags, IPC_BATCH_F_END_EPOCH);
	assert_int_equal(v.n_tensors, 6);
	assert_null(v.msg);

	assert_int_equal(ipc_batch_tensor(&v, 0, &t, msg, sizeof(msg)), 0);
	assert_int_equal(t.dtype, IPC_DTYPE_FLOAT32);
	assert_int_equal(t.kind, IPC_TENSOR_DENSE);
	assert_int_equal(t.rank, 2);
	assert_int_equal(t.shape[0], 3);
	assert_int_equal(t.shape[1], 2);
	assert_int_equal(t.shape[2], 0);
	assert_int_equal(t.n_elems, 6);
	assert_ptr_equal(t.data, b.mem + b.data_off[0]);
	assert_memory_equal(t.data, t0_data, sizeof(t0_data));

	assert_int_equal(ipc_batch_tensor(&v, 1, &t, msg, sizeof(msg)), 0);
	assert_int_equal(t.kind, IPC_TENSOR_RAGGED);
	assert_int_equal(t.shape[1], -1);
	assert_int_equal(t.n_elems, 8);
	assert_int_equal(t.data_len, 64);
	sp = t.splits;
	assert_int_equal(sp[3], 4);
	assert_null(t.offsets);

	assert_int_equal(ipc_batch_tensor(&v, 2, &t, msg, sizeof(msg)), 0);
	assert_int_equal(t.dtype, IPC_DTYPE_STRING);
	assert_int_equal(t.n_elems, 3);
	assert_int_equal(t.offsets[3], 8);
	assert_memory_equal((const char *)t.data + t.offsets[2], "de\0\xff!", 5);

	assert_int_equal(ipc_batch_tensor(&v, 3, &t, msg, sizeof(msg)), 0);
	assert_int_equal(t.kind, IPC_TENSOR_RAGGED);
	assert_int_equal(t.n_elems, 3);
	assert_int_equal(t.splits[1], 2);
	assert_int_equal(t.offsets[2], 3);

	assert_int_equal(ipc_batch_tensor(&v, 5, &t, msg, sizeof(msg)), 0);
	assert_int_equal(t.n_elems, 0);
	assert_int_equal(t.data_len, 0);

	/* Out of range index: -EINVAL, not a message about the data. */
	assert_int_equal(ipc_batch_tensor(&v, 6, &t, msg, sizeof(msg)), -EINVAL);
	assert_int_equal(ipc_batch_tensor(&v, 1000, &t, NULL, 0), -EINVAL);

	/* A longer extent than total_bytes is fine (the allocation was rounded up). */
	assert_int_equal(check_all(b.mem, BB_CAP, msg, sizeof(msg)), 0);
	free(b.mem);
}

static void test_valid_error_batch(void **state)
{
	struct bb b;
	uint64_t len = build_error(&b);
	struct ipc_batch_view v;
	char msg[256];

	(void)state;
	assert_int_equal(ipc_batch_view(b.mem, len, &v, msg, sizeof(msg)), 0);
	assert_true(v.flags & IPC_BATCH_F_ERROR);
	assert_int_equal(v.error, -EBADMSG);
	assert_int_equal(v.n_tensors, 0);
	assert_int_equal(v.msg_len, strlen(err_text));
	assert_memory_equal(v.msg, err_text, v.msg_len);
	free(b.mem);
}

static void test_empty_batch(void **state)
{
	const int64_t s0[] = { 0, 4 }, s1[] = { 0, -1 };
	const int64_t zero = 0;
	struct bb b;
	uint64_t len;
	char msg[256];

	(void)state;
	bb_begin(&b, 3, 0, 0);
	bb_tensor(&b, 0, IPC_DTYPE_INT32, IPC_TENSOR_DENSE, 2, s0);
	bb_tensor(&b, 1, IPC_DTYPE_UINT8, IPC_TENSOR_RAGGED, 2, s1);
	bb_splits(&b, 1, &zero, 1);
	bb_tensor(&b, 2, IPC_DTYPE_STRING, IPC_TENSOR_DENSE, 2, s0);
	bb_offsets(&b, 2, &zero, 1);
	len = bb_end(&b);
	assert_int_equal(check_all(b.mem, len, msg, sizeof(msg)), 0);
	free(b.mem);
}

static void test_corrupt_header(void **state)
{
	struct bb b;
	uint64_t len = build_mixed(&b);

	(void)state;
	corrupt(&b, len, HDR(magic), 0x54424c54, "batch: magic");
	corrupt(&b, len, HDR(version), 2, "batch: version");
	corrupt(&b, len, HDR(version), 0, "batch: version");
	corrupt(&b, len, HDR(total_bytes), len + 1, "batch: total_bytes");
	corrupt(&b, len, HDR(total_bytes), 63, "batch: total_bytes");
	corrupt(&b, len, HDR(total_bytes), UINT64_MAX, "batch: total_bytes");
	corrupt(&b, len, HDR(flags), 1u << 3, "batch: flags");
	corrupt(&b, len, HDR(n_tensors), 0xffff, "batch: n_tensors");
	corrupt(&b, len, HDR(rows), 4, "tensor 0: shape[0]");
	corrupt(&b, len, HDR(rows), UINT64_MAX, "batch: rows");
	/* total_bytes shorter than the data: the tensors no longer fit. */
	corrupt(&b, len, HDR(total_bytes), b.splits_off[1], "tensor 1: splits_off");
	corrupt(&b, len, HDR(total_bytes), 64 + 6 * 104, "tensor 0: data_off");
	/* An error flag on a batch with tensors. */
	corrupt(&b, len, HDR(flags), IPC_BATCH_F_ERROR, "batch: n_tensors");
	free(b.mem);
}

static void test_corrupt_error_batch(void **state)
{
	struct bb b;
	uint64_t len = build_error(&b);

	(void)state;
	corrupt(&b, len, HDR(error), 0, "batch: error");
	corrupt(&b, len, HDR(error), 5, "batch: error");
	corrupt(&b, len, HDR(msg_off), len, "batch: msg_off");
	corrupt(&b, len, HDR(msg_off), 0xffffffff, "batch: msg_off");
	corrupt(&b, len, HDR(msg_len), 0xffffffff, "batch: msg_off");
	corrupt(&b, len, HDR(msg_len), len, "batch: msg_off");
	corrupt(&b, len, HDR(msg_off), 8, "batch: msg_off"); /* inside the header */
	corrupt(&b, len, HDR(n_tensors), 1, "batch: n_tensors");
	free(b.mem);
}

static void test_corrupt_tensor_entry(void **state)
{
	struct bb b;
	uint64_t len = build_mixed(&b);

	(void)state;
	corrupt(&b, len, TEN(0, dtype), IPC_DTYPE_COUNT_, "tensor 0: dtype");
	corrupt(&b, len, TEN(4, dtype), 0xff, "tensor 4: dtype");
	corrupt(&b, len, TEN(0, rank), 0, "tensor 0: rank");
	corrupt(&b, len, TEN(0, rank), 9, "tensor 0: rank");
	corrupt(&b, len, TEN(2, kind), 2, "tensor 2: kind");
	corrupt(&b, len, SHAPE(0, 0), 2, "tensor 0: shape[0]");
	corrupt(&b, len, SHAPE(0, 0), (uint64_t)-3, "tensor 0: shape[0]");
	corrupt(&b, len, SHAPE(0, 1), (uint64_t)-1, "tensor 0: shape[1]");
	corrupt(&b, len, SHAPE(0, 1), 3, "tensor 0: data_len");
	corrupt(&b, len, SHAPE(0, 1), INT64_MAX, "tensor 0: shape");
	corrupt(&b, len, SHAPE(1, 1), 4, "tensor 1: shape[1]");
	corrupt(&b, len, SHAPE(1, 1), (uint64_t)-2, "tensor 1: shape[1]");
	corrupt(&b, len, SHAPE(1, 2), (uint64_t)-1, "tensor 1: shape[2]");
	corrupt(&b, len, SHAPE(1, 2), 3, "tensor 1: data_len");
	corrupt(&b, len, SHAPE(1, 2), INT64_MAX, "tensor 1: splits[3]");
	corrupt(&b, len, TEN(3, rank), 1, "tensor 3: rank");
	/* dtype changes: element sizes no longer match, strings lose their offsets. */
	corrupt(&b, len, TEN(0, dtype), IPC_DTYPE_FLOAT64, "tensor 0: data_len");
	corrupt(&b, len, TEN(0, dtype), IPC_DTYPE_STRING, "tensor 0: offsets_off");
	corrupt(&b, len, TEN(2, dtype), IPC_DTYPE_UINT8, "tensor 2: offsets_off");
	corrupt(&b, len, TEN(2, kind), IPC_TENSOR_RAGGED, "tensor 2: rank");
	corrupt(&b, len, TEN(1, kind), IPC_TENSOR_DENSE, "tensor 1: shape[1]");
	free(b.mem);
}

static void test_corrupt_data(void **state)
{
	struct bb b;
	uint64_t len = build_mixed(&b);

	(void)state;
	corrupt(&b, len, TEN(0, data_off), b.data_off[0] + 8, "tensor 0: data_off");
	corrupt(&b, len, TEN(0, data_off), len, "tensor 0: data_off");
	corrupt(&b, len, TEN(0, data_off), UINT64_MAX - 63, "tensor 0: data_off");
	corrupt(&b, len, TEN(0, data_off), 0, "tensor 0: data_off"); /* over the header */
	corrupt(&b, len, TEN(0, data_len), 20, "tensor 0: data_len");
	corrupt(&b, len, TEN(0, data_len), 28, "tensor 0: data_len");
	corrupt(&b, len, TEN(0, data_len), UINT64_MAX, "tensor 0: data_off");
	corrupt(&b, len, TEN(1, data_len), 56, "tensor 1: data_len");
	corrupt(&b, len, TEN(5, data_len), 2, "tensor 5: data_off"); /* at offset 0 */
	corrupt(&b, len, TEN(5, data_off), len + 64, "tensor 5: data_off");
	corrupt(&b, len, TEN(0, splits_off), b.splits_off[1], "tensor 0: splits_off");
	corrupt(&b, len, TEN(0, offsets_off), b.offsets_off[2], "tensor 0: offsets_off");
	/* A data block that runs past the end. */
	corrupt(&b, len, TEN(4, data_len), 65, "tensor 4: data_off");
	corrupt(&b, len, TEN(4, data_len), len, "tensor 4: data_off");
	free(b.mem);
}

static void test_corrupt_splits(void **state)
{
	struct bb b;
	uint64_t len = build_mixed(&b);

	(void)state;
	corrupt(&b, len, TEN(1, splits_off), b.splits_off[1] + 4, "tensor 1: splits_off");
	corrupt(&b, len, TEN(1, splits_off), len - 16, "tensor 1: splits_off");
	corrupt(&b, len, TEN(1, splits_off), len, "tensor 1: splits_off");
	corrupt(&b, len, TEN(1, splits_off), UINT64_MAX - 7, "tensor 1: splits_off");
	corrupt(&b, len, TEN(1, splits_off), 0, "tensor 1: splits_off");
	corrupt(&b, len, TEN(1, splits_off), 8, "tensor 1: splits_off"); /* inside the header */
	corrupt(&b, len, b.splits_off[1], 8, 1, "tensor 1: splits[0]");
	corrupt(&b, len, b.splits_off[1], 8, (uint64_t)-1, "tensor 1: splits[0]");
	corrupt(&b, len, b.splits_off[1] + 16, 8, 0, "tensor 1: splits[2]");
	corrupt(&b, len, b.splits_off[1] + 8, 8, (uint64_t)-1, "tensor 1: splits[1]");
	corrupt(&b, len, b.splits_off[1] + 24, 8, 3, "tensor 1: data_len");
	corrupt(&b, len, b.splits_off[1] + 24, 8, 5, "tensor 1: data_len");
	corrupt(&b, len, b.splits_off[1] + 24, 8, INT64_MAX, "tensor 1: data_len");
	corrupt(&b, len, b.splits_off[1] + 24, 8, (uint64_t)INT64_MIN, "tensor 1: splits[3]");
	corrupt(&b, len, b.splits_off[3] + 24, 8, 2, "tensor 3: offsets[2]");
	corrupt(&b, len, b.splits_off[3] + 24, 8, 4, "tensor 3: offsets[4]");
	corrupt(&b, len, b.splits_off[3] + 24, 8, INT64_MAX / 2, "tensor 3: offsets_off");
	free(b.mem);
}

static void test_corrupt_offsets(void **state)
{
	struct bb b;
	uint64_t len = build_mixed(&b);

	(void)state;
	corrupt(&b, len, TEN(2, offsets_off), b.offsets_off[2] + 1, "tensor 2: offsets_off");
	corrupt(&b, len, TEN(2, offsets_off), 0, "tensor 2: offsets_off");
	corrupt(&b, len, TEN(2, offsets_off), len - 8, "tensor 2: offsets_off");
	corrupt(&b, len, TEN(2, offsets_off), UINT64_MAX - 7, "tensor 2: offsets_off");
	corrupt(&b, len, b.offsets_off[2], 8, 1, "tensor 2: offsets[0]");
	corrupt(&b, len, b.offsets_off[2] + 8, 8, 4, "tensor 2: offsets[2]");
	corrupt(&b, len, b.offsets_off[2] + 8, 8, (uint64_t)-1, "tensor 2: offsets[1]");
	corrupt(&b, len, b.offsets_off[2] + 24, 8, 7, "tensor 2: offsets[3]");
	corrupt(&b, len, b.offsets_off[2] + 24, 8, 9, "tensor 2: offsets[3]");
	corrupt(&b, len, b.offsets_off[2] + 24, 8, (uint64_t)INT64_MIN, "tensor 2: offsets[3]");
	corrupt(&b, len, TEN(2, data_len), 9, "tensor 2: offsets[3]");
	corrupt(&b, len, TEN(2, data_len), UINT64_MAX, "tensor 2: data_off");
	corrupt(&b, len, b.offsets_off[3] + 16, 8, 0, "tensor 3: offsets[2]");
	corrupt(&b, len, SHAPE(2, 0), 4, "tensor 2: shape[0]");
	free(b.mem);
}

/* Every byte of the extent set to a few values: each check answers 0 or -EBADMSG. */
static void sweep(const uint8_t *valid, uint64_t len)
{
	static const int deltas[] = { 1, -1, 0x40, 0x80 };
	char msg[256];
	uint64_t off;
	size_t k;
	int r;

	for (off = 0; off < len; off++) {
		for (k = 0; k < 7; k++) {
			uint8_t *p = exact_copy(valid, len);

			if (k < 4)
				p[off] = (uint8_t)(p[off] + deltas[k]);
			else
				p[off] = k == 4 ? 0 : k == 5 ? 0xff : 0x7f;
			r = check_all(p, len, msg, sizeof(msg));
			assert_true(r == 0 || r == -EBADMSG);
			if (r < 0)
				assert_true(msg[0] != '\0');
			free(p);
		}
	}
}

static void test_sweep_bytes(void **state)
{
	struct bb b;
	uint64_t len;

	(void)state;
	len = build_mixed(&b);
	sweep(b.mem, len);
	free(b.mem);
	len = build_error(&b);
	sweep(b.mem, len);
	free(b.mem);
}

/* Every truncation of the extent; and with total_bytes patched to the shorter length. */
static void test_truncated(void **state)
{
	struct bb b;
	uint64_t len = build_mixed(&b), n;
	char msg[256];
	int r;

	(void)state;
	for (n = 0; n < len; n++) {
		uint8_t *p = exact_copy(b.mem, n);

		assert_int_equal(check_all(p, n, msg, sizeof(msg)), -EBADMSG);
		if (n >= sizeof(struct ipc_batch_hdr)) {
			memcpy(p + offsetof(struct ipc_batch_hdr, total_bytes), &n, 8);
			r = check_all(p, n, msg, sizeof(msg));
			/* The last tensor's data ends the extent; anything shorter breaks one. */
			assert_int_equal(r, n >= b.data_off[4] + sizeof(t4_data) ? 0 : -EBADMSG);
		}
		free(p);
	}
	free(b.mem);
}

static void test_unaligned_address(void **state)
{
	struct bb b;
	uint64_t len = build_mixed(&b);
	struct ipc_batch_view v;
	uint8_t *p = aligned_alloc(64, BB_CAP + 64);
	char msg[256];

	(void)state;
	assert_non_null(p);
	memcpy(p + 4, b.mem, len);
	assert_int_equal(ipc_batch_view(p + 4, len, &v, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "aligned"));
	free(p);
	free(b.mem);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dtypes),
		cmocka_unit_test(test_valid_mixed),
		cmocka_unit_test(test_valid_error_batch),
		cmocka_unit_test(test_empty_batch),
		cmocka_unit_test(test_corrupt_header),
		cmocka_unit_test(test_corrupt_error_batch),
		cmocka_unit_test(test_corrupt_tensor_entry),
		cmocka_unit_test(test_corrupt_data),
		cmocka_unit_test(test_corrupt_splits),
		cmocka_unit_test(test_corrupt_offsets),
		cmocka_unit_test(test_sweep_bytes),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_unaligned_address),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
