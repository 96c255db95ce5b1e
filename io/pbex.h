/* SPDX-License-Identifier: Apache-2.0 */
/* tf.train.Example / SequenceExample wire format: decoder (projection, no allocation), encoder. */
#ifndef SLUICE_IO_PBEX_H
#define SLUICE_IO_PBEX_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ioerr.h"

/*
 * The schema is DESIGN.md §3.2. The decoder reads the protobuf wire format directly and accepts
 * everything a conforming protobuf parser accepts (google.protobuf is the reference):
 *   - packed and unpacked repeated scalars, mixed within one list;
 *   - fields in any order; unknown fields of every wire type (groups skipped with their nesting);
 *     a known field number that arrives with an unexpected wire type is an unknown field;
 *   - a repeated map key: the last entry wins (map semantics); within one map entry a repeated
 *     key field: the last wins; a repeated value field: the messages merge;
 *   - an embedded message field that appears more than once (Example.features,
 *     SequenceExample.context / feature_lists): the messages merge (for maps: the union, later
 *     keys win);
 *   - a Feature whose kind is set twice: the last kind wins (oneof); when the same kind repeats,
 *     its lists merge (concatenate), as protobuf merges repeated message fields;
 *   - a map entry without key (key "") or without value (Feature{} / FeatureList{});
 *   - empty messages; negative int64 as 10-byte varints.
 * It rejects, with -EBADMSG and a message naming the feature and the byte offset in the record:
 * a varint longer than 10 bytes, a length running past its parent message, wire types 6 and 7,
 * an end-group without its start-group (or a mismatched one), a packed float list whose length
 * is not a multiple of 4, truncated fixed32/fixed64 fields, nesting deeper than 100.
 *
 * Projection: only the features named in a pbex_schema are looked at in depth. Other map
 * entries are skipped as length-delimited blobs (as TensorFlow's fast parser does), so damage
 * inside a feature nobody asked for is not reported by pbex_decode_*; the _foreach functions
 * validate everything.
 */

enum pbex_kind {
	PBEX_KIND_NONE = 0, /* Feature{} with no kind set */
	PBEX_KIND_BYTES = 1,
	PBEX_KIND_FLOAT = 2,
	PBEX_KIND_INT64 = 3,
};

const char *pbex_kind_name(enum pbex_kind k); /* "none", "bytes_list", "float_list", "int64_list" */

/*
 * A decoded feature: a view into the record's bytes (no copy). Valid as long as the record
 * bytes are. Every value in it has been validated by the decode call that produced it, so the
 * accessors below cannot fail.
 */
struct pbex_feature {
	bool present;	     /* the key was in the record */
	enum pbex_kind kind; /* PBEX_KIND_NONE when absent or Feature{} */
	uint32_t count;	     /* number of values */
	uint64_t bytes_len;  /* PBEX_KIND_BYTES: sum of the values' lengths */
	/* private to io/pbex*.c: where the values are */
	const uint8_t *src_; /* the map entry (or FeatureList element) the values live in */
	uint32_t src_len_;
	uint32_t start_; /* offset in src_ of the first field that holds values of `kind` */
	uint32_t end_;	 /* offset in src_ of the end of the Feature message holding start_ */
	uint32_t flags_; /* PBEX_F_PACKED_RUN: the values are src_[start_ .. end_), packed */
};

/* Copy the values out. out must hold f->count values; the kind must match (asserted). */
void pbex_feature_int64s(const struct pbex_feature *f, int64_t *out);
void pbex_feature_floats(const struct pbex_feature *f, float *out);

/* Iterate the values of a PBEX_KIND_BYTES feature, in order. */
struct pbex_bytes_iter {
	const struct pbex_feature *f_;
	uint32_t pos_[4];
};
void pbex_bytes_iter_init(struct pbex_bytes_iter *it, const struct pbex_feature *f);
/* true and a view of the next value; false after the last. */
bool pbex_bytes_iter_next(struct pbex_bytes_iter *it, const uint8_t **ret_data, size_t *ret_len);

/* A SequenceExample feature list: a view; iterate its steps (each a Feature). */
struct pbex_feature_list {
	bool present;
	uint32_t count; /* number of steps (Features) */
	const uint8_t *src_;
	uint32_t src_len_;
	uint32_t start_;
	uint32_t flags_;
};

struct pbex_list_iter {
	const struct pbex_feature_list *l_;
	uint32_t pos_[4];
};
void pbex_list_iter_init(struct pbex_list_iter *it, const struct pbex_feature_list *l);
/* true and the next step; false after the last. */
bool pbex_list_iter_next(struct pbex_list_iter *it, struct pbex_feature *ret_step);

