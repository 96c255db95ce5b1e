/* SPDX-License-Identifier: Apache-2.0 */
/* One row: check and decode a record, give each output tensor's shape and source elements. */
#include "rowparse.h"

#include "cache.h"

#include "io/crc32c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GROW(ptr, cap, need) \
	((need) <= (cap) ? 0 : grow((void **)&(ptr), &(cap), (need), sizeof(*(ptr))))

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	size_t n = *cap ? *cap : 64;
	while (n < need)
		n *= 2;
	void *q = realloc(*p, n * elem);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = n;
	return 0;
}

struct pl_worker_scratch *pl_scratch_create(const struct pl_plan *plan)
{
	struct pl_worker_scratch *ws = calloc(1, sizeof(*ws));
	if (!ws)
		return NULL;
	ws->ctx = calloc(plan->n_ctx + 1, sizeof(*ws->ctx));
	ws->lists = calloc(plan->n_lists + 1, sizeof(*ws->lists));
	ws->rec_dims = calloc(plan->n_out + 1, sizeof(*ws->rec_dims));
	ws->wout = calloc(plan->n_out + 1, sizeof(*ws->wout));
	ws->vplan = calloc(plan->n_out + 1, sizeof(*ws->vplan));
	ws->n_wout = plan->n_out;
	bool img = false;
	for (size_t i = 0; i < plan->n_out; i++)
		img |= plan->out[i].img != NULL;
	if (img)
		ws->img = pl_img_work_create();
	if (!ws->ctx || !ws->lists || !ws->rec_dims || !ws->wout || !ws->vplan ||
	    (img && !ws->img)) {
		pl_scratch_destroy(ws);
		return NULL;
	}
	return ws;
}

void pl_scratch_destroy(struct pl_worker_scratch *ws)
{
	if (!ws)
		return;
	free(ws->ctx);
	free(ws->lists);
	free(ws->rec_dims);
	free(ws->buf);
	free(ws->whole);
	free(ws->vplan);
	free(ws->strs);
	free(ws->idx);
	if (ws->wout)
		for (size_t i = 0; i < ws->n_wout; i++) {
			free(ws->wout[i].buf);
			free(ws->wout[i].strs);
		}
	free(ws->wout);
	pl_img_work_destroy(ws->img);
	free(ws);
}

static void shape_text(const int64_t *d, unsigned rank, char *buf, size_t cap)
{
	size_t o = 0;
	buf[0] = 0;
	o += (size_t)snprintf(buf, cap, "[");
	for (unsigned i = 0; i < rank && o < cap; i++)
		o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)d[i]);
	if (o < cap)
		snprintf(buf + o, cap - o, "]");
}

/* "PATH: record N at offset O: " in front of err's message. */
void pl_row_error_prefix(const struct pl_plan *plan, const struct pl_rec *rec, struct io_error *err)
{
	io_error_prefix(err, "%s: record %llu at %soffset %llu: ", plan->ds->files[rec->file].path,
			(unsigned long long)rec->index, rec->decompressed ? "decompressed " : "",
			(unsigned long long)rec->offset);
}

static int crc_error(const struct pl_plan *plan, const struct pl_rec *rec, struct io_error *err)
{
	struct tfr_record tr = {
		.data = rec->data,
		.len = rec->len,
		.offset = rec->offset,
		.index = rec->index,
		.decompressed = rec->decompressed,
		.crc_checked = false,
	};
	return tfr_record_verify(&tr, plan->ds->files[rec->file].path, err);
}

int pl_row_check_crc(const struct pl_plan *plan, const struct pl_rec *rec)
{
	return rec->crc_checked ? 0 : crc_error(plan, rec, NULL);
}

void pl_crcur_begin(struct pl_crcur *c, const struct pl_rec *rec)
{
	c->rec = rec->data;
	c->len = rec->len;
	c->pos = 0;
	c->crc = 0;
	c->active = !rec->crc_checked;
}

