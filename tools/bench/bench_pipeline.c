/* SPDX-License-Identifier: Apache-2.0 */
/* sluice-bench pipeline: batches of the ctr and image datasets per CPU-second, against memcpy. */
#include "bench.h"

#include <errno.h>
#include <pthread.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <jansson.h>

#include "daemon/pipeline/pipeline.h"
#include "daemon/pipeline/spec.h"
#include "io/crc32c.h"
#include "io/dataset.h"
#include "io/iox.h"
#include "io/manifest.h"
#include "io/tfr.h"
#include "sched/sched.h"
#include "tools/common/cliarg.h"
#include "tools/common/scan.h"

#define MEMCPY_BUF	 (64ul << 20)
#define MEMCPY_MIN_BYTES (512ul << 20)

static void pipeline_usage(FILE *f)
{
	fprintf(f, "usage: sluice-bench pipeline [--ctr DIR] [--image DIR] [--imagenet DIR]\n"
		   "                             [--batches N] [--workers N] [--repeat R]\n"
		   "                             [--direct] [--queue]\n"
		   "\n"
		   "Runs an independent-loader pipeline over each dataset given, made by\n"
		   "  sluicectl gen ctr DIR --files 8 --records 1000000\n"
		   "  sluicectl gen image DIR --files 8 --records 40000\n"
		   "  sluicectl gen jpeg DIR --files 8 --records 5000\n"
		   "ctr: batches of 1024, every feature; image: batches of 64, the image, label\n"
		   "and bbox features; imagenet: ResNet-50's training input pipeline (decode,\n"
		   "random_resized_crop 224, flip, normalize to float32 CHW), batches of 256,\n"
		   "then its evaluation pipeline (resize 256, center_crop 224, normalize) as\n"
		   "imagenet_eval. All shuffled (buffers 10000 / 1000 / 1000, 8 files mixed and\n"
		   "8 in the filename buffer), 4 parallel reads of 1 MiB, 4 batches of prefetch,\n"
		   "endless epochs, drop_remainder. It takes N batches (default: ctr 2000,\n"
		   "image 500, imagenet 20) on a pool of N workers (default: every CPU) and\n"
		   "measures wall\n"
		   "and process CPU time (user + sys); in the same run, a one-thread memcpy of\n"
		   "as many bytes as the batches' extents (a 64 MiB buffer copied repeatedly).\n"
		   "The batches go to a deliver callback on the driver thread, as sluiced takes\n"
		   "them; --queue takes them with pl_pipeline_next() on this thread instead.\n"
		   "--direct reads with O_DIRECT (no page cache, no kernel copy: what a host\n"
		   "with NVMe would use; the disk may then limit the wall time, not the CPU).\n"
		   "datapath: one thread reads, frames and copies (CRC checked) the records\n"
		   "into a batch-sized buffer, nothing else: about the most the pipeline can\n"
		   "reach on this machine.\n"
		   "Each measurement is the best of R runs (default 3; memcpy: of at least 5).\n"
		   "ratio is batch bytes per CPU-second over memcpy bytes per second.\n");
}

struct bench_ds {
	const char *name; /* "ctr", "image" */
	const char *dir;
	int64_t batch_size;
	int64_t shuffle_buffer;
	uint64_t batches;	     /* default count */
	const char *const *features; /* NULL: every feature of the manifest */
	const char *steps;	     /* processing_steps (JSON), or NULL */
};

static const char *const image_features[] = { "image", "label", "bbox", NULL };
static const char *const jpeg_features[] = { "image/encoded", "image/class/label", NULL };

/* torchvision's ImageNet recipes (the reference training scripts' transforms) */
#define NORMALIZE                                                                        \
	"{\"tensor\": \"image/encoded\", \"type\": \"normalize\", \"args\": {\"mean\": " \
	"[123.675, 116.28, 103.53], \"std\": [58.395, 57.12, 57.375]}}"
static const char imagenet_train[] =
	"[{\"tensor\": \"image/encoded\", \"type\": \"decode_image\", \"args\": {\"channels\": "
	"3}}, {\"tensor\": \"image/encoded\", \"type\": \"random_resized_crop\", \"args\": "
	"{\"size\": [224, 224]}}, {\"tensor\": \"image/encoded\", \"type\": \"random_flip\", "
	"\"args\": {}}, " NORMALIZE "]";
