/* SPDX-License-Identifier: Apache-2.0 */
/* sluice-bench image: images decoded per CPU-second, full vs crop vs scaled, against memcpy. */
#include "bench.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/dataset.h"
#include "io/file.h"
#include "io/image.h"
#include "io/image_internal.h"
#include "io/pbex.h"
#include "io/tfr.h"
#include "tools/common/cliarg.h"

static void image_usage(FILE *f)
{
	fprintf(f, "usage: sluice-bench image DIR [--feature NAME] [--limit N] [--repeat R]\n"
		   "                          [--size S] [--threads T] [--seed X]\n"
		   "\n"
		   "Loads up to N images (default 400) of feature NAME (default image/encoded)\n"
		   "from the dataset DIR (sluicectl gen jpeg makes one) and decodes them all, one\n"
		   "mode at a time, on one thread, timing CPU time (CLOCK_THREAD_CPUTIME_ID): "
		   "full\n"
		   "decodes (accurate and fast DCT; rows straight into the output or through the\n"
		   "row buffer), the header probe, RandomResizedCrop crops (8-100 %% of the area,\n"
		   "aspect 3/4-4/3, as torchvision draws them) decoded alone, the same crops with\n"
		   "libjpeg's scaled IDCT where the crop is at least 2x S (default 224) on its "
		   "short\n"
		   "side, and whole images at 1/2, 1/4, 1/8. Baseline in the same run: memcpy of\n"
		   "the decoded bytes. With T > 1, full and crop also run on T threads at once.\n"
		   "Best of R runs (default 3). JPEG and PNG images are reported apart.\n");
}

static double thread_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double wall_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct bimg {
	uint8_t *data;
	size_t len;
	struct img_info info;
	struct img_rect crop;  /* RandomResizedCrop's box, full-size pixels */
	unsigned scale;	       /* for crop_scaled: 1, 2, 4 or 8 */
	struct img_rect scrop; /* the box at that scale */
};

enum mode {
	M_PROBE,
	M_FULL,
	M_FULL_FAST,
	M_FULL_ROWCOPY,
	M_CROP,
	M_CROP_ROWCOPY,
	M_CROP_SCALED,
	M_SCALE2,
	M_SCALE4,
	M_SCALE8,
	M_COUNT
};

static const char *const mode_names[M_COUNT] = {
	"probe",	"full",	       "full_fast", "full_rowcopy", "crop",
	"crop_rowcopy", "crop_scaled", "scale2",    "scale4",	    "scale8",
};

struct run {
	const struct bimg *imgs;
	size_t n;
	enum img_format fmt;
	enum mode mode;
	uint8_t *out;
	size_t out_cap;
	struct img_scratch *s;
	/* results */
	size_t images;
	uint64_t in_bytes, out_bytes, pixels;
	double cpu_s, wall_s;
	int err;
};

/* Decode every image of r->fmt in r->mode once. */
static void *run_mode(void *p)
{
	struct run *r = p;
	double c0 = thread_cpu_s(), w0 = wall_s();

	r->images = 0;
	r->in_bytes = r->out_bytes = r->pixels = 0;
	r->err = 0;
	for (size_t i = 0; i < r->n; i++) {
		const struct bimg *b = &r->imgs[i];
		struct img_decode_opts o;
		struct img_shape sh;
		struct img_info info;
		struct io_error err;
		int ret;

		if (b->info.format != r->fmt)
			continue;
		img_decode_opts_init(&o);
		o.channels = 3;
		r->s->force_row_copy = r->mode == M_FULL_ROWCOPY || r->mode == M_CROP_ROWCOPY;
		switch (r->mode) {
		case M_PROBE:
			ret = img_probe(b->data, b->len, &info, &err);
			if (ret)
				r->err = ret;
			r->images++;
			r->in_bytes += b->len;
			continue;
		case M_FULL_FAST:
			o.dct = IMG_DCT_FAST;
			break;
		case M_CROP:
		case M_CROP_ROWCOPY:
			o.has_crop = true;
			o.crop = b->crop;
			break;
		case M_CROP_SCALED:
			o.has_crop = true;
			o.crop = b->scrop;
			o.scale_denom = b->scale;
			break;
		case M_SCALE2:
		case M_SCALE4:
		case M_SCALE8:
			if (r->fmt != IMG_FORMAT_JPEG)
				continue;
			o.scale_denom = r->mode == M_SCALE2 ? 2 : r->mode == M_SCALE4 ? 4 : 8;
			break;
		default:
			break;
		}
		ret = img_decode(b->data, b->len, &o, r->out, r->out_cap, &sh, r->s, &err);
		if (ret) {
			fprintf(stderr, "sluice-bench image: image %zu: %s\n", i, err.msg);
			r->err = ret;
			continue;
		}
		r->images++;
		r->in_bytes += b->len;
		r->out_bytes += img_shape_bytes(&sh);
		r->pixels += (uint64_t)sh.width * sh.height;
	}
	r->s->force_row_copy = false;
	r->cpu_s = thread_cpu_s() - c0;
	r->wall_s = wall_s() - w0;
	return NULL;
}

