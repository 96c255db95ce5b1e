/* SPDX-License-Identifier: Apache-2.0 */
/* Test support for daemon/pipeline/pipeline.c: the dataset, specs, allocators, stream checks. */
#include "tests/unit/pipeline/pipeline_fixture.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/pipeline/pipeline.h"
#include "daemon/pipeline/spec.h"
#include "io/manifest.h"
#include "io/pbex.h"
#include "io/tfr.h"
#include "ipc/batch.h"

const unsigned FILE_RECS[N_FILES] = { 250, 300, 200, 257 };

/* The test group's temporary directory and its main dataset. */
char g_tmp[512];
static char g_main[PATH_MAX];
struct dataset_layout g_layout;

int64_t rec_id(unsigned file, unsigned index)
{
	return (int64_t)file * ID_FILE + index;
}

void file_path(const char *dir, unsigned k, char *out)
{
	int n = snprintf(out, PATH_MAX, "%s/part-%u.tfrecords", dir, k);
	assert_true(n > 0 && n < PATH_MAX);
}

static void fill_feature(struct manifest_feature *f, const char *name, enum manifest_dtype t,
			 enum manifest_deser d, unsigned rank, int64_t dim0)
{
	memset(f, 0, sizeof(*f));
	f->name = (char *)name;
	f->dtype = t;
	f->deser = d;
	f->rank = rank;
	f->shape[0] = dim0;
	f->raw_len = -1;
}

/*
 * Write the dataset into dir (which must exist): the manifest and N_FILES files. The record
 * (spoil_file, spoil_index) is spoiled as `spoil` says. Returns 0 or -errno.
 */
int make_dataset(const char *dir, enum spoil spoil, unsigned spoil_file, unsigned spoil_index,
		 struct dataset_layout *ret_layout)
{
	struct manifest m = { .compression = TFR_COMPRESSION_NONE, .allow_var_len = false };
	struct manifest_feature feats[3];
	struct io_error err;
	struct pbex_enc enc;
	char path[PATH_MAX];
	int r;

	fill_feature(&feats[0], "id", MANIFEST_DTYPE_INT64, MANIFEST_DESER_INT, 0, 0);
	fill_feature(&feats[1], "vec", MANIFEST_DTYPE_FLOAT32, MANIFEST_DESER_FLOAT, 1, 2);
	fill_feature(&feats[2], "tag", MANIFEST_DTYPE_STRING, MANIFEST_DESER_STRING, 0, 0);
	m.features = feats;
	m.n_features = 3;
	if ((size_t)snprintf(path, sizeof(path), "%s/__manifest__.json", dir) >= sizeof(path))
		return -ENAMETOOLONG;
	r = manifest_write_file(&m, path, &err);
	if (r < 0)
		return r;
	pbex_enc_init(&enc);
	for (unsigned k = 0; k < N_FILES && r == 0; k++) {
		struct tfr_writer *w;
		uint64_t at = 0;

		file_path(dir, k, path);
		r = tfr_writer_open(path, TFR_COMPRESSION_NONE, -1, &w);
		if (r < 0)
			break;
		for (unsigned i = 0; i < FILE_RECS[k] && r == 0; i++) {
			int64_t id = rec_id(k, i);
			float vec[2] = { (float)id * 0.5f, (float)-id };
			char tag[32];
			const void *tv = tag;
			size_t tl = (size_t)snprintf(tag, sizeof(tag), "r%lld", (long long)id);

			pbex_enc_reset(&enc, false);
			if (!(spoil == SPOIL_NO_ID && k == spoil_file && i == spoil_index))
				pbex_enc_add_int64s(&enc, "id", &id, 1);
			pbex_enc_add_floats(&enc, "vec", vec, 2);
			pbex_enc_add_bytes(&enc, "tag", &tv, &tl, 1);
			if (spoil == SPOIL_PAD) {
				static const uint8_t pad[8000];
				const void *pv = pad;
				size_t pn = sizeof(pad);
				pbex_enc_add_bytes(&enc, "pad", &pv, &pn, 1);
			}
			r = pbex_enc_finish(&enc);
			if (r == 0)
				r = tfr_writer_write(w, enc.buf, enc.len);
			if (ret_layout) {
				ret_layout->off[k][i] = at + TFR_HEADER_LEN;
				ret_layout->len[k][i] = (uint32_t)enc.len;
			}
			at += TFR_HEADER_LEN + enc.len + TFR_FOOTER_LEN;
		}
		if (ret_layout)
			ret_layout->size[k] = at;
		int c = tfr_writer_close(w);
		if (r == 0)
			r = c;
	}
	pbex_enc_fini(&enc);
	return r;
}