static const char imagenet_eval[] =
	"[{\"tensor\": \"image/encoded\", \"type\": \"decode_image\", \"args\": {\"channels\": "
	"3}}, {\"tensor\": \"image/encoded\", \"type\": \"resize\", \"args\": {\"shorter_side\": "
	"256}}, {\"tensor\": \"image/encoded\", \"type\": \"center_crop\", \"args\": {\"size\": "
	"[224, 224]}}, " NORMALIZE "]";

static double process_cpu_s(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) < 0)
		return 0;
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static int add_primary(json_t *list, const char *name)
{
	json_t *f = json_object();

	if (!f || json_object_set_new(f, "from_name", json_string(name)) < 0 ||
	    json_object_set_new(f, "to_name", json_string(name)) < 0 ||
	    json_array_append_new(list, f) < 0)
		return -ENOMEM;
	return 0;
}

/* The spec of ds as JSON text; the caller frees *ret_text. Features from the manifest. */
static int build_spec(const struct bench_ds *ds, unsigned workers, char **ret_text,
		      struct io_error *err)
{
	struct manifest *m = NULL;
	json_t *root = NULL, *feats;
	char path[4096], name[64];
	size_t i;
	int rc;

	if ((size_t)snprintf(path, sizeof(path), "%s/__manifest__.json", ds->dir) >= sizeof(path)) {
		io_error_set(err, "%s: path too long", ds->dir);
		return -ENAMETOOLONG;
	}
	rc = manifest_load_file(path, &m, err);
	if (rc < 0)
		return rc;
	rc = -ENOMEM;
	feats = json_array();
	if (!feats)
		goto out;
	if (ds->features) {
		for (i = 0; ds->features[i]; i++) {
			if (manifest_find(m, ds->features[i]) < 0) {
				io_error_set(err,
					     "%s: no feature '%s' (is it a `sluicectl gen %s` "
					     "dataset?)",
					     path, ds->features[i], ds->name);
				json_decref(feats);
				rc = -EINVAL;
				goto out;
			}
			if (add_primary(feats, ds->features[i]) < 0) {
				json_decref(feats);
				goto out;
			}
		}
	} else {
		for (i = 0; i < m->n_features; i++) {
			if (add_primary(feats, m->features[i].name) < 0) {
				json_decref(feats);
				goto out;
			}
		}
	}
	snprintf(name, sizeof(name), "bench-%s", ds->name);
	/* "o" hands feats over to root (also when json_pack fails). */
	root = json_pack("{s:s, s:s, s:{s:{s:s, s:{s:s}}, s:I, s:b, s:n, s:i, s:I, s:i, s:i, s:b, "
			 "s:I, s:i, s:i, s:o}}",
			 "name", name, "type", "independent", "args", "dataset", "type", "dir",
			 "args", "data_dir", ds->dir, "target_batch_size",
			 (json_int_t)ds->batch_size, "drop_remainder", 1, "epochs",
			 "num_parallel_reads", 4, "num_parallel_parses", (json_int_t)workers,
			 "num_read_buffer_bytes", 1 << 20, "num_prefetch", 4, "shuffle", 1,
			 "num_shuffle_buffer_elements", (json_int_t)ds->shuffle_buffer,
			 "num_filenames_shuffle_buffer", 8, "num_mix_files", 8, "primary_features",
			 feats);
	if (!root)
		goto out;
	if (ds->steps) {
		json_t *steps = json_loads(ds->steps, 0, NULL);
		if (!steps || json_object_set_new(json_object_get(root, "args"), "processing_steps",
						  steps) < 0)
			goto out;
	}
	*ret_text = json_dumps(root, JSON_COMPACT);
	rc = *ret_text ? 0 : -ENOMEM;
out:
	if (rc == -ENOMEM)
		io_error_set(err, "out of memory building the spec");
	json_decref(root);
	manifest_destroy(m);
	return rc;
}

struct pl_run {
	double wall_s, cpu_s;
	uint64_t batches, records, bytes;
	const char *engine;
};

/*
 * What a run counts: a warm-up of n/10 + 1 batches (filling the shuffle buffer, first touch of
 * the read buffers), then n timed ones (the steady state), whichever thread takes them.
 */