void pl_crcur_copy(struct pl_crcur *c, void *dst, const void *src, size_t len)
{
	const uint8_t *p = src;
	if (!c->active || p < c->rec + c->pos || p + len > c->rec + c->len) {
		memcpy(dst, src, len);
		return;
	}
	size_t at = (size_t)(p - c->rec);
	c->crc = crc32c_extend(c->crc, c->rec + c->pos, at - c->pos);
	c->crc = crc32c_copy(c->crc, dst, p, len);
	c->pos = at + len;
}

int pl_crcur_end(struct pl_crcur *c, const struct pl_plan *plan, const struct pl_rec *rec,
		 struct io_error *err)
{
	if (!c->active)
		return 0;
	c->crc = crc32c_extend(c->crc, c->rec + c->pos, c->len - c->pos);
	c->active = false;
	if (crc32c_mask(c->crc) == tfr_record_stored_crc(rec->data, rec->len))
		return 0;
	int r = crc_error(plan, rec, err); /* its message */
	return r < 0 ? r : -EBADMSG;
}

const uint8_t *pl_row_flat_heads(const struct pl_rec *rec, uint32_t *ret_len)
{
	*ret_len = 0;
	if (!rec->values || !rec->blk || !rec->blk->cached)
		return NULL;
	return pl_cache_entry_heads(rec->blk->owner, ret_len);
}

int pl_row_decode(const struct pl_plan *plan, struct pl_worker_scratch *ws,
		  const struct pl_rec *rec, bool check_crc, struct io_error *err)
{
	int r;
	if (check_crc && !rec->crc_checked) {
		r = crc_error(plan, rec, err);
		if (r < 0)
			return r; /* the message names the file, record and offset */
	}
	if (rec->flat) {
		uint32_t hl;
		const uint8_t *h = pl_row_flat_heads(rec, &hl);
		r = h ? pbex_flat_view_parts(h, hl, rec->data, hl, (size_t)hl + rec->len,
					     plan->n_ctx, ws->ctx)
		      : pbex_flat_view(rec->data, rec->len, plan->n_ctx, ws->ctx);
		if (r < 0)
			io_error_set(err, "a record in the record cache is damaged (sluice's bug)");
	} else if (plan->sequence_example)
		r = pbex_decode_sequence_example(plan->ctx, plan->lists, rec->data, rec->len,
						 ws->ctx, ws->lists, err);
	else
		r = pbex_decode_example(plan->ctx, rec->data, rec->len, ws->ctx, err);
	if (r < 0) {
		pl_row_error_prefix(plan, rec, err);
		return r;
	}
	/* a feature missing or without values takes its default: the record's view from then on */
	for (size_t k = 0; plan->any_dflt && k < plan->n_ctx; k++) {
		const struct pbex_feature *pf = &ws->ctx[k];
		if (plan->dflt[k].present && (pf->kind == PBEX_KIND_NONE || pf->count == 0))
			ws->ctx[k] = plan->dflt[k];
	}
	return 0;
}

static enum pbex_kind want_kind(enum manifest_deser d)
{
	switch (d) {
	case MANIFEST_DESER_INT:
		return PBEX_KIND_INT64;
	case MANIFEST_DESER_FLOAT:
		return PBEX_KIND_FLOAT;
	default:
		return PBEX_KIND_BYTES;
	}
}

static int check_kind(const struct pl_out *o, const struct pbex_feature *f, const char *where,
		      struct io_error *err)
{
	enum pbex_kind want = want_kind(o->feat->deser);
	if (__builtin_expect(f->kind != PBEX_KIND_NONE && f->kind != want, 0)) {
		io_error_set(err, "feature \"%s\"%s: expected %s (deserialize_type %s), got %s",
			     o->feat->name, where, pbex_kind_name(want),
			     manifest_deser_name(o->feat->deser), pbex_kind_name(f->kind));
		return -EBADMSG;
	}
	return 0;
}

/*
 * A raw bytes value of len bytes as elements of the feature's shape, with its -1 inferred.
 * Writes the inferred size to *inferred (or leaves it when there is no -1).
 */
