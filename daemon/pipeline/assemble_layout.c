/* SPDX-License-Identifier: Apache-2.0 */
/* Batch assembly, the driver's part: a batch's layout (shapes, offsets, the extent) and header. */
#include "assemble_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/batch.h"

/* ---- layout ---- */

/*
 * Place len bytes at the next IPC_BATCH_ALIGN boundary from *at; the skipped bytes are noted
 * so that they can be zeroed: every byte of an extent is written, so the same spec and data
 * give the same extent, and nothing stale (a reused extent) reaches shared memory.
 */
static int place(struct pl_bjob *job, size_t *at, size_t len, uint64_t *ret_off)
{
	size_t a = pl_asm_align_up(*at, IPC_BATCH_ALIGN);
	if (a > *at) {
		if (job->n_gaps == job->cap_gaps) {
			size_t nc = job->cap_gaps ? job->cap_gaps * 2 : 16;
			void *ng = realloc(job->gaps, nc * sizeof(*job->gaps));
			if (!ng)
				return -ENOMEM;
			job->gaps = ng;
			job->cap_gaps = nc;
		}
		job->gaps[job->n_gaps][0] = *at;
		job->gaps[job->n_gaps][1] = a;
		job->n_gaps++;
	}
	*ret_off = a;
	*at = a + len;
	return 0;
}

static int layout_tensor(struct pl_bjob *job, size_t i, size_t *at, struct io_error *err)
{
	const struct pl_plan *plan = job->ax->plan;
	const struct pl_out *o = &plan->out[i];
	struct pl_tlay *t = &job->lay[i];
	size_t n = job->n_good;
	t->rank = o->row_rank + 1;
	t->shape[0] = (int64_t)n;
	t->kind = o->ragged ? IPC_TENSOR_RAGGED : IPC_TENSOR_DENSE;
	const int64_t *first = NULL;
	struct pl_rec tmp; /* a row's record, for a message */
	for (unsigned d = 0; d < o->row_rank; d++) {
		t->shape[d + 1] = o->row_shape[d];
		if (o->pad) /* a fixed size, or at least the static size (unknown: the rows') */
			t->shape[d + 1] = o->pad_shape[d] >= 0	 ? o->pad_shape[d]
					  : o->row_shape[d] >= 0 ? o->row_shape[d]
								 : 0;
	}
	if (o->measure) {
		for (size_t row = 0; row < job->n_rows; row++) {
			if (job->bad[row])
				continue;
			const int64_t *dm = job->dims + (row * plan->n_out + i) * PL_MAX_RANK;
			if (!first) {
				first = dm;
				if (!o->pad)
					for (unsigned d = 0; d < o->row_rank; d++)
						t->shape[d + 1] = dm[d];
			}
			for (unsigned d = 0; d < o->row_rank; d++) {
				if (o->pad) {
					if (o->pad_shape[d] < 0) {
						if (dm[d] > t->shape[d + 1])
							t->shape[d + 1] = dm[d];
					} else if (dm[d] > o->pad_shape[d]) {
						io_error_set(err,
							     "tensor \"%s\": row %zu has %lld "
							     "along "
							     "dimension %u, more than its padding "
							     "shape "
							     "(%lld)",
							     o->name, job->outpos[row],
							     (long long)dm[d], d,
							     (long long)o->pad_shape[d]);
						pl_row_error_prefix(
							plan, pl_bjob_rec(job, row, &tmp, NULL),
							err);
						return -EINVAL;
					}
				} else if (!(o->ragged && d == 0) && dm[d] != first[d]) {
					io_error_set(err,
						     "tensor \"%s\": rows of different shapes "
						     "cannot be "
						     "batched without padding: dimension %u is "
						     "%lld in row %zu "
						     "and %lld in row 0",
						     o->name, d, (long long)dm[d], job->outpos[row],
						     (long long)first[d]);
					pl_row_error_prefix(plan, pl_bjob_rec(job, row, &tmp, NULL),
							    err);
					return -EINVAL;
				}
			}
		}
		if (!first) /* no rows: unknown sizes are 0 */
			for (unsigned d = 0; d < o->row_rank; d++)
				if (t->shape[d + 1] < 0)
					t->shape[d + 1] = 0;
	}
	int64_t inner = 1;
	for (unsigned d = (o->ragged ? 1 : 0); d < o->row_rank; d++)
		inner *= t->shape[d + 1];
	int64_t total;
	if (o->ragged) {
		t->shape[1] = -1;
		t->inner = inner;
		if (place(job, at, (n + 1) * sizeof(int64_t), &t->splits_off) < 0)
			return -ENOMEM;
		int64_t steps = 0;
		for (size_t row = 0; row < job->n_rows; row++)
			if (!job->bad[row])
				steps += job->dims[(row * plan->n_out + i) * PL_MAX_RANK];
		total = steps * inner;
	} else {
		t->row_elems = inner;
		struct pl_view c;
		pl_view_init(&c, o->row_rank, t->shape + 1);
		memcpy(t->dst_stride, c.stride, sizeof(t->dst_stride));
		total = (int64_t)n * inner;
	}
	if (o->dtype == MANIFEST_DTYPE_STRING) {
		if (place(job, at, ((size_t)total + 1) * sizeof(int64_t), &t->offsets_off) < 0)
			return -ENOMEM;
		t->byte_start = calloc(n + 1, sizeof(uint64_t));
		if (!t->byte_start)
			return -ENOMEM;
		uint64_t bytes = 0;
		for (size_t row = 0; row < job->n_rows; row++) {
			if (job->bad[row])
				continue;
			t->byte_start[job->outpos[row]] = bytes;
			bytes += job->sbytes[row * plan->n_out + i];
			if (o->pad) {
				const int64_t *dm =
					job->dims + (row * plan->n_out + i) * PL_MAX_RANK;
				int64_t have = 1;
				for (unsigned d = 0; d < o->row_rank; d++)
					have *= dm[d];
				bytes += (uint64_t)(inner - have) * o->pad_str_len;
			}
		}
		t->byte_start[n] = bytes;
		t->data_len = bytes;
	} else {
		t->data_len = (uint64_t)total * o->elem_size;
	}
	return place(job, at, t->data_len, &t->data_off);
}