struct tally {
	uint64_t warm, n, seen;
	double t0, c0;
	struct pl_run r;
};

static void tally_init(struct tally *t, uint64_t n)
{
	memset(t, 0, sizeof(*t));
	t->warm = n / 10 + 1;
	t->n = n;
}

/* Count batch b; true once the n timed batches are in (the clock then stops). */
static bool tally_take(struct tally *t, const struct pl_batch *b)
{
	if (t->seen++ < t->warm) {
		if (t->seen == t->warm) {
			t->t0 = scan_now_s();
			t->c0 = process_cpu_s();
		}
		return false;
	}
	if (t->r.batches == t->n)
		return true;
	t->r.batches++;
	t->r.records += b->rows;
	t->r.bytes += b->len;
	if (t->r.batches < t->n)
		return false;
	t->r.wall_s = scan_now_s() - t->t0;
	t->r.cpu_s = process_cpu_s() - t->c0;
	return true;
}

static const char *engine_of(const struct pl_pipeline *p)
{
	struct pl_stats st;

	pl_pipeline_get_stats(p, &st);
	return st.io_engine && !strcmp(st.io_engine, "pread") ? "pread" : "io_uring";
}

/* The deliver callback's side of a run, on the driver thread. */
struct dl_run {
	struct pl_pipeline *p;
	struct tally t;
	int end; /* 1 once the callbacks are done with the run */
	int rc;
	struct io_error err;
	pthread_mutex_t lock;
	pthread_cond_t cond;
};

/* Under d->lock. */
static void dl_finish(struct dl_run *d, int rc, const struct io_error *err)
{
	if (!d->end) {
		d->end = 1;
		d->rc = rc;
		if (err)
			d->err = *err;
		pthread_cond_signal(&d->cond);
	}
}

/* The lock (uncontended but for the start) orders d->p, set when create returns, before use. */
static void dl_deliver(void *ctx, struct pl_batch *b)
{
	struct dl_run *d = ctx;

	pthread_mutex_lock(&d->lock);
	if (tally_take(&d->t, b))
		dl_finish(d, 0, NULL);
	struct pl_pipeline *p = d->p;
	pthread_mutex_unlock(&d->lock);
	pl_batch_release(p, b);
}

static void dl_end(void *ctx, int rc, const struct io_error *err)
{
	struct dl_run *d = ctx;

	pthread_mutex_lock(&d->lock);
	dl_finish(d, rc < 0 ? rc : -ENODATA, err);
	pthread_mutex_unlock(&d->lock);
}

/* One timed run with the batches delivered to dl_deliver (as sluiced takes them). */
static int run_once_deliver(const struct pl_spec *spec, struct sched_pool *pool, bool direct,
			    uint64_t n, struct pl_run *ret, struct io_error *err)
{
	struct pl_pipeline_opts po;
	struct dl_run d;
	int rc;

	memset(&d, 0, sizeof(d));
	tally_init(&d.t, n);
	pthread_mutex_init(&d.lock, NULL);
	pthread_cond_init(&d.cond, NULL);
	pl_pipeline_opts_init(&po);
	po.pool = pool;
	po.direct = direct;
	po.deliver = dl_deliver;
	po.end = dl_end;
	po.deliver_ctx = &d;
	/* d.p is read by the callbacks, which may start before create returns: hold them back */
	pthread_mutex_lock(&d.lock);
	rc = pl_pipeline_create(spec, &po, &d.p, err);
	pthread_mutex_unlock(&d.lock);
	if (rc == 0) {
		pthread_mutex_lock(&d.lock);
		while (!d.end)
			pthread_cond_wait(&d.cond, &d.lock);
		pthread_mutex_unlock(&d.lock);
		d.t.r.engine = engine_of(d.p);
		pl_pipeline_destroy(d.p);
		rc = d.rc;
		if (rc == -ENODATA)
			io_error_set(err, "the dataset ended before %" PRIu64 " batches", n);
		else if (rc < 0)
			*err = d.err;
	}
	pthread_cond_destroy(&d.cond);
	pthread_mutex_destroy(&d.lock);
	if (rc < 0)
		return rc;
	*ret = d.t.r;
	return 0;
}

