/* SPDX-License-Identifier: Apache-2.0 */
/* Batch assembly, the parse tasks' part: a row measured, and filled into its place in the batch. */
#include "assemble_internal.h"

#include <errno.h>
#include <string.h>

/* ---- measure ---- */

/* A window's row: its records joined (the messages name the record that failed). */
static int measure_window(struct pl_bjob *job, struct pl_worker_scratch *ws, size_t row,
			  struct io_error *err)
{
	const struct pl_plan *plan = job->ax->plan;
	int r = pl_window_assemble(plan, ws, &job->rows[row], err);
	for (size_t i = 0; r == 0 && i < plan->n_out; i++) {
		const struct pl_out *o = &plan->out[i];
		if (!o->measure)
			continue;
		struct pl_view v;
		pl_window_view(ws, i, &v);
		memcpy(job->dims + (row * plan->n_out + i) * PL_MAX_RANK, v.shape,
		       sizeof(int64_t) * PL_MAX_RANK);
		if (o->dtype == MANIFEST_DTYPE_STRING) {
			struct pl_row_src s;
			pl_window_source(plan, ws, i, &s);
			r = pl_row_string_bytes(o, &s, &v, ws, &job->sbytes[row * plan->n_out + i]);
		}
	}
	return r;
}

/* The bytes of a bytes feature's values, all of them. */
static uint64_t str_bytes(const struct pbex_feature *pf)
{
	struct pbex_bytes_iter it;
	const uint8_t *p;
	size_t len;
	uint64_t total = 0;
	if (pf->kind == PBEX_KIND_NONE)
		return 0;
	pbex_bytes_iter_init(&it, pf);
	while (pbex_bytes_iter_next(&it, &p, &len))
		total += len;
	return total;
}

int pl_asm_measure_row(struct pl_bjob *job, struct pl_worker_scratch *ws, size_t row,
		       struct io_error *err)
{
	const struct pl_plan *plan = job->ax->plan;
	struct pl_rec tmp;
	const struct pl_rec *rec = pl_bjob_rec(job, row, &tmp, ws);
	if (!rec) {
		io_error_set(err, "out of memory");
		return -ENOMEM;
	}
	if (rec->win)
		return measure_window(job, ws, row, err);
	int r = pl_row_decode(plan, ws, rec, false, err); /* the fill pass checks the CRC */
	if (r < 0)
		return r; /* its message names the record */
	/* keep the views (into the record) for the fill pass: one decode per record */
	memcpy(job->feats + row * plan->n_ctx, ws->ctx, plan->n_ctx * sizeof(*ws->ctx));
	memcpy(job->lists + row * plan->n_lists, ws->lists, plan->n_lists * sizeof(*ws->lists));
	r = pl_row_shapes(plan, ws, err);
	if (r == 0) /* and its checked shapes: the fill pass does not walk the record again */
		memcpy(job->rdims + row * plan->n_out, ws->rec_dims,
		       plan->n_out * sizeof(*ws->rec_dims));
	for (size_t i = 0; r == 0 && i < plan->n_out; i++) {
		const struct pl_out *o = &plan->out[i];
		if (!o->measure)
			continue;
		if (o->img) { /* the image's header and the random draws give its shape */
			int64_t *d = job->dims + (row * plan->n_out + i) * PL_MAX_RANK;
			memset(d, 0, sizeof(int64_t) * PL_MAX_RANK);
			r = pl_asm_image_shape(job, ws, row, i, d, err);
			if (r < 0)
				break;
			continue;
		}
		if (o->str_direct) { /* its shape is its record shape: only its bytes to count */
			int64_t *d = job->dims + (row * plan->n_out + i) * PL_MAX_RANK;
			memset(d, 0, sizeof(int64_t) * PL_MAX_RANK);
			memcpy(d, o->rec_shape, sizeof(int64_t) * o->rec_rank);
			job->sbytes[row * plan->n_out + i] = str_bytes(&ws->ctx[o->slot]);
			continue;
		}
		struct pl_view v;
		r = pl_row_view(plan, ws, i, &v, err);
		if (r < 0)
			break;
		int64_t *d = job->dims + (row * plan->n_out + i) * PL_MAX_RANK;
		memcpy(d, v.shape, sizeof(int64_t) * PL_MAX_RANK);
		if (o->dtype == MANIFEST_DTYPE_STRING) {
			struct pl_row_src s;
			r = pl_row_source(plan, ws, i, &s);
			if (r == 0)
				r = pl_row_string_bytes(o, &s, &v, ws,
							&job->sbytes[row * plan->n_out + i]);
		}
	}
	if (r < 0 && r != -ENOMEM)
		pl_row_error_prefix(plan, rec, err);
	return r;
}