static int raw_value_dims(const struct pl_out *o, size_t len, int64_t *inferred, const char *where,
			  struct io_error *err)
{
	const struct manifest_feature *f = o->feat;
	size_t es = o->elem_size ? o->elem_size : 1;
	if (len % es) {
		io_error_set(err,
			     "feature \"%s\"%s: %zu raw bytes are not a whole number of %s (%zu "
			     "bytes each)",
			     f->name, where, len, manifest_dtype_name(f->dtype), es);
		return -EBADMSG;
	}
	int64_t elems = (int64_t)(len / es), known = 1;
	bool hole = false;
	for (unsigned d = 0; d < f->rank; d++) {
		if (f->shape[d] < 0)
			hole = true;
		else
			known *= f->shape[d];
	}
	char sh[96];
	shape_text(f->shape, f->rank, sh, sizeof(sh));
	if (!hole) {
		if (elems != known) {
			io_error_set(err,
				     "feature \"%s\"%s: %lld raw elements do not fit shape %s "
				     "(%lld)",
				     f->name, where, (long long)elems, sh, (long long)known);
			return -EBADMSG;
		}
		return 0;
	}
	int64_t dim = known ? elems / known : 0;
	if ((known && elems % known) || (!known && elems)) {
		io_error_set(err, "feature \"%s\"%s: %lld raw elements do not fit shape %s",
			     f->name, where, (long long)elems, sh);
		return -EBADMSG;
	}
	if (*inferred >= 0 && *inferred != dim) {
		io_error_set(err,
			     "feature \"%s\"%s: raw values of different sizes (%lld and %lld "
			     "for the -1 of shape %s)",
			     f->name, where, (long long)*inferred, (long long)dim, sh);
		return -EBADMSG;
	}
	*inferred = dim;
	return 0;
}

/* The raw feature's record shape with its -1 (at shape index hole) replaced. */
static void raw_fill_hole(const struct pl_out *o, int64_t *dims, int64_t inferred)
{
	const struct manifest_feature *f = o->feat;
	unsigned lead = o->rec_rank - f->rank;
	for (unsigned d = 0; d < f->rank; d++)
		if (f->shape[d] < 0)
			dims[lead + d] = inferred;
}

/* A context/Example feature: check it and give its record dims. */
static int fixed_dims(const struct pl_out *o, const struct pbex_feature *pf, int64_t *dims,
		      struct io_error *err)
{
	const struct manifest_feature *f = o->feat;
	if (!pf->present && !o->var_count) {
		io_error_set(err, "feature \"%s\" is missing (and has no default)", f->name);
		return -EBADMSG;
	}
	int r = check_kind(o, pf, "", err);
	if (r < 0)
		return r;
	uint32_t count = pf->kind == PBEX_KIND_NONE ? 0 : pf->count;
	if (o->var_count) { /* any number of rows of step_elems values; missing: none */
		if (count % (uint64_t)o->step_elems) {
			char sh[96];
			shape_text(dims, o->rec_rank, sh, sizeof(sh));
			io_error_set(err,
				     "feature \"%s\": %u values are not a whole number of rows of "
				     "%lld (shape %s)",
				     f->name, count, (long long)o->step_elems, sh);
			return -EBADMSG;
		}
		dims[0] = count / o->step_elems;
		return 0;
	}
	if (f->deser == MANIFEST_DESER_RAW) {
		int64_t want = f->raw_len > 1 ? f->raw_len : 1;
		if (count != want) {
			io_error_set(err, "feature \"%s\": expected %lld raw byte string%s, got %u",
				     f->name, (long long)want, want == 1 ? "" : "s", count);
			return -EBADMSG;
		}
		int64_t inferred = -1;
		struct pbex_bytes_iter it;
		const uint8_t *p;
		size_t len;
		pbex_bytes_iter_init(&it, pf);
		while (pbex_bytes_iter_next(&it, &p, &len)) {
			r = raw_value_dims(o, len, &inferred, "", err);
			if (r < 0)
				return r;
		}
		raw_fill_hole(o, dims, inferred);
		return 0;
	}
	int64_t want = 1;
	for (unsigned d = 0; d < o->rec_rank; d++)
		want *= dims[d];
	if ((int64_t)count != want) {
		char sh[96];
		shape_text(dims, o->rec_rank, sh, sizeof(sh));
		io_error_set(err, "feature \"%s\": expected %lld values (shape %s), got %u",
			     f->name, (long long)want, sh, count);
		return -EBADMSG;
	}
	return 0;
}