/* One timed run with the batches taken by pl_pipeline_next() on this thread (--queue). */
static int run_once(const struct pl_spec *spec, struct sched_pool *pool, bool direct, uint64_t n,
		    struct pl_run *ret, struct io_error *err)
{
	struct pl_pipeline_opts po;
	struct pl_pipeline *p = NULL;
	struct tally t;
	bool done = false;
	int rc;

	tally_init(&t, n);
	pl_pipeline_opts_init(&po);
	po.pool = pool;
	po.direct = direct;
	rc = pl_pipeline_create(spec, &po, &p, err);
	if (rc < 0)
		return rc;
	while (!done) {
		struct pl_batch *b;

		rc = pl_pipeline_next(p, -1, &b, err);
		if (rc < 0) {
			pl_pipeline_destroy(p);
			return rc;
		}
		if (rc == 0 && t.seen < t.warm) {
			pl_pipeline_destroy(p);
			io_error_set(err, "the dataset ended during the warm-up");
			return -ENODATA;
		}
		if (rc == 0) { /* ended early: what was timed so far */
			t.r.wall_s = scan_now_s() - t.t0;
			t.r.cpu_s = process_cpu_s() - t.c0;
			break;
		}
		done = tally_take(&t, b);
		pl_batch_release(p, b);
	}
	t.r.engine = engine_of(p);
	pl_pipeline_destroy(p);
	*ret = t.r;
	return 0;
}

/* The baseline: single-thread memcpy of `bytes` bytes through a 64 MiB buffer, best of repeat. */
static int bench_memcpy(uint64_t bytes, unsigned repeat, double *ret_bytes_per_s)
{
	volatile uint8_t sink = 0;
	double best = 0;
	uint8_t *src, *dst;
	unsigned r;

	if (bytes < MEMCPY_MIN_BYTES)
		bytes = MEMCPY_MIN_BYTES;
	src = malloc(MEMCPY_BUF);
	dst = malloc(MEMCPY_BUF);
	if (!src || !dst) {
		free(src);
		free(dst);
		return -ENOMEM;
	}
	/* Fault both buffers in before timing. */
	memset(src, 0x5a, MEMCPY_BUF);
	memset(dst, 0xa5, MEMCPY_BUF);
	for (r = 0; r < repeat; r++) {
		double t0 = scan_now_s(), t;
		uint64_t left = bytes;

		while (left) {
			size_t n = left < MEMCPY_BUF ? (size_t)left : MEMCPY_BUF;

			memcpy(dst, src, n);
			sink ^= dst[n - 1];
			src[0]++;
			left -= n;
		}
		t = scan_now_s() - t0;
		if (r == 0 || t < best)
			best = t;
	}
	(void)sink;
	free(src);
	free(dst);
	if (best <= 0)
		best = 1e-9;
	*ret_bytes_per_s = (double)bytes / best;
	printf("bench=baseline_memcpy bytes=%" PRIu64 " buf_bytes=%lu wall_s=%.4f "
	       "bytes_per_s=%.0f\n",
	       bytes, MEMCPY_BUF, best, *ret_bytes_per_s);
	return 0;
}

/*
 * The data path alone, for scale: one thread reads the dataset's files with the pipeline's
 * engine and chunk size, frames the records and copies each payload into a batch-sized buffer
 * with its CRC checked (crc32c_copy), until `bytes` record bytes: no decoding, shuffling,
 * batching or second thread. Its ratio is about the most the pipeline can reach here.
 */