/* Number the good rows, lay every tensor out, allocate the extent and write the splits. */
int pl_asm_layout(struct pl_bjob *job, struct io_error *err)
{
	struct pl_asm_ctx *ax = job->ax;
	const struct pl_plan *plan = ax->plan;
	job->n_good = 0;
	for (size_t row = 0; row < job->n_rows; row++)
		job->outpos[row] = job->bad[row] ? SIZE_MAX : job->n_good++;
	size_t at = sizeof(struct ipc_batch_hdr) + plan->n_out * sizeof(struct ipc_batch_tensor);
	for (size_t i = 0; i < plan->n_out; i++) {
		int r = layout_tensor(job, i, &at, err);
		if (r < 0)
			return r;
	}
	job->len = pl_asm_align_up(at, IPC_BATCH_EXTENT_ALIGN);
	unsigned prev = pl_prof_enter(ax->prof, PL_STAGE_IDLE_); /* it may wait for the consumer */
	uint64_t t0 = pl_clock_ns(CLOCK_MONOTONIC);
	job->mem = ax->alloc(ax->alloc_ctx, job->len);
	ax->alloc_ns += pl_clock_ns(CLOCK_MONOTONIC) - t0; /* a ring full of unread batches waits */
	pl_prof_leave(ax->prof, prev);
	if (!job->mem) {
		io_error_set(err, "out of memory for a batch of %zu bytes", job->len);
		return -ENOMEM;
	}
	for (size_t g = 0; g < job->n_gaps; g++)
		memset(job->mem + job->gaps[g][0], 0, job->gaps[g][1] - job->gaps[g][0]);
	memset(job->mem + at, 0, job->len - at);
	for (size_t i = 0; i < plan->n_out; i++) {
		const struct pl_out *o = &plan->out[i];
		struct pl_tlay *t = &job->lay[i];
		if (t->kind == IPC_TENSOR_RAGGED) {
			int64_t *splits = (int64_t *)(job->mem + t->splits_off);
			splits[0] = 0;
			for (size_t row = 0; row < job->n_rows; row++)
				if (!job->bad[row])
					splits[job->outpos[row] + 1] =
						splits[job->outpos[row]] +
						job->dims[(row * plan->n_out + i) * PL_MAX_RANK];
		}
		if (o->dtype == MANIFEST_DTYPE_STRING)
			((int64_t *)(job->mem + t->offsets_off))[0] = 0;
	}
	return 0;
}

/* Rows that failed in a static layout's fill pass: move the good rows together. */
void pl_asm_squeeze(struct pl_bjob *job)
{
	const struct pl_plan *plan = job->ax->plan;
	size_t good = 0;
	for (size_t row = 0; row < job->n_rows; row++) {
		if (job->bad[row])
			continue;
		for (size_t i = 0; i < plan->n_out; i++) {
			struct pl_tlay *t = &job->lay[i];
			size_t rb = (size_t)t->row_elems * plan->out[i].elem_size;
			if (good != row)
				memmove(job->mem + t->data_off + good * rb,
					job->mem + t->data_off + row * rb, rb);
		}
		good++;
	}
	for (size_t i = 0; i < plan->n_out; i++) {
		struct pl_tlay *t = &job->lay[i];
		t->shape[0] = (int64_t)good;
		t->data_len = good * (size_t)t->row_elems * plan->out[i].elem_size;
	}
	job->n_good = good;
}

void pl_asm_write_header(struct pl_bjob *job)
{
	const struct pl_plan *plan = job->ax->plan;
	struct ipc_batch_hdr *h = (struct ipc_batch_hdr *)job->mem;
	memset(h, 0, sizeof(*h));
	h->magic = IPC_BATCH_MAGIC;
	h->version = IPC_BATCH_VERSION;
	h->n_tensors = (uint16_t)plan->n_out;
	h->seq = job->seq;
	h->epoch = job->epoch;
	h->rows = job->n_good;
	h->flags = job->flags;
	h->total_bytes = job->len;
	h->index_in_epoch = job->index_in_epoch;
	struct ipc_batch_tensor *tt = (struct ipc_batch_tensor *)(h + 1);
	for (size_t i = 0; i < plan->n_out; i++) {
		const struct pl_tlay *t = &job->lay[i];
		struct ipc_batch_tensor *e = &tt[i];
		memset(e, 0, sizeof(*e));
		e->schema_index = (uint32_t)i;
		e->dtype = (uint8_t)plan->out[i].dtype;
		e->rank = (uint8_t)t->rank;
		e->kind = (uint8_t)t->kind;
		memcpy(e->shape, t->shape, sizeof(e->shape));
		e->data_off = t->data_off;
		e->data_len = t->data_len;
		e->splits_off = t->splits_off;
		e->offsets_off = t->offsets_off;
	}
}