/* A fresh directory under the group's temporary directory. */
void sub_dir(const char *name, char *out)
{
	int n = snprintf(out, PATH_MAX, "%s/%s", g_tmp, name);
	assert_true(n > 0 && n < PATH_MAX);
	assert_int_equal(mkdir(out, 0700), 0);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

int group_setup(void **state)
{
	const char *t = getenv("TMPDIR");

	snprintf(g_tmp, sizeof(g_tmp), "%s/test_pl_pipeline.XXXXXX", t && *t ? t : "/tmp");
	if (!mkdtemp(g_tmp))
		return -1;
	snprintf(g_main, sizeof(g_main), "%s/main", g_tmp);
	if (mkdir(g_main, 0700) < 0)
		return -1;
	return make_dataset(g_main, SPOIL_NONE, 0, 0, &g_layout) < 0 ? -1 : 0;
}

int group_teardown(void **state)
{
	return nftw(g_tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- specs ---- */

struct spec_args spec_default(void)
{
	struct spec_args a = {
		.dir = g_main,
		.batch = 64,
		.epochs = "1",
		.prefetch = 2,
		.parses = 2,
		.reads = 1,
		.shuffle = false,
		.seed = 7,
		.on_corrupt = "fail",
		.id_from = "id",
	};
	return a;
}

struct pl_spec *make_spec(const struct spec_args *a)
{
	char json[4096], shuffle[256] = "", shard[128] = "", reads[96], knobs[160];
	struct pl_spec *spec = NULL;
	struct io_error err = { { 0 } };
	int n;

	if (a->global)
		snprintf(shuffle, sizeof(shuffle), "\"shuffle\": \"global\", ");
	else if (a->shuffle)
		snprintf(shuffle, sizeof(shuffle),
			 "\"shuffle\": true, \"num_shuffle_buffer_elements\": "
			 "%d, \"num_filenames_shuffle_buffer\": 4, \"num_mix_files\": 2, ",
			 a->shuffle_elems ? a->shuffle_elems : 100);
	if (a->shard)
		snprintf(shard, sizeof(shard), "\"shard\": %s, ", a->shard);
	if (a->reads < 0)
		snprintf(reads, sizeof(reads), "\"auto\"");
	else
		snprintf(reads, sizeof(reads), "%d", a->reads);
	if (a->cycle_length)
		snprintf(reads + strlen(reads), sizeof(reads) - strlen(reads),
			 ", \"cycle_length\": %d", a->cycle_length);
	/* num_read_buffer_bytes, num_prefetch and ram_budget */
	n = a->read_bytes < 0
		    ? snprintf(knobs, sizeof(knobs), "\"auto\"")
		    : snprintf(knobs, sizeof(knobs), "%ld", a->read_bytes ? a->read_bytes : 4096L);
	n += a->prefetch < 0 ? snprintf(knobs + n, sizeof(knobs) - (size_t)n,
					", \"num_prefetch\": \"auto\"")
			     : snprintf(knobs + n, sizeof(knobs) - (size_t)n,
					", \"num_prefetch\": %d", a->prefetch);
	if (a->ram_budget)
		snprintf(knobs + n, sizeof(knobs) - (size_t)n, ", \"ram_budget\": %lld",
			 a->ram_budget);
	n = snprintf(json, sizeof(json),
		     "{\"type\": \"independent\", \"args\": {"
		     "\"dataset\": {\"type\": \"dir\", \"args\": {\"data_dir\": \"%s\"}}, "
		     "\"target_batch_size\": %d, \"drop_remainder\": %s, \"epochs\": %s, "
		     "\"num_read_buffer_bytes\": %s, "
		     "\"num_parallel_parses\": %d, \"num_parallel_reads\": %s, %s%s"
		     "\"sloppy_interleave\": %s, "
		     "\"seed\": %llu, \"on_corrupt\": \"%s\", \"primary_features\": ["
		     "{\"from_name\": \"%s\", \"to_name\": \"id\"}, "
		     "{\"from_name\": \"vec\", \"to_name\": \"vec\"}%s]}}",
		     a->dir, a->batch, a->drop_remainder ? "true" : "false", a->epochs, knobs,
		     a->parses, reads, shuffle, shard, a->sloppy ? "true" : "false",
		     (unsigned long long)a->seed, a->on_corrupt, a->id_from,
		     a->no_tag ? "" : ", {\"from_name\": \"tag\", \"to_name\": \"tag\"}");
	assert_true(n > 0 && (size_t)n < sizeof(json));
	if (pl_spec_parse(json, (size_t)n, "<spec>", &spec, &err) != 0)
		fail_msg("spec: %s\n%s", err.msg, json);
	return spec;
}

/* ---- a counting allocator ---- */

void ca_init(struct count_alloc *c)
{
	memset(c, 0, sizeof(*c));
	c->poison = CA_POISON;
	pthread_mutex_init(&c->lock, NULL);
}

void ca_fini(struct count_alloc *c)
{
	pthread_mutex_destroy(&c->lock);
}

void *ca_alloc(void *ctx, size_t len)
{
	struct count_alloc *c = ctx;
	void *m;

	if (c->delay_us)
		usleep(c->delay_us); /* the workload: a slow allocator */
	m = aligned_alloc(IPC_BATCH_EXTENT_ALIGN, len);
	if (!m)
		return NULL;
	memset(m, c->poison, len); /* bytes the pipeline leaves unwritten show in comparisons */
	pthread_mutex_lock(&c->lock);
	if (c->live_n == CA_MAX_LIVE) {
		c->misuse = true;
	} else {
		c->mem[c->live_n] = m;
		c->len[c->live_n++] = len;
		c->live_bytes += len;
		c->total_n++;
		if (c->live_n > c->max_live_n)
			c->max_live_n = c->live_n;
	}
	pthread_mutex_unlock(&c->lock);
	return m;
}

void ca_free(void *ctx, void *mem, size_t len)
{
	struct count_alloc *c = ctx;
	bool found = false;

	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < c->live_n; i++) {
		if (c->mem[i] != mem)
			continue;
		if (c->len[i] != len)
			c->misuse = true;
		c->live_bytes -= c->len[i];
		c->mem[i] = c->mem[--c->live_n];
		c->len[i] = c->len[c->live_n];
		found = true;
		break;
	}
	if (!found)
		c->misuse = true;
	pthread_mutex_unlock(&c->lock);
	if (found)
		free(mem);
}

/* Whether [mem, mem + len) is exactly one live allocation of c. */
bool ca_owns(struct count_alloc *c, const void *mem, size_t len)
{
	bool r = false;

	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < c->live_n; i++)
		if (c->mem[i] == mem && c->len[i] == len)
			r = true;
	pthread_mutex_unlock(&c->lock);
	return r;
}

size_t ca_live(struct count_alloc *c)
{
	pthread_mutex_lock(&c->lock);
	size_t n = c->live_bytes;
	pthread_mutex_unlock(&c->lock);
	return n;
}

void opts_with(struct pl_pipeline_opts *o, struct count_alloc *c)
{
	pl_pipeline_opts_init(o);
	o->alloc = ca_alloc;
	o->free = ca_free;
	o->alloc_ctx = c;
}

/* ---- checking batches (no cmocka asserts: also runs on other threads) ---- */

/*
 * Check a batch's extent with ipc_batch_view/ipc_batch_tensor, that it agrees with *b, and that
 * every row's vec and tag match its id; append the ids to ids[*n_ids..]. 0, or -1 and why.
 */
static int verify_batch(const struct pl_batch *b, int64_t *ids, size_t *n_ids, size_t cap,
			char *why, size_t why_cap)
{
	struct ipc_batch_view v;
	struct ipc_tensor_view t[3];
	char msg[256];

	if ((uintptr_t)b->mem % IPC_BATCH_EXTENT_ALIGN || b->len % IPC_BATCH_EXTENT_ALIGN) {
		snprintf(why, why_cap, "batch %llu: extent %p + %zu not 4096-aligned",
			 (unsigned long long)b->seq, b->mem, b->len);
		return -1;
	}
	if (ipc_batch_view(b->mem, b->len, &v, msg, sizeof(msg)) != 0) {
		snprintf(why, why_cap, "batch %llu: view: %s", (unsigned long long)b->seq, msg);
		return -1;
	}
	if (v.seq != b->seq || v.epoch != b->epoch || v.rows != b->rows || v.flags != b->flags) {
		snprintf(why, why_cap, "batch %llu: header disagrees with struct pl_batch",
			 (unsigned long long)b->seq);
		return -1;
	}
	if (v.n_tensors != 2 && v.n_tensors != 3) {
		snprintf(why, why_cap, "batch %llu: %u tensors", (unsigned long long)b->seq,
			 v.n_tensors);
		return -1;
	}
	for (unsigned i = 0; i < v.n_tensors; i++) {
		if (ipc_batch_tensor(&v, i, &t[i], msg, sizeof(msg)) != 0) {
			snprintf(why, why_cap, "batch %llu: tensor %u: %s",
				 (unsigned long long)b->seq, i, msg);
			return -1;
		}
		if (t[i].schema_index != i || t[i].kind != IPC_TENSOR_DENSE ||
		    t[i].shape[0] != (int64_t)v.rows) {
			snprintf(why, why_cap, "batch %llu: tensor %u: bad schema index/kind/rows",
				 (unsigned long long)b->seq, i);
			return -1;
		}
	}
	if (t[0].dtype != IPC_DTYPE_INT64 || t[0].rank != 1 || t[1].dtype != IPC_DTYPE_FLOAT32 ||
	    t[1].rank != 2 || t[1].shape[1] != 2 ||
	    (v.n_tensors == 3 && (t[2].dtype != IPC_DTYPE_STRING || t[2].rank != 1))) {
		snprintf(why, why_cap, "batch %llu: tensor dtypes or shapes wrong",
			 (unsigned long long)b->seq);
		return -1;
	}
	if (*n_ids + v.rows > cap) {
		snprintf(why, why_cap, "batch %llu: more rows than the dataset has",
			 (unsigned long long)b->seq);
		return -1;
	}
	for (uint64_t r = 0; r < v.rows; r++) {
		int64_t id;
		float vec[2];
		char tag[32];

		memcpy(&id, (const uint8_t *)t[0].data + r * 8, 8);
		memcpy(vec, (const uint8_t *)t[1].data + r * 8, 8);
		if (vec[0] != (float)id * 0.5f || vec[1] != (float)-id) {
			snprintf(why, why_cap, "batch %llu row %llu: vec does not match id %lld",
				 (unsigned long long)b->seq, (unsigned long long)r, (long long)id);
			return -1;
		}
		if (v.n_tensors == 3) {
			int tl = snprintf(tag, sizeof(tag), "r%lld", (long long)id);
			int64_t s = t[2].offsets[r], e = t[2].offsets[r + 1];
			if (e - s != tl ||
			    memcmp((const char *)t[2].data + s, tag, (size_t)tl) != 0) {
				snprintf(why, why_cap,
					 "batch %llu row %llu: tag does not match id %lld",
					 (unsigned long long)b->seq, (unsigned long long)r,
					 (long long)id);
				return -1;
			}
		}
		ids[(*n_ids)++] = id;
	}
	return 0;
}

/* ---- streams ---- */

struct stream *stream_new(void)
{
	struct stream *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	return s;
}

void stream_free(struct stream *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++)
		free(s->b[i].copy);
	free(s->b);
	free(s);
}