/* A feature list (var_len): check every step and give the record dims [steps, ...]. */
static int list_dims(const struct pl_out *o, const struct pbex_feature_list *pl, int64_t *dims,
		     struct io_error *err)
{
	const struct manifest_feature *f = o->feat;
	uint32_t steps = pl->present ? pl->count : 0;
	dims[0] = steps;
	if (!steps)
		return 0;
	struct pbex_list_iter it;
	struct pbex_feature step;
	int64_t inferred = -1;
	uint32_t k = 0;
	char where[48] = "";
	pbex_list_iter_init(&it, pl);
	while (pbex_list_iter_next(&it, &step)) {
		int r = check_kind(o, &step, "", NULL);
		if (r < 0) {
			snprintf(where, sizeof(where), " step %u", k);
			return check_kind(o, &step, where, err);
		}
		uint32_t count = step.kind == PBEX_KIND_NONE ? 0 : step.count;
		if (f->deser == MANIFEST_DESER_RAW) {
			snprintf(where, sizeof(where), " step %u", k);
			if (count != 1) {
				io_error_set(err,
					     "feature \"%s\"%s: expected 1 raw byte string, got %u",
					     f->name, where, count);
				return -EBADMSG;
			}
			struct pbex_bytes_iter bi;
			const uint8_t *p;
			size_t len;
			pbex_bytes_iter_init(&bi, &step);
			while (pbex_bytes_iter_next(&bi, &p, &len)) {
				r = raw_value_dims(o, len, &inferred, where, err);
				if (r < 0)
					return r;
			}
		} else if ((int64_t)count != o->step_elems) {
			io_error_set(err,
				     "feature \"%s\" step %u: expected %lld values per step, got "
				     "%u",
				     f->name, k, (long long)o->step_elems, count);
			return -EBADMSG;
		}
		k++;
	}
	if (f->deser == MANIFEST_DESER_RAW)
		raw_fill_hole(o, dims, inferred);
	return 0;
}

static int apply_steps(const struct pl_out *o, struct pl_view *v, struct io_error *err)
{
	for (size_t i = 0; i < o->n_steps; i++) {
		unsigned axis = 0;
		int64_t size = 0;
		const struct pl_out_step *st = &o->steps[i];
		unsigned rank = v->rank;
		int64_t shape[PL_MAX_RANK];
		memcpy(shape, v->shape, sizeof(shape));
		int r = pl_view_slice(v, st->dims, st->n_dims, &axis);
		if (r < 0) {
			char sh[96];
			shape_text(shape, rank, sh, sizeof(sh));
			if (axis < rank)
				size = shape[axis];
			io_error_set(err,
				     "tensor \"%s\": slice %s: index out of range for axis %u of "
				     "size %lld (shape %s)",
				     o->name, st->text, axis, (long long)size, sh);
			return -EBADMSG;
		}
	}
	return 0;
}

/* A direct output (fixed shape, int/float, an Example): present, the right kind and count. */
static int direct_check(const struct pl_out *o, const struct pbex_feature *pf, struct io_error *err)
{
	if (__builtin_expect(pf->present && pf->kind == want_kind(o->feat->deser) &&
				     (int64_t)pf->count == o->rec_elems,
			     1))
		return 0;
	int64_t dims[PL_MAX_RANK];
	memcpy(dims, o->rec_shape, sizeof(dims));
	return fixed_dims(o, pf, dims, err); /* the general check, for its message */
}