/* ---- fill ---- */

/* Copy one row of a string tensor: its view's elements (and pad strings) from element e0. */
static void fill_strings(const struct pl_out *o, const struct pl_tlay *t, uint8_t *mem,
			 const struct pl_row_src *s, const struct pl_view *v, size_t pos,
			 int64_t e0, unsigned prank, const int64_t *pdims, struct pl_crcur *cc)
{
	int64_t *offs = (int64_t *)(mem + t->offsets_off);
	uint8_t *bytes = mem + t->data_off;
	uint64_t at = t->byte_start[pos];
	int64_t total = 1;
	for (unsigned d = 0; d < prank; d++)
		total *= pdims[d];
	int64_t idx[PL_MAX_RANK] = { 0 };
	for (int64_t j = 0; j < total; j++) {
		bool inside = true;
		int64_t src = v->offset;
		for (unsigned d = 0; d < prank; d++) {
			if (idx[d] >= v->shape[d])
				inside = false;
			else
				src += idx[d] * v->stride[d];
		}
		const uint8_t *p;
		size_t len;
		if (!inside) {
			p = (const uint8_t *)o->pad_str;
			len = o->pad_str_len;
		} else if (s->const_str) {
			p = (const uint8_t *)o->c_str;
			len = o->c_str_len;
		} else {
			p = s->strs[src].p;
			len = s->strs[src].len;
		}
		if (len)
			pl_crcur_copy(cc, bytes + at, p, len);
		at += len;
		offs[e0 + j + 1] = (int64_t)at;
		for (int d = (int)prank - 1; d >= 0; d--) {
			if (++idx[d] < pdims[d])
				break;
			idx[d] = 0;
		}
	}
}

/*
 * A row failed: if its data CRC is also wrong, that is the error to report (the content of a
 * record with a bad CRC means nothing).
 */
static int crc_first(struct pl_crcur *cc, const struct pl_plan *plan, const struct pl_rec *rec,
		     int r, struct io_error *err)
{
	if (cc->active) {
		cc->pos = 0;
		cc->crc = 0;
		struct io_error e;
		if (pl_crcur_end(cc, plan, rec, &e) < 0) {
			if (err)
				*err = e;
			return -EBADMSG;
		}
	}
	return r;
}

/* Whether v, copied with dst_stride, is one run of contiguous elements on both sides. */
static bool view_contiguous(const struct pl_view *v, const int64_t *dst_stride)
{
	int64_t want = 1;
	for (int d = (int)v->rank - 1; d >= 0; d--) {
		if (v->shape[d] != 1 && (v->stride[d] != want || dst_stride[d] != want))
			return false;
		want *= v->shape[d];
	}
	return true;
}

/*
 * A str_direct output: the feature's values, in order, are the row's elements (their count was
 * checked): each one's bytes copied with the data CRC, and its end offset.
 */
static void fill_str_direct(const struct pl_tlay *t, uint8_t *mem, const struct pbex_feature *pf,
			    size_t pos, struct pl_crcur *cc)
{
	int64_t *offs = (int64_t *)(mem + t->offsets_off) + (int64_t)pos * t->row_elems;
	uint8_t *bytes = mem + t->data_off;
	uint64_t at = t->byte_start[pos];
	struct pbex_bytes_iter it;
	const uint8_t *p;
	size_t len;
	if (pf->kind == PBEX_KIND_NONE)
		return;
	pbex_bytes_iter_init(&it, pf);
	while (pbex_bytes_iter_next(&it, &p, &len)) {
		if (len)
			pl_crcur_copy(cc, bytes + at, p, len);
		at += len;
		*++offs = (int64_t)at;
	}
}

