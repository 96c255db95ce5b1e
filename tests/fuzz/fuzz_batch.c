/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: ipc_batch_view and ipc_batch_tensor on any bytes; every view stays in bounds. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/batch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * Invariants checked (abort() makes the fuzzer report them):
 * - the view and every tensor answer 0 or -EBADMSG with a message (-EINVAL only for an index
 *   past n_tensors, which is never asked);
 * - every pointer of an accepted view lies in the extent, with its length; every byte it covers
 *   is read (so that ASan sees a bad one), splits and offsets start at 0 and never decrease,
 *   the last offset is the data length, and counts agree with the element size.
 * Each input is checked as it is, then with magic, version and total_bytes made valid (so that
 * the fuzzer reaches the tensor checks without having to guess them).
 */

static volatile uint64_t sink;

static void check_tensor(const struct ipc_batch_view *v, const struct ipc_tensor_view *t,
			 const uint8_t *lo, const uint8_t *hi)
{
	const uint8_t *d = t->data;
	uint64_t k, n;

	if (d < lo || d > hi || t->data_len > (uint64_t)(hi - d))
		abort();
	if (t->rank < 1 || t->rank > IPC_BATCH_MAX_RANK || t->dtype >= IPC_DTYPE_COUNT_)
		abort();
	for (k = 0; k < t->data_len; k++)
		sink += d[k];
	if (t->kind == IPC_TENSOR_RAGGED) {
		n = v->rows + 1;
		if (!t->splits || (const uint8_t *)t->splits < lo ||
		    (uint64_t)(hi - (const uint8_t *)t->splits) / 8 < n || t->splits[0] != 0)
			abort();
		for (k = 1; k < n; k++)
			if (t->splits[k] < t->splits[k - 1])
				abort();
	} else if (t->splits) {
		abort();
	}
	if (t->dtype == IPC_DTYPE_STRING) {
		n = t->n_elems + 1;
		if (!t->offsets || (const uint8_t *)t->offsets < lo ||
		    (uint64_t)(hi - (const uint8_t *)t->offsets) / 8 < n || t->offsets[0] != 0 ||
		    (uint64_t)t->offsets[n - 1] != t->data_len)
			abort();
		for (k = 1; k < n; k++)
			if (t->offsets[k] < t->offsets[k - 1])
				abort();
	} else if (t->offsets || t->n_elems * ipc_dtype_size(t->dtype) != t->data_len) {
		abort();
	}
}

static void check(const uint8_t *mem, size_t size)
{
	struct ipc_batch_view v;
	struct ipc_tensor_view t;
	char msg[256];
	unsigned i;
	int r;

	msg[0] = '\0';
	r = ipc_batch_view(mem, size, &v, msg, sizeof(msg));
	if (r < 0) {
		if (r != -EBADMSG || !msg[0])
			abort();
		return;
	}
	if (v.flags & IPC_BATCH_F_ERROR) {
		if ((const uint8_t *)v.msg < mem || (const uint8_t *)v.msg + v.msg_len > mem + size)
			abort();
		for (i = 0; i < v.msg_len; i++)
			sink += (uint8_t)v.msg[i];
	}
	for (i = 0; i < v.n_tensors; i++) {
		msg[0] = '\0';
		r = ipc_batch_tensor(&v, i, &t, msg, sizeof(msg));
		if (r < 0) {
			if (r != -EBADMSG || !msg[0])
				abort();
			continue;
		}
		check_tensor(&v, &t, mem, mem + size);
	}
	if (ipc_batch_tensor(&v, v.n_tensors, &t, NULL, 0) != -EINVAL)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ipc_batch_hdr h;
	uint8_t *mem;

	/* An exact-size, 8-aligned heap copy: ASan then sees any read past the end. */
	mem = malloc(size ? size : 1);
	if (!mem)
		return 0;
	memcpy(mem, data, size);
	check(mem, size);
	if (size >= sizeof(h)) {
		memcpy(&h, mem, sizeof(h));
		h.magic = IPC_BATCH_MAGIC;
		h.version = IPC_BATCH_VERSION;
		h.total_bytes = size;
		memcpy(mem, &h, sizeof(h));
		check(mem, size);
	}
	free(mem);
	return 0;
}