/*
 * Take up to max batches (0: all) with pl_pipeline_next(-1), verifying and releasing each;
 * keep copies of the extents when copy is set. Thread-safe (no cmocka asserts).
 */
void stream_add(struct stream *s, const struct pl_batch *b, bool copy)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 64;
		s->b = realloc(s->b, s->cap * sizeof(*s->b));
		if (!s->b)
			abort();
	}
	struct bmeta *m = &s->b[s->n++];
	memset(m, 0, sizeof(*m));
	m->seq = b->seq;
	m->epoch = b->epoch;
	m->rows = b->rows;
	m->flags = b->flags;
	m->len = b->len;
	m->index = ((const struct ipc_batch_hdr *)b->mem)->index_in_epoch;
	m->first_id = s->n_ids;
	if (!s->bad && verify_batch(b, s->ids, &s->n_ids, sizeof(s->ids) / sizeof(s->ids[0]),
				    s->why, sizeof(s->why)) < 0)
		s->bad = true;
	if (copy) {
		m->copy = malloc(b->len);
		if (!m->copy)
			abort();
		memcpy(m->copy, b->mem, b->len);
	}
}

void drain(struct pl_pipeline *p, struct stream *s, size_t max, bool copy)
{
	for (;;) {
		struct pl_batch *b = NULL;
		int r;

		if (max && s->n == max) {
			s->end = 1;
			return;
		}
		r = pl_pipeline_next(p, -1, &b, &s->err);
		if (r <= 0) {
			s->end = r;
			return;
		}
		stream_add(s, b, copy);
		pl_batch_release(p, b);
	}
}