/*
 * A list_direct output: each step's values straight into the row's stretch of values (the
 * measuring pass checked every step's kind and count), without gathering them first.
 */
static void fill_list_direct(const struct pl_out *o, const struct pbex_feature_list *l,
			     uint8_t *dst)
{
	struct pbex_list_iter it;
	struct pbex_feature step;
	size_t at = 0;
	pl_list_iter_begin(&it, l);
	while (pbex_list_iter_next(&it, &step)) {
		if (step.kind == PBEX_KIND_NONE || step.count == 0)
			continue;
		if (o->feat->deser == MANIFEST_DESER_INT)
			pbex_feature_int64s(&step, (int64_t *)dst + at);
		else
			pbex_feature_floats(&step, (float *)dst + at);
		at += step.count;
	}
}

/* A direct output: the record's values straight into the row (counts were checked). */
static int fill_direct(const struct pl_plan *plan, size_t i, struct pl_worker_scratch *ws,
		       uint8_t *dst, size_t n)
{
	const struct pl_out *o = &plan->out[i];
	const struct pbex_feature *pf = &ws->ctx[o->slot];
	if (pf->kind == PBEX_KIND_NONE || n == 0)
		return 0;
	switch (o->feat->deser) {
	case MANIFEST_DESER_INT:
		if (o->dtype == MANIFEST_DTYPE_INT64) {
			pbex_feature_int64s(pf, (int64_t *)dst);
			return 0;
		}
		break;
	case MANIFEST_DESER_FLOAT:
		if (o->dtype == MANIFEST_DTYPE_FLOAT32) {
			pbex_feature_floats(pf, (float *)dst);
			return 0;
		}
		break;
	default:
		break;
	}
	struct pl_row_src s;
	int r = pl_row_source(plan, ws, i, &s);
	if (r < 0)
		return r;
	pl_convert(dst, o->dtype, s.base, s.st, n);
	return 0;
}

/*
 * Output o's values in a decoded row (as fill_flat_native takes it: heads == data for its
 * whole flat form), when they have the kind and count that direct_check wants; else NULL.
 */
static const uint8_t *native_values(const struct pl_out *o, const uint8_t *heads, uint32_t hl,
				    const uint8_t *data, uint32_t len)
{
	struct pbex_flat_values v;
	size_t off = heads == data ? 0 : hl, total = heads == data ? len : (size_t)hl + len;
	enum pbex_kind want =
		o->feat->deser == MANIFEST_DESER_INT ? PBEX_KIND_INT64 : PBEX_KIND_FLOAT;
	if (pbex_flat_get_parts(heads, hl, data, off, total, o->slot, &v) < 0 || !v.present ||
	    v.kind != want || (int64_t)v.count != o->rec_elems)
		return NULL;
	return v.values;
}

/* n bytes of one row's values into its place: one load and store where they are 8 or 4. */
static inline void copy_values(uint8_t *dst, const uint8_t *src, size_t n)
{
	if (n == 8) /* one value of 8 bytes, or two of 4 */
		memcpy(dst, src, 8);
	else if (n == 4)
		memcpy(dst, src, 4);
	else
		memcpy(dst, src, n);
}

/*
 * A decoded row from the record cache (rec->flat) of a plan whose outputs are all native: each
 * feature's values copied straight from the cache into the row, when each has the kind and
 * count that direct_check wants. The row is its flat form (data, len), or (heads set) only its
 * values, whose heads are those (hl bytes). 0 when done; 1 otherwise (the general path then
 * does the row, and says what is wrong with it).
 */
static int fill_flat_native(struct pl_bjob *job, const uint8_t *heads, uint32_t hl,
			    const uint8_t *data, uint32_t len, size_t pos)
{
	const struct pl_plan *plan = job->ax->plan;
	if (!heads) { /* the whole form */
		heads = data;
		hl = len;
	}
	for (size_t i = 0; i < plan->n_out; i++) {
		const struct pl_out *o = &plan->out[i];
		const struct pl_tlay *t = &job->lay[i];
		const uint8_t *src = native_values(o, heads, hl, data, len);
		if (!src)
			return 1;
		size_t n = (size_t)o->rec_elems * o->elem_size;
		copy_values(job->mem + t->data_off + pos * (size_t)t->row_elems * o->elem_size, src,
			    n);
	}
	return 0;
}