static int bench_datapath(const struct bench_ds *ds, bool direct, uint64_t bytes, double memcpy_bps)
{
	struct dataset *set = NULL;
	struct io_error err = { "" };
	struct iox_opts o;
	struct iox *iox = NULL;
	struct tfr_reader_opts ro;
	uint64_t done = 0, records = 0;
	size_t cap = 2u << 20, at = 0;
	uint8_t *dst = aligned_alloc(4096, cap);
	uint32_t sink = 0;
	double c0;
	int rc;

	if (!dst)
		return -ENOMEM;
	memset(dst, 0, cap);
	rc = dataset_open_dir(ds->dir, NULL, &set, &err);
	if (rc < 0)
		goto out;
	iox_opts_init(&o);
	o.chunk_len = 1u << 20;
	o.direct = direct;
	o.max_open_files = 1;
	rc = iox_create(&o, &iox, &err);
	if (rc < 0)
		goto out;
	tfr_reader_opts_init(&ro);
	ro.defer_data_crc = true; /* checked by the copy, as in the pipeline */
	c0 = process_cpu_s();
	for (size_t f = 0; done < bytes && rc >= 0; f = (f + 1) % set->n_files) {
		struct tfr_reader *r = tfr_reader_create(&ro);
		struct iox_chunk ch;
		bool last = false;

		if (!r || iox_add_file(iox, set->files[f].path, NULL) < 0) {
			tfr_reader_destroy(r);
			rc = -ENOMEM;
			break;
		}
		while (!last && rc >= 0 && (rc = iox_next(iox, -1, &ch, &err)) == 1) {
			struct tfr_record rec;
			int k;

			last = ch.last;
			if (ch.error) {
				rc = ch.error;
				break;
			}
			tfr_reader_feed(r, ch.data, ch.len);
			if (last)
				tfr_reader_finish(r);
			while ((k = tfr_reader_next(r, &rec, &err)) == TFR_RECORD) {
				if (at + rec.len > cap)
					at = 0;
				if (crc32c_mask(crc32c_copy(0, dst + at, rec.data, rec.len)) !=
				    tfr_record_stored_crc(rec.data, rec.len))
					sink++;
				at += rec.len;
				done += rec.len;
				records++;
			}
			iox_release(iox, &ch);
			if (k < 0)
				rc = k;
		}
		tfr_reader_destroy(r);
		if (rc == 0) /* every added file delivered */
			rc = 1;
	}
	if (rc >= 0) {
		double cpu = process_cpu_s() - c0;

		if (cpu <= 0)
			cpu = 1e-9;
		printf("bench=datapath_%s bytes=%" PRIu64 " records=%" PRIu64 " cpu_s=%.4f "
		       "bytes_per_cpu_s=%.0f ratio=%.4f bad_crc=%u direct=%d\n",
		       ds->name, done, records, cpu, (double)done / cpu,
		       (double)done / cpu / memcpy_bps, sink, direct);
		rc = 0;
	}
out:
	if (rc < 0)
		fprintf(stderr, "sluice-bench pipeline: %s data path: %s\n", ds->name,
			err.msg[0] ? err.msg : strerror(-rc));
	iox_destroy(iox);
	dataset_destroy(set);
	free(dst);
	return rc;
}

static int bench_dataset(const struct bench_ds *ds, struct sched_pool *pool, bool direct,
			 bool deliver, uint64_t batches, unsigned repeat)
{
	unsigned workers = sched_pool_workers(pool), r;
	struct pl_spec *spec = NULL;
	struct pl_run best, run;
	struct io_error err;
	char *text = NULL, origin[64];
	double memcpy_bps, cpu;
	int rc;

	err.msg[0] = '\0';
	rc = build_spec(ds, workers, &text, &err);
	if (rc < 0)
		goto fail;
	snprintf(origin, sizeof(origin), "<bench %s spec>", ds->name);
	rc = pl_spec_parse(text, strlen(text), origin, &spec, &err);
	if (rc < 0)
		goto fail;
	memset(&best, 0, sizeof(best));
	for (r = 0; r < repeat; r++) {
		rc = deliver ? run_once_deliver(spec, pool, direct, batches, &run, &err)
			     : run_once(spec, pool, direct, batches, &run, &err);
		if (rc < 0)
			goto fail;
		if (r == 0 || run.wall_s < best.wall_s)
			best = run;
	}
	if (best.batches < batches)
		fprintf(stderr,
			"sluice-bench pipeline: %s: the stream ended after %" PRIu64 " batches\n",
			ds->name, best.batches);
	/* at least 5 copies: the baseline is the denominator, a slow one inflates the ratio */
	rc = bench_memcpy(best.bytes, repeat > 5 ? repeat : 5, &memcpy_bps);
	if (rc < 0)
		goto fail;
	cpu = best.cpu_s > 0 ? best.cpu_s : 1e-9;
	printf("bench=pipeline_%s workers=%u batches=%" PRIu64 " records=%" PRIu64 " wall_s=%.4f "
	       "cpu_s=%.4f records_per_s=%.0f records_per_cpu_s=%.0f batch_bytes_per_cpu_s=%.0f "
	       "memcpy_bytes_per_s=%.0f ratio=%.4f batch_bytes=%" PRIu64 " engine=%s direct=%d "
	       "delivery=%s\n",
	       ds->name, workers, best.batches, best.records, best.wall_s, best.cpu_s,
	       (double)best.records / (best.wall_s > 0 ? best.wall_s : 1e-9),
	       (double)best.records / cpu, (double)best.bytes / cpu, memcpy_bps,
	       (double)best.bytes / cpu / memcpy_bps, best.bytes, best.engine, direct,
	       deliver ? "callback" : "queue");
	fflush(stdout);
	if (ds->steps) { /* decode-bound: reading and copying the records is not its limit */
		pl_spec_destroy(spec);
		free(text);
		return 0;
	}
	rc = bench_datapath(ds, direct, best.bytes, memcpy_bps);
	if (rc < 0) {
		pl_spec_destroy(spec);
		free(text);
		return rc;
	}
	pl_spec_destroy(spec);
	free(text);
	return 0;
fail:
	fprintf(stderr, "sluice-bench pipeline: %s: %s\n", ds->name,
		err.msg[0] ? err.msg : strerror(-rc));
	pl_spec_destroy(spec);
	free(text);
	return rc;
}

