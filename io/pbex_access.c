/* SPDX-License-Identifier: Apache-2.0 */
/* tf.train.Example decoder: the accessors that read the values of decoded features. */
#include "pbex.h"

#include <assert.h>
#include <string.h>

#include "pbex_internal.h"

/*
 * A walk over the value fields of a decoded feature, in order: the *List fields of its kind
 * from start_ to end_ (inside one Feature message), then the Feature messages that follow in
 * the map entry (field 2) up to src_len_. Everything was validated by the decode, so the walk
 * does not check; a failure here is our bug.
 */
struct vwalk {
	const uint8_t *s;
	uint32_t slen;
	/* in the current Feature; fpos == fend: continue in the entry at fend */
	uint32_t fpos, fend;
	uint32_t lpos, lend; /* in the current *List */
	enum pbex_kind kind;
};

static const struct dctx quiet = { .rec = NULL };

/* A step of a walk over validated bytes: it cannot fail, a failure is our bug. */
#define MUST(call)                     \
	do {                           \
		int must_rc_ = (call); \
		assert(must_rc_ == 0); \
		(void)must_rc_;        \
	} while (0)

static void vwalk_init(struct vwalk *w, const struct pbex_feature *f)
{
	w->s = f->src_;
	w->slen = f->src_len_;
	w->fpos = f->start_;
	w->fend = f->end_;
	w->lpos = 0;
	w->lend = 0;
	w->kind = f->kind;
}

static void skip_quiet(const uint8_t **pp, const uint8_t *end, uint32_t field, unsigned wt)
{
	MUST(pbex_skip_field(&quiet, pp, end, *pp, field, wt, 0));
}

/* Next value field of the walk: its wire type and payload (for WT_LEN) or value start. */
static bool vwalk_next(struct vwalk *w, unsigned *ret_wt, const uint8_t **ret_p, uint32_t *ret_len)
{
	const uint8_t *s = w->s, *p, *end;
	uint32_t f = 0, l = 0; /* set by the MUST() calls */
	unsigned wt = 0;

	for (;;) {
		if (w->lpos < w->lend) {
			p = s + w->lpos;
			end = s + w->lend;
			MUST(get_tag(&quiet, &p, end, &f, &wt));
			if (f == 1 &&
			    (wt == WT_LEN || (w->kind == PBEX_KIND_INT64 && wt == WT_VARINT) ||
			     (w->kind == PBEX_KIND_FLOAT && wt == WT_I32))) {
				if (wt == WT_LEN) {
					MUST(get_len(&quiet, &p, end, p, &l));
					*ret_p = p;
					*ret_len = l;
					p += l;
				} else {
					const uint8_t *v = p;

					skip_quiet(&p, end, f, wt);
					*ret_p = v;
					*ret_len = (uint32_t)(p - v);
				}
				*ret_wt = wt;
				w->lpos = (uint32_t)(p - s);
				return true;
			}
			skip_quiet(&p, end, f, wt);
			w->lpos = (uint32_t)(p - s);
			continue;
		}
		if (w->fpos < w->fend) {
			p = s + w->fpos;
			end = s + w->fend;
			MUST(get_tag(&quiet, &p, end, &f, &wt));
			if (f == (uint32_t)w->kind && wt == WT_LEN) {
				MUST(get_len(&quiet, &p, end, p, &l));
				w->lpos = (uint32_t)(p - s);
				w->lend = w->lpos + l;
				p += l;
			} else {
				skip_quiet(&p, end, f, wt);
			}
			w->fpos = (uint32_t)(p - s);
			continue;
		}
		if (w->fend < w->slen) {
			p = s + w->fend;
			end = s + w->slen;
			MUST(get_tag(&quiet, &p, end, &f, &wt));
			if (f == 2 && wt == WT_LEN) {
				MUST(get_len(&quiet, &p, end, p, &l));
				w->fpos = (uint32_t)(p - s);
				w->fend = w->fpos + l;
			} else {
				skip_quiet(&p, end, f, wt);
				w->fpos = w->fend = (uint32_t)(p - s);
			}
			continue;
		}
		return false;
	}
}

/* Decode a validated packed run of varints. */
static inline size_t unpack_varints(const uint8_t *p, const uint8_t *end, int64_t *out)
{
	size_t i = 0;

	while (p < end) {
		uint64_t v = *p++;

		if (v >= 0x80) {
			unsigned shift = 7;
			uint8_t b;

			v &= 0x7f;
			do {
				b = *p++;
				v |= (uint64_t)(b & 0x7f) << shift;
				shift += 7;
			} while (b & 0x80);
		}
		out[i++] = (int64_t)v;
	}
	return i;
}

void pbex_feature_int64s(const struct pbex_feature *f, int64_t *out)
{
	struct vwalk w;
	const uint8_t *p;
	uint32_t l;
	unsigned wt;
	size_t n = 0;

	assert(f->kind == PBEX_KIND_INT64 || f->count == 0);
	if (f->count == 0)
		return;
	if (f->flags_ & PBEX_F_FLAT) {
		memcpy(out, f->src_ + f->start_, (size_t)f->count * 8);
		return;
	}
	if (f->flags_ & PBEX_F_PACKED_RUN) {
		n = unpack_varints(f->src_ + f->start_, f->src_ + f->end_, out);
		assert(n == f->count);
		return;
	}
	vwalk_init(&w, f);
	while (vwalk_next(&w, &wt, &p, &l))
		n += unpack_varints(p, p + l, out + n);
	assert(n == f->count);
}

