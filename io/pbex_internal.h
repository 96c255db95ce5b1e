/* SPDX-License-Identifier: Apache-2.0 */
/* pbex internals: the decode context, wire primitives, feature scan state and schema lookup. */
#ifndef SLUICE_IO_PBEX_INTERNAL_H
#define SLUICE_IO_PBEX_INTERNAL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pbex.h"

/*
 * Who does what. pbex.c walks records (validation, decode, the foreach visits), pbex_project.c
 * copies the map entries a schema names into a smaller record (pbex_project), pbex_schema.c
 * builds the schema's hash index, pbex_access.c reads the values of decoded features. What more
 * than one of them needs lives here: the hot wire readers, the schema lookup and the map entry
 * walk are static inline so that the decode walk keeps them inlined, as when everything was one
 * file.
 */

#define PBEX_MAX_DEPTH 100

enum {
	WT_VARINT = 0,
	WT_I64 = 1,
	WT_LEN = 2,
	WT_SGROUP = 3,
	WT_EGROUP = 4,
	WT_I32 = 5,
};

/* pbex_feature.flags_: the values are one packed run at src_[start_ .. end_). */
#define PBEX_F_PACKED_RUN 1u
/* pbex_feature.flags_: a flat feature (pbex_flat_view): its values are src_[start_ .. end_) */
#define PBEX_F_FLAT 2u

/*
 * Depth of each message below the record (the record is 0), for the nesting limit:
 * Example > Features > map entry > Feature > *List, and
 * SequenceExample > FeatureLists > map entry > FeatureList > Feature > *List.
 */
enum {
	D_FEATURES = 1,
	D_ENTRY = 2,
	D_FEATURE = 3,
	D_FL = 3,
	D_FL_FEATURE = 4,
};

/* ---- errors ---------------------------------------------------------------------------- */

/* One decode call: where we are, for error messages. Lives on the caller's stack. */
struct dctx {
	const uint8_t *rec; /* the record, for byte offsets */
	struct io_error *err;
	const char *label; /* "feature", "context feature", "feature_list" or NULL */
	const uint8_t *name;
	size_t name_len;
	long step;	   /* index of the step in a feature list, or -1 */
	const char *where; /* the message type being read */
};

static inline void dctx_init(struct dctx *c, const uint8_t *rec, struct io_error *err,
			     const char *where)
{
	c->rec = rec;
	c->err = err;
	c->label = NULL;
	c->name = NULL;
	c->name_len = 0;
	c->step = -1;
	c->where = where;
}

void pbex_fail_msg(const struct dctx *c, const uint8_t *at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4), noinline, cold));

/* The error return: the constant is visible to the callers' flow analysis. */
#define fail(c, at, ...) (pbex_fail_msg((c), (at), __VA_ARGS__), -EBADMSG)

/* The record's length: offsets into it are 32 bits. */
static inline int check_len(struct dctx *c, size_t len)
{
	if (len > UINT32_MAX)
		return fail(c, c->rec, "record of %zu bytes is larger than 4 GiB", len);
	return 0;
}

/* ---- wire primitives --------------------------------------------------------------------- */

static inline int varint_slow(const struct dctx *c, const uint8_t **pp, const uint8_t *end,
			      uint64_t *ret)
{
	const uint8_t *p = *pp;
	uint64_t v = 0;
	int i;

	for (i = 0; i < 10; i++) {
		if (p + i >= end)
			return fail(c, p, "truncated varint");
		v |= (uint64_t)(p[i] & 0x7f) << (7 * i); /* the 10th byte keeps its lowest bit */
		if (p[i] < 0x80) {
			*pp = p + i + 1;
			*ret = v;
			return 0;
		}
	}
	return fail(c, p, "varint longer than 10 bytes");
}

static inline int get_varint(const struct dctx *c, const uint8_t **pp, const uint8_t *end,
			     uint64_t *ret)
{
	const uint8_t *p = *pp;

	if (__builtin_expect(p < end && *p < 0x80, 1)) {
		*ret = *p;
		*pp = p + 1;
		return 0;
	}
	return varint_slow(c, pp, end, ret);
}

/*
 * A tag or a length: at most 5 bytes (as protobuf's cpp parser). A tag's value is truncated to
 * 32 bits as cpp does; a length is kept whole (up to 35 bits) so that a huge one is caught.
 */