int bench_pipeline(int argc, char **argv)
{
	struct bench_ds ds[] = {
		{ "ctr", NULL, 1024, 10000, 2000, NULL, NULL },
		{ "image", NULL, 64, 1000, 500, image_features, NULL },
		{ "imagenet", NULL, 256, 1000, 20, jpeg_features, imagenet_train },
		{ "imagenet_eval", NULL, 256, 1000, 20, jpeg_features, imagenet_eval },
	};
	const size_t n_ds = sizeof(ds) / sizeof(ds[0]);
	uint64_t batches = 0, workers = 0, repeat = 3;
	bool direct = false, deliver = true;
	struct sched_pool_opts po;
	struct sched_pool *pool = NULL;
	int rc = 0, a;
	size_t i;

	static const struct option opts[] = {
		{ "ctr", required_argument, NULL, 'c' },
		{ "image", required_argument, NULL, 'i' },
		{ "imagenet", required_argument, NULL, 'n' },
		{ "direct", no_argument, NULL, 'd' },
		{ "queue", no_argument, NULL, 'q' },
		{ "batches", required_argument, NULL, 'b' },
		{ "workers", required_argument, NULL, 'w' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *name;
	optind = 0;
	while ((a = bench_getopt(argc, argv, opts, &name)) != -1) {
		switch (a) {
		case 'h':
			pipeline_usage(stdout);
			return 0;
		case '?':
			return 2;
		case 'c':
			ds[0].dir = optarg;
			break;
		case 'i':
			ds[1].dir = optarg;
			break;
		case 'n':
			ds[2].dir = ds[3].dir = optarg;
			break;
		case 'd':
			direct = true;
			break;
		case 'q':
			deliver = false;
			break;
		default: { /* b, w, r */
			uint64_t *dst = a == 'b' ? &batches : a == 'w' ? &workers : &repeat;

			if (cli_parse_u64(optarg, a == 'b' ? 1u << 30 : 4096, dst) < 0 ||
			    *dst == 0) {
				fprintf(stderr,
					"sluice-bench pipeline: --%s needs a positive number\n",
					name);
				return 2;
			}
		}
		}
	}
	if (optind != argc) {
		fprintf(stderr, "sluice-bench pipeline: unexpected argument %s (try --help)\n",
			argv[optind]);
		return 2;
	}
	if (!ds[0].dir && !ds[1].dir && !ds[2].dir) {
		pipeline_usage(stderr);
		return 2;
	}
	sched_pool_opts_init(&po);
	po.workers = (unsigned)workers;
	rc = sched_pool_create(&po, &pool);
	if (rc < 0) {
		fprintf(stderr, "sluice-bench pipeline: cannot start the pool: %s\n",
			strerror(-rc));
		return 1;
	}
	for (i = 0; i < n_ds && rc == 0; i++) {
		if (ds[i].dir)
			rc = bench_dataset(&ds[i], pool, direct, deliver,
					   batches ? batches : ds[i].batches, (unsigned)repeat);
	}
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
	return rc < 0 ? 1 : 0;
}