/* torchvision's RandomResizedCrop box: area 8..100 %, aspect log-uniform 3/4..4/3, 10 tries,
 * else the central crop of the clamped aspect. */
static struct img_rect rrc(uint32_t w, uint32_t h, unsigned *seed)
{
	double area = (double)w * h;

	for (int t = 0; t < 10; t++) {
		double a = area * (0.08 + 0.92 * (rand_r(seed) / (RAND_MAX + 1.0)));
		double lr = log(3.0 / 4) +
			    (log(4.0 / 3) - log(3.0 / 4)) * (rand_r(seed) / (RAND_MAX + 1.0));
		double ar = exp(lr);
		long cw = lround(sqrt(a * ar)), ch = lround(sqrt(a / ar));

		if (cw > 0 && ch > 0 && cw <= (long)w && ch <= (long)h) {
			struct img_rect c = { 0, 0, (uint32_t)cw, (uint32_t)ch };

			c.x = (uint32_t)(rand_r(seed) % (w - c.w + 1));
			c.y = (uint32_t)(rand_r(seed) % (h - c.h + 1));
			return c;
		}
	}
	return (struct img_rect){ 0, 0, w, h };
}

/* Read the images of feature `name` from every file of the dataset, up to limit. */
static int load_images(const char *dir, const char *name, size_t limit, struct bimg **ret,
		       size_t *ret_n)
{
	struct dataset *ds;
	struct io_error err;
	struct pbex_schema *schema;
	size_t nl = strlen(name), n = 0, cap = 0;
	struct bimg *imgs = NULL;
	int ret_code = 0;

	ret_code = dataset_open_dir(dir, NULL, &ds, &err);
	if (ret_code) {
		fprintf(stderr, "sluice-bench image: %s\n", err.msg);
		return ret_code;
	}
	schema = pbex_schema_create(&name, &nl, 1);
	for (size_t fi = 0; fi < ds->n_files && n < limit && schema; fi++) {
		struct tfr_reader_opts to;
		struct tfr_reader *r;
		char *buf;
		size_t len;
		bool fed = false;

		ret_code = io_file_read(ds->files[fi].path, (size_t)4 << 30, &buf, &len, &err);
		if (ret_code)
			break;
		tfr_reader_opts_init(&to);
		to.compression = ds->manifest->compression;
		to.path = ds->files[fi].path;
		r = tfr_reader_create(&to);
		while (r && n < limit) {
			struct tfr_record rec;
			struct pbex_feature f;
			int rc = tfr_reader_next(r, &rec, &err);

			if (rc == TFR_NEED_INPUT) {
				if (fed) {
					tfr_reader_finish(r);
				} else {
					tfr_reader_feed(r, buf, len);
					fed = true;
				}
				continue;
			}
			if (rc != TFR_RECORD)
				break;
			if (pbex_decode_example(schema, rec.data, rec.len, &f, &err) == 0 &&
			    f.kind == PBEX_KIND_BYTES && f.count >= 1) {
				struct pbex_bytes_iter it;
				const uint8_t *d;
				size_t l;

				pbex_bytes_iter_init(&it, &f);
				pbex_bytes_iter_next(&it, &d, &l);
				if (n == cap) {
					struct bimg *ni;

					cap = cap ? 2 * cap : 256;
					ni = realloc(imgs, cap * sizeof(*imgs));
					if (!ni)
						break;
					imgs = ni;
				}
				memset(&imgs[n], 0, sizeof(imgs[n]));
				imgs[n].data = malloc(l ? l : 1);
				if (!imgs[n].data)
					break;
				memcpy(imgs[n].data, d, l);
				imgs[n].len = l;
				if (img_probe(d, l, &imgs[n].info, &err) == 0)
					n++;
				else
					free(imgs[n].data);
			}
		}
		tfr_reader_destroy(r);
		free(buf);
	}
	pbex_schema_destroy(schema);
	dataset_destroy(ds);
	if (ret_code) {
		fprintf(stderr, "sluice-bench image: %s\n", err.msg);
		for (size_t i = 0; i < n; i++)
			free(imgs[i].data);
		free(imgs);
		return ret_code;
	}
	*ret = imgs;
	*ret_n = n;
	return 0;
}