static inline int varint32_slow(const struct dctx *c, const uint8_t **pp, const uint8_t *end,
				const char *what, uint64_t *ret)
{
	const uint8_t *p = *pp;
	uint64_t v = 0;
	int i;

	for (i = 0; i < 5; i++) {
		if (p + i >= end)
			return fail(c, p, "truncated %s", what);
		v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
		if (p[i] < 0x80) {
			*pp = p + i + 1;
			*ret = v;
			return 0;
		}
	}
	return fail(c, p, "%s varint longer than 5 bytes", what);
}

/* Read a tag; wire types 6 and 7 and field number 0 are errors. */
static inline int get_tag(const struct dctx *c, const uint8_t **pp, const uint8_t *end,
			  uint32_t *ret_field, unsigned *ret_wt)
{
	const uint8_t *p = *pp;
	uint64_t v;
	uint32_t t;
	int rc;

	if (__builtin_expect(*p < 0x80, 1)) { /* caller checked p < end */
		t = *p;
		*pp = p + 1;
	} else {
		rc = varint32_slow(c, pp, end, "tag", &v);
		if (rc < 0)
			return rc;
		t = (uint32_t)v;
	}
	if (__builtin_expect((t & 7) >= 6 || t < 8, 0)) {
		if ((t & 7) >= 6)
			return fail(c, p, "invalid wire type %u (field %u)", t & 7, t >> 3);
		return fail(c, p, "field number 0");
	}
	*ret_field = t >> 3;
	*ret_wt = t & 7;
	return 0;
}

/* Read the length of a length-delimited field whose tag is at tagp; check it against end. */
static inline int get_len(const struct dctx *c, const uint8_t **pp, const uint8_t *end,
			  const uint8_t *tagp, uint32_t *ret)
{
	const uint8_t *p = *pp;
	uint64_t l;
	int rc;

	if (__builtin_expect(p < end && *p < 0x80, 1)) {
		l = *p++;
	} else {
		rc = varint32_slow(c, &p, end, "length", &l);
		if (rc < 0)
			return rc;
	}
	if (__builtin_expect(l > (uint64_t)(end - p), 0))
		return fail(c, tagp, "length %llu runs past the end of its message",
			    (unsigned long long)l);
	*pp = p;
	*ret = (uint32_t)l;
	return 0;
}

/*
 * Skip the value of a field whose tag (at tagp) has been read. depth is that of the message
 * holding the field. An end-group here has no start-group.
 */
int pbex_skip_field(const struct dctx *c, const uint8_t **pp, const uint8_t *end,
		    const uint8_t *tagp, uint32_t field, unsigned wt, int depth);

/* ---- Feature validation -------------------------------------------------------------- */

/* The state of one feature being decoded: the merge of all its Feature messages so far. */
struct fscan {
	const uint8_t *src; /* base of the offsets: the map entry or the Feature message */
	enum pbex_kind kind;
	uint32_t count;
	uint64_t bytes_len;
	uint32_t start, end;	     /* see pbex_feature */
	uint32_t nlists;	     /* *List fields of `kind` since the kind was last set */
	uint32_t run_start, run_end; /* the packed run when the one list is one packed field */
	bool run;
};

static inline void fscan_init(struct fscan *fs, const uint8_t *src)
{
	fs->src = src;
	fs->kind = PBEX_KIND_NONE;
	fs->count = 0;
	fs->bytes_len = 0;
	fs->start = 0;
	fs->end = 0;
	fs->nlists = 0;
	fs->run = false;
}

/* Validate one Feature message [p, end) at depth, merging it into fs (protobuf merge rules). */
int pbex_scan_feature(struct dctx *c, struct fscan *fs, const uint8_t *p, const uint8_t *end,
		      int depth);

static inline void fscan_to_feature(const struct fscan *fs, uint32_t src_len,
				    struct pbex_feature *f)
{
	f->present = true;
	f->kind = fs->kind;
	f->count = fs->count;
	f->bytes_len = fs->bytes_len;
	f->src_ = fs->src;
	f->src_len_ = src_len;
	if (fs->kind == PBEX_KIND_NONE) {
		f->start_ = src_len;
		f->end_ = src_len;
		f->flags_ = 0;
	} else if (fs->nlists == 1 && fs->run) {
		f->start_ = fs->run_start;
		f->end_ = fs->run_end;
		f->flags_ = PBEX_F_PACKED_RUN;
	} else {
		f->start_ = fs->start;
		f->end_ = fs->end;
		f->flags_ = 0;
	}
}