/*
 * The set of feature names a caller wants, with a hash index for the lookup of each map key.
 * Names are arbitrary bytes (not NUL-terminated) and must be distinct.
 */
struct pbex_schema;

/* Names are copied. NULL when out of memory or when a name repeats (check with _find first). */
struct pbex_schema *pbex_schema_create(const char *const *names, const size_t *name_lens, size_t n);
void pbex_schema_destroy(struct pbex_schema *s);
size_t pbex_schema_count(const struct pbex_schema *s);
/* Index of name in the schema, or -1. */
long pbex_schema_find(const struct pbex_schema *s, const void *name, size_t len);

/*
 * Decode an Example, filling out[i] for the schema's i-th name (out has pbex_schema_count()
 * entries; features not in the record get present = false). Returns 0 or -EBADMSG (err says
 * which feature and the byte offset in rec). No heap allocation. On failure out holds a partial
 * result that must not be used (the same for ret_ctx / ret_lists below).
 */
int pbex_decode_example(const struct pbex_schema *s, const uint8_t *rec, size_t len,
			struct pbex_feature *out, struct io_error *err);

/*
 * Decode a SequenceExample: context features named by ctx (may be NULL) into ret_ctx, feature
 * lists named by lists (may be NULL) into ret_lists. Every step of a requested list is validated.
 */
int pbex_decode_sequence_example(const struct pbex_schema *ctx, const struct pbex_schema *lists,
				 const uint8_t *rec, size_t len, struct pbex_feature *ret_ctx,
				 struct pbex_feature_list *ret_lists, struct io_error *err);

/*
 * Visit every feature of an Example (or every context feature and feature list of a
 * SequenceExample) in wire order, validating everything. A key that repeats is visited again:
 * the last visit wins. A callback that returns non-zero stops the walk; that value is returned.
 */
typedef int (*pbex_feature_fn)(void *ctx, const uint8_t *name, size_t name_len,
			       const struct pbex_feature *f);
typedef int (*pbex_list_fn)(void *ctx, const uint8_t *name, size_t name_len,
			    const struct pbex_feature_list *l);
int pbex_example_foreach(const uint8_t *rec, size_t len, pbex_feature_fn fn, void *ctx,
			 struct io_error *err);
int pbex_sequence_example_foreach(const uint8_t *rec, size_t len, pbex_feature_fn ctx_fn,
				  pbex_list_fn list_fn, void *ctx, struct io_error *err);

/*
 * Projection (for the record cache, daemon/pipeline/cache.h): write to out a record holding only
 * the map entries that ctx names (Example features, or SequenceExample context features) and,
 * for a SequenceExample, that lists names (its feature lists), each copied as it is on the wire,
 * in wire order, in one Features (and one FeatureLists) message. For every record whose
 * pbex_decode_* with these schemas succeeds, decoding out with them gives the same features,
 * value for value (entries are copied whole, so repeated keys, merged values and kinds, empty
 * entries and unknown fields inside them mean what they meant; only the skipped entries and the
 * fields outside the maps are gone); and for a record whose decode fails, the decode of out fails
 * too (the damage is in an entry kept whole, or in a level walked). ctx or lists may be NULL
 * (none). Returns the length of out,
 * at most len + 12 bytes; -ENOSPC when cap is less; -EBADMSG when rec's framing is damaged at
 * the levels walked (decode it first: its error says where).
 */
long pbex_project(const struct pbex_schema *ctx, const struct pbex_schema *lists, bool sequence,
		  const uint8_t *rec, size_t len, uint8_t *out, size_t cap);

/*
 * The flat form of decoded Example features (for the record cache's decoded level): n features,
 * as pbex_decode_example gave them for a schema of n names, written so that pbex_flat_view gives
 * them back in O(n) with no parsing: a 16-byte head per feature (present, kind, count, where its
 * values are), then the values as the accessors give them (int64 and float arrays in host byte
 * order; bytes as count 32-bit lengths, then their contents). Host-local, never stored on disk.
 * The accessors read a flat feature as they read a decoded one.
 */
/* Bytes pbex_flatten writes for f[0 .. n). */
size_t pbex_flat_size(const struct pbex_feature *f, size_t n);
/*
 * Write f[0 .. n) to out (8-aligned): its length, or -ENOSPC when cap is less than
 * pbex_flat_size (or it is over 4 GiB), -EINVAL when out is not aligned.
 */
long pbex_flatten(const struct pbex_feature *f, size_t n, uint8_t *out, size_t cap);
/*
 * The n features of a flat record, views into p (valid as long as p is). 0, or -EBADMSG when p
 * is not a flat form of n features (no message: only sluice writes them).
 */