/*
 * A cached epoch's row of values (its heads the epoch's: every such row has the same): by
 * where the first of a batch has each output's values (ws->vplan), with no check per row. 0
 * when done; 1 to do it as any other row.
 */
static int fill_values(struct pl_bjob *job, struct pl_worker_scratch *ws, size_t row, size_t pos)
{
	const struct pl_plan *plan = job->ax->plan;
	const struct pl_crow *cr = &job->crows[row];
	if (ws->vplan_seq != job->seq + 1) {
		uint32_t hl;
		const uint8_t *heads = pl_cepoch_heads(job->cx, &hl);
		ws->vplan_seq = job->seq + 1;
		ws->vplan_len = cr->len;
		ws->vplan_ok = heads != NULL;
		for (size_t i = 0; i < plan->n_out && ws->vplan_ok; i++) {
			const struct pl_out *o = &plan->out[i];
			const uint8_t *src = native_values(o, heads, hl, cr->data, cr->len);
			ws->vplan_ok = src != NULL;
			ws->vplan[i].src = src ? (uint32_t)(src - cr->data) : 0;
			ws->vplan[i].n = (uint32_t)(o->rec_elems * (int64_t)o->elem_size);
		}
	}
	if (!ws->vplan_ok || cr->len != ws->vplan_len)
		return 1;
	for (size_t i = 0; i < plan->n_out; i++) {
		const struct pl_tlay *t = &job->lay[i];
		const struct pl_vcopy *vc = &ws->vplan[i];
		copy_values(job->mem + t->data_off +
				    pos * (size_t)t->row_elems * plan->out[i].elem_size,
			    cr->data + vc->src, vc->n);
	}
	return 0;
}