/*
 * The layout TensorFlow writes, with short lengths: a value [v, e) that is one *List field
 * holding one packed field (or one bytes value), or nothing. Fill *out and return true; false
 * when the value is laid out otherwise or is bad (the general path then decides). Offsets are
 * from q: the map entry, or the step itself (q == v) in a FeatureList.
 */
static inline bool pbex_fast_feature(const uint8_t *q, const uint8_t *v, const uint8_t *e,
				     struct pbex_feature *out)
{
	const uint8_t *pl;
	uint32_t kind, n = 0, run = 0, len;

	if (e - v < 2 || v[1] >= 0x80 || v[1] != e - v - 2)
		return false;
	kind = v[0] >> 3;
	if ((v[0] & 7) != WT_LEN || kind < 1 || kind > 3)
		return false;
	out->present = true;
	out->kind = (enum pbex_kind)kind;
	out->src_ = q;
	out->src_len_ = (uint32_t)(e - q);
	out->bytes_len = 0;
	if (v[1] == 0) { /* an empty list */
		out->count = 0;
		out->start_ = (uint32_t)(v - q);
		out->end_ = out->src_len_;
		out->flags_ = 0;
		return true;
	}
	if (e - v < 4 || v[2] != 0x0a || v[3] >= 0x80 || v[3] != e - v - 4)
		return false;
	pl = v + 4;
	len = v[3];
	switch (kind) {
	case PBEX_KIND_INT64:
		for (uint32_t i = 0; i < len; i++) {
			if (pl[i] < 0x80) {
				n++;
				run = 0;
			} else if (++run == 10) {
				return false;
			}
		}
		if (run)
			return false;
		break;
	case PBEX_KIND_FLOAT:
		if (len % 4)
			return false;
		n = len / 4;
		break;
	default:
		out->count = 1;
		out->bytes_len = len;
		out->start_ = (uint32_t)(v - q);
		out->end_ = out->src_len_;
		out->flags_ = 0;
		return true;
	}
	out->count = n;
	out->start_ = (uint32_t)(pl - q);
	out->end_ = out->src_len_;
	out->flags_ = PBEX_F_PACKED_RUN;
	return true;
}

/* ---- schema --------------------------------------------------------------------------- */

struct pbex_slot {
	uint32_t hash; /* upper half of the key's hash */
	uint32_t len;
	uint64_t word;	     /* tail_word() of the key: with len, the whole key when len <= 8 */
	const uint8_t *name; /* NULL: empty slot */
	long idx;
};

struct pbex_schema {
	size_t n;
	uint32_t mask; /* slots - 1 */
	struct pbex_slot *slots;
	/* names and lengths by index, pointing into the same allocation */
	const uint8_t **names;
	size_t *lens;
};

static inline uint64_t mix(uint64_t h)
{
	h ^= h >> 32;
	h *= 0xd6e8feb86659fd93ull;
	h ^= h >> 32;
	return h;
}

/* The last n <= 8 bytes of a key as a word; for a given n, different bytes give different words. */
static inline uint64_t tail_word(const uint8_t *k, size_t n)
{
	uint32_t x, y;

	if (n >= 4) {
		memcpy(&x, k, 4);
		memcpy(&y, k + n - 4, 4);
		return x | (uint64_t)y << 32;
	}
	if (n > 0)
		return (uint64_t)k[0] << 16 | (uint64_t)k[n >> 1] << 8 | k[n - 1];
	return 0;
}

/* A cheap hash of a short key: 8-byte words, multiply-xor (not for hostile hash flooding). */
static inline uint64_t hash_key(const uint8_t *k, size_t n, uint64_t *ret_word)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ n, a;

	while (n > 8) {
		memcpy(&a, k, 8);
		h = mix((h ^ a) * 0xff51afd7ed558ccdull);
		k += 8;
		n -= 8;
	}
	*ret_word = tail_word(k, n);
	return mix((h ^ *ret_word) * 0xc4ceb9fe1a85ec53ull);
}