int pbex_flat_view(const uint8_t *p, size_t len, size_t n, struct pbex_feature *ret);
/* The same of a flat form kept in two places (pbex_flat_get_parts): views into values. */
int pbex_flat_view_parts(const uint8_t *heads, size_t heads_len, const uint8_t *values,
			 size_t values_off, size_t total, size_t n, struct pbex_feature *ret);
/* Feature k of a flat record, as its values are stored (see above). */
struct pbex_flat_values {
	bool present;
	enum pbex_kind kind;
	uint32_t count;
	const uint8_t *values; /* count int64 or float values; bytes: count lengths, then data */
	uint32_t len;	       /* bytes at values */
};
/* A feature's head in the flat form (host byte order; the layout is the form's, not an ABI). */
struct pbex_flat_head {
	uint8_t present;
	uint8_t kind;
	uint16_t zero;
	uint32_t count;
	uint32_t off; /* of the values, from the start of the record */
	uint32_t len; /* of the values in bytes */
};
/*
 * Feature k of a flat form of total bytes kept in two places: heads_len bytes from its start at
 * heads (its heads, at least), and from byte values_off on at values (its values: byte i of the
 * form is values[i - values_off]). The record cache keeps a uniform record's values apart from
 * the heads its file's records share (daemon/pipeline/cache.h, PL_CACHE_REC_VALUES). 0, or
 * -EBADMSG when it holds no such feature (k past its heads, its values out of bounds).
 */
static inline int pbex_flat_get_parts(const uint8_t *heads, size_t heads_len, const uint8_t *values,
				      size_t values_off, size_t total, size_t k,
				      struct pbex_flat_values *ret)
{
	struct pbex_flat_head h;
	if (total > UINT32_MAX || (k + 1) * sizeof(h) > heads_len)
		return -EBADMSG;
	__builtin_memcpy(&h, heads + k * sizeof(h), sizeof(h));
	if (h.off < values_off || h.off > total || h.len > total - h.off ||
	    h.kind > PBEX_KIND_INT64)
		return -EBADMSG;
	ret->present = h.present != 0;
	ret->kind = (enum pbex_kind)h.kind;
	ret->count = h.count;
	ret->values = values + (h.off - values_off);
	ret->len = h.len;
	return 0;
}

/*
 * 0, or -EBADMSG when p holds no such feature (k past its heads, or out of bounds). Inline: the
 * parse task reads a few features of every cached row with it.
 */
static inline int pbex_flat_get(const uint8_t *p, size_t len, size_t k,
				struct pbex_flat_values *ret)
{
	return pbex_flat_get_parts(p, len, p, 0, len, k, ret);
}

/*
 * The encoder, for the generator and tests: builds a record into a growable buffer, writing
 * packed lists (as TensorFlow does). Usage: pbex_enc_reset, then for each feature one of the
 * _add_* calls (Example), or _context_* / _list_begin, _step_*, _list_end (SequenceExample),
 * then pbex_enc_finish to get the bytes. A buffer is reused across records.
 */
struct pbex_enc {
	uint8_t *buf;
	size_t len, cap;
	/* private */
	size_t mark_[4];
	int depth_;
	bool sequence_;
	bool failed_;
	int err_;      /* the first error: -ENOMEM or -EINVAL */
	bool in_list_; /* between _list_begin and _list_end */
	bool lists_;   /* the feature_lists field is open */
};

void pbex_enc_init(struct pbex_enc *e);
void pbex_enc_fini(struct pbex_enc *e);
/* Start a record; sequence = true for a SequenceExample. */
void pbex_enc_reset(struct pbex_enc *e, bool sequence);
/* Example features, or SequenceExample context features. */
void pbex_enc_add_int64s(struct pbex_enc *e, const char *name, const int64_t *v, size_t n);
void pbex_enc_add_floats(struct pbex_enc *e, const char *name, const float *v, size_t n);
void pbex_enc_add_bytes(struct pbex_enc *e, const char *name, const void *const *v,
			const size_t *lens, size_t n);
void pbex_enc_add_empty(struct pbex_enc *e, const char *name); /* Feature{} */
/* SequenceExample feature lists (after all context features). */
void pbex_enc_list_begin(struct pbex_enc *e, const char *name);
void pbex_enc_step_int64s(struct pbex_enc *e, const int64_t *v, size_t n);
void pbex_enc_step_floats(struct pbex_enc *e, const float *v, size_t n);
void pbex_enc_step_bytes(struct pbex_enc *e, const void *const *v, const size_t *lens, size_t n);
void pbex_enc_list_end(struct pbex_enc *e);
/* 0 and the record in e->buf[0 .. e->len), or -ENOMEM / -EINVAL (calls out of order). */
int pbex_enc_finish(struct pbex_enc *e);

#endif
