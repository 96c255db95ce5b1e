/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for daemon/pipeline/pipeline.c: lifecycle, errors, checkpoints and concurrency. */
#include "daemon/pipeline/pipeline.h"

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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon/pipeline/spec.h"
#include "io/manifest.h"
#include "io/pbex.h"
#include "io/tfr.h"
#include "ipc/batch.h"
#include "sched/sched.h"

/*
 * The dataset: N_FILES files part-K.tfrecords of FILE_RECS[K] Examples each, with features
 * "id" (int64 [], K * ID_FILE + index, unique), "vec" (float32 [2], {id / 2, -id}) and "tag"
 * (string [], "r<id>"), so that every row of a batch can be checked against its id and every
 * test can tell which records came out.
 */
#define N_FILES 4
#define ID_FILE 100000
static const unsigned FILE_RECS[N_FILES] = { 250, 300, 200, 257 };
#define N_RECS (250 + 300 + 200 + 257)

/* How make_dataset may spoil a record. */
enum spoil {
	SPOIL_NONE,
	SPOIL_NO_ID, /* write the record without "id" */
	SPOIL_PAD,   /* every record also holds "pad", 8000 bytes the manifest does not name */
};

struct dataset_layout {
	/* byte offset of each record's payload in its file, and its length */
	uint64_t off[N_FILES][300];
	uint32_t len[N_FILES][300];
	uint64_t size[N_FILES];
};

/* The test group's temporary directory and its main dataset. */
static char g_tmp[512];
static char g_main[PATH_MAX];
static struct dataset_layout g_layout;

static int64_t rec_id(unsigned file, unsigned index)
{
	return (int64_t)file * ID_FILE + index;
}

