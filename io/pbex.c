/* SPDX-License-Identifier: Apache-2.0 */
/* tf.train.Example / SequenceExample decoder: validating wire-format walk with projection. */
#include "pbex.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pbex_internal.h"

/*
 * Reference behaviour. Every rule below was checked against google.protobuf 4.21 (Debian's
 * python3-protobuf; its default "cpp" implementation, which is also the parser TensorFlow uses)
 * and against its pure-Python implementation (PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python),
 * with a .proto written from DESIGN.md §3.2 and crafted bytes. We accept what both accept, with
 * the same result, and where they disagree we follow cpp unless noted:
 *   - a value varint of 10 bytes is truncated to 64 bits (any 10th byte below 0x80 is accepted:
 *     80..80 02 reads as 0, 80..80 01 as -2^63), as both do; 11 bytes or more is rejected;
 *   - a tag is a varint of at most 5 bytes whose value is truncated to 32 bits (cpp; the Python
 *     implementation compares raw tag bytes, so an over-long tag of a known field is an unknown
 *     field there); a length is a varint of at most 5 bytes (cpp; Python takes up to 10);
 *   - field number 0 is rejected everywhere (Python rejects it except inside a group; cpp accepts
 *     it at the top level as the end of the message and rejects it elsewhere);
 *   - an end-group tag at the top level of the record is rejected (Python rejects; cpp stops
 *     parsing there and drops the rest with a warning);
 *   - nesting: every embedded message and every group counts one level below the record; more
 *     than 100 levels is rejected (cpp; Python's limit counts differently);
 *   - map keys are taken as bytes: both implementations reject a key that is not valid UTF-8
 *     (TensorFlow's feature.proto is proto3); we accept it, like TensorFlow's own fast parser;
 *   - projection: pbex_decode_* skip the map entries nobody asked for without looking inside,
 *     so damage there is not reported (both implementations would reject the record); an entry
 *     whose key is not in the first field is scanned to find its key, and damage to the framing
 *     of its fields is reported.
 */

/* ---- errors ---------------------------------------------------------------------------- */

/* Quote a feature name for a message: printable ASCII as is, the rest as \xNN, cut at 64. */
static void quote_name(char *buf, size_t cap, const uint8_t *name, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0, i;

	assert(cap >= 8);
	for (i = 0; i < len; i++) {
		uint8_t b = name[i];

		if (o + 8 >= cap || i == 64) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		if (b >= 0x20 && b < 0x7f && b != '"' && b != '\\') {
			buf[o++] = (char)b;
		} else {
			buf[o++] = '\\';
			buf[o++] = 'x';
			buf[o++] = hex[b >> 4];
			buf[o++] = hex[b & 15];
		}
	}
	buf[o] = '\0';
}

/*
 * Write "[label "name": ][step N: ][where: ]what (byte N)" into c->err.
 * at points into the record at the offending item.
 */
void pbex_fail_msg(const struct dctx *c, const uint8_t *at, const char *fmt, ...)
{
	char what[256], qname[300], step[32];
	va_list ap;

	if (!c->err)
		return;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	qname[0] = '\0';
	if (c->label) {
		char q[280];

		quote_name(q, sizeof(q), c->name, c->name_len);
		snprintf(qname, sizeof(qname), "%s \"%s\": ", c->label, q);
	}
	step[0] = '\0';
	if (c->step >= 0)
		snprintf(step, sizeof(step), "step %ld: ", c->step);
	io_error_set(c->err, "%s%s%s%s%s (byte %zu)", qname, step, c->where ? c->where : "",
		     c->where ? ": " : "", what, (size_t)(at - c->rec));
}

/* ---- skipping ------------------------------------------------------------------------ */

static int skip_group(const struct dctx *c, const uint8_t **pp, const uint8_t *end,
		      const uint8_t *tagp, uint32_t field, int depth);

/*
 * Skip the value of a field whose tag (at tagp) has been read. depth is that of the message
 * holding the field. An end-group here has no start-group.
 */