void assert_stream_ok(const struct stream *s)
{
	if (s->bad)
		fail_msg("%s", s->why);
	if (s->end < 0)
		fail_msg("stream ended with %d: %s", s->end, s->err.msg);
}

/* Create a pipeline for spec args a with opts o (NULL: defaults), asserting success. */
struct pl_pipeline *create(const struct spec_args *a, const struct pl_pipeline_opts *o)
{
	struct pl_spec *spec = make_spec(a);
	struct pl_pipeline *p = NULL;
	struct io_error err = { { 0 } };
	int r = pl_pipeline_create(spec, o, &p, &err);

	pl_spec_destroy(spec);
	if (r != 0)
		fail_msg("pl_pipeline_create: %d: %s", r, err.msg);
	assert_non_null(p);
	return p;
}

/* The whole stream of spec a (defaults opts), with copies. */
struct stream *run_all(const struct spec_args *a, const struct pl_pipeline_opts *o, bool copy)
{
	struct pl_pipeline *p = create(a, o);
	struct stream *s = stream_new();

	drain(p, s, 0, copy);
	pl_pipeline_destroy(p);
	assert_stream_ok(s);
	return s;
}

/* Which part of the extent byte `at` lies in: NULL for bytes that belong to no tensor. */
static const char *extent_part(const uint8_t *mem, size_t at, char *buf, size_t cap)
{
	const struct ipc_batch_hdr *h = (const struct ipc_batch_hdr *)mem;
	const struct ipc_batch_tensor *t = (const struct ipc_batch_tensor *)(h + 1);
	size_t table_end = sizeof(*h) + h->n_tensors * sizeof(*t);

	if (at < sizeof(*h))
		return "the header";
	if (at < table_end)
		return "the tensor table";
	for (unsigned i = 0; i < h->n_tensors; i++) {
		uint64_t n = 1;
		for (unsigned d = 0; d < t[i].rank; d++)
			n *= (uint64_t)t[i]
				     .shape[d]; /* dense (these tests have no ragged tensor) */
		if (at >= t[i].data_off && at < t[i].data_off + t[i].data_len) {
			snprintf(buf, cap, "tensor %u's data", i);
			return buf;
		}
		if (t[i].offsets_off && at >= t[i].offsets_off &&
		    at < t[i].offsets_off + (n + 1) * 8) {
			snprintf(buf, cap, "tensor %u's offsets", i);
			return buf;
		}
		if (t[i].splits_off && at >= t[i].splits_off &&
		    at < t[i].splits_off + ((uint64_t)t[i].shape[0] + 1) * 8) {
			snprintf(buf, cap, "tensor %u's row_splits", i);
			return buf;
		}
	}
	return NULL;
}

