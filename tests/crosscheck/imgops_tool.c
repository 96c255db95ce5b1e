/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The image kernels (daemon/pipeline/imgops.c) on raw files, for test_imgops.py to compare with
 * its numpy model (imgref.py):
 *   imgops_tool resize IN H W C OUT_H OUT_W INTERP FLIP_X FLIP_Y OUT
 *   imgops_tool crop IN H W C X Y CW CH OUT            (then resize with OUT_H OUT_W of the crop)
 *   imgops_tool normalize IN H W C DTYPE CHW M0 M1 M2 S0 S1 S2 OUT
 *   imgops_tool jitter IN H W C ORDER ON F0 F1 F2 F3 OUT
 *       (ORDER: the four adjustments' order as 4 digits, e.g. 2031; ON: 4 digits 0/1)
 *   imgops_tool jdraw SEED EPOCH STREAM N B_LO B_HI C_LO C_HI S_LO S_HI H_LO H_HI ON
 *       (prints N draws "o0 o1 o2 o3 f0 f1 f2 f3", keyed as rrc's)
 *   imgops_tool rrc SEED EPOCH STREAM N H W SCALE_LO SCALE_HI RATIO_LO RATIO_HI
 *       (prints N crops "x y w h", drawn from one stream keyed by (SEED, EPOCH, STREAM, i))
 * INTERP: nearest, bilinear, area; DTYPE: uint8, float16, bfloat16, float32.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/pipeline/imgops.h"

static uint8_t *load(const char *path, size_t n)
{
	uint8_t *p = malloc(n ? n : 1);
	FILE *f = fopen(path, "rb");
	if (!p || !f || fread(p, 1, n, f) != n) {
		fprintf(stderr, "imgops_tool: %s: cannot read %zu bytes\n", path, n);
		exit(2);
	}
	fclose(f);
	return p;
}

static void save(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
		fprintf(stderr, "imgops_tool: %s: cannot write\n", path);
		exit(2);
	}
}

static long num(const char *s)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (*end || end == s) {
		fprintf(stderr, "imgops_tool: %s: not an integer\n", s);
		exit(2);
	}
	return v;
}

static double real(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	if (*end || end == s) {
		fprintf(stderr, "imgops_tool: %s: not a number\n", s);
		exit(2);
	}
	return v;
}

static enum pl_interp interp_of(const char *s)
{
	for (unsigned i = 0; i < PL_INTERP_COUNT_; i++)
		if (strcmp(s, pl_interp_name((enum pl_interp)i)) == 0)
			return (enum pl_interp)i;
	fprintf(stderr, "imgops_tool: interpolation %s?\n", s);
	exit(2);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	if (strcmp(argv[1], "rrc") == 0 && argc == 12) {
		int n = num(argv[5]);
		struct pl_rng rng;
		for (int i = 0; i < n; i++) {
			pl_rng_init(&rng, strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10),
				    strtoull(argv[4], NULL, 10), (uint64_t)i);
			struct pl_rect r = pl_img_random_resized_crop(
				&rng, (uint32_t)num(argv[6]), (uint32_t)num(argv[7]), real(argv[8]),
				real(argv[9]), real(argv[10]), real(argv[11]));
			printf("%u %u %u %u\n", r.x, r.y, r.w, r.h);
		}
		return 0;
	}
	if (strcmp(argv[1], "jdraw") == 0 && argc == 15) {
		double range[4][2];
		bool on[4];
		for (int k = 0; k < 4; k++) {
			range[k][0] = real(argv[6 + 2 * k]);
			range[k][1] = real(argv[7 + 2 * k]);
			on[k] = argv[14][k] == '1';
		}
		for (int i = 0; i < num(argv[5]); i++) {
			struct pl_rng rng;
			struct pl_jitter j;
			pl_rng_init(&rng, strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10),
				    strtoull(argv[4], NULL, 10), (uint64_t)i);
			pl_jitter_draw(&rng, range, on, &j);
			printf("%u %u %u %u %.9g %.9g %.9g %.9g\n", j.order[0], j.order[1],
			       j.order[2], j.order[3], j.factor[0], j.factor[1], j.factor[2],
			       j.factor[3]);
		}
		return 0;
	}
	if (argc < 6)
		return 2;
	uint32_t h = (uint32_t)num(argv[3]), w = (uint32_t)num(argv[4]);
	uint32_t c = (uint32_t)num(argv[5]);
	uint8_t *in = load(argv[2], (size_t)h * w * c);
	struct pl_img img = { in, h, w, c, (size_t)w * c };
	if (strcmp(argv[1], "resize") == 0 && argc == 12) {
		uint32_t oh = (uint32_t)num(argv[6]), ow = (uint32_t)num(argv[7]);
		size_t n = (size_t)oh * ow * c;
		uint8_t *out = malloc(n);
		struct pl_resampler *rs = pl_resampler_create();
		int r = pl_img_resize(rs, &img, out, (size_t)ow * c, oh, ow, interp_of(argv[8]),
				      num(argv[9]) != 0, num(argv[10]) != 0);
		if (r < 0)
			return 1;
		save(argv[11], out, n);
		pl_resampler_destroy(rs);
		free(out);
	} else if (strcmp(argv[1], "crop") == 0 && argc == 11) {
		struct pl_rect rc = { (uint32_t)num(argv[6]), (uint32_t)num(argv[7]),
				      (uint32_t)num(argv[8]), (uint32_t)num(argv[9]) };
		struct pl_img sub = { in + (size_t)rc.y * img.stride + (size_t)rc.x * c, rc.h, rc.w,
				      c, img.stride };
		size_t n = (size_t)rc.h * rc.w * c;
		uint8_t *out = malloc(n ? n : 1);
		pl_img_copy(&sub, out, (size_t)rc.w * c, false, false);
		save(argv[10], out, n);
		free(out);
	} else if (strcmp(argv[1], "normalize") == 0 && argc == 15) {
		static const char *const dts[] = { "uint8", "float16", "bfloat16", "float32" };
		static const size_t sizes[] = { 1, 2, 2, 4 };
		unsigned dt = 0;
		while (dt < 4 && strcmp(dts[dt], argv[6]) != 0)
			dt++;
		if (dt == 4)
			return 2;
		float mean[3] = { (float)real(argv[8]), (float)real(argv[9]),
				  (float)real(argv[10]) };
		float sd[3] = { (float)real(argv[11]), (float)real(argv[12]),
				(float)real(argv[13]) };
		size_t n = (size_t)h * w * c * sizes[dt];
		void *out = malloc(n ? n : 1);
		int64_t hwc[3] = { (int64_t)w * c, c, 1 }, chw[3] = { w, 1, (int64_t)h * w };
		pl_img_normalize(&img, out, (enum pl_norm_dtype)dt, num(argv[7]) != 0 ? chw : hwc,
				 false, false, mean, sd);
		save(argv[14], out, n);
		free(out);
	} else if (strcmp(argv[1], "jitter") == 0 && argc == 13) {
		struct pl_jitter j;
		for (int k = 0; k < 4; k++) {
			j.order[k] = (unsigned)(argv[6][k] - '0');
			j.on[k] = argv[7][k] == '1';
			j.factor[k] = (float)real(argv[8 + k]);
		}
		pl_img_color_jitter(in, h, w, c, img.stride, &j);
		save(argv[12], in, (size_t)h * w * c);
	} else {
		return 2;
	}
	free(in);
	return 0;
}
