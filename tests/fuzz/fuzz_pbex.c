/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the Example / SequenceExample decoder, both walks and every accessor. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/pbex.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * The input is one record. It is decoded as an Example with a small schema, as a
 * SequenceExample, and walked with both _foreach functions; every feature found is read out
 * with its accessor into a heap buffer of exactly its count (so that ASan sees a write past
 * it), and bytes values are read byte by byte. Invariants that must hold whatever the input
 * (counts, byte totals, decode agreeing with foreach) abort when broken: that is a bug.
 */

static const char *const names[] = { "a",   "b", "", "f0", "c0", "label", "image/encoded",
				     "tok", "s", "k" };
#define NNAMES (sizeof(names) / sizeof(names[0]))

static void check(int cond, const char *what)
{
	if (!cond) {
		fprintf(stderr, "fuzz_pbex: invariant broken: %s\n", what);
		abort();
	}
}

static uint64_t touch_feature(const struct pbex_feature *f)
{
	struct pbex_bytes_iter it;
	const uint8_t *d;
	uint64_t sum = 0, total = 0;
	uint32_t n = 0;
	size_t l;

	if (!f->present) {
		check(f->kind == PBEX_KIND_NONE && f->count == 0, "absent feature has values");
		return 0;
	}
	switch (f->kind) {
	case PBEX_KIND_INT64: {
		int64_t *v = malloc((f->count ? f->count : 1) * sizeof(*v));

		if (!v)
			return 0;
		pbex_feature_int64s(f, v);
		for (uint32_t i = 0; i < f->count; i++)
			sum += (uint64_t)v[i];
		free(v);
		break;
	}
	case PBEX_KIND_FLOAT: {
		float *v = malloc((f->count ? f->count : 1) * sizeof(*v));

		if (!v)
			return 0;
		pbex_feature_floats(f, v);
		for (uint32_t i = 0; i < f->count; i++) {
			uint32_t u;

			memcpy(&u, &v[i], 4);
			sum += u;
		}
		free(v);
		break;
	}
	case PBEX_KIND_BYTES:
		pbex_bytes_iter_init(&it, f);
		while (pbex_bytes_iter_next(&it, &d, &l)) {
			for (size_t i = 0; i < l; i++)
				sum += d[i];
			total += l;
			n++;
		}
		check(n == f->count, "bytes iterator count");
		check(total == f->bytes_len, "bytes iterator total");
		break;
	case PBEX_KIND_NONE:
		check(f->count == 0, "Feature{} has values");
		break;
	default:
		check(0, "bad kind");
	}
	return sum;
}

static uint64_t touch_list(const struct pbex_feature_list *l)
{
	struct pbex_list_iter it;
	struct pbex_feature step;
	uint64_t sum = 0;
	uint32_t n = 0;

	pbex_list_iter_init(&it, l);
	while (pbex_list_iter_next(&it, &step)) {
		check(step.present, "step not present");
		sum += touch_feature(&step);
		n++;
	}
	check(n == l->count, "list iterator count");
	return sum;
}

/* What foreach saw for the schema's names (the last visit wins). */
struct seen {
	const struct pbex_schema *s;
	struct pbex_feature f[NNAMES];
	uint32_t steps[NNAMES];
	bool list_present[NNAMES];
	uint64_t sum;
};

static int feature_cb(void *ctx, const uint8_t *name, size_t name_len, const struct pbex_feature *f)
{
	struct seen *sn = ctx;
	long i = pbex_schema_find(sn->s, name, name_len);

	sn->sum += touch_feature(f);
	if (i >= 0)
		sn->f[i] = *f;
	return 0;
}

static int list_cb(void *ctx, const uint8_t *name, size_t name_len,
		   const struct pbex_feature_list *l)
{
	struct seen *sn = ctx;
	long i = pbex_schema_find(sn->s, name, name_len);

	sn->sum += touch_list(l);
	if (i >= 0) {
		sn->steps[i] = l->count;
		sn->list_present[i] = true;
	}
	return 0;
}

/* Whether two decoded features hold the same values (kind, count, every value). */
static bool same_feature(const struct pbex_feature *a, const struct pbex_feature *b)
{
	if (a->present != b->present || a->kind != b->kind || a->count != b->count ||
	    a->bytes_len != b->bytes_len)
		return false;
	if (!a->present || !a->count)
		return true;
	if (a->kind == PBEX_KIND_INT64 || a->kind == PBEX_KIND_FLOAT) {
		size_t n = a->count * 8ull;
		uint8_t *x = malloc(n), *y = malloc(n);
		bool eq = false;

		if (x && y) {
			if (a->kind == PBEX_KIND_INT64) {
				pbex_feature_int64s(a, (int64_t *)(void *)x);
				pbex_feature_int64s(b, (int64_t *)(void *)y);
			} else {
				pbex_feature_floats(a, (float *)(void *)x);
				pbex_feature_floats(b, (float *)(void *)y);
				n = a->count * 4ull;
			}
			eq = memcmp(x, y, n) == 0;
		}
		free(x);
		free(y);
		return eq || !x || !y;
	}
	struct pbex_bytes_iter ia, ib;
	const uint8_t *da, *db;
	size_t la, lb;

	pbex_bytes_iter_init(&ia, a);
	pbex_bytes_iter_init(&ib, b);
	while (pbex_bytes_iter_next(&ia, &da, &la)) {
		if (!pbex_bytes_iter_next(&ib, &db, &lb) || la != lb || memcmp(da, db, la) != 0)
			return false;
	}
	return !pbex_bytes_iter_next(&ib, &db, &lb);
}

