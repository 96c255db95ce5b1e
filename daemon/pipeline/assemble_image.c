/* SPDX-License-Identifier: Apache-2.0 */
/* Batch assembly of an output with image steps: the parse tasks' calls into the decode stage. */
#include <errno.h>
#include <string.h>

#include "assemble_internal.h"
#include "decode.h"
#include "ops.h"

/* Where row's random draws come from: (seed, epoch, its position in the epoch). */
static struct pl_img_key image_key(const struct pl_bjob *job, size_t row)
{
	const struct pl_plan *plan = job->ax->plan;
	return (struct pl_img_key){ plan->cfg.seed, job->epoch,
				    job->index_in_epoch * (uint64_t)plan->cfg.target_batch_size +
					    row };
}

static int image_error(const struct pl_out *o, int r, struct io_error *err)
{
	if (r != -ENOMEM)
		io_error_prefix(err, "tensor \"%s\": ", o->name);
	return r;
}

int pl_asm_image_shape(struct pl_bjob *job, struct pl_worker_scratch *ws, size_t row, size_t i,
		       int64_t *dims, struct io_error *err)
{
	const struct pl_plan *plan = job->ax->plan;
	const uint8_t *p;
	size_t len;
	int r = pl_row_image_bytes(plan, ws, i, &p, &len, err);
	if (r < 0)
		return r;
	struct pl_img_key key = image_key(job, row);
	r = pl_imgchain_shape(plan->out[i].img, &key, p, len, dims, ws->img, err);
	return r < 0 ? image_error(&plan->out[i], r, err) : 0;
}

int pl_asm_fill_boxes(struct pl_bjob *job, struct pl_worker_scratch *ws, size_t row, size_t i,
		      float *dst, size_t n, struct io_error *err)
{
	const struct pl_plan *plan = job->ax->plan;
	const struct pl_out *o = &plan->out[i];
	size_t m = o->box_of - 1;
	const uint8_t *p;
	size_t len;
	int r = pl_row_image_bytes(plan, ws, m, &p, &len, err);
	if (r < 0)
		return r;
	struct pl_img_key key = image_key(job, row);
	r = pl_imgchain_boxes(plan->out[m].img, &key, p, len, dst, n, o->box_xyxy, o->box_pixels,
			      err);
	return r < 0 ? image_error(&plan->out[m], r, err) : 0;
}

int pl_asm_fill_image(struct pl_bjob *job, struct pl_worker_scratch *ws, size_t row, size_t i,
		      const struct pl_tlay *t, size_t pos, struct io_error *err)
{
	const struct pl_plan *plan = job->ax->plan;
	const struct pl_out *o = &plan->out[i];
	/* the row's shape: measured, or the static one (the chain checks the image has it) */
	const int64_t *dims =
		o->measure ? job->dims + (row * plan->n_out + i) * PL_MAX_RANK : t->shape + 1;
	const uint8_t *p;
	size_t len;
	int r = pl_row_image_bytes(plan, ws, i, &p, &len, err);
	if (r < 0)
		return r;
	uint8_t *dst;
	int64_t stride[3];
	if (t->kind == IPC_TENSOR_RAGGED) {
		const int64_t *splits = (const int64_t *)(job->mem + t->splits_off);
		dst = job->mem + t->data_off + (size_t)(splits[pos] * t->inner) * o->elem_size;
		stride[2] = 1;
		stride[1] = dims[2];
		stride[0] = dims[1] * dims[2];
	} else {
		dst = job->mem + t->data_off + pos * (size_t)t->row_elems * o->elem_size;
		memcpy(stride, t->dst_stride, sizeof(stride));
		if (dims[0] != t->shape[1] || dims[1] != t->shape[2] || dims[2] != t->shape[3])
			pl_fill(dst, o->pad_elem, o->elem_size, (size_t)t->row_elems);
	}
	struct pl_img_key key = image_key(job, row);
	r = pl_imgchain_run(o->img, &key, p, len, dims, dst, stride, ws->img, err);
	return r < 0 ? image_error(o, r, err) : 0;
}
