/* SPDX-License-Identifier: Apache-2.0 */
/* tf.train.Example decoder: the flat form of decoded features (the record cache's decoded level). */
#include "pbex.h"

#include <errno.h>
#include <string.h>

#include "pbex_internal.h"

/*
 * Layout: n heads, then each feature's values at its head's offset, 8-byte aligned relative to
 * the start (the cache keeps records 8-aligned, but the accessors copy with memcpy anyway).
 */

static size_t align8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

static size_t values_len(const struct pbex_feature *f)
{
	switch (f->kind) {
	case PBEX_KIND_INT64:
		return (size_t)f->count * 8;
	case PBEX_KIND_FLOAT:
		return (size_t)f->count * 4;
	case PBEX_KIND_BYTES:
		return (size_t)f->count * 4 + f->bytes_len;
	default:
		return 0;
	}
}

size_t pbex_flat_size(const struct pbex_feature *f, size_t n)
{
	size_t at = n * sizeof(struct pbex_flat_head);
	for (size_t i = 0; i < n; i++)
		at = align8(at) + values_len(&f[i]);
	return at;
}

long pbex_flatten(const struct pbex_feature *f, size_t n, uint8_t *out, size_t cap)
{
	size_t total = pbex_flat_size(f, n);
	if (total > cap || total > UINT32_MAX)
		return -ENOSPC;
	if ((uintptr_t)out & 7)
		return -EINVAL; /* the values are stored as arrays of their type */
	size_t at = n * sizeof(struct pbex_flat_head);
	for (size_t i = 0; i < n; i++) {
		size_t pad = align8(at) - at;
		memset(out + at, 0, pad);
		at += pad;
		size_t vl = values_len(&f[i]);
		struct pbex_flat_head h = {
			.present = f[i].present,
			.kind = (uint8_t)f[i].kind,
			.count = f[i].kind == PBEX_KIND_NONE ? 0 : f[i].count,
			.off = (uint32_t)at,
			.len = (uint32_t)vl,
		};
		memcpy(out + i * sizeof(h), &h, sizeof(h));
		if (h.count == 0)
			continue;
		uint8_t *v = out + at;
		if (f[i].kind == PBEX_KIND_INT64) {
			pbex_feature_int64s(&f[i], (int64_t *)(void *)v);
		} else if (f[i].kind == PBEX_KIND_FLOAT) {
			pbex_feature_floats(&f[i], (float *)(void *)v);
		} else {
			struct pbex_bytes_iter it;
			const uint8_t *p;
			size_t len, k = 0, data = (size_t)h.count * 4;
			pbex_bytes_iter_init(&it, &f[i]);
			while (pbex_bytes_iter_next(&it, &p, &len)) {
				uint32_t l32 = (uint32_t)len;
				memcpy(v + 4 * k++, &l32, 4);
				memcpy(v + data, p, len);
				data += len;
			}
		}
		at += vl;
	}
	return (long)total;
}

int pbex_flat_view(const uint8_t *p, size_t len, size_t n, struct pbex_feature *ret)
{
	return pbex_flat_view_parts(p, len, p, 0, len, n, ret);
}

int pbex_flat_view_parts(const uint8_t *heads, size_t heads_len, const uint8_t *values,
			 size_t values_off, size_t total, size_t n, struct pbex_feature *ret)
{
	if (values_off > total)
		return -EBADMSG;
	for (size_t i = 0; i < n; i++) {
		struct pbex_flat_values v;
		if (pbex_flat_get_parts(heads, heads_len, values, values_off, total, i, &v) < 0)
			return -EBADMSG;
		struct pbex_feature *f = &ret[i];
		f->present = v.present;
		f->kind = v.kind;
		f->count = v.count;
		f->bytes_len = 0;
		f->src_ = values; /* the views: into the values */
		f->src_len_ = (uint32_t)(total - values_off);
		f->start_ = (uint32_t)(v.values - values);
		f->end_ = f->start_ + v.len;
		f->flags_ = PBEX_F_FLAT;
		uint64_t want;
		switch (f->kind) {
		case PBEX_KIND_INT64:
			want = (uint64_t)v.count * 8;
			break;
		case PBEX_KIND_FLOAT:
			want = (uint64_t)v.count * 4;
			break;
		case PBEX_KIND_BYTES:
			if ((uint64_t)v.count * 4 > v.len)
				return -EBADMSG;
			f->bytes_len = v.len - (uint64_t)v.count * 4;
			want = (uint64_t)v.count * 4;
			for (uint32_t k = 0; k < v.count; k++) {
				uint32_t l;
				memcpy(&l, v.values + 4 * k, 4);
				want += l;
			}
			break;
		default:
			want = 0;
			if (v.count != 0)
				return -EBADMSG;
		}
		if (want != v.len)
			return -EBADMSG;
	}
	return 0;
}