/* memcpy of `bytes` in image-sized pieces from one buffer to another: MB per second. */
static double memcpy_rate(uint8_t *dst, const uint8_t *src, size_t piece, uint64_t bytes)
{
	double t0 = thread_cpu_s(), dt;
	uint64_t done = 0;

	while (done < bytes) {
		size_t n = bytes - done < piece ? (size_t)(bytes - done) : piece;

		memcpy(dst, src, n);
		__asm__ __volatile__("" : : "r"(dst) : "memory");
		done += n;
	}
	dt = thread_cpu_s() - t0;
	return dt > 0 ? (double)bytes / dt / 1e6 : 0;
}

int bench_image(int argc, char **argv)
{
	enum {
		OPT_FEATURE = 256,
		OPT_LIMIT,
		OPT_REPEAT,
		OPT_SIZE,
		OPT_THREADS,
		OPT_SEED,
	};
	static const struct option longopts[] = {
		{ "feature", required_argument, NULL, OPT_FEATURE },
		{ "limit", required_argument, NULL, OPT_LIMIT },
		{ "repeat", required_argument, NULL, OPT_REPEAT },
		{ "size", required_argument, NULL, OPT_SIZE },
		{ "threads", required_argument, NULL, OPT_THREADS },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *feature = "image/encoded";
	uint64_t limit = 400, repeat = 3, size = 224, threads = 1, seed = 1;
	struct bimg *imgs = NULL;
	size_t n = 0, out_cap = 0, max_out = 0;
	uint8_t *src = NULL, *dst = NULL;
	int c, status = 0;

	optind = 0;
	const char *name;
	while ((c = bench_getopt(argc, argv, longopts, &name)) != -1) {
		uint64_t *v = c == OPT_LIMIT	 ? &limit
			      : c == OPT_REPEAT	 ? &repeat
			      : c == OPT_SIZE	 ? &size
			      : c == OPT_THREADS ? &threads
			      : c == OPT_SEED	 ? &seed
						 : NULL;

		if (c == OPT_FEATURE) {
			feature = optarg;
		} else if (v) {
			if (cli_parse_u64(optarg, 1u << 20, v) || *v == 0) {
				fprintf(stderr,
					"sluice-bench image: --%s needs a positive number\n", name);
				return 2;
			}
		} else if (c == 'h') {
			image_usage(stdout);
			return 0;
		} else {
			return 2; /* bench_getopt said why */
		}
	}
	if (argc - optind != 1) {
		image_usage(stderr);
		return 2;
	}
	if (load_images(argv[optind], feature, limit, &imgs, &n))
		return 1;
	if (n == 0) {
		fprintf(stderr, "sluice-bench image: no images in %s (feature %s)\n", argv[optind],
			feature);
		free(imgs);
		return 1;
	}
	/* the crops, and the scale each crop_scaled decode uses */
	{
		unsigned rs = (unsigned)seed;

		for (size_t i = 0; i < n; i++) {
			struct bimg *b = &imgs[i];
			struct img_rect k;
			uint32_t shortside, d = 1, x1, y1;

			b->crop = rrc(b->info.width, b->info.height, &rs);
			shortside = b->crop.w < b->crop.h ? b->crop.w : b->crop.h;
			while (b->info.format == IMG_FORMAT_JPEG && d < 8 &&
			       shortside / (2 * d) >= size)
				d *= 2;
			b->scale = d;
			/* the scaled image's pixels that cover the box */
			x1 = (b->crop.x + b->crop.w + d - 1) / d;
			y1 = (b->crop.y + b->crop.h + d - 1) / d;
			k.x = b->crop.x / d;
			k.y = b->crop.y / d;
			k.w = x1 - k.x;
			k.h = y1 - k.y;
			b->scrop = k;
			if ((size_t)b->info.width * b->info.height * 3 > max_out)
				max_out = (size_t)b->info.width * b->info.height * 3;
		}
	}
	out_cap = max_out;
	src = malloc(out_cap);
	dst = malloc(out_cap);
	if (!src || !dst) {
		status = 1;
		goto out;
	}
	memset(src, 1, out_cap);
	for (int f = IMG_FORMAT_JPEG; f <= IMG_FORMAT_PNG; f++) {
		struct run best[M_COUNT];
		size_t nf = 0, nscaled = 0;
		double base = 0;

		for (size_t i = 0; i < n; i++)
			if (imgs[i].info.format == (enum img_format)f) {
				nf++;
				nscaled += imgs[i].scale > 1;
			}
		if (nf == 0)
			continue;
		memset(best, 0, sizeof(best));
		for (uint64_t rep = 0; rep < repeat; rep++) {
			for (int m = 0; m < M_COUNT; m++) {
				struct run r = { .imgs = imgs,
						 .n = n,
						 .fmt = (enum img_format)f,
						 .mode = (enum mode)m,
						 .out_cap = out_cap };

				if (f == IMG_FORMAT_PNG &&
				    (m == M_FULL_FAST || m == M_CROP_SCALED || m >= M_SCALE2))
					continue;
				r.out = dst;
				r.s = img_scratch_create();
				if (!r.s) {
					status = 1;
					goto out;
				}
				run_mode(&r);
				img_scratch_destroy(r.s);
				if (r.err)
					status = 1;
				if (best[m].images == 0 || r.cpu_s < best[m].cpu_s)
					best[m] = r;
			}
			{
				double b = memcpy_rate(
					dst, src, out_cap,
					best[M_FULL].out_bytes ? best[M_FULL].out_bytes : out_cap);

				base = b > base ? b : base;
			}
		}
		printf("bench=image_baseline fmt=%s memcpy_mb_per_s=%.0f images=%zu\n",
		       img_format_name((enum img_format)f), base, nf);
		for (int m = 0; m < M_COUNT; m++) {
			const struct run *r = &best[m];
			double ips = r->cpu_s > 0 ? (double)r->images / r->cpu_s : 0;
			double full = best[M_FULL].cpu_s > 0
					      ? (double)best[M_FULL].images / best[M_FULL].cpu_s
					      : 0;

			if (r->images == 0)
				continue;
			printf("bench=image fmt=%s mode=%s threads=1 images=%zu cpu_s=%.4f "
			       "images_per_cpu_s=%.1f mpix_per_cpu_s=%.2f in_mb_per_cpu_s=%.2f "
			       "out_mb_per_cpu_s=%.1f vs_full=%.2f ratio_to_memcpy=%.4f",
			       img_format_name((enum img_format)f), mode_names[m], r->images,
			       r->cpu_s, ips, (double)r->pixels / r->cpu_s / 1e6,
			       (double)r->in_bytes / r->cpu_s / 1e6,
			       (double)r->out_bytes / r->cpu_s / 1e6, full > 0 ? ips / full : 0,
			       base > 0 ? (double)r->out_bytes / r->cpu_s / 1e6 / base : 0);
			if (m == M_CROP_SCALED)
				printf(" scaled_share=%.3f target=%llu",
				       (double)nscaled / (double)nf, (unsigned long long)size);
			printf("\n");
		}
		/* T threads at once, each with its own scratch and output */
		for (int m = M_FULL; threads > 1 && m <= M_CROP; m += M_CROP - M_FULL) {
			struct run *rs = calloc(threads, sizeof(*rs));
			pthread_t *th = calloc(threads, sizeof(*th));
			double w0 = wall_s(), w;
			size_t images = 0;

			if (!rs || !th) {
				free(rs);
				free(th);
				status = 1;
				goto out;
			}
			for (uint64_t t = 0; t < threads; t++) {
				rs[t] = (struct run){ .imgs = imgs,
						      .n = n,
						      .fmt = (enum img_format)f,
						      .mode = (enum mode)m,
						      .out_cap = out_cap };
				rs[t].out = malloc(out_cap);
				rs[t].s = img_scratch_create();
				if (!rs[t].out || !rs[t].s ||
				    pthread_create(&th[t], NULL, run_mode, &rs[t]))
					status = 1;
			}
			for (uint64_t t = 0; t < threads; t++) {
				if (rs[t].s && rs[t].out)
					pthread_join(th[t], NULL);
				images += rs[t].images;
				img_scratch_destroy(rs[t].s);
				free(rs[t].out);
			}
			w = wall_s() - w0;
			printf("bench=image fmt=%s mode=%s threads=%llu images=%zu wall_s=%.4f "
			       "images_per_s=%.1f\n",
			       img_format_name((enum img_format)f), mode_names[m],
			       (unsigned long long)threads, images, w, (double)images / w);
			free(rs);
			free(th);
		}
	}
out:
	for (size_t i = 0; i < n; i++)
		free(imgs[i].data);
	free(imgs);
	free(src);
	free(dst);
	return status;
}