static bool same_list(const struct pbex_feature_list *a, const struct pbex_feature_list *b)
{
	struct pbex_list_iter ia, ib;
	struct pbex_feature fa, fb;

	if (a->present != b->present || a->count != b->count)
		return false;
	pbex_list_iter_init(&ia, a);
	pbex_list_iter_init(&ib, b);
	while (pbex_list_iter_next(&ia, &fa)) {
		if (!pbex_list_iter_next(&ib, &fb) || !same_feature(&fa, &fb))
			return false;
	}
	return !pbex_list_iter_next(&ib, &fb);
}

/*
 * The flat form (the record cache's decoded level): decoded features, flattened and viewed
 * again, hold the same values; a buffer one byte short is refused; a cut flat form is not
 * taken for a whole one.
 */
static void check_flat(const struct pbex_feature *f, size_t n)
{
	size_t need = pbex_flat_size(f, n);
	uint64_t *buf = malloc(need + 8); /* 8-aligned */
	struct pbex_feature v[NNAMES];

	if (!buf)
		return;
	uint8_t *out = (uint8_t *)buf;
	check(need == 0 || pbex_flatten(f, n, out, need - 1) == -ENOSPC, "flatten: short buffer");
	long len = pbex_flatten(f, n, out, need);
	check(len == (long)need, "flatten: its size");
	check(pbex_flat_view(out, (size_t)len, n, v) == 0, "flat view of a flat form");
	for (size_t i = 0; i < n; i++)
		check(same_feature(&f[i], &v[i]), "flat feature differs from the decoded one");
	if (len > 0 && (size_t)len > n * 16 && f[n - 1].count > 0)
		check(pbex_flat_view(out, (size_t)len - 1, n, v) == -EBADMSG, "a cut flat form");
	/*
	 * Its values apart from its heads (the record cache's values-only records): the same
	 * features; values cut short, or heads cut short, are refused.
	 */
	size_t hl = n * 16, vl = (size_t)len - hl;
	uint64_t *vbuf = malloc(vl + 8);
	if (vbuf) {
		memcpy(vbuf, out + hl, vl);
		const uint8_t *vals = (const uint8_t *)vbuf;
		check(pbex_flat_view_parts(out, hl, vals, hl, (size_t)len, n, v) == 0, "flat view "
										       "of heads "
										       "and values "
										       "apart");
		for (size_t i = 0; i < n; i++)
			check(same_feature(&f[i], &v[i]), "flat feature apart differs");
		if (vl > 0 && f[n - 1].count > 0)
			check(pbex_flat_view_parts(out, hl, vals, hl, (size_t)len - 1, n, v) ==
				      -EBADMSG,
			      "cut values apart");
		if (n > 0)
			check(pbex_flat_view_parts(out, hl - 1, vals, hl, (size_t)len, n, v) ==
				      -EBADMSG,
			      "cut heads apart");
		free(vbuf);
	}
	free(buf);
}

/* The first half of the names: projection must drop the others and keep these exactly. */
#define NSUB (NNAMES / 2)

static struct pbex_schema *sub_schema(void)
{
	static struct pbex_schema *s;
	size_t lens[NSUB];

	if (s)
		return s;
	for (size_t i = 0; i < NSUB; i++)
		lens[i] = strlen(names[i]);
	s = pbex_schema_create(names, lens, NSUB);
	return s;
}

/*
 * Projection (the record cache's): for a record that decodes, the projected record decodes to
 * the same features, value for value, for the names projected.
 */