int pl_asm_fill_row(struct pl_bjob *job, struct pl_worker_scratch *ws, size_t row,
		    struct io_error *err)
{
	const struct pl_plan *plan = job->ax->plan;
	size_t pos = job->outpos[row];
	if (!job->rows && (job->crows[row].id & PL_CROW_VALUES) && plan->all_native &&
	    fill_values(job, ws, row, pos) == 0)
		return 0;
	/* a decoded row from the cache: a compact row (a cached epoch's) is one, or its values */
	const uint8_t *heads = NULL;
	uint32_t hl = 0;
	bool flat = job->rows ? job->rows[row].flat : true;
	if (job->rows)
		heads = pl_row_flat_heads(&job->rows[row], &hl);
	else if (job->crows[row].id & PL_CROW_VALUES)
		heads = pl_cepoch_heads(job->cx, &hl);
	if (flat && plan->all_native &&
	    fill_flat_native(job, heads, hl, pl_bjob_data(job, row), pl_bjob_len(job, row), pos) ==
		    0)
		return 0;
	struct pl_rec tmp;
	const struct pl_rec *rec = pl_bjob_rec(job, row, &tmp, ws);
	if (!rec) {
		io_error_set(err, "out of memory");
		return -ENOMEM;
	}
	bool win = rec->win != NULL;
	struct pl_crcur cc = { .active = false };
	int r;
	if (win) {
		r = pl_window_assemble(plan, ws, rec, err);
	} else {
		pl_crcur_begin(&cc, rec); /* the data CRC, fused with the copies below */
		if (job->feats) { /* measured: decoded and checked there already (it succeeded) */
			memcpy(ws->ctx, job->feats + row * plan->n_ctx,
			       plan->n_ctx * sizeof(*ws->ctx));
			memcpy(ws->lists, job->lists + row * plan->n_lists,
			       plan->n_lists * sizeof(*ws->lists));
			memcpy(ws->rec_dims, job->rdims + row * plan->n_out,
			       plan->n_out * sizeof(*ws->rec_dims));
			r = 0;
		} else {
			r = pl_row_decode(plan, ws, rec, false, err);
			if (r < 0)
				return crc_first(&cc, plan, rec, r, err);
			r = pl_row_shapes(plan, ws, err);
		}
	}
	for (size_t i = 0; r == 0 && i < plan->n_out; i++) {
		const struct pl_out *o = &plan->out[i];
		const struct pl_tlay *t = &job->lay[i];
		if (o->direct) {
			r = fill_direct(plan, i, ws,
					job->mem + t->data_off +
						pos * (size_t)t->row_elems * o->elem_size,
					(size_t)t->row_elems);
			continue;
		}
		if (o->img) {
			r = pl_asm_fill_image(job, ws, row, i, t, pos, err);
			continue;
		}
		/* str_direct, list_direct: independent loaders, measured (no windows) */
		if (o->str_direct) {
			fill_str_direct(t, job->mem, &ws->ctx[o->slot], pos, &cc);
			continue;
		}
		if (o->list_direct) {
			const int64_t *splits = (const int64_t *)(job->mem + t->splits_off);
			fill_list_direct(o, &ws->lists[o->slot],
					 job->mem + t->data_off +
						 (size_t)(splits[pos] * t->inner) * o->elem_size);
			continue;
		}
		struct pl_view v;
		if (win)
			pl_window_view(ws, i, &v);
		else
			r = pl_row_view(plan, ws, i, &v, err);
		if (r < 0)
			break;
		if (!o->measure) {
			/* static layout: the row must have the planned shape (or fit its padding) */
			for (unsigned d = 0; d < v.rank; d++) {
				if (o->pad ? v.shape[d] > t->shape[d + 1]
					   : v.shape[d] != t->shape[d + 1]) {
					io_error_set(err,
						     "tensor \"%s\": dimension %u is %lld, "
						     "expected "
						     "%lld",
						     o->name, d, (long long)v.shape[d],
						     (long long)t->shape[d + 1]);
					r = -EBADMSG;
					break;
				}
			}
			if (r < 0)
				break;
		}
		struct pl_row_src s;
		if (win)
			pl_window_source(plan, ws, i, &s);
		else
			r = pl_row_source(plan, ws, i, &s);
		if (r < 0)
			break;
		if (o->dtype == MANIFEST_DTYPE_STRING) {
			int64_t e0;
			const int64_t *pdims;
			if (t->kind == IPC_TENSOR_RAGGED) {
				const int64_t *splits = (const int64_t *)(job->mem + t->splits_off);
				e0 = splits[pos] * t->inner;
				pdims = v.shape;
			} else {
				e0 = (int64_t)pos * t->row_elems;
				pdims = t->shape + 1;
			}
			fill_strings(o, t, job->mem, &s, &v, pos, e0, v.rank, pdims, &cc);
			continue;
		}
		uint8_t *dst;
		int64_t stride[PL_MAX_RANK];
		if (t->kind == IPC_TENSOR_RAGGED) {
			const int64_t *splits = (const int64_t *)(job->mem + t->splits_off);
			dst = job->mem + t->data_off +
			      (size_t)(splits[pos] * t->inner) * o->elem_size;
			struct pl_view c;
			pl_view_init(&c, v.rank, v.shape);
			memcpy(stride, c.stride, sizeof(stride));
		} else {
			dst = job->mem + t->data_off + pos * (size_t)t->row_elems * o->elem_size;
			memcpy(stride, t->dst_stride, sizeof(stride));
			bool partial = false;
			for (unsigned d = 0; d < v.rank; d++)
				partial |= v.shape[d] != t->shape[d + 1];
			if (partial)
				pl_fill(dst, o->pad_elem, o->elem_size, (size_t)t->row_elems);
		}
		if (s.st == PL_SRC_SAME && view_contiguous(&v, stride)) /* raw bytes, as they are */
			pl_crcur_copy(&cc, dst + 0,
				      (const uint8_t *)s.base + v.offset * o->elem_size,
				      (size_t)pl_view_count(&v) * o->elem_size);
		else
			pl_copy_view(dst, stride, o->dtype, s.base, s.st, &v);
		if (o->box_of) /* [n, 4] rows: the first n * 4 values, contiguous */
			r = pl_asm_fill_boxes(job, ws, row, i, (float *)(void *)dst,
					      (size_t)pl_view_count(&v) / 4, err);
	}
	if (r < 0) {
		if (r != -ENOMEM && !win)
			pl_row_error_prefix(plan, rec, err);
		return crc_first(&cc, plan, rec, r, err);
	}
	return pl_crcur_end(&cc, plan, rec, err);
}