static void file_path(const char *dir, unsigned k, char *out)
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
static int make_dataset(const char *dir, enum spoil spoil, unsigned spoil_file,
			unsigned spoil_index, struct dataset_layout *ret_layout)
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
	snprintf(path, sizeof(path), "%s/__manifest__.json", dir);
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
static void sub_dir(const char *name, char *out)
{
	int n = snprintf(out, PATH_MAX, "%s/%s", g_tmp, name);
	assert_true(n > 0 && n < PATH_MAX);
	assert_int_equal(mkdir(out, 0700), 0);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

static int group_setup(void **state)
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

static int group_teardown(void **state)
{
	return nftw(g_tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- specs ---- */

struct spec_args {
	const char *dir;
	int batch;
	bool drop_remainder;
	const char *epochs; /* JSON: "2", "null" */
	int prefetch;
	int parses;
	int reads;
	bool shuffle;
	uint64_t seed;
	const char *on_corrupt;
	bool no_tag;	     /* only "id" and "vec" (a plan without the measuring pass) */
	const char *id_from; /* from_name of the "id" output (default "id") */
	const char *shard;   /* JSON object, or NULL */
	bool sloppy;	     /* sloppy_interleave */
	int shuffle_elems;   /* num_shuffle_buffer_elements (0: 100) */
};

static struct spec_args spec_default(void)
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

static struct pl_spec *make_spec(const struct spec_args *a)
{
	char json[4096], shuffle[256] = "", shard[128] = "";
	struct pl_spec *spec = NULL;
	struct io_error err = { { 0 } };
	int n;

	if (a->shuffle)
		snprintf(shuffle, sizeof(shuffle),
			 "\"shuffle\": true, \"num_shuffle_buffer_elements\": "
			 "%d, \"num_filenames_shuffle_buffer\": 4, \"num_mix_files\": 2, ",
			 a->shuffle_elems ? a->shuffle_elems : 100);
	if (a->shard)
		snprintf(shard, sizeof(shard), "\"shard\": %s, ", a->shard);
	n = snprintf(json, sizeof(json),
		     "{\"type\": \"independent\", \"args\": {"
		     "\"dataset\": {\"type\": \"dir\", \"args\": {\"data_dir\": \"%s\"}}, "
		     "\"target_batch_size\": %d, \"drop_remainder\": %s, \"epochs\": %s, "
		     "\"num_read_buffer_bytes\": 4096, \"num_prefetch\": %d, "
		     "\"num_parallel_parses\": %d, \"num_parallel_reads\": %d, %s%s"
		     "\"sloppy_interleave\": %s, "
		     "\"seed\": %llu, \"on_corrupt\": \"%s\", \"primary_features\": ["
		     "{\"from_name\": \"%s\", \"to_name\": \"id\"}, "
		     "{\"from_name\": \"vec\", \"to_name\": \"vec\"}%s]}}",
		     a->dir, a->batch, a->drop_remainder ? "true" : "false", a->epochs, a->prefetch,
		     a->parses, a->reads, shuffle, shard, a->sloppy ? "true" : "false",
		     (unsigned long long)a->seed, a->on_corrupt, a->id_from,
		     a->no_tag ? "" : ", {\"from_name\": \"tag\", \"to_name\": \"tag\"}");
	assert_true(n > 0 && (size_t)n < sizeof(json));
	if (pl_spec_parse(json, (size_t)n, "<spec>", &spec, &err) != 0)
		fail_msg("spec: %s\n%s", err.msg, json);
	return spec;
}

/* ---- a counting allocator ---- */

#define CA_MAX_LIVE 256
#define CA_POISON   0xa5

struct count_alloc {
	pthread_mutex_t lock;
	size_t live_bytes, live_n, total_n, max_live_n;
	void *mem[CA_MAX_LIVE];
	size_t len[CA_MAX_LIVE];
	bool misuse;	   /* a free of memory it did not give, or with another length */
	unsigned delay_us; /* sleep in each alloc (slow producers) */
	uint8_t poison;	   /* fresh memory is filled with this (CA_POISON by ca_init) */
};

static void ca_init(struct count_alloc *c)
{
	memset(c, 0, sizeof(*c));
	c->poison = CA_POISON;
	pthread_mutex_init(&c->lock, NULL);
}

static void ca_fini(struct count_alloc *c)
{
	pthread_mutex_destroy(&c->lock);
}

static void *ca_alloc(void *ctx, size_t len)
{
	struct count_alloc *c = ctx;
	void *m;

	if (c->delay_us)
		usleep(c->delay_us);
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

static void ca_free(void *ctx, void *mem, size_t len)
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
static bool ca_owns(struct count_alloc *c, const void *mem, size_t len)
{
	bool r = false;

	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < c->live_n; i++)
		if (c->mem[i] == mem && c->len[i] == len)
			r = true;
	pthread_mutex_unlock(&c->lock);
	return r;
}

static size_t ca_live(struct count_alloc *c)
{
	pthread_mutex_lock(&c->lock);
	size_t n = c->live_bytes;
	pthread_mutex_unlock(&c->lock);
	return n;
}

static void opts_with(struct pl_pipeline_opts *o, struct count_alloc *c)
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

/* What a consumer saw. */
struct bmeta {
	uint64_t seq, epoch, rows, index;
	uint32_t flags;
	size_t len;
	uint8_t *copy;	 /* the whole extent, when asked for */
	size_t first_id; /* index into ids of its first row */
};

struct stream {
	struct bmeta *b;
	size_t n, cap;
	int64_t ids[4 * N_RECS];
	size_t n_ids;
	int end;	     /* what ended it: 0 (end of stream), an error, or 1 (max reached) */
	struct io_error err; /* the error's message */
	char why[512];	     /* the first verify failure */
	bool bad;
};

static struct stream *stream_new(void)
{
	struct stream *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	return s;
}

static void stream_free(struct stream *s)
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
static void drain(struct pl_pipeline *p, struct stream *s, size_t max, bool copy)
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
		if (!s->bad &&
		    verify_batch(b, s->ids, &s->n_ids, sizeof(s->ids) / sizeof(s->ids[0]), s->why,
				 sizeof(s->why)) < 0)
			s->bad = true;
		if (copy) {
			m->copy = malloc(b->len);
			if (!m->copy)
				abort();
			memcpy(m->copy, b->mem, b->len);
		}
		pl_batch_release(p, b);
	}
}

static void assert_stream_ok(const struct stream *s)
{
	if (s->bad)
		fail_msg("%s", s->why);
	if (s->end < 0)
		fail_msg("stream ended with %d: %s", s->end, s->err.msg);
}

/* Create a pipeline for spec args a with opts o (NULL: defaults), asserting success. */
static struct pl_pipeline *create(const struct spec_args *a, const struct pl_pipeline_opts *o)
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
static struct stream *run_all(const struct spec_args *a, const struct pl_pipeline_opts *o,
			      bool copy)
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
static void assert_same_batch(const struct bmeta *a, const struct bmeta *b, size_t i, bool whole)
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

static void assert_same_batches_(const struct stream *x, size_t x_from, const struct stream *y,
				 bool whole)
{
	assert_int_equal(x->n - x_from, y->n);
	for (size_t i = 0; i < y->n; i++)
		assert_same_batch(&x->b[x_from + i], &y->b[i], i, whole);
}

static void assert_same_batches(const struct stream *x, size_t x_from, const struct stream *y)
{
	assert_same_batches_(x, x_from, y, false);
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* Whether ids[0..n) is a permutation of the dataset's ids, less the ids in `minus`. */
static void assert_permutation(const int64_t *ids, size_t n, const int64_t *minus, size_t n_minus)
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
static int64_t file_order_id(size_t pos)
{
	for (unsigned k = 0; k < N_FILES; k++) {
		if (pos < FILE_RECS[k])
			return rec_id(k, (unsigned)pos);
		pos -= FILE_RECS[k];
	}
	return -1;
}

/* ---- the stream ---- */

/* Two shuffled epochs: every batch valid, each epoch a permutation, seq and flags in place. */
static void test_stream_epochs_shuffle(void **state)
{
	struct spec_args a = spec_default();
	struct pl_stats st;
	a.epochs = "2";
	a.shuffle = true;
	a.batch = 50;
	a.parses = 3;
	struct pl_pipeline *p = create(&a, NULL);
	struct stream *s = stream_new();

	assert_int_equal(pl_pipeline_n_tensors(p), 3);
	assert_string_equal(pl_pipeline_tensor(p, 0)->name, "id");
	assert_string_equal(pl_pipeline_tensor(p, 2)->name, "tag");
	assert_null(pl_pipeline_tensor(p, 3));
	drain(p, s, 0, false);
	assert_stream_ok(s);
	assert_int_equal(s->end, 0);

	/* 1007 rows per epoch: 20 batches of 50 and one of 7 */
	size_t per_epoch = (N_RECS + 49) / 50;
	assert_int_equal(s->n, 2 * per_epoch);
	for (size_t i = 0; i < s->n; i++) {
		const struct bmeta *m = &s->b[i];
		bool last_of_epoch = i % per_epoch == per_epoch - 1;
		uint32_t want = last_of_epoch ? IPC_BATCH_F_END_EPOCH : 0;
		if (i == s->n - 1)
			want |= IPC_BATCH_F_END_STREAM;
		assert_int_equal(m->seq, i);
		assert_int_equal(m->epoch, i / per_epoch);
		assert_int_equal(m->index, i % per_epoch);
		assert_int_equal(m->flags, want);
		assert_int_equal(m->rows, last_of_epoch ? N_RECS % 50 : 50);
	}
	assert_int_equal(s->n_ids, 2 * N_RECS);
	assert_permutation(s->ids, N_RECS, NULL, 0);
	assert_permutation(s->ids + N_RECS, N_RECS, NULL, 0);
	/* shuffled, and differently per epoch */
	assert_true(memcmp(s->ids, s->ids + N_RECS, N_RECS * sizeof(int64_t)) != 0);
	size_t in_order = 0;
	for (size_t i = 0; i < N_RECS; i++)
		in_order += s->ids[i] == file_order_id(i);
	assert_true(in_order < N_RECS / 2);

	/* the end is sticky */
	struct pl_batch *b = NULL;
	assert_int_equal(pl_pipeline_next(p, -1, &b, NULL), 0);
	assert_int_equal(pl_pipeline_next(p, 0, &b, NULL), 0);
	assert_null(b);

	pl_pipeline_get_stats(p, &st);
	assert_int_equal(st.rows, 2 * N_RECS);
	assert_int_equal(st.batches, 2 * per_epoch);
	assert_int_equal(st.skipped_records, 0);
	assert_int_equal(st.skipped_files, 0);
	assert_true(st.records >= 2 * N_RECS);
	assert_non_null(st.io_engine);
	print_message("default io engine: %s%s%s\n", st.io_engine,
		      st.io_fallback ? ", because " : "", st.io_fallback ? st.io_fallback : "");
	pl_pipeline_destroy(p);
	stream_free(s);
}

/*
 * A shuffle buffer that spans more read chunks than a slot may pin (900 records
 * of ~8 KB; chunks are 64 KiB at least, a file 2.4 MB):
 * the stragglers of old chunks are copied out (evacuations), and every epoch is still a
 * permutation of the records, the same as with a pool of another size.
 */
static void test_stream_evacuations(void **state)
{
	struct spec_args a = spec_default();
	struct pl_stats st;
	char dir[PATH_MAX];
	sub_dir("padded", dir);
	assert_int_equal(make_dataset(dir, SPOIL_PAD, 0, 0, NULL), 0);
	a.dir = dir;
	a.epochs = "2";
	a.shuffle = true;
	a.shuffle_elems = 900;
	a.batch = 50;
	struct stream *s[2];
	for (int k = 0; k < 2; k++) {
		a.parses = k ? 1 : 3;
		struct pl_pipeline *p = create(&a, NULL);
		s[k] = stream_new();
		drain(p, s[k], 0, false);
		assert_stream_ok(s[k]);
		assert_int_equal(s[k]->n_ids, 2 * N_RECS);
		assert_permutation(s[k]->ids, N_RECS, NULL, 0);
		assert_permutation(s[k]->ids + N_RECS, N_RECS, NULL, 0);
		pl_pipeline_get_stats(p, &st);
		print_message("parses %d: %llu evacuations, %llu of %llu record bytes copied\n",
			      a.parses, (unsigned long long)st.evacuations,
			      (unsigned long long)st.copied_bytes,
			      (unsigned long long)st.record_bytes);
		assert_true(st.evacuations > 0);
		assert_true(st.copied_bytes > 0);
		pl_pipeline_destroy(p);
	}
	assert_memory_equal(s[0]->ids, s[1]->ids, 2 * N_RECS * sizeof(int64_t));
	stream_free(s[0]);
	stream_free(s[1]);
}

/* Without shuffle and with one read at a time, the rows are the files in path order. */
static void test_stream_file_order(void **state)
{
	struct spec_args a = spec_default();
	a.batch = 10;
	a.drop_remainder = true;
	struct stream *s = run_all(&a, NULL, false);

	assert_int_equal(s->n, N_RECS / 10);
	assert_int_equal(s->n_ids, N_RECS / 10 * 10);
	for (size_t i = 0; i < s->n_ids; i++)
		assert_int_equal(s->ids[i], file_order_id(i));
	assert_int_equal(s->b[s->n - 1].flags, IPC_BATCH_F_END_EPOCH | IPC_BATCH_F_END_STREAM);
	stream_free(s);
}

/* 1007 = 19 * 53: the epoch's last batch is a full one and still carries the flags. */
static void test_stream_exact_batches(void **state)
{
	struct spec_args a = spec_default();
	a.batch = 53;
	a.epochs = "3";
	a.shuffle = true;
	for (int drop = 0; drop < 2; drop++) {
		a.drop_remainder = drop;
		struct stream *s = run_all(&a, NULL, false);
		assert_int_equal(s->n, 3 * 19);
		for (size_t i = 0; i < s->n; i++) {
			uint32_t want = i % 19 == 18 ? IPC_BATCH_F_END_EPOCH : 0;
			if (i == s->n - 1)
				want |= IPC_BATCH_F_END_STREAM;
			assert_int_equal(s->b[i].flags, want);
			assert_int_equal(s->b[i].rows, 53);
			assert_int_equal(s->b[i].epoch, i / 19);
		}
		for (int e = 0; e < 3; e++)
			assert_permutation(s->ids + e * N_RECS, N_RECS, NULL, 0);
		stream_free(s);
	}
}

/* sloppy_interleave: any order among the open files, but every record once per epoch. */
static void test_stream_sloppy(void **state)
{
	struct spec_args a = spec_default();
	a.sloppy = true;
	a.reads = 4;
	a.epochs = "2";
	a.batch = 45;
	for (int shuffle = 0; shuffle < 2; shuffle++) {
		a.shuffle = shuffle;
		struct stream *s = run_all(&a, NULL, false);
		assert_int_equal(s->n_ids, 2 * N_RECS);
		assert_permutation(s->ids, N_RECS, NULL, 0);
		assert_permutation(s->ids + N_RECS, N_RECS, NULL, 0);
		/* within a file, records keep their order (without shuffle) */
		if (!shuffle) {
			int64_t last[N_FILES] = { -1, -1, -1, -1 };
			for (size_t i = 0; i < N_RECS; i++) {
				unsigned f = (unsigned)(s->ids[i] / ID_FILE);
				assert_true(s->ids[i] > last[f]);
				last[f] = s->ids[i];
			}
		}
		stream_free(s);
	}
}

/* epochs null and no batch in an epoch: an error, not an endless loop. */
static void test_stream_endless_empty_epoch(void **state)
{
	struct spec_args a = spec_default();
	struct pl_batch *b;
	struct io_error err = { { 0 } };
	a.batch = 2000;
	a.drop_remainder = true;
	a.epochs = "null";
	struct pl_pipeline *p = create(&a, NULL);
	assert_int_equal(pl_pipeline_next(p, 10000, &b, &err), -ENODATA);
	assert_non_null(strstr(err.msg, "epoch 0 produced no batch"));
	assert_int_equal(pl_pipeline_next(p, 0, &b, &err), -ENODATA);
	pl_pipeline_destroy(p);
}

/* ---- destroy at every point ---- */

static void test_destroy_right_after_create(void **state)
{
	struct count_alloc c;
	struct pl_pipeline_opts o;
	struct spec_args a = spec_default();

	ca_init(&c);
	opts_with(&o, &c);
	pl_pipeline_destroy(NULL);
	for (int i = 0; i < 20; i++) {
		a.epochs = i % 2 ? "null" : "1";
		pl_pipeline_destroy(create(&a, &o));
		assert_int_equal(ca_live(&c), 0);
	}
	assert_false(c.misuse);
	ca_fini(&c);
}

static void test_destroy_after_one_batch(void **state)
{
	struct count_alloc c;
	struct pl_pipeline_opts o;
	struct spec_args a = spec_default();
	struct pl_batch *b;

	ca_init(&c);
	opts_with(&o, &c);
	a.shuffle = true;
	struct pl_pipeline *p = create(&a, &o);
	assert_int_equal(pl_pipeline_next(p, -1, &b, NULL), 1);
	assert_true(ca_owns(&c, b->mem, b->len));
	pl_batch_release(p, b);
	pl_pipeline_destroy(p);
	assert_int_equal(ca_live(&c), 0);
	assert_false(c.misuse);
	ca_fini(&c);
}

/*
 * pipeline.h: destroy "frees every batch not yet released". Batches that next() handed out and
 * the caller still holds are not yet released: destroy must free them (and the caller must not
 * release them afterwards).
 */
static void test_destroy_frees_held_batches(void **state)
{
	struct count_alloc c;
	struct pl_pipeline_opts o;
	struct spec_args a = spec_default();
	struct pl_batch *b1, *b2;

	ca_init(&c);
	opts_with(&o, &c);
	a.batch = 16;
	a.prefetch = 4;
	struct pl_pipeline *p = create(&a, &o);
	assert_int_equal(pl_pipeline_next(p, -1, &b1, NULL), 1);
	assert_int_equal(pl_pipeline_next(p, -1, &b2, NULL), 1);
	usleep(20000); /* let the driver fill the queue behind them */
	pl_pipeline_destroy(p);
	if (ca_live(&c) != 0)
		fail_msg("%zu bytes of batches still allocated after pl_pipeline_destroy (the two "
			 "batches the caller held were not freed)",
			 ca_live(&c));
	assert_false(c.misuse);
	ca_fini(&c);
}

/* Batches released after a queue has filled up, then destroy with a full queue. */
static void test_destroy_with_full_queue(void **state)
{
	struct count_alloc c;
	struct pl_pipeline_opts o;
	struct spec_args a = spec_default();
	struct pl_batch *b;

	ca_init(&c);
	opts_with(&o, &c);
	a.batch = 8;
	a.prefetch = 6;
	struct pl_pipeline *p = create(&a, &o);
	assert_int_equal(pl_pipeline_next(p, -1, &b, NULL), 1);
	pl_batch_release(p, b);
	/* wait until prefetch batches are ready: all allocated, none released */
	for (int i = 0; i < 2000; i++) {
		pthread_mutex_lock(&c.lock);
		size_t total = c.total_n;
		pthread_mutex_unlock(&c.lock);
		if (total >= 7)
			break;
		usleep(1000);
	}
	pthread_mutex_lock(&c.lock);
	size_t n = c.live_n;
	pthread_mutex_unlock(&c.lock);
	assert_true(n <= 6);
	pl_pipeline_destroy(p);
	assert_int_equal(ca_live(&c), 0);
	assert_false(c.misuse);
	ca_fini(&c);
}

/* epochs null: the driver blocks on the full prefetch queue forever; destroy must stop it. */
static void test_destroy_endless_blocked(void **state)
{
	struct count_alloc c;
	struct pl_pipeline_opts o;
	struct spec_args a = spec_default();

	ca_init(&c);
	opts_with(&o, &c);
	a.epochs = "null";
	a.shuffle = true;
	a.batch = 32;
	for (int i = 0; i < 6; i++) {
		a.prefetch = i % 3; /* 0 is resolved to at least 1 */
		struct pl_pipeline *p = create(&a, &o);
		struct stream *s = stream_new();
		/* across an epoch boundary, then stop consuming */
		drain(p, s, (size_t)(i * 17 % 40) + 1, false);
		assert_stream_ok(s);
		assert_int_equal(s->end, 1);
		usleep(30000);
		pl_pipeline_destroy(p);
		stream_free(s);
		assert_int_equal(ca_live(&c), 0);
	}
	assert_false(c.misuse);
	ca_fini(&c);
}

/* 200 pipelines, stopped at varied points, with their own and a shared pool. */
static void test_create_destroy_loop(void **state)
{
	struct count_alloc c;
	struct pl_pipeline_opts o;
	struct sched_pool_opts po;
	struct sched_pool *pool;
	struct spec_args a = spec_default();

	ca_init(&c);
	sched_pool_opts_init(&po);
	po.workers = 2;
	po.pin = false;
	assert_int_equal(sched_pool_create(&po, &pool), 0);
	a.batch = 32;
	for (int i = 0; i < 200; i++) {
		struct pl_batch *b;
		int r;

		opts_with(&o, &c);
		o.pool = i % 2 ? pool : NULL;
		a.epochs = i % 3 ? "null" : "1";
		a.shuffle = i % 5 < 2;
		a.prefetch = 1 + i % 3;
		struct pl_pipeline *p = create(&a, &o);
		switch (i % 4) {
		case 0:
			break;
		case 1:
			assert_int_equal(pl_pipeline_next(p, -1, &b, NULL), 1);
			pl_batch_release(p, b);
			break;
		case 2:
			r = pl_pipeline_next(p, 0, &b, NULL);
			assert_true(r == 1 || r == -ETIMEDOUT);
			if (r == 1)
				pl_batch_release(p, b);
			break;
		default:
			for (int k = 0; k < i % 7; k++) {
				assert_int_equal(pl_pipeline_next(p, -1, &b, NULL), 1);
				pl_batch_release(p, b);
			}
			break;
		}
		pl_pipeline_destroy(p);
		if (ca_live(&c) != 0)
			fail_msg("iteration %d: %zu bytes left", i, ca_live(&c));
	}
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
	assert_false(c.misuse);
	ca_fini(&c);
}

/* ---- pools and threads ---- */

struct consumer {
	pthread_t t;
	struct pl_pipeline *p;
	struct stream *s;
	size_t max;
};

static void *consumer_main(void *arg)
{
	struct consumer *c = arg;
	drain(c->p, c->s, c->max, true);
	return NULL;
}

/* Pipelines sharing one pool, consumed on their own threads, each get their full stream. */
static void test_shared_pool_threads(void **state)
{
	enum { N = 5 };
	struct sched_pool_opts po;
	struct sched_pool *pool;
	struct consumer cs[N];
	struct stream *ref[N];
	struct spec_args a[N];

	for (int i = 0; i < N; i++) {
		a[i] = spec_default();
		a[i].epochs = "2";
		a[i].shuffle = i != 0;
		a[i].seed = (uint64_t)(i % 3);
		a[i].batch = 20 + 13 * i;
		a[i].prefetch = 1 + i % 3;
		ref[i] = run_all(&a[i], NULL, true);
	}
	sched_pool_opts_init(&po);
	po.workers = 3;
	po.pin = false;
	assert_int_equal(sched_pool_create(&po, &pool), 0);
	for (int round = 0; round < 2; round++) {
		/* round 1: pipelines 1 and 3 are stopped early while the others run */
		for (int i = 0; i < N; i++) {
			struct pl_pipeline_opts o;
			pl_pipeline_opts_init(&o);
			o.pool = pool;
			cs[i].p = create(&a[i], &o);
			cs[i].s = stream_new();
			cs[i].max = round == 1 && i % 2 ? 3 : 0;
		}
		for (int i = 0; i < N; i++)
			assert_int_equal(pthread_create(&cs[i].t, NULL, consumer_main, &cs[i]), 0);
		for (int i = 0; i < N; i++) {
			pthread_join(cs[i].t, NULL);
			if (cs[i].max)
				pl_pipeline_destroy(cs[i].p); /* the others still run */
		}
		for (int i = 0; i < N; i++) {
			if (!cs[i].max)
				pl_pipeline_destroy(cs[i].p);
			assert_stream_ok(cs[i].s);
			if (cs[i].max) {
				assert_int_equal(cs[i].s->n, cs[i].max);
				struct stream *part = cs[i].s;
				for (size_t k = 0; k < part->n; k++)
					assert_same_batch(&ref[i]->b[k], &part->b[k], k, false);
			} else {
				assert_same_batches(ref[i], 0, cs[i].s);
			}
			stream_free(cs[i].s);
		}
	}
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
	for (int i = 0; i < N; i++)
		stream_free(ref[i]);
}

/* num_parallel_parses 1 and 4, shared pools of 1 and 4 workers: byte-identical batches. */
static void test_parallelism_identical(void **state)
{
	struct spec_args a = spec_default();
	struct count_alloc c;
	struct pl_pipeline_opts o;

	a.shuffle = true;
	a.epochs = "2";
	a.batch = 37;
	a.parses = 1;
	struct stream *ref = run_all(&a, NULL, true);
	assert_permutation(ref->ids, N_RECS, NULL, 0);

	a.parses = 4;
	struct stream *s = run_all(&a, NULL, true);
	assert_same_batches(ref, 0, s);
	stream_free(s);

	/* poisoned fresh memory: the pipeline writes every byte of the extent */
	ca_init(&c);
	opts_with(&o, &c);
	s = run_all(&a, &o, true);
	assert_same_batches(ref, 0, s);
	stream_free(s);
	assert_int_equal(ca_live(&c), 0);
	ca_fini(&c);

	for (unsigned w = 1; w <= 4; w += 3) {
		struct sched_pool_opts po;
		struct sched_pool *pool;
		sched_pool_opts_init(&po);
		po.workers = w;
		po.pin = false;
		assert_int_equal(sched_pool_create(&po, &pool), 0);
		pl_pipeline_opts_init(&o);
		o.pool = pool;
		a.parses = (int)(5 - w);
		s = run_all(&a, &o, true);
		assert_same_batches(ref, 0, s);
		stream_free(s);
		sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
	}

	/* the pread engine gives the same batches */
	pl_pipeline_opts_init(&o);
	o.engine = IOX_ENGINE_PREAD;
	struct pl_pipeline *p = create(&a, &o);
	s = stream_new();
	drain(p, s, 0, true);
	assert_stream_ok(s);
	struct pl_stats st;
	pl_pipeline_get_stats(p, &st);
	assert_string_equal(st.io_engine, "pread");
	pl_pipeline_destroy(p);
	assert_same_batches(ref, 0, s);
	stream_free(s);
	stream_free(ref);
}

/*
 * Every byte of an extent is written by the pipeline: two runs whose allocators leave different
 * garbage in fresh memory give byte-identical extents (the padding between blocks and the tail
 * included; clients see the whole extent in shared memory).
 */
static void test_extent_fully_written(void **state)
{
	struct spec_args a = spec_default();
	struct count_alloc c1, c2;
	struct pl_pipeline_opts o1, o2;

	a.shuffle = true;
	a.batch = 37;
	ca_init(&c1);
	ca_init(&c2);
	opts_with(&o1, &c1);
	opts_with(&o2, &c2);
	c2.poison = 0x5a;
	struct stream *x = run_all(&a, &o1, true);
	struct stream *y = run_all(&a, &o2, true);
	assert_same_batches_(x, 0, y, true);
	stream_free(x);
	stream_free(y);
	ca_fini(&c1);
	ca_fini(&c2);
}

/* ---- the allocator ---- */

static void test_custom_allocator(void **state)
{
	struct count_alloc c;
	struct pl_pipeline_opts o;
	struct spec_args a = spec_default();
	struct pl_batch *held[8];
	size_t n_held = 0, n = 0;
	int r;

	ca_init(&c);
	opts_with(&o, &c);
	a.shuffle = true;
	a.epochs = "2";
	a.prefetch = 3;
	a.batch = 40;
	struct pl_pipeline *p = create(&a, &o);
	for (;;) {
		struct pl_batch *b;
		r = pl_pipeline_next(p, -1, &b, NULL);
		if (r <= 0)
			break;
		n++;
		assert_true(ca_owns(&c, b->mem, b->len));
		assert_int_equal((uintptr_t)b->mem % IPC_BATCH_EXTENT_ALIGN, 0);
		/* hold a few at a time: the driver keeps going on other memory */
		held[n_held++] = b;
		if (n_held == 8 || n % 5 == 0) {
			while (n_held)
				pl_batch_release(p, held[--n_held]);
		}
	}
	assert_int_equal(r, 0);
	assert_int_equal(n, 2 * ((N_RECS + 39) / 40));
	while (n_held)
		pl_batch_release(p, held[--n_held]);
	assert_int_equal(ca_live(&c), 0);
	pl_pipeline_destroy(p);
	assert_int_equal(ca_live(&c), 0);
	assert_true(c.total_n >= n);
	assert_false(c.misuse);
	ca_fini(&c);
}

/* An allocator that runs out: the batches before come out, then -ENOMEM; nothing leaks. */
struct failing_alloc {
	struct count_alloc c;
	size_t left; /* allocations that succeed */
};

static void *fa_alloc(void *ctx, size_t len)
{
	struct failing_alloc *f = ctx;
	bool ok;

	pthread_mutex_lock(&f->c.lock);
	ok = f->left > 0;
	if (ok)
		f->left--;
	pthread_mutex_unlock(&f->c.lock);
	return ok ? ca_alloc(&f->c, len) : NULL;
}

static void fa_free(void *ctx, void *mem, size_t len)
{
	struct failing_alloc *f = ctx;
	ca_free(&f->c, mem, len);
}

static void test_allocator_out_of_memory(void **state)
{
	struct spec_args a = spec_default();
	struct failing_alloc f;
	struct pl_pipeline_opts o;

	a.batch = 20;
	a.prefetch = 3;
	for (int no_tag = 0; no_tag < 2; no_tag++) {
		ca_init(&f.c);
		f.left = 5;
		pl_pipeline_opts_init(&o);
		o.alloc = fa_alloc;
		o.free = fa_free;
		o.alloc_ctx = &f;
		a.no_tag = no_tag;
		struct pl_pipeline *p = create(&a, &o);
		struct stream *s = stream_new();
		drain(p, s, 0, false);
		if (s->bad)
			fail_msg("%s", s->why);
		assert_int_equal(s->end, -ENOMEM);
		assert_non_null(strstr(s->err.msg, "out of memory"));
		assert_int_equal(s->n, 5);
		for (size_t i = 0; i < s->n_ids; i++)
			assert_int_equal(s->ids[i], file_order_id(i));
		pl_pipeline_destroy(p);
		stream_free(s);
		assert_int_equal(ca_live(&f.c), 0);
		assert_false(f.c.misuse);
		ca_fini(&f.c);
	}
}

/* ---- timeouts ---- */

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void test_next_timeouts(void **state)
{
	struct count_alloc c;
	struct pl_pipeline_opts o;
	struct spec_args a = spec_default();
	struct io_error err = { { 0 } };
	struct pl_batch *b = NULL;
	size_t batches = 0, timeouts = 0;
	uint64_t t0;
	int r;

	ca_init(&c);
	opts_with(&o, &c);
	c.delay_us = 20000; /* each batch takes at least 20 ms */
	a.batch = 100;
	struct pl_pipeline *p = create(&a, &o);
	t0 = mono_ms();
	r = pl_pipeline_next(p, 0, &b, &err);
	assert_int_equal(r, -ETIMEDOUT);
	assert_null(b);
	assert_non_null(strstr(err.msg, "no batch within 0 ms"));
	r = pl_pipeline_next(p, 1, &b, &err);
	assert_int_equal(r, -ETIMEDOUT);
	assert_true(mono_ms() - t0 < 1000);
	for (int i = 0;; i++) {
		static const int tmo[] = { 0, 1, 3, 0, 7 };
		uint64_t t1 = mono_ms();
		r = pl_pipeline_next(p, tmo[i % 5], &b, &err);
		assert_true(mono_ms() - t1 < 2000);
		if (r == -ETIMEDOUT) {
			timeouts++;
		} else if (r == 1) {
			batches++;
			pl_batch_release(p, b);
		} else {
			break;
		}
		assert_true(mono_ms() - t0 < 60000);
	}
	assert_int_equal(r, 0);
	assert_int_equal(batches, (N_RECS + 99) / 100);
	assert_true(timeouts > 0);
	assert_int_equal(pl_pipeline_next(p, 0, &b, &err), 0);
	struct pl_stats st;
	pl_pipeline_get_stats(p, &st);
	assert_true(st.next_wait_ns > 0);
	pl_pipeline_destroy(p);
	assert_int_equal(ca_live(&c), 0);
	ca_fini(&c);
}

/* ---- checkpoints ---- */

static void test_save_restore(void **state)
{
	struct spec_args a = spec_default();
	a.shuffle = true;
	a.epochs = "2";
	a.batch = 64;
	struct stream *ref = run_all(&a, NULL, true);
	size_t per_epoch = (N_RECS + 63) / 64;
	assert_int_equal(ref->n, 2 * per_epoch);
	const size_t at[] = {
		0, 1, 7, per_epoch - 1, per_epoch, per_epoch + 1, 2 * per_epoch - 1, 2 * per_epoch
	};

	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		uint8_t blob[PL_STATE_MAX];
		struct pl_pipeline_opts o;
		struct pl_pipeline *p = create(&a, NULL);
		struct stream *s = stream_new();
		int len;

		if (at[i])
			drain(p, s, at[i], false);
		assert_stream_ok(s);
		len = pl_pipeline_save(p, blob, sizeof(blob));
		assert_true(len > 0 && len <= PL_STATE_MAX);
		pl_pipeline_destroy(p);
		stream_free(s);

		pl_pipeline_opts_init(&o);
		o.state = blob;
		o.state_len = (size_t)len;
		a.parses = 1 + (int)i % 3; /* the parse threads are not part of the position */
		p = create(&a, &o);
		s = stream_new();
		drain(p, s, 0, true);
		assert_stream_ok(s);
		assert_same_batches(ref, at[i], s);
		if (s->n)
			assert_int_equal(s->b[0].seq, at[i]);
		/* save after restore and no next(): the restored position */
		pl_pipeline_destroy(p);
		stream_free(s);
	}

	/* a state saved right after create, and after a restore without next() */
	uint8_t s0[PL_STATE_MAX], s1[PL_STATE_MAX];
	struct pl_pipeline *p = create(&a, NULL);
	struct stream *s = stream_new();
	drain(p, s, 5, false);
	int l0 = pl_pipeline_save(p, s0, sizeof(s0));
	pl_pipeline_destroy(p);
	stream_free(s);
	struct pl_pipeline_opts o;
	pl_pipeline_opts_init(&o);
	o.state = s0;
	o.state_len = (size_t)l0;
	p = create(&a, &o);
	int l1 = pl_pipeline_save(p, s1, sizeof(s1));
	assert_int_equal(l0, l1);
	assert_memory_equal(s0, s1, (size_t)l0);
	pl_pipeline_destroy(p);
	stream_free(ref);
}

static int create_rc(const struct spec_args *a, const struct pl_pipeline_opts *o,
		     struct io_error *err)
{
	struct pl_spec *spec = make_spec(a);
	struct pl_pipeline *p = (struct pl_pipeline *)(uintptr_t)0x1;
	int r = pl_pipeline_create(spec, o, &p, err);

	pl_spec_destroy(spec);
	if (r == 0)
		pl_pipeline_destroy(p);
	else
		assert_ptr_equal(p, (struct pl_pipeline *)(uintptr_t)0x1); /* untouched */
	return r;
}

static void test_restore_refused(void **state)
{
	struct spec_args a = spec_default();
	struct pl_pipeline_opts o;
	struct io_error err = { { 0 } };
	uint8_t blob[PL_STATE_MAX + 16], bad[PL_STATE_MAX + 16];
	struct stream *s = stream_new();

	a.shuffle = true;
	a.batch = 30;
	struct pl_pipeline *p = create(&a, NULL);
	drain(p, s, 3, false);
	assert_int_equal(pl_pipeline_save(p, blob, 0), -ENOSPC);
	int len = pl_pipeline_save(p, blob, sizeof(blob));
	assert_true(len > 0 && len <= PL_STATE_MAX);
	assert_int_equal(pl_pipeline_save(p, bad, (size_t)len - 1), -ENOSPC);
	assert_int_equal(pl_pipeline_save(p, bad, PL_STATE_MAX), len);
	pl_pipeline_destroy(p);
	stream_free(s);

	pl_pipeline_opts_init(&o);
	o.state = blob;
	o.state_len = (size_t)len;
	assert_int_equal(create_rc(&a, &o, &err), 0);

	/* another seed, another spec */
	a.seed = 8;
	assert_int_equal(create_rc(&a, &o, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "state"));
	a.seed = 7;
	a.batch = 31;
	assert_int_equal(create_rc(&a, &o, &err), -EBADMSG);
	a.batch = 30;
	a.shuffle = false;
	assert_int_equal(create_rc(&a, &o, &err), -EBADMSG);
	a.shuffle = true;

	/* truncated, lengthened, garbage, each byte of the header */
	o.state_len = (size_t)len - 1;
	assert_int_equal(create_rc(&a, &o, &err), -EBADMSG);
	o.state_len = 0;
	assert_int_equal(create_rc(&a, &o, &err), -EBADMSG);
	memcpy(bad, blob, (size_t)len);
	bad[len] = 0;
	o.state = bad;
	o.state_len = (size_t)len + 1;
	assert_int_equal(create_rc(&a, &o, &err), -EBADMSG);
	memset(bad, 0xab, sizeof(bad));
	o.state_len = (size_t)len;
	assert_int_equal(create_rc(&a, &o, &err), -EBADMSG);
	for (int i = 0; i < 24; i++) { /* magic, version, fingerprint, seed */
		memcpy(bad, blob, (size_t)len);
		bad[i] ^= 0x10;
		err.msg[0] = 0;
		if (create_rc(&a, &o, &err) != -EBADMSG)
			fail_msg("a state with byte %d flipped was accepted", i);
		assert_true(err.msg[0] != 0);
	}
}

/* The same spec over another set of data files refuses the state. */
static void test_restore_refused_other_files(void **state)
{
	char dir[PATH_MAX], path[PATH_MAX];
	struct spec_args a = spec_default();
	struct pl_pipeline_opts o;
	struct io_error err = { { 0 } };
	uint8_t blob[PL_STATE_MAX];
	struct stream *s = stream_new();

	sub_dir("other_files", dir);
	assert_int_equal(make_dataset(dir, SPOIL_NONE, 0, 0, NULL), 0);
	a.dir = dir;
	struct pl_pipeline *p = create(&a, NULL);
	drain(p, s, 2, false);
	int len = pl_pipeline_save(p, blob, sizeof(blob));
	pl_pipeline_destroy(p);
	stream_free(s);
	/* drop the last file */
	file_path(dir, N_FILES - 1, path);
	assert_int_equal(unlink(path), 0);
	pl_pipeline_opts_init(&o);
	o.state = blob;
	o.state_len = (size_t)len;
	assert_int_equal(create_rc(&a, &o, &err), -EBADMSG);
}

/* ---- on_corrupt ---- */

/* A copy of the main dataset in a new directory, the record (file, index) spoiled. */
static void spoiled_dataset(const char *name, enum spoil spoil, unsigned file, unsigned index,
			    char *dir)
{
	sub_dir(name, dir);
	assert_int_equal(make_dataset(dir, spoil, file, index, NULL), 0);
}

static void flip_byte(const char *dir, unsigned file, uint64_t off)
{
	char path[PATH_MAX];
	FILE *f;
	int c;

	file_path(dir, file, path);
	f = fopen(path, "r+b");
	assert_non_null(f);
	assert_int_equal(fseek(f, (long)off, SEEK_SET), 0);
	c = fgetc(f);
	assert_true(c != EOF);
	assert_int_equal(fseek(f, (long)off, SEEK_SET), 0);
	assert_true(fputc(c ^ 0x01, f) != EOF);
	assert_int_equal(fclose(f), 0);
}

/* Position of record (file, index) in the file-order stream. */
static size_t file_order_pos(unsigned file, unsigned index)
{
	size_t pos = index;
	for (unsigned k = 0; k < file; k++)
		pos += FILE_RECS[k];
	return pos;
}

/*
 * Under "fail": the batches before the one holding the bad record come out (file order, so
 * exactly the first pos / batch * batch rows), then the error, again on every call.
 */
static void expect_fail_at(const char *dir, size_t pos, int batch, bool no_tag, int want_rc,
			   const char *want1, const char *want2)
{
	struct spec_args a = spec_default();
	a.dir = dir;
	a.batch = batch;
	a.no_tag = no_tag;
	a.prefetch = 4;
	struct pl_pipeline *p = create(&a, NULL);
	struct stream *s = stream_new();
	struct io_error err = { { 0 } };
	struct pl_batch *b;

	drain(p, s, 0, false);
	if (s->bad)
		fail_msg("%s", s->why);
	if (s->end != want_rc)
		fail_msg("stream ended with %d (%s), expected %d", s->end, s->err.msg, want_rc);
	if (!strstr(s->err.msg, want1) || !strstr(s->err.msg, want2))
		fail_msg("message \"%s\" does not name \"%s\" and \"%s\"", s->err.msg, want1,
			 want2);
	size_t want_rows = pos / (size_t)batch * (size_t)batch;
	if (s->n_ids != want_rows)
		fail_msg("%zu rows delivered before the error, expected the %zu rows of the "
			 "batches "
			 "before the bad record (position %zu)",
			 s->n_ids, want_rows, pos);
	for (size_t i = 0; i < s->n_ids; i++)
		assert_int_equal(s->ids[i], file_order_id(i));
	assert_int_equal(pl_pipeline_next(p, -1, &b, &err), want_rc);
	assert_string_equal(err.msg, s->err.msg);
	assert_int_equal(pl_pipeline_next(p, 0, &b, NULL), want_rc);
	pl_pipeline_destroy(p);
	stream_free(s);
}

/* Under a skip mode: every record but those in minus, and the counters. */
static void expect_skip(const char *dir, const char *mode, bool no_tag, bool shuffle,
			const int64_t *minus, size_t n_minus, uint64_t skipped_records,
			uint64_t skipped_files)
{
	struct spec_args a = spec_default();
	struct pl_stats st;
	a.dir = dir;
	a.batch = 16;
	a.on_corrupt = mode;
	a.no_tag = no_tag;
	a.shuffle = shuffle;
	a.parses = 3;
	struct pl_pipeline *p = create(&a, NULL);
	struct stream *s = stream_new();

	drain(p, s, 0, false);
	assert_stream_ok(s);
	assert_int_equal(s->end, 0);
	if (s->n_ids != N_RECS - n_minus)
		fail_msg("on_corrupt %s: %zu rows, expected %zu (all but %zu)", mode, s->n_ids,
			 N_RECS - n_minus, n_minus);
	assert_permutation(s->ids, s->n_ids, minus, n_minus);
	pl_pipeline_get_stats(p, &st);
	if (skipped_records != UINT64_MAX)
		assert_int_equal(st.skipped_records, skipped_records);
	if (skipped_files != UINT64_MAX)
		assert_int_equal(st.skipped_files, skipped_files);
	assert_int_equal(st.rows, N_RECS - n_minus);
	uint64_t rows = 0;
	for (size_t i = 0; i < s->n; i++)
		rows += s->b[i].rows;
	assert_int_equal(rows, N_RECS - n_minus);
	pl_pipeline_destroy(p);
	stream_free(s);
}

static void test_corrupt_data_crc(void **state)
{
	char dir[PATH_MAX], path[PATH_MAX], rec[32];
	const unsigned file = 1, index = 137;
	const int64_t bad = rec_id(file, index);

	spoiled_dataset("crc", SPOIL_NONE, 0, 0, dir);
	flip_byte(dir, file, g_layout.off[file][index] + g_layout.len[file][index] / 2);
	file_path(dir, file, path);
	snprintf(rec, sizeof(rec), "record %u", index);
	for (int no_tag = 0; no_tag < 2; no_tag++) {
		expect_fail_at(dir, file_order_pos(file, index), 10, no_tag, -EBADMSG, path, rec);
		expect_fail_at(dir, file_order_pos(file, index), 64, no_tag, -EBADMSG, path, rec);
		expect_skip(dir, "skip_record", no_tag, false, &bad, 1, 1, 0);
		expect_skip(dir, "skip_record", no_tag, true, &bad, 1, 1, 0);
	}
}

/* A truncated last record: under "fail" an error, under the skip modes the file ends there. */
static void test_corrupt_truncated_file(void **state)
{
	char dir[PATH_MAX], path[PATH_MAX], rec[32];
	const unsigned file = N_FILES - 1, index = FILE_RECS[N_FILES - 1] - 1;
	const int64_t bad = rec_id(file, index);

	spoiled_dataset("truncated", SPOIL_NONE, 0, 0, dir);
	file_path(dir, file, path);
	assert_int_equal(truncate(path, (off_t)g_layout.size[file] - 3), 0);
	snprintf(rec, sizeof(rec), "record %u", index);
	for (int no_tag = 0; no_tag < 2; no_tag++) {
		expect_skip(dir, "skip_file", no_tag, false, &bad, 1, 0, 1);
		expect_skip(dir, "skip_record", no_tag, true, &bad, 1, 0, 1);
	}
	expect_fail_at(dir, file_order_pos(file, index), 10, false, -EBADMSG, path, rec);
}

/* A record without "id": an error naming the feature under "fail", a skipped row otherwise. */
static void test_corrupt_missing_feature(void **state)
{
	char dir[PATH_MAX], path[PATH_MAX], rec[32];
	const unsigned file = 2, index = 5;
	const int64_t bad = rec_id(file, index);

	spoiled_dataset("missing", SPOIL_NO_ID, file, index, dir);
	file_path(dir, file, path);
	snprintf(rec, sizeof(rec), "record %u", index);
	for (int no_tag = 0; no_tag < 2; no_tag++) {
		expect_fail_at(dir, file_order_pos(file, index), 16, no_tag, -EBADMSG,
			       "feature \"id\"", rec);
		expect_fail_at(dir, file_order_pos(file, index), 16, no_tag, -EBADMSG, path, rec);
		expect_skip(dir, "skip_record", no_tag, true, &bad, 1, 1, 0);
	}
}

/*
 * skip_file: "the file ends at its first error" (docs/pipeline-semantics.md; plref.py's
 * _records stops the file at the first record that fails): a record with a bad data CRC or a
 * missing feature drops it and every later record of its file, the records before it stay.
 */
static void test_corrupt_skip_file_ends_file(void **state)
{
	char dir[PATH_MAX];
	const unsigned file = 1, index = 137;
	int64_t minus[300];
	size_t n_minus = 0;

	for (unsigned i = index; i < FILE_RECS[file]; i++)
		minus[n_minus++] = rec_id(file, i);
	spoiled_dataset("crc_skip_file", SPOIL_NONE, 0, 0, dir);
	flip_byte(dir, file, g_layout.off[file][index] + g_layout.len[file][index] / 2);
	expect_skip(dir, "skip_file", false, false, minus, n_minus, UINT64_MAX, UINT64_MAX);
	expect_skip(dir, "skip_file", true, true, minus, n_minus, UINT64_MAX, UINT64_MAX);

	spoiled_dataset("missing_skip_file", SPOIL_NO_ID, file, index, dir);
	expect_skip(dir, "skip_file", false, false, minus, n_minus, UINT64_MAX, UINT64_MAX);
}

/* ---- errors at create ---- */

static void test_create_errors(void **state)
{
	struct spec_args a = spec_default();
	struct io_error err = { { 0 } };
	char dir[PATH_MAX];

	a.id_from = "nope";
	assert_int_equal(create_rc(&a, NULL, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "args.primary_features[0].from_name"));
	assert_non_null(strstr(err.msg, "nope"));

	a = spec_default();
	a.shard = "{\"index\": 5, \"count\": 8}";
	assert_int_equal(create_rc(&a, NULL, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "args.shard"));
	a.shard = "{\"index\": 3, \"count\": 4}";
	assert_int_equal(create_rc(&a, NULL, &err), 0);

	/* a directory with a manifest and no data files */
	sub_dir("empty", dir);
	assert_int_equal(make_dataset(dir, SPOIL_NONE, 0, 0, NULL), 0);
	for (unsigned k = 0; k < N_FILES; k++) {
		char path[PATH_MAX];
		file_path(dir, k, path);
		assert_int_equal(unlink(path), 0);
	}
	a = spec_default();
	a.dir = dir;
	assert_int_equal(create_rc(&a, NULL, &err), -ENOENT);

	/* no such directory */
	snprintf(dir, sizeof(dir), "%s/does-not-exist", g_tmp);
	a.dir = dir;
	assert_true(create_rc(&a, NULL, &err) < 0);
	assert_non_null(strstr(err.msg, "args.dataset"));
}

/* A shard keeps exactly its files. */
static void test_shard(void **state)
{
	struct spec_args a = spec_default();
	a.shard = "{\"index\": 1, \"count\": 2}";
	struct stream *s = run_all(&a, NULL, false);
	size_t n = 0;
	for (size_t i = 0; i < s->n_ids; i++) {
		unsigned file = (unsigned)(s->ids[i] / ID_FILE);
		assert_true(file == 1 || file == 3);
		n++;
	}
	assert_int_equal(n, FILE_RECS[1] + FILE_RECS[3]);
	stream_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stream_epochs_shuffle),
		cmocka_unit_test(test_stream_evacuations),
		cmocka_unit_test(test_stream_file_order),
		cmocka_unit_test(test_stream_exact_batches),
		cmocka_unit_test(test_stream_sloppy),
		cmocka_unit_test(test_stream_endless_empty_epoch),
		cmocka_unit_test(test_destroy_right_after_create),
		cmocka_unit_test(test_destroy_after_one_batch),
		cmocka_unit_test(test_destroy_frees_held_batches),
		cmocka_unit_test(test_destroy_with_full_queue),
		cmocka_unit_test(test_destroy_endless_blocked),
		cmocka_unit_test(test_create_destroy_loop),
		cmocka_unit_test(test_shared_pool_threads),
		cmocka_unit_test(test_parallelism_identical),
		cmocka_unit_test(test_extent_fully_written),
		cmocka_unit_test(test_custom_allocator),
		cmocka_unit_test(test_allocator_out_of_memory),
		cmocka_unit_test(test_next_timeouts),
		cmocka_unit_test(test_save_restore),
		cmocka_unit_test(test_restore_refused),
		cmocka_unit_test(test_restore_refused_other_files),
		cmocka_unit_test(test_corrupt_data_crc),
		cmocka_unit_test(test_corrupt_truncated_file),
		cmocka_unit_test(test_corrupt_missing_feature),
		cmocka_unit_test(test_corrupt_skip_file_ends_file),
		cmocka_unit_test(test_create_errors),
		cmocka_unit_test(test_shard),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
