/* SPDX-License-Identifier: Apache-2.0 */
/* tf.train.Example / SequenceExample encoder: packed lists, as TensorFlow writes them. */
#include "pbex.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/*
 * The record is built in e->buf, which the encoder owns (freed by pbex_enc_fini). A message
 * whose size is not known when it starts (Example.features, SequenceExample.context and
 * .feature_lists, a feature list's map entry and its FeatureList) is opened with 5 bytes kept
 * for its length; closing it writes the length and moves the content down over the unused
 * bytes. Features and steps have sizes known up front and are written in one go.
 */

#define ENC_MAX_OPEN 4

static void enc_fail(struct pbex_enc *e, int err)
{
	if (!e->failed_) {
		e->failed_ = true;
		e->err_ = err;
	}
}

static size_t varint_size(uint64_t v)
{
	size_t n = 1;

	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

static bool reserve(struct pbex_enc *e, size_t extra)
{
	size_t cap;
	uint8_t *nb;

	if (e->failed_)
		return false;
	if (extra <= e->cap - e->len)
		return true;
	if (extra > SIZE_MAX / 2 - e->len) {
		enc_fail(e, -ENOMEM);
		return false;
	}
	cap = e->cap ? e->cap : 256;
	while (cap - e->len < extra)
		cap *= 2;
	nb = realloc(e->buf, cap);
	if (!nb) {
		enc_fail(e, -ENOMEM);
		return false;
	}
	e->buf = nb;
	e->cap = cap;
	return true;
}

/* The writers below run after reserve() made room. */
static void put_byte(struct pbex_enc *e, uint8_t b)
{
	e->buf[e->len++] = b;
}

static void put_varint(struct pbex_enc *e, uint64_t v)
{
	while (v >= 0x80) {
		e->buf[e->len++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	e->buf[e->len++] = (uint8_t)v;
}

static void put_bytes(struct pbex_enc *e, const void *p, size_t n)
{
	if (n)
		memcpy(e->buf + e->len, p, n);
	e->len += n;
}

static void open_msg(struct pbex_enc *e, uint32_t field)
{
	if (e->depth_ >= ENC_MAX_OPEN) {
		enc_fail(e, -EINVAL);
		return;
	}
	if (!reserve(e, 6))
		return;
	put_byte(e, (uint8_t)(field << 3 | 2));
	e->mark_[e->depth_++] = e->len;
	e->len += 5;
}

/* Close the innermost open message; an empty one is dropped with its tag when drop_empty. */
static void close_msg(struct pbex_enc *e, bool drop_empty)
{
	uint8_t tmp[5];
	size_t m, l, k = 0;

	if (e->failed_)
		return;
	if (e->depth_ <= 0) {
		enc_fail(e, -EINVAL);
		return;
	}
	m = e->mark_[--e->depth_];
	l = e->len - (m + 5);
	if (l == 0 && drop_empty) {
		e->len = m - 1;
		return;
	}
	if (l > UINT32_MAX) {
		enc_fail(e, -EINVAL); /* the decoder's length limit */
		return;
	}
	for (uint64_t v = l;; v >>= 7) {
		tmp[k++] = (uint8_t)(v >= 0x80 ? (v | 0x80) : v);
		if (v < 0x80)
			break;
	}
	memmove(e->buf + m + k, e->buf + m + 5, l);
	memcpy(e->buf + m, tmp, k);
	e->len -= 5 - k;
}

void pbex_enc_init(struct pbex_enc *e)
{
	memset(e, 0, sizeof(*e));
}

void pbex_enc_fini(struct pbex_enc *e)
{
	if (!e)
		return;
	free(e->buf);
	memset(e, 0, sizeof(*e));
}

void pbex_enc_reset(struct pbex_enc *e, bool sequence)
{
	e->len = 0;
	e->depth_ = 0;
	e->sequence_ = sequence;
	e->failed_ = false;
	e->err_ = 0;
	e->in_list_ = false;
	e->lists_ = false;
	open_msg(e, 1); /* Example.features or SequenceExample.context */
}

/* The values of one Feature: which kind, and where they are. */
struct fvals {
	enum pbex_kind kind;
	const int64_t *i;
	const float *f;
	const void *const *b;
	const size_t *blens;
	size_t n;
};

/* Size of the list's payload (packed values, or the bytes fields). */
static size_t payload_size(const struct fvals *v)
{
	size_t s = 0, i;

	switch (v->kind) {
	case PBEX_KIND_INT64:
		for (i = 0; i < v->n; i++)
			s += varint_size((uint64_t)v->i[i]);
		return s;
	case PBEX_KIND_FLOAT:
		return 4 * v->n;
	case PBEX_KIND_BYTES:
		for (i = 0; i < v->n; i++)
			s += 1 + varint_size(v->blens[i]) + v->blens[i];
		return s;
	default:
		return 0;
	}
}

/* Size of the *List message: one packed field (none when empty), or the bytes fields. */
static size_t list_size(const struct fvals *v, size_t payload)
{
	if (v->kind == PBEX_KIND_BYTES || v->n == 0)
		return payload;
	return 1 + varint_size(payload) + payload;
}

/* Size of the Feature message. */
static size_t feature_size(const struct fvals *v, size_t list)
{
	if (v->kind == PBEX_KIND_NONE)
		return 0;
	return 1 + varint_size(list) + list;
}

static void put_feature(struct pbex_enc *e, const struct fvals *v, size_t payload, size_t list)
{
	size_t i;

	if (v->kind == PBEX_KIND_NONE)
		return;
	put_byte(e, (uint8_t)(v->kind << 3 | 2));
	put_varint(e, list);
	switch (v->kind) {
	case PBEX_KIND_INT64:
		if (!v->n)
			return;
		put_byte(e, 0x0a);
		put_varint(e, payload);
		for (i = 0; i < v->n; i++)
			put_varint(e, (uint64_t)v->i[i]);
		return;
	case PBEX_KIND_FLOAT:
		if (!v->n)
			return;
		put_byte(e, 0x0a);
		put_varint(e, payload);
		for (i = 0; i < v->n; i++) {
			uint32_t u;

			memcpy(&u, &v->f[i], 4);
			put_byte(e, (uint8_t)u);
			put_byte(e, (uint8_t)(u >> 8));
			put_byte(e, (uint8_t)(u >> 16));
			put_byte(e, (uint8_t)(u >> 24));
		}
		return;
	case PBEX_KIND_BYTES:
		for (i = 0; i < v->n; i++) {
			put_byte(e, 0x0a);
			put_varint(e, v->blens[i]);
			put_bytes(e, v->b[i], v->blens[i]);
		}
		return;
	default:
		return;
	}
}

/* A Features map entry: {key = name, value = Feature}. */
static void add_feature(struct pbex_enc *e, const char *name, const struct fvals *v)
{
	size_t payload, list, feat, klen, entry;

	if (e->failed_)
		return;
	if (e->depth_ != 1 || e->in_list_ || e->lists_ || !name) {
		enc_fail(e, -EINVAL);
		return;
	}
	payload = payload_size(v);
	list = list_size(v, payload);
	feat = feature_size(v, list);
	klen = strlen(name);
	entry = 1 + varint_size(klen) + klen + 1 + varint_size(feat) + feat;
	if (!reserve(e, 1 + varint_size(entry) + entry))
		return;
	put_byte(e, 0x0a);
	put_varint(e, entry);
	put_byte(e, 0x0a);
	put_varint(e, klen);
	put_bytes(e, name, klen);
	put_byte(e, 0x12);
	put_varint(e, feat);
	put_feature(e, v, payload, list);
}

void pbex_enc_add_int64s(struct pbex_enc *e, const char *name, const int64_t *v, size_t n)
{
	struct fvals fv = { .kind = PBEX_KIND_INT64, .i = v, .n = n };

	add_feature(e, name, &fv);
}

void pbex_enc_add_floats(struct pbex_enc *e, const char *name, const float *v, size_t n)
{
	struct fvals fv = { .kind = PBEX_KIND_FLOAT, .f = v, .n = n };

	add_feature(e, name, &fv);
}

void pbex_enc_add_bytes(struct pbex_enc *e, const char *name, const void *const *v,
			const size_t *lens, size_t n)
{
	struct fvals fv = { .kind = PBEX_KIND_BYTES, .b = v, .blens = lens, .n = n };

	add_feature(e, name, &fv);
}

void pbex_enc_add_empty(struct pbex_enc *e, const char *name)
{
	struct fvals fv = { .kind = PBEX_KIND_NONE };

	add_feature(e, name, &fv);
}

void pbex_enc_list_begin(struct pbex_enc *e, const char *name)
{
	size_t klen;

	if (e->failed_)
		return;
	if (!e->sequence_ || e->in_list_ || e->depth_ != 1 || !name) {
		enc_fail(e, -EINVAL);
		return;
	}
	if (!e->lists_) {
		close_msg(e, true); /* the context */
		open_msg(e, 2);	    /* feature_lists */
		e->lists_ = true;
	}
	open_msg(e, 1); /* the map entry */
	klen = strlen(name);
	if (!reserve(e, 1 + varint_size(klen) + klen))
		return;
	put_byte(e, 0x0a);
	put_varint(e, klen);
	put_bytes(e, name, klen);
	open_msg(e, 2); /* its FeatureList */
	e->in_list_ = true;
}

static void add_step(struct pbex_enc *e, const struct fvals *v)
{
	size_t payload, list, feat;

	if (e->failed_)
		return;
	if (!e->in_list_) {
		enc_fail(e, -EINVAL);
		return;
	}
	payload = payload_size(v);
	list = list_size(v, payload);
	feat = feature_size(v, list);
	if (!reserve(e, 1 + varint_size(feat) + feat))
		return;
	put_byte(e, 0x0a);
	put_varint(e, feat);
	put_feature(e, v, payload, list);
}

void pbex_enc_step_int64s(struct pbex_enc *e, const int64_t *v, size_t n)
{
	struct fvals fv = { .kind = PBEX_KIND_INT64, .i = v, .n = n };

	add_step(e, &fv);
}

void pbex_enc_step_floats(struct pbex_enc *e, const float *v, size_t n)
{
	struct fvals fv = { .kind = PBEX_KIND_FLOAT, .f = v, .n = n };

	add_step(e, &fv);
}

void pbex_enc_step_bytes(struct pbex_enc *e, const void *const *v, const size_t *lens, size_t n)
{
	struct fvals fv = { .kind = PBEX_KIND_BYTES, .b = v, .blens = lens, .n = n };

	add_step(e, &fv);
}

void pbex_enc_list_end(struct pbex_enc *e)
{
	if (e->failed_)
		return;
	if (!e->in_list_) {
		enc_fail(e, -EINVAL);
		return;
	}
	close_msg(e, false); /* the FeatureList: kept when empty, the list is there */
	close_msg(e, false); /* the map entry */
	e->in_list_ = false;
}

int pbex_enc_finish(struct pbex_enc *e)
{
	if (!e->failed_ && (e->in_list_ || e->depth_ != 1))
		enc_fail(e, -EINVAL);
	close_msg(e, true);
	if (e->failed_)
		return e->err_;
	return 0;
}
