/* SPDX-License-Identifier: Apache-2.0 */
/* Projection for the record cache: a record cut down to the map entries its schemas name. */
#include "pbex.h"

#include <errno.h>
#include <string.h>

#include "pbex_internal.h"

/* Write varint v at p; returns the bytes written (at most 5 for v < 2^35). */
static size_t put_varint(uint8_t *p, uint64_t v)
{
	size_t n = 0;

	while (v >= 0x80) {
		p[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (uint8_t)v;
	return n;
}

/*
 * Copy the named map entries (each field as it is on the wire: tag, length, bytes) of every
 * message of field `field` of the record into out + o, as the content of one such message
 * (tag and length first). Returns the new end of out, or -ENOSPC / -EBADMSG.
 */
static long project_maps(struct dctx *c, const struct pbex_schema *s, uint32_t field,
			 const char *where, const char *label, const uint8_t *rec, size_t len,
			 uint8_t *out, size_t cap, size_t o)
{
	const uint8_t *p = rec, *end = rec + len, *tp;
	size_t body = o + 6, w = body; /* room for the tag and a 5-byte length */
	uint32_t f, l;
	unsigned wt;
	int rc;

	while (p < end) {
		tp = p;
		rc = get_tag(c, &p, end, &f, &wt);
		if (rc < 0)
			return rc;
		if (f != field || wt != WT_LEN) {
			rc = pbex_skip_field(c, &p, end, tp, f, wt, 0);
			if (rc < 0)
				return rc;
			continue;
		}
		rc = get_len(c, &p, end, tp, &l);
		if (rc < 0)
			return rc;
		const uint8_t *q = p, *qe = p + l;
		while (q < qe) {
			const uint8_t *etp = q;
			struct map_entry me = { 0 };

			/* walk_features' fast path: a short entry looked up without parsing it
			   further (as decode does) */
			const uint8_t *k, *e;
			uint32_t kl;
			if (short_entry(q, qe, &k, &kl, &e)) {
				if (schema_lookup(s, k + 2, kl) >= 0) {
					if (w + (size_t)(e - q) > cap)
						return -ENOSPC;
					memcpy(out + w, q, (size_t)(e - q));
					w += (size_t)(e - q);
				}
				q = e;
				continue;
			}
			rc = next_entry(c, s, where, label, &q, qe, &me);
			if (rc < 0)
				return rc;
			if (rc == 0)
				continue;
			if (w + (size_t)(me.e - etp) > cap)
				return -ENOSPC;
			memcpy(out + w, etp, (size_t)(me.e - etp));
			w += (size_t)(me.e - etp);
		}
		p = qe;
	}
	if (w == body)
		return (long)o; /* nothing named: no message at all (the same to a decoder) */
	uint8_t hdr[6];
	size_t h = 0;
	hdr[h++] = (uint8_t)(field << 3 | WT_LEN);
	h += put_varint(hdr + h, w - body);
	memcpy(out + o, hdr, h);
	memmove(out + o + h, out + body, w - body);
	return (long)(o + h + (w - body));
}

long pbex_project(const struct pbex_schema *ctx, const struct pbex_schema *lists, bool sequence,
		  const uint8_t *rec, size_t len, uint8_t *out, size_t cap)
{
	struct dctx c;
	long o;

	dctx_init(&c, rec, NULL, sequence ? "SequenceExample" : "Example");
	if (check_len(&c, len) < 0)
		return -EBADMSG;
	if (!ctx)
		ctx = &pbex_empty_schema;
	o = project_maps(&c, ctx, 1, "Features", sequence ? "context feature" : "feature", rec, len,
			 out, cap, 0);
	if (o >= 0 && sequence && lists)
		o = project_maps(&c, lists, 2, "FeatureLists", "feature_list", rec, len, out, cap,
				 (size_t)o);
	return o;
}