int pl_row_shapes(const struct pl_plan *plan, struct pl_worker_scratch *ws, struct io_error *err)
{
	for (size_t i = 0; i < plan->n_out; i++) {
		const struct pl_out *o = &plan->out[i];
		int64_t *dims = ws->rec_dims[i];
		int r;
		if (o->direct) { /* its dims are its static record shape: nothing to note */
			r = direct_check(o, &ws->ctx[o->slot], err);
			if (r < 0)
				return r;
			continue;
		}
		if (o->src == PL_OUT_CONST) {
			const struct pl_out *from =
				o->shape_from >= 0 ? &plan->out[o->shape_from] : NULL;
			if (from)
				memcpy(dims,
				       from->direct ? from->rec_shape : ws->rec_dims[o->shape_from],
				       sizeof(ws->rec_dims[0]));
			else
				memcpy(dims, o->c_shape, sizeof(ws->rec_dims[0]));
			continue;
		}
		memcpy(dims, o->rec_shape, sizeof(ws->rec_dims[0]));
		if (o->in_lists)
			r = list_dims(o, &ws->lists[o->slot], dims, err);
		else
			r = fixed_dims(o, &ws->ctx[o->slot], dims, err);
		if (r < 0)
			return r;
	}
	return 0;
}

int pl_row_view(const struct pl_plan *plan, struct pl_worker_scratch *ws, size_t i,
		struct pl_view *ret_view, struct io_error *err)
{
	const struct pl_out *o = &plan->out[i];
	unsigned rank = o->src == PL_OUT_CONST ? o->c_rank : o->rec_rank;
	pl_view_init(ret_view, rank, o->direct ? o->rec_shape : ws->rec_dims[i]);
	if (o->src == PL_OUT_CONST) /* one element, repeated */
		for (unsigned d = 0; d < rank; d++)
			ret_view->stride[d] = 0;
	return apply_steps(o, ret_view, err);
}

static bool host_big_endian(void)
{
	return __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__;
}

int pl_row_source(const struct pl_plan *plan, struct pl_worker_scratch *ws, size_t i,
		  struct pl_row_src *ret)
{
	const struct pl_out *o = &plan->out[i];
	const int64_t *dims = o->direct ? o->rec_shape : ws->rec_dims[i];
	ret->strs = NULL;
	if (o->src == PL_OUT_CONST) {
		ret->st = PL_SRC_SAME;
		ret->base = o->c_elem;
		ret->const_str = true;
		return 0;
	}
	ret->const_str = false;
	int64_t n = 1;
	for (unsigned d = 0; d < o->rec_rank; d++)
		n *= dims[d];
	const struct manifest_feature *f = o->feat;
	const struct pbex_feature *pf = o->in_lists ? NULL : &ws->ctx[o->slot];
	struct pbex_list_iter li;
	struct pbex_feature step;
	if (o->in_lists)
		pl_list_iter_begin(&li, &ws->lists[o->slot]);
	switch (f->deser) {
	case MANIFEST_DESER_INT:
	case MANIFEST_DESER_FLOAT: {
		bool ints = f->deser == MANIFEST_DESER_INT;
		size_t es = ints ? 8 : 4;
		if (GROW(ws->buf, ws->buf_cap, (size_t)n * es + 8) < 0)
			return -ENOMEM;
		ret->st = ints ? PL_SRC_INT64 : PL_SRC_FLOAT32;
		ret->base = ws->buf;
		if (!o->in_lists) {
			if (pf->kind != PBEX_KIND_NONE && pf->count) {
				if (ints)
					pbex_feature_int64s(pf, (int64_t *)ws->buf);
				else
					pbex_feature_floats(pf, (float *)ws->buf);
			}
			return 0;
		}
		size_t at = 0;
		while (pbex_list_iter_next(&li, &step)) {
			if (step.kind != PBEX_KIND_NONE && step.count) {
				if (ints)
					pbex_feature_int64s(&step, (int64_t *)ws->buf + at);
				else
					pbex_feature_floats(&step, (float *)ws->buf + at);
			}
			at += step.kind == PBEX_KIND_NONE ? 0 : step.count;
		}
		return 0;
	}
	case MANIFEST_DESER_RAW: {
		ret->st = host_big_endian() == f->raw_big_endian || o->elem_size <= 1 ? PL_SRC_SAME
										      : PL_SRC_SWAP;
		struct pbex_bytes_iter it;
		const uint8_t *p;
		size_t len;
		if (!o->in_lists && pf->count == 1) { /* in place: no copy */
			pbex_bytes_iter_init(&it, pf);
			pbex_bytes_iter_next(&it, &p, &len);
			ret->base = p;
			return 0;
		}
		size_t es = o->elem_size ? o->elem_size : 1;
		if (GROW(ws->buf, ws->buf_cap, (size_t)n * es + 8) < 0)
			return -ENOMEM;
		size_t at = 0;
		if (!o->in_lists) {
			pbex_bytes_iter_init(&it, pf);
			while (pbex_bytes_iter_next(&it, &p, &len)) {
				memcpy(ws->buf + at, p, len);
				at += len;
			}
		} else {
			while (pbex_list_iter_next(&li, &step)) {
				pbex_bytes_iter_init(&it, &step);
				while (pbex_bytes_iter_next(&it, &p, &len)) {
					memcpy(ws->buf + at, p, len);
					at += len;
				}
			}
		}
		ret->base = ws->buf;
		return 0;
	}
	case MANIFEST_DESER_STRING: {
		if (GROW(ws->strs, ws->strs_cap, (size_t)n + 1) < 0)
			return -ENOMEM;
		size_t at = 0;
		struct pbex_bytes_iter it;
		const uint8_t *p;
		size_t len;
		if (!o->in_lists) {
			if (pf->kind != PBEX_KIND_NONE) {
				pbex_bytes_iter_init(&it, pf);
				while (pbex_bytes_iter_next(&it, &p, &len))
					ws->strs[at++] = (struct pl_strref){ p, len };
			}
		} else {
			while (pbex_list_iter_next(&li, &step)) {
				if (step.kind == PBEX_KIND_NONE)
					continue;
				pbex_bytes_iter_init(&it, &step);
				while (pbex_bytes_iter_next(&it, &p, &len))
					ws->strs[at++] = (struct pl_strref){ p, len };
			}
		}
		ret->strs = ws->strs;
		ret->base = NULL;
		ret->st = PL_SRC_SAME;
		return 0;
	}
	}
	return -EINVAL;
}

