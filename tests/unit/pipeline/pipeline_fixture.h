/* SPDX-License-Identifier: Apache-2.0 */
/* Test support for daemon/pipeline/pipeline.c: the dataset, specs, allocators, stream checks. */
#ifndef SLUICE_TESTS_PIPELINE_FIXTURE_H
#define SLUICE_TESTS_PIPELINE_FIXTURE_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/pipeline/pipeline.h"
#include "daemon/pipeline/spec.h"
#include "io/ioerr.h"

/*
 * The dataset: N_FILES files part-K.tfrecords of FILE_RECS[K] Examples each, with features
 * "id" (int64 [], K * ID_FILE + index, unique), "vec" (float32 [2], {id / 2, -id}) and "tag"
 * (string [], "r<id>"), so that every row of a batch can be checked against its id and every
 * test can tell which records came out.
 */
#define N_FILES 4
#define ID_FILE 100000
extern const unsigned FILE_RECS[N_FILES];
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

/* The test group's temporary directory, and the layout of its main dataset (g_tmp/main). */
extern char g_tmp[512];
extern struct dataset_layout g_layout;

/* The id of record `index` of file `file`. */
int64_t rec_id(unsigned file, unsigned index);
/* dir/part-K.tfrecords into out (PATH_MAX bytes). */
void file_path(const char *dir, unsigned k, char *out);
/*
 * Write the dataset into dir (which must exist): the manifest and N_FILES files. The record
 * (spoil_file, spoil_index) is spoiled as `spoil` says. Returns 0 or -errno.
 */
int make_dataset(const char *dir, enum spoil spoil, unsigned spoil_file, unsigned spoil_index,
		 struct dataset_layout *ret_layout);
/* A fresh directory g_tmp/name, its path into out (PATH_MAX bytes). */
void sub_dir(const char *name, char *out);

/* cmocka group setup and teardown: g_tmp with the main dataset, removed afterwards. */
int group_setup(void **state);
int group_teardown(void **state);

/* ---- specs ---- */

struct spec_args {
	const char *dir;
	int batch;
	bool drop_remainder;
	const char *epochs; /* JSON: "2", "null" */
	int prefetch;	    /* num_prefetch (-1: "auto") */
	int parses;
	int reads;	  /* num_parallel_reads (-1: "auto") */
	int cycle_length; /* 0: not given */
	bool shuffle;
	bool global; /* shuffle "global" (shuffle is then ignored) */
	uint64_t seed;
	const char *on_corrupt;
	bool no_tag;	      /* only "id" and "vec" (a plan without the measuring pass) */
	const char *id_from;  /* from_name of the "id" output (default "id") */
	const char *shard;    /* JSON object, or NULL */
	bool sloppy;	      /* sloppy_interleave */
	int shuffle_elems;    /* num_shuffle_buffer_elements (0: 100) */
	long read_bytes;      /* num_read_buffer_bytes (0: 4096, -1: "auto") */
	long long ram_budget; /* args.ram_budget (0: not given) */
};

/* The defaults: the main dataset, batches of 64, one epoch in file order. */
struct spec_args spec_default(void);
/* The spec for a, asserting that it parses; the caller destroys it. */
struct pl_spec *make_spec(const struct spec_args *a);

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

void ca_init(struct count_alloc *c);
void ca_fini(struct count_alloc *c);
/* The pl_pipeline_opts alloc and free callbacks, ctx a struct count_alloc. */
void *ca_alloc(void *ctx, size_t len);
void ca_free(void *ctx, void *mem, size_t len);
/* Whether [mem, mem + len) is exactly one live allocation of c. */
bool ca_owns(struct count_alloc *c, const void *mem, size_t len);
/* The bytes c gave out and that were not freed yet. */
size_t ca_live(struct count_alloc *c);
/* Default options that allocate batches from c. */
void opts_with(struct pl_pipeline_opts *o, struct count_alloc *c);

/* ---- streams ---- */

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

/* An empty stream (asserts on out-of-memory); stream_free frees it and its copies. */
struct stream *stream_new(void);
void stream_free(struct stream *s);
/* Note batch b in s, verified; keep a copy of its extent when copy is set. No cmocka asserts. */
void stream_add(struct stream *s, const struct pl_batch *b, bool copy);
/*
 * Take up to max batches (0: all) with pl_pipeline_next(-1), verifying and releasing each;
 * keep copies of the extents when copy is set. Thread-safe (no cmocka asserts).
 */
void drain(struct pl_pipeline *p, struct stream *s, size_t max, bool copy);
/* Fails the test if a batch did not verify or the stream ended with an error. */
void assert_stream_ok(const struct stream *s);
/* Create a pipeline for spec args a with opts o (NULL: defaults), asserting success. */
struct pl_pipeline *create(const struct spec_args *a, const struct pl_pipeline_opts *o);
/* The whole stream of spec a, verified; with copy, copies of the extents. */
struct stream *run_all(const struct spec_args *a, const struct pl_pipeline_opts *o, bool copy);

/*
 * Batch a equals batch b (the i-th compared): the header, the tensor table and every tensor's
 * bytes; with whole, every byte of the extents (alignment padding and the tail included).
 */
void assert_same_batch(const struct bmeta *a, const struct bmeta *b, size_t i, bool whole);
/* y's batches equal x's from x_from on (whole: as for assert_same_batch). */
void assert_same_batches_(const struct stream *x, size_t x_from, const struct stream *y,
			  bool whole);
void assert_same_batches(const struct stream *x, size_t x_from, const struct stream *y);
/* Whether ids[0..n) is a permutation of the dataset's ids, less the ids in `minus`. */
void assert_permutation(const int64_t *ids, size_t n, const int64_t *minus, size_t n_minus);
/* The dataset's ids in file order (no shuffle, one read at a time). */
int64_t file_order_id(size_t pos);

#endif /* SLUICE_TESTS_PIPELINE_FIXTURE_H */