static inline long schema_lookup(const struct pbex_schema *s, const uint8_t *name, size_t len)
{
	uint64_t w, h = hash_key(name, len, &w);
	uint32_t i = (uint32_t)h & s->mask, hi = (uint32_t)(h >> 32);

	for (;;) {
		const struct pbex_slot *sl = &s->slots[i];

		if (!sl->name)
			return -1;
		if (sl->hash == hi && sl->len == len && sl->word == w &&
		    (len <= 8 || memcmp(sl->name, name, len) == 0))
			return sl->idx;
		i = (i + 1) & s->mask;
	}
}

/* The schema of no features (pbex.c): what a NULL schema stands for. */
extern const struct pbex_schema pbex_empty_schema;

/* ---- map entries (decode, and the projection: pbex_project.c) -------------------------- */

/*
 * Find the key of a map entry [q, e) (pbex.c says which field it is); *ret_v, *ret_ve: its value's
 * bounds when the entry has the common layout, else NULL.
 */
int pbex_entry_key(struct dctx *c, const char *label, const uint8_t *q, const uint8_t *e,
		   const uint8_t **ret_key, uint32_t *ret_klen, const uint8_t **ret_v,
		   const uint8_t **ret_ve);

/* A map entry of a Features or FeatureLists message, as next_entry() finds it. */
struct map_entry {
	const uint8_t *q, *e; /* the entry */
	const uint8_t *key;
	uint32_t klen;
	const uint8_t *v, *ve; /* its value in the common layout (pbex_entry_key()), else NULL */
	long idx;	       /* its index in the schema; -1 without a schema */
};

/*
 * Read the field at *pp of a Features or FeatureLists message (where) ending at end, and move
 * *pp past it. Returns 1 and the entry in *ret, with c naming it (label and key) for the errors
 * of its decode, when it is a map entry to decode: with a schema, one the schema names; without,
 * every one. Returns 0 when the field was skipped (not a map entry, or a key nobody asked for),
 * or -EBADMSG.
 */
static inline int next_entry(struct dctx *c, const struct pbex_schema *s, const char *where,
			     const char *label, const uint8_t **pp, const uint8_t *end,
			     struct map_entry *ret)
{
	const uint8_t *p = *pp, *tp = p;
	uint32_t f, l;
	unsigned wt;
	int rc;

	c->where = where;
	c->label = NULL;
	rc = get_tag(c, &p, end, &f, &wt);
	if (rc < 0)
		return rc;
	if (f != 1 || wt != WT_LEN) {
		rc = pbex_skip_field(c, &p, end, tp, f, wt, D_FEATURES);
		*pp = p;
		return rc;
	}
	rc = get_len(c, &p, end, tp, &l);
	if (rc < 0)
		return rc;
	c->where = "map entry";
	rc = pbex_entry_key(c, label, p, p + l, &ret->key, &ret->klen, &ret->v, &ret->ve);
	if (rc < 0)
		return rc;
	ret->q = p;
	ret->e = p + l;
	*pp = p + l;
	ret->idx = -1;
	if (s) {
		ret->idx = schema_lookup(s, ret->key, ret->klen);
		if (ret->idx < 0)
			return 0;
	}
	c->label = label;
	c->name = ret->key;
	c->name_len = ret->klen;
	return 1;
}

/*
 * Whether the field at p (before end) is a Features map entry laid out as TensorFlow writes a
 * short one: tag, 1-byte length, {key tag, 1-byte key length, key, value tag, 1-byte value
 * length, value}. Then *ret_q is the entry's content, *ret_kl the key's length (the key at
 * *ret_q + 2, the value at *ret_q + 4 + kl) and *ret_e the entry's end.
 */
static inline bool short_entry(const uint8_t *p, const uint8_t *end, const uint8_t **ret_q,
			       uint32_t *ret_kl, const uint8_t **ret_e)
{
	if (p[0] != 0x0a || end - p < 6 || p[1] < 4 || p[1] >= 0x80 || p[1] > end - p - 2)
		return false;
	const uint8_t *q = p + 2;
	uint32_t kl = q[1];
	if (q[0] != 0x0a || kl + 4 > p[1] || q[2 + kl] != 0x12 || q[3 + kl] != p[1] - 4 - kl)
		return false;
	*ret_q = q;
	*ret_kl = kl;
	*ret_e = q + p[1];
	return true;
}

#endif