void pl_list_iter_begin(struct pbex_list_iter *it, const struct pbex_feature_list *l)
{
	static const struct pbex_feature_list empty = { 0 };
	pbex_list_iter_init(it, l->present ? l : &empty);
}

int pl_row_string_bytes(const struct pl_out *o, const struct pl_row_src *s, const struct pl_view *v,
			struct pl_worker_scratch *ws, uint64_t *ret_bytes)
{
	int64_t n = pl_view_count(v);
	if (s->const_str) {
		*ret_bytes = (uint64_t)n * o->c_str_len;
		return 0;
	}
	if (GROW(ws->idx, ws->idx_cap, (size_t)n + 1) < 0)
		return -ENOMEM;
	pl_view_indices(v, ws->idx);
	uint64_t total = 0;
	for (int64_t j = 0; j < n; j++)
		total += s->strs[ws->idx[j]].len;
	*ret_bytes = total;
	return 0;
}

/* Append the steps [a, b) of output i's row (view v, elements s) to the window's tensor i. */
static int window_append(const struct pl_out *o, struct pl_worker_scratch *ws, size_t i,
			 const struct pl_row_src *s, struct pl_view v, int64_t a, int64_t b)
{
	struct pl_wout *w = &ws->wout[i];
	v.offset += a * v.stride[0];
	v.shape[0] = b - a;
	int64_t n = pl_view_count(&v);
	if (o->dtype == MANIFEST_DTYPE_STRING) {
		if (GROW(w->strs, w->strs_cap, (size_t)(w->count + n) + 1) < 0 ||
		    GROW(ws->idx, ws->idx_cap, (size_t)n + 1) < 0)
			return -ENOMEM;
		pl_view_indices(&v, ws->idx);
		for (int64_t j = 0; j < n; j++)
			w->strs[w->count + j] =
				s->const_str ? (struct pl_strref){ (const uint8_t *)o->c_str,
								   o->c_str_len }
					     : s->strs[ws->idx[j]];
	} else {
		size_t es = o->elem_size;
		if (GROW(w->buf, w->cap, (size_t)(w->count + n) * es + 8) < 0)
			return -ENOMEM;
		struct pl_view c;
		pl_view_init(&c, v.rank, v.shape);
		pl_copy_view(w->buf + (size_t)w->count * es, c.stride, o->dtype, s->base, s->st,
			     &v);
	}
	w->count += n;
	w->dims[0] += b - a;
	return 0;
}