int pbex_skip_field(const struct dctx *c, const uint8_t **pp, const uint8_t *end,
		    const uint8_t *tagp, uint32_t field, unsigned wt, int depth)
{
	uint64_t v;
	uint32_t l;
	int rc;

	switch (wt) {
	case WT_VARINT:
		return get_varint(c, pp, end, &v);
	case WT_I64:
		if (end - *pp < 8)
			return fail(c, tagp, "truncated fixed64 (field %u)", field);
		*pp += 8;
		return 0;
	case WT_LEN:
		rc = get_len(c, pp, end, tagp, &l);
		if (rc < 0)
			return rc;
		*pp += l;
		return 0;
	case WT_I32:
		if (end - *pp < 4)
			return fail(c, tagp, "truncated fixed32 (field %u)", field);
		*pp += 4;
		return 0;
	case WT_SGROUP:
		return skip_group(c, pp, end, tagp, field, depth);
	default:
		return fail(c, tagp, "end-group tag for field %u without a matching start-group",
			    field);
	}
}

/* Skip a group (its start tag, at tagp, has been read), with the groups nested in it. */
static int skip_group(const struct dctx *c, const uint8_t **pp, const uint8_t *end,
		      const uint8_t *tagp, uint32_t field, int depth)
{
	uint32_t stack[PBEX_MAX_DEPTH + 1];
	const uint8_t *p = *pp, *tp;
	uint32_t f;
	unsigned wt;
	int n = 0, rc;

	if (depth + 1 > PBEX_MAX_DEPTH)
		return fail(c, tagp, "nesting deeper than %d", PBEX_MAX_DEPTH);
	stack[n++] = field;
	while (n > 0) {
		if (p >= end)
			return fail(c, tagp, "group (field %u) has no end-group tag", field);
		tp = p;
		rc = get_tag(c, &p, end, &f, &wt);
		if (rc < 0)
			return rc;
		if (wt == WT_EGROUP) {
			if (f != stack[n - 1])
				return fail(c, tp,
					    "end-group tag for field %u does not match "
					    "start-group for field %u",
					    f, stack[n - 1]);
			n--;
		} else if (wt == WT_SGROUP) {
			if (depth + n + 1 > PBEX_MAX_DEPTH)
				return fail(c, tp, "nesting deeper than %d", PBEX_MAX_DEPTH);
			stack[n++] = f;
		} else {
			rc = pbex_skip_field(c, &p, end, tp, f, wt, 0);
			if (rc < 0)
				return rc;
		}
	}
	*pp = p;
	return 0;
}

/* ---- Feature validation -------------------------------------------------------------- */

/* Count the varints of a packed int64 run [p, end), checking each. */
static int count_varints(const struct dctx *c, const uint8_t *p, const uint8_t *end, uint32_t *ret)
{
	uint32_t n = 0, run = 0;

	for (; p < end; p++) {
		if (*p < 0x80) {
			n++;
			run = 0;
		} else if (++run == 10) {
			return fail(c, p - 9, "varint longer than 10 bytes");
		}
	}
	if (run)
		return fail(c, end - run, "truncated varint");
	*ret = n;
	return 0;
}

/* Validate one *List message [p, end) of kind k at depth; add its values to fs. */
static int scan_list(const struct dctx *c, struct fscan *fs, enum pbex_kind k, const uint8_t *p,
		     const uint8_t *end, int depth)
{
	const uint8_t *lstart = p, *tp;
	uint32_t f, l, n;
	bool whole = false;
	unsigned wt;
	uint64_t v;
	int rc;

	while (p < end) {
		tp = p;
		rc = get_tag(c, &p, end, &f, &wt);
		if (rc < 0)
			return rc;
		if (f != 1)
			goto unknown;
		if (wt == WT_LEN) {
			rc = get_len(c, &p, end, tp, &l);
			if (rc < 0)
				return rc;
			if (k == PBEX_KIND_BYTES) {
				fs->count++;
				fs->bytes_len += l;
			} else if (k == PBEX_KIND_FLOAT) {
				if (l % 4)
					return fail(c, tp,
						    "packed float_list length %u is not a "
						    "multiple of 4",
						    l);
				fs->count += l / 4;
			} else {
				rc = count_varints(c, p, p + l, &n);
				if (rc < 0)
					return rc;
				fs->count += n;
			}
			if (k != PBEX_KIND_BYTES && tp == lstart && p + l == end) {
				/* one packed field makes the whole list */
				fs->run_start = (uint32_t)(p - fs->src);
				fs->run_end = (uint32_t)(p + l - fs->src);
				whole = true;
			}
			p += l;
			continue;
		}
		if (k == PBEX_KIND_INT64 && wt == WT_VARINT) {
			rc = get_varint(c, &p, end, &v);
			if (rc < 0)
				return rc;
			fs->count++;
			continue;
		}
		if (k == PBEX_KIND_FLOAT && wt == WT_I32) {
			if (end - p < 4)
				return fail(c, tp, "truncated fixed32 (field %u)", f);
			p += 4;
			fs->count++;
			continue;
		}
	unknown:
		rc = pbex_skip_field(c, &p, end, tp, f, wt, depth);
		if (rc < 0)
			return rc;
	}
	fs->run = whole;
	return 0;
}