/*
 * y's batches equal x's from x_from on: the header, the tensor table and every tensor's bytes;
 * with whole, every byte of the extents (alignment padding and the tail included).
 */
void assert_same_batch(const struct bmeta *a, const struct bmeta *b, size_t i, bool whole)
{
	char part[64];
	const char *what;

	if (a->len != b->len)
		fail_msg("batch %zu (seq %llu): extents of %zu and %zu bytes", i,
			 (unsigned long long)b->seq, a->len, b->len);
	if (memcmp(a->copy, b->copy, a->len) == 0)
		return;
	for (size_t at = 0; at < a->len; at++) {
		if (a->copy[at] == b->copy[at])
			continue;
		what = extent_part(a->copy, at, part, sizeof(part));
		if (what || whole)
			fail_msg("batch %zu (seq %llu): extents differ at byte %zu (of %zu), in "
				 "%s: "
				 "0x%02x vs 0x%02x",
				 i, (unsigned long long)b->seq, at, a->len,
				 what ? what
				      : "bytes of no tensor (alignment padding or the tail): "
					"left unwritten?",
				 a->copy[at], b->copy[at]);
	}
}

void assert_same_batches_(const struct stream *x, size_t x_from, const struct stream *y, bool whole)
{
	assert_int_equal(x->n - x_from, y->n);
	for (size_t i = 0; i < y->n; i++)
		assert_same_batch(&x->b[x_from + i], &y->b[i], i, whole);
}