static void check_projection(const uint8_t *data, size_t size, bool sequence)
{
	const struct pbex_schema *sub = sub_schema();
	struct pbex_feature a[NSUB], b[NSUB];
	struct pbex_feature_list la[NSUB], lb[NSUB];
	size_t cap = size + 12;
	uint8_t *out = malloc(cap);
	long n;

	if (!sub || !out) {
		free(out);
		return;
	}
	if (sequence ? pbex_decode_sequence_example(sub, sub, data, size, a, la, NULL)
		     : pbex_decode_example(sub, data, size, a, NULL)) {
		/* a record that does not decode: neither does its projection, if there is one
		   (the record cache relies on it to keep such records whole) */
		n = pbex_project(sub, sequence ? sub : NULL, sequence, data, size, out, cap);
		if (n >= 0)
			check((sequence ? pbex_decode_sequence_example(sub, sub, out, (size_t)n, b,
								       lb, NULL)
					: pbex_decode_example(sub, out, (size_t)n, b, NULL)) != 0,
			      "the projection of a record that does not decode decodes");
		free(out);
		return;
	}
	n = pbex_project(sub, sequence ? sub : NULL, sequence, data, size, out, cap);
	check(n >= 0 && (size_t)n <= cap, "projection of a record that decodes");
	check(pbex_project(sub, sequence ? sub : NULL, sequence, data, size, out,
			   n > 0 ? (size_t)n - 1 : 0) == (n > 0 ? -ENOSPC : 0),
	      "projection into too small a buffer");
	n = pbex_project(sub, sequence ? sub : NULL, sequence, data, size, out, cap);
	check((sequence ? pbex_decode_sequence_example(sub, sub, out, (size_t)n, b, lb, NULL)
			: pbex_decode_example(sub, out, (size_t)n, b, NULL)) == 0,
	      "the projected record decodes");
	for (size_t i = 0; i < NSUB; i++) {
		check(same_feature(&a[i], &b[i]), "projected feature differs");
		if (sequence)
			check(same_list(&la[i], &lb[i]), "projected feature list differs");
	}
	free(out);
	if (!sequence)
		check_flat(a, NSUB);
}

static struct pbex_schema *schema(void)
{
	static struct pbex_schema *s;
	size_t lens[NNAMES];

	if (s)
		return s;
	for (size_t i = 0; i < NNAMES; i++)
		lens[i] = strlen(names[i]);
	s = pbex_schema_create(names, lens, NNAMES);
	return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pbex_feature out[NNAMES], ctx[NNAMES];
	struct pbex_feature_list lists[NNAMES];
	const struct pbex_schema *s = schema();
	struct io_error err;
	struct seen sn;
	int rc, frc;
	uint64_t sum = 0;

	if (!s)
		return 0;

	/* Example */
	memset(&sn, 0, sizeof(sn));
	sn.s = s;
	memset(&err, 0, sizeof(err));
	frc = pbex_example_foreach(data, size, feature_cb, &sn, &err);
	check(frc == 0 || (frc == -EBADMSG && strlen(err.msg) > 0), "foreach result");
	memset(&err, 0, sizeof(err));
	rc = pbex_decode_example(s, data, size, out, &err);
	check(rc == 0 || (rc == -EBADMSG && strlen(err.msg) > 0), "decode result");
	if (frc == 0) /* a record foreach accepts, decode accepts, with the same values */
		check(rc == 0, "decode rejects what foreach accepts");
	if (rc == 0) {
		for (size_t i = 0; i < NNAMES; i++) {
			sum += touch_feature(&out[i]);
			if (frc == 0) {
				check(out[i].present == sn.f[i].present, "present differs");
				check(out[i].kind == sn.f[i].kind, "kind differs");
				check(out[i].count == sn.f[i].count, "count differs");
				check(out[i].bytes_len == sn.f[i].bytes_len, "bytes_len differs");
			}
		}
	}

	/* SequenceExample */
	memset(&sn, 0, sizeof(sn));
	sn.s = s;
	frc = pbex_sequence_example_foreach(data, size, feature_cb, list_cb, &sn, &err);
	check(frc == 0 || frc == -EBADMSG, "sequence foreach result");
	rc = pbex_decode_sequence_example(s, s, data, size, ctx, lists, &err);
	check(rc == 0 || rc == -EBADMSG, "sequence decode result");
	if (frc == 0)
		check(rc == 0, "sequence decode rejects what foreach accepts");
	if (rc == 0) {
		for (size_t i = 0; i < NNAMES; i++) {
			sum += touch_feature(&ctx[i]);
			sum += touch_list(&lists[i]);
			if (frc == 0) {
				check(ctx[i].count == sn.f[i].count, "context count differs");
				check(lists[i].present == sn.list_present[i], "list present "
									      "differs");
				check(lists[i].count == sn.steps[i], "list count differs");
			}
		}
	}
	rc = pbex_decode_sequence_example(NULL, NULL, data, size, NULL, NULL, NULL);
	check(rc == 0 || rc == -EBADMSG, "sequence decode (nothing asked) result");
	rc = pbex_sequence_example_foreach(data, size, NULL, NULL, NULL, NULL);
	check(rc == 0 || rc == -EBADMSG, "sequence foreach (no callbacks) result");

	check_projection(data, size, false);
	check_projection(data, size, true);

	/* keep the sums alive */
	if (sum + sn.sum == 0x5eed5eed5eed5eedull)
		fprintf(stderr, "fuzz_pbex: %llu\n", (unsigned long long)sum);
	return 0;
}