static inline float load_f32(const uint8_t *p)
{
	uint32_t u =
		(uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	float v;

	memcpy(&v, &u, 4);
	return v;
}

static inline void copy_floats(const uint8_t *p, uint32_t bytes, float *out)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	memcpy(out, p, bytes);
#else
	for (uint32_t i = 0; i < bytes / 4; i++)
		out[i] = load_f32(p + 4 * i);
#endif
}

void pbex_feature_floats(const struct pbex_feature *f, float *out)
{
	struct vwalk w;
	const uint8_t *p;
	uint32_t l;
	unsigned wt;
	size_t n = 0;

	assert(f->kind == PBEX_KIND_FLOAT || f->count == 0);
	if (f->count == 0)
		return;
	if (f->flags_ & PBEX_F_FLAT) {
		memcpy(out, f->src_ + f->start_, (size_t)f->count * 4);
		return;
	}
	if (f->flags_ & PBEX_F_PACKED_RUN) {
		copy_floats(f->src_ + f->start_, f->end_ - f->start_, out);
		return;
	}
	vwalk_init(&w, f);
	while (vwalk_next(&w, &wt, &p, &l)) {
		if (wt == WT_I32) {
			out[n++] = load_f32(p);
		} else {
			copy_floats(p, l, out + n);
			n += l / 4;
		}
	}
	assert(n == f->count);
}

void pbex_bytes_iter_init(struct pbex_bytes_iter *it, const struct pbex_feature *f)
{
	it->f_ = f;
	if (f->flags_ & PBEX_F_FLAT) { /* pos_: the next value's index, where its bytes are */
		it->pos_[0] = 0;
		it->pos_[1] = f->start_ + f->count * 4;
		it->pos_[2] = it->pos_[3] = 0;
		return;
	}
	/* pos_: the vwalk's fpos, fend, lpos, lend */
	it->pos_[0] = f->start_;
	it->pos_[1] = f->end_;
	it->pos_[2] = 0;
	it->pos_[3] = 0;
}

bool pbex_bytes_iter_next(struct pbex_bytes_iter *it, const uint8_t **ret_data, size_t *ret_len)
{
	const struct pbex_feature *f = it->f_;
	struct vwalk w;
	const uint8_t *p;
	uint32_t l;
	unsigned wt;

	if (f->kind != PBEX_KIND_BYTES || f->count == 0)
		return false;
	if (f->flags_ & PBEX_F_FLAT) {
		if (it->pos_[0] >= f->count)
			return false;
		uint32_t vlen;
		memcpy(&vlen, f->src_ + f->start_ + 4 * it->pos_[0]++, 4);
		*ret_data = f->src_ + it->pos_[1];
		*ret_len = vlen;
		it->pos_[1] += vlen;
		return true;
	}
	w.s = f->src_;
	w.slen = f->src_len_;
	w.fpos = it->pos_[0];
	w.fend = it->pos_[1];
	w.lpos = it->pos_[2];
	w.lend = it->pos_[3];
	w.kind = PBEX_KIND_BYTES;
	if (!vwalk_next(&w, &wt, &p, &l))
		return false;
	it->pos_[0] = w.fpos;
	it->pos_[1] = w.fend;
	it->pos_[2] = w.lpos;
	it->pos_[3] = w.lend;
	*ret_data = p;
	*ret_len = l;
	return true;
}

void pbex_list_iter_init(struct pbex_list_iter *it, const struct pbex_feature_list *l)
{
	it->l_ = l;
	/* pos_[0]: next field of the entry; pos_[1], pos_[2]: in the current FeatureList */
	it->pos_[0] = l->start_;
	it->pos_[1] = 0;
	it->pos_[2] = 0;
	it->pos_[3] = 0;
}

bool pbex_list_iter_next(struct pbex_list_iter *it, struct pbex_feature *ret_step)
{
	const struct pbex_feature_list *fl = it->l_;
	const uint8_t *s = fl->src_, *p, *end;
	struct fscan fs;
	struct dctx c;
	uint32_t f = 0, l = 0; /* set by the MUST() calls */
	unsigned wt = 0;

	if (!fl->present)
		return false;
	for (;;) {
		if (it->pos_[1] < it->pos_[2]) {
			p = s + it->pos_[1];
			end = s + it->pos_[2];
			MUST(get_tag(&quiet, &p, end, &f, &wt));
			if (f == 1 && wt == WT_LEN) {
				MUST(get_len(&quiet, &p, end, p, &l));
				it->pos_[1] = (uint32_t)(p + l - s);
				if (pbex_fast_feature(p, p, p + l, ret_step))
					return true;
				/* the step was validated by the decode: this scan only measures */
				dctx_init(&c, s, NULL, NULL);
				fscan_init(&fs, p);
				MUST(pbex_scan_feature(&c, &fs, p, p + l, D_FL_FEATURE));
				/* a step is one Feature: its end_ is its end, nothing follows */
				fscan_to_feature(&fs, l, ret_step);
				return true;
			}
			skip_quiet(&p, end, f, wt);
			it->pos_[1] = (uint32_t)(p - s);
			continue;
		}
		if (it->pos_[0] < fl->src_len_) {
			p = s + it->pos_[0];
			end = s + fl->src_len_;
			MUST(get_tag(&quiet, &p, end, &f, &wt));
			if (f == 2 && wt == WT_LEN) {
				MUST(get_len(&quiet, &p, end, p, &l));
				it->pos_[1] = (uint32_t)(p - s);
				it->pos_[2] = it->pos_[1] + l;
				p += l;
			} else {
				skip_quiet(&p, end, f, wt);
			}
			it->pos_[0] = (uint32_t)(p - s);
			continue;
		}
		return false;
	}
}