/* Validate one Feature message [p, end) at depth, merging it into fs (protobuf merge rules). */
int pbex_scan_feature(struct dctx *c, struct fscan *fs, const uint8_t *p, const uint8_t *end,
		      int depth)
{
	const uint8_t *tp;
	const char *where = c->where;
	uint32_t f, l;
	unsigned wt;
	int rc;

	while (p < end) {
		tp = p;
		rc = get_tag(c, &p, end, &f, &wt);
		if (rc < 0)
			return rc;
		if (f < 1 || f > 3 || wt != WT_LEN) {
			rc = pbex_skip_field(c, &p, end, tp, f, wt, depth);
			if (rc < 0)
				return rc;
			continue;
		}
		rc = get_len(c, &p, end, tp, &l);
		if (rc < 0)
			return rc;
		if ((enum pbex_kind)f != fs->kind) {
			/* oneof: setting another kind drops what the old one held */
			fs->kind = (enum pbex_kind)f;
			fs->count = 0;
			fs->bytes_len = 0;
			fs->nlists = 0;
			fs->start = (uint32_t)(tp - fs->src);
			fs->end = (uint32_t)(end - fs->src);
		}
		fs->nlists++;
		fs->run_start = 0;
		fs->run_end = 0;
		c->where = pbex_kind_name(fs->kind);
		rc = scan_list(c, fs, fs->kind, p, p + l, depth + 1);
		c->where = where;
		if (rc < 0)
			return rc;
		p += l;
	}
	return 0;
}