int pl_window_assemble(const struct pl_plan *plan, struct pl_worker_scratch *ws,
		       const struct pl_rec *win, struct io_error *err)
{
	bool cont = win->win_len >= 0;
	int64_t skip = win->win_skip, left = win->win_len;
	for (size_t i = 0; i < plan->n_out; i++) {
		ws->wout[i].count = 0;
		ws->wout[i].rank = 0;
		ws->wout[i].dims[0] = 0;
	}
	for (uint32_t k = 0; k < win->n_win; k++) {
		const struct pl_rec *rec = &win->win[k];
		int r = pl_row_decode(plan, ws, rec, true, err);
		if (r == 0)
			r = pl_row_shapes(plan, ws, err);
		int64_t used = 0;
		for (size_t i = 0; r == 0 && i < plan->n_out; i++) {
			const struct pl_out *o = &plan->out[i];
			struct pl_wout *w = &ws->wout[i];
			struct pl_view v;
			r = pl_row_view(plan, ws, i, &v, err);
			if (r < 0)
				break;
			if (w->rank == 0 && k == 0) {
				w->rank = v.rank;
				memcpy(w->dims + 1, v.shape + 1,
				       (PL_MAX_RANK - 1) * sizeof(int64_t));
			} else if (memcmp(w->dims + 1, v.shape + 1,
					  (v.rank - 1) * sizeof(int64_t))) {
				char a[96], b[96];
				shape_text(w->dims + 1, w->rank - 1, a, sizeof(a));
				shape_text(v.shape + 1, v.rank - 1, b, sizeof(b));
				io_error_set(err,
					     "tensor \"%s\": records of one window differ after "
					     "axis 0 "
					     "(%s here, %s in the window's first record)",
					     o->name, b, a);
				r = -EBADMSG;
				break;
			}
			struct pl_row_src s;
			r = pl_row_source(plan, ws, i, &s);
			if (r < 0)
				break;
			int64_t a = 0, e = v.shape[0];
			if (cont) {
				a = k == 0 ? skip : 0;
				if (a > e)
					a = e;
				e = a + left < e ? a + left : e;
				used = e - a;
			}
			r = window_append(o, ws, i, &s, v, a, e);
		}
		if (r < 0) {
			if (r != -ENOMEM)
				pl_row_error_prefix(plan, rec, err);
			return r;
		}
		if (cont)
			left -= used;
	}
	return 0;
}

void pl_window_view(const struct pl_worker_scratch *ws, size_t i, struct pl_view *ret_view)
{
	const struct pl_wout *w = &ws->wout[i];
	pl_view_init(ret_view, w->rank, w->dims);
}

void pl_window_source(const struct pl_plan *plan, const struct pl_worker_scratch *ws, size_t i,
		      struct pl_row_src *ret)
{
	const struct pl_wout *w = &ws->wout[i];
	ret->st = PL_SRC_SAME;
	ret->base = w->buf;
	ret->strs = w->strs;
	ret->const_str = false;
}

int pl_row_image_bytes(const struct pl_plan *plan, struct pl_worker_scratch *ws, size_t i,
		       const uint8_t **ret_p, size_t *ret_len, struct io_error *err)
{
	struct pl_view v;
	int r = pl_row_view(plan, ws, i, &v, err);
	if (r < 0)
		return r;
	int64_t n = pl_view_count(&v);
	if (n != 1) {
		io_error_set(err, "tensor \"%s\": decode_image needs one encoded image, got %lld",
			     plan->out[i].name, (long long)n);
		return -EBADMSG;
	}
	struct pl_row_src s;
	r = pl_row_source(plan, ws, i, &s);
	if (r < 0)
		return r;
	*ret_p = s.strs[v.offset].p;
	*ret_len = s.strs[v.offset].len;
	return 0;
}
