/* SPDX-License-Identifier: Apache-2.0 */
/* Image kernels of the decode stage: crop draws, resampling, flips, normalization. */
#ifndef SLUICE_PIPELINE_IMGOPS_H
#define SLUICE_PIPELINE_IMGOPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rng.h"
#include "spec.h"

/*
 * Images here are uint8 HWC, row-major, with a row stride in bytes (a crop is a pointer and a
 * stride into its source). The semantics and their sources (torchvision, Pillow, tf.image) are
 * in docs/image.md; tests/crosscheck/imgref.py is the numpy model the tests compare with.
 */

struct pl_img {
	const uint8_t *p; /* pixel (0, 0) */
	uint32_t h, w, c;
	size_t stride; /* bytes from one row to the next */
};

/* A rectangle of an image: rows [y, y + h), columns [x, x + w). */
struct pl_rect {
	uint32_t x, y, w, h;
};

/*
 * torchvision's RandomResizedCrop.get_params on an h × w image: up to 10 tries of an area
 * fraction uniform in [scale_lo, scale_hi] and an aspect ratio log-uniform in
 * [ratio_lo, ratio_hi], the first that fits placed uniformly; else the central crop of the
 * ratio clamped to the range (the whole image when its own ratio is inside). Draws from rng.
 */
struct pl_rect pl_img_random_resized_crop(struct pl_rng *rng, uint32_t h, uint32_t w,
					  double scale_lo, double scale_hi, double ratio_lo,
					  double ratio_hi);
/* The central h × w crop of an image (torchvision's center_crop; h, w at most the image's). */
struct pl_rect pl_img_center_crop(uint32_t img_h, uint32_t img_w, uint32_t h, uint32_t w);
/* A uniform double in [0, 1) from 53 bits of rng. */
double pl_rng_uniform(struct pl_rng *rng);

/*
 * Resampling as Pillow's Image.resize does (separable, horizontal pass then vertical, each
 * output pixel a normalised filter-weighted sum of the input pixels within the filter's support
 * scaled by max(1, in/out): antialias when shrinking), in fixed point (14-bit weights; SSE2
 * where the machine has it) and rounded half up into uint8. A resampler holds the weights for one
 * (in, out) geometry and scratch; it is reused across calls (pl_resampler_plan recomputes only what
 * changed).
 */
struct pl_resampler;
struct pl_resampler *pl_resampler_create(void);
void pl_resampler_destroy(struct pl_resampler *rs);
/*
 * Resample src into dst (out_h × out_w × src->c, row stride dst_stride), mirroring the output
 * columns when flip_x and rows when flip_y. -ENOMEM, or -EINVAL for an empty size.
 */
int pl_img_resize(struct pl_resampler *rs, const struct pl_img *src, uint8_t *dst,
		  size_t dst_stride, uint32_t out_h, uint32_t out_w, enum pl_interp interp,
		  bool flip_x, bool flip_y);

/*
 * torchvision's ColorJitter on a PIL image, in place: the four adjustments in the order
 * order[0..3] (0 brightness, 1 contrast, 2 saturation, 3 hue), each skipped where its on[] is
 * false, with factor[] (hue: a shift in [-0.5, 0.5] of the hue circle). As Pillow computes
 * them: brightness and contrast and saturation blend with a degenerate image (black; the
 * mean of the luma, rounded; the luma) in float, truncated; hue goes through Pillow's 8-bit
 * HSV. Gray images (c 1) take brightness and contrast only; c 2 and 4: the first 3 (or 1).
 */
struct pl_jitter {
	unsigned order[4];
	bool on[4];
	float factor[4];
};
void pl_img_color_jitter(uint8_t *p, uint32_t h, uint32_t w, uint32_t c, size_t stride,
			 const struct pl_jitter *j);
/*
 * The draw of a color_jitter: a permutation of the four (Fisher-Yates from the top, j =
 * floor(u * (i + 1))), then a factor uniform in [lo, hi] for each that is on, in the order
 * brightness, contrast, saturation, hue. range[k] = {lo, hi}; on[k] says which apply.
 */
void pl_jitter_draw(struct pl_rng *rng, const double range[4][2], const bool on[4],
		    struct pl_jitter *j);

/* Copy src into dst (same size), mirrored as asked. */
void pl_img_copy(const struct pl_img *src, uint8_t *dst, size_t dst_stride, bool flip_x,
		 bool flip_y);

/*
 * (pixel - mean[ch]) / std[ch] on the 0..255 scale (as numpy computes it in float32), written
 * as dt: element (y, x, ch) of src goes to dst + (y' * stride[0] + x' * stride[1] +
 * ch * stride[2]) elements, where y' and x' are mirrored when flip_y / flip_x. HWC is
 * {w * c, c, 1}, CHW {w, 1, h * w}; a padded row has wider strides. mean and std have one
 * entry per channel (not used for PL_NORM_UINT8, a copy).
 */
void pl_img_normalize(const struct pl_img *src, void *dst, enum pl_norm_dtype dt,
		      const int64_t stride[3], bool flip_x, bool flip_y, const float *mean,
		      const float *std);

#endif