/* Validate every value field of a Features map entry [q, e) (depth D_ENTRY) into fs. */
static int scan_entry_values(struct dctx *c, struct fscan *fs, const uint8_t *q, const uint8_t *e)
{
	const uint8_t *p = q, *tp;
	uint32_t f, l;
	unsigned wt;
	int rc;

	while (p < e) {
		tp = p;
		rc = get_tag(c, &p, e, &f, &wt);
		if (rc < 0)
			return rc;
		if (f == 2 && wt == WT_LEN) {
			rc = get_len(c, &p, e, tp, &l);
			if (rc < 0)
				return rc;
			c->where = "Feature";
			rc = pbex_scan_feature(c, fs, p, p + l, D_FEATURE);
			c->where = "map entry";
			if (rc < 0)
				return rc;
			p += l;
		} else {
			rc = pbex_skip_field(c, &p, e, tp, f, wt, D_ENTRY);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

/*
 * Find the key of a map entry [q, e): the last field 1 (length-delimited); "" when none.
 * Errors after a key was seen name it (with label).
 * The common layout (key first, then at most one value that ends the entry) is read without
 * a walk; *ret_value is then that value's bounds, else NULL.
 */
int pbex_entry_key(struct dctx *c, const char *label, const uint8_t *q, const uint8_t *e,
		   const uint8_t **ret_key, uint32_t *ret_klen, const uint8_t **ret_v,
		   const uint8_t **ret_ve)
{
	const uint8_t *p = q, *tp, *key = q;
	uint32_t f, l, klen = 0, vl;
	unsigned wt;
	int rc;

	if (e - q >= 2 && q[0] == 0x0a && q[1] < 0x80 && q[1] <= e - q - 2) {
		const uint8_t *k = q + 2 + q[1];

		if (k == e) {
			*ret_key = q + 2;
			*ret_klen = q[1];
			*ret_v = NULL;
			*ret_ve = NULL;
			return 0;
		}
		if (e - k >= 2 && k[0] == 0x12) {
			p = k + 1;
			if (*p < 0x80) {
				vl = *p++;
			} else if (e - p >= 2 && p[1] < 0x80) {
				vl = (uint32_t)(p[0] & 0x7f) | (uint32_t)p[1] << 7;
				p += 2;
			} else {
				vl = UINT32_MAX;
			}
			if (vl == (size_t)(e - p)) {
				*ret_key = q + 2;
				*ret_klen = q[1];
				*ret_v = p;
				*ret_ve = e;
				return 0;
			}
		}
		p = q;
	}
	while (p < e) {
		tp = p;
		rc = get_tag(c, &p, e, &f, &wt);
		if (rc < 0)
			return rc;
		if (f == 1 && wt == WT_LEN) {
			rc = get_len(c, &p, e, tp, &l);
			if (rc < 0)
				return rc;
			key = p;
			klen = l;
			p += l;
			/* later damage in the entry is reported under this name */
			c->label = label;
			c->name = key;
			c->name_len = klen;
		} else {
			rc = pbex_skip_field(c, &p, e, tp, f, wt, D_ENTRY);
			if (rc < 0)
				return rc;
		}
	}
	*ret_key = key;
	*ret_klen = klen;
	*ret_v = NULL;
	*ret_ve = NULL;
	return 0;
}

/* Validate a Features map entry [q, e) whose key is known; the result goes to *out. */
static int decode_entry(struct dctx *c, const uint8_t *q, const uint8_t *e, const uint8_t *v,
			const uint8_t *ve, struct pbex_feature *out)
{
	struct fscan fs;
	int rc;

	if (v && pbex_fast_feature(q, v, ve, out))
		return 0;
	fscan_init(&fs, q);
	if (v) {
		c->where = "Feature";
		rc = pbex_scan_feature(c, &fs, v, ve, D_FEATURE);
	} else {
		c->where = "map entry";
		rc = scan_entry_values(c, &fs, q, e);
	}
	if (rc < 0)
		return rc;
	fscan_to_feature(&fs, (uint32_t)(e - q), out);
	return 0;
}

/* Here rather than in pbex_access.c: pbex_scan_feature() calls it, and inlines it. */
const char *pbex_kind_name(enum pbex_kind k)
{
	switch (k) {
	case PBEX_KIND_NONE:
		return "none";
	case PBEX_KIND_BYTES:
		return "bytes_list";
	case PBEX_KIND_FLOAT:
		return "float_list";
	case PBEX_KIND_INT64:
		return "int64_list";
	}
	return "?";
}

/* ---- Example decoding ---------------------------------------------------------------- */

/*
 * Walk a Features message [p, end): with a schema, decode the entries it names into out and
 * skip the rest; without (fn set), validate every entry and call fn on it.
 */
static int walk_features(struct dctx *c, const struct pbex_schema *s, const uint8_t *p,
			 const uint8_t *end, struct pbex_feature *out, const char *label,
			 pbex_feature_fn fn, void *fctx)
{
	struct pbex_feature tmp;
	struct map_entry me;
	long idx;
	int rc;

	while (p < end) {
		/* fast path: a short entry {key, value} laid out as TensorFlow writes it */
		const uint8_t *q, *e;
		uint32_t kl;
		if (s && short_entry(p, end, &q, &kl, &e)) {
			idx = schema_lookup(s, q + 2, kl);
			if (idx < 0 || pbex_fast_feature(q, q + 4 + kl, e, &out[idx])) {
				p = e;
				continue;
			}
		}
		rc = next_entry(c, s, "Features", label, &p, end, &me);
		if (rc <= 0) {
			if (rc < 0)
				return rc;
			continue;
		}
		rc = decode_entry(c, me.q, me.e, me.v, me.ve, s ? &out[me.idx] : &tmp);
		if (rc < 0)
			return rc;
		c->label = NULL;
		if (!s && fn) {
			rc = fn(fctx, me.key, me.klen, &tmp);
			if (rc)
				return rc;
		}
	}
	return 0;
}

int pbex_decode_example(const struct pbex_schema *s, const uint8_t *rec, size_t len,
			struct pbex_feature *out, struct io_error *err)
{
	const uint8_t *p = rec, *end = rec + len, *tp;
	struct dctx c;
	uint32_t f, l;
	unsigned wt;
	int rc;

	dctx_init(&c, rec, err, "Example");
	rc = check_len(&c, len);
	if (rc < 0)
		return rc;
	if (s->n)
		memset(out, 0, s->n * sizeof(*out));
	while (p < end) {
		tp = p;
		c.where = "Example";
		rc = get_tag(&c, &p, end, &f, &wt);
		if (rc < 0)
			return rc;
		if (f == 1 && wt == WT_LEN) {
			rc = get_len(&c, &p, end, tp, &l);
			if (rc < 0)
				return rc;
			rc = walk_features(&c, s, p, p + l, out, "feature", NULL, NULL);
			if (rc < 0)
				return rc;
			p += l;
		} else {
			rc = pbex_skip_field(&c, &p, end, tp, f, wt, 0);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

int pbex_example_foreach(const uint8_t *rec, size_t len, pbex_feature_fn fn, void *ctx,
			 struct io_error *err)
{
	const uint8_t *p = rec, *end = rec + len, *tp;
	struct dctx c;
	uint32_t f, l;
	unsigned wt;
	int rc;

	dctx_init(&c, rec, err, "Example");
	rc = check_len(&c, len);
	if (rc < 0)
		return rc;
	while (p < end) {
		tp = p;
		c.where = "Example";
		rc = get_tag(&c, &p, end, &f, &wt);
		if (rc < 0)
			return rc;
		if (f == 1 && wt == WT_LEN) {
			rc = get_len(&c, &p, end, tp, &l);
			if (rc < 0)
				return rc;
			rc = walk_features(&c, NULL, p, p + l, NULL, "feature", fn, ctx);
			if (rc)
				return rc;
			p += l;
		} else {
			rc = pbex_skip_field(&c, &p, end, tp, f, wt, 0);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

/* ---- SequenceExample decoding --------------------------------------------------------- */

/* Validate every step of a FeatureLists map entry [q, e); the result goes to *out. */
static int decode_list_entry(struct dctx *c, const uint8_t *q, const uint8_t *e,
			     struct pbex_feature_list *out)
{
	const uint8_t *p = q, *tp, *fp, *fe, *ftp;
	uint32_t f, l, steps = 0, first = UINT32_MAX;
	struct fscan fs;
	unsigned wt;
	int rc;

	while (p < e) {
		tp = p;
		c->where = "map entry";
		rc = get_tag(c, &p, e, &f, &wt);
		if (rc < 0)
			return rc;
		if (f != 2 || wt != WT_LEN) {
			rc = pbex_skip_field(c, &p, e, tp, f, wt, D_ENTRY);
			if (rc < 0)
				return rc;
			continue;
		}
		rc = get_len(c, &p, e, tp, &l);
		if (rc < 0)
			return rc;
		if (first == UINT32_MAX)
			first = (uint32_t)(tp - q);
		fp = p;
		fe = p + l;
		while (fp < fe) {
			ftp = fp;
			c->where = "FeatureList";
			rc = get_tag(c, &fp, fe, &f, &wt);
			if (rc < 0)
				return rc;
			if (f != 1 || wt != WT_LEN) {
				rc = pbex_skip_field(c, &fp, fe, ftp, f, wt, D_FL);
				if (rc < 0)
					return rc;
				continue;
			}
			rc = get_len(c, &fp, fe, ftp, &l);
			if (rc < 0)
				return rc;
			fscan_init(&fs, fp);
			c->step = steps;
			c->where = "Feature";
			rc = pbex_scan_feature(c, &fs, fp, fp + l, D_FL_FEATURE);
			c->step = -1;
			if (rc < 0)
				return rc;
			if (steps == UINT32_MAX)
				return fail(c, ftp, "too many steps");
			steps++;
			fp += l;
		}
		p = fe;
	}
	out->present = true;
	out->count = steps;
	out->src_ = q;
	out->src_len_ = (uint32_t)(e - q);
	out->start_ = first == UINT32_MAX ? out->src_len_ : first;
	out->flags_ = 0;
	return 0;
}

/* Walk a FeatureLists message [p, end): like walk_features, for feature lists. */
static int walk_feature_lists(struct dctx *c, const struct pbex_schema *s, const uint8_t *p,
			      const uint8_t *end, struct pbex_feature_list *out, pbex_list_fn fn,
			      void *fctx)
{
	struct pbex_feature_list tmp;
	struct map_entry me;
	int rc;

	while (p < end) {
		rc = next_entry(c, s, "FeatureLists", "feature_list", &p, end, &me);
		if (rc <= 0) {
			if (rc < 0)
				return rc;
			continue;
		}
		rc = decode_list_entry(c, me.q, me.e, s ? &out[me.idx] : &tmp);
		if (rc < 0)
			return rc;
		c->label = NULL;
		if (!s && fn) {
			rc = fn(fctx, me.key, me.klen, &tmp);
			if (rc)
				return rc;
		}
	}
	return 0;
}

/*
 * The shared walk of a SequenceExample. With schemas (decode), fill the outputs; with
 * callbacks (foreach), visit everything. The two modes are told apart by `visit`.
 */
static int walk_sequence(const struct pbex_schema *ctx, const struct pbex_schema *lists,
			 const uint8_t *rec, size_t len, struct pbex_feature *ret_ctx,
			 struct pbex_feature_list *ret_lists, bool visit, pbex_feature_fn ctx_fn,
			 pbex_list_fn list_fn, void *fctx, struct io_error *err)
{
	const uint8_t *p = rec, *end = rec + len, *tp;
	struct dctx c;
	uint32_t f, l;
	unsigned wt;
	int rc;

	dctx_init(&c, rec, err, "SequenceExample");
	rc = check_len(&c, len);
	if (rc < 0)
		return rc;
	while (p < end) {
		tp = p;
		c.where = "SequenceExample";
		rc = get_tag(&c, &p, end, &f, &wt);
		if (rc < 0)
			return rc;
		if ((f != 1 && f != 2) || wt != WT_LEN) {
			rc = pbex_skip_field(&c, &p, end, tp, f, wt, 0);
			if (rc < 0)
				return rc;
			continue;
		}
		rc = get_len(&c, &p, end, tp, &l);
		if (rc < 0)
			return rc;
		if (f == 1 && visit)
			rc = walk_features(&c, NULL, p, p + l, NULL, "context feature", ctx_fn,
					   fctx);
		else if (f == 1)
			rc = walk_features(&c, ctx, p, p + l, ret_ctx, "context feature", NULL,
					   NULL);
		else
			rc = walk_feature_lists(&c, visit ? NULL : lists, p, p + l, ret_lists,
						list_fn, fctx);
		if (rc)
			return rc;
		p += l;
	}
	return 0;
}

/* An empty schema: decode validates the framing of a part nobody asked for, no entry. */
static const struct pbex_slot empty_slots[1];
const struct pbex_schema pbex_empty_schema = { .n = 0,
					       .mask = 0,
					       .slots = (struct pbex_slot *)empty_slots };

int pbex_decode_sequence_example(const struct pbex_schema *ctx, const struct pbex_schema *lists,
				 const uint8_t *rec, size_t len, struct pbex_feature *ret_ctx,
				 struct pbex_feature_list *ret_lists, struct io_error *err)
{
	if (!ctx)
		ctx = &pbex_empty_schema;
	if (!lists)
		lists = &pbex_empty_schema;
	if (ctx->n)
		memset(ret_ctx, 0, ctx->n * sizeof(*ret_ctx));
	if (lists->n)
		memset(ret_lists, 0, lists->n * sizeof(*ret_lists));
	return walk_sequence(ctx, lists, rec, len, ret_ctx, ret_lists, false, NULL, NULL, NULL,
			     err);
}

int pbex_sequence_example_foreach(const uint8_t *rec, size_t len, pbex_feature_fn ctx_fn,
				  pbex_list_fn list_fn, void *ctx, struct io_error *err)
{
	return walk_sequence(NULL, NULL, rec, len, NULL, NULL, true, ctx_fn, list_fn, ctx, err);
}