void assert_same_batches(const struct stream *x, size_t x_from, const struct stream *y)
{
	assert_same_batches_(x, x_from, y, false);
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* Whether ids[0..n) is a permutation of the dataset's ids, less the ids in `minus`. */
void assert_permutation(const int64_t *ids, size_t n, const int64_t *minus, size_t n_minus)
{
	int64_t *got = malloc((n + 1) * sizeof(*got)), *want = malloc(N_RECS * sizeof(*want));
	size_t n_want = 0;

	assert_non_null(got);
	assert_non_null(want);
	for (unsigned k = 0; k < N_FILES; k++)
		for (unsigned i = 0; i < FILE_RECS[k]; i++) {
			bool skip = false;
			for (size_t j = 0; j < n_minus; j++)
				skip |= minus[j] == rec_id(k, i);
			if (!skip)
				want[n_want++] = rec_id(k, i);
		}
	memcpy(got, ids, n * sizeof(*got));
	qsort(got, n, sizeof(*got), cmp_i64);
	assert_int_equal(n, n_want);
	for (size_t i = 0; i < n; i++)
		if (got[i] != want[i])
			fail_msg("id %lld missing or repeated (at sorted position %zu, got %lld)",
				 (long long)want[i], i, (long long)got[i]);
	free(got);
	free(want);
}

/* The dataset's ids in file order (no shuffle, one read at a time). */
int64_t file_order_id(size_t pos)
{
	for (unsigned k = 0; k < N_FILES; k++) {
		if (pos < FILE_RECS[k])
			return rec_id(k, (unsigned)pos);
		pos -= FILE_RECS[k];
	}
	return -1;
}
