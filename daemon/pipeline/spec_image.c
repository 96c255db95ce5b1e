/* SPDX-License-Identifier: Apache-2.0 */
/* The arguments of the image processing steps (docs/pipeline-spec.md, "Image steps"). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "spec.h"
#include "spec_internal.h"

static const char *const step_names[PL_STEP_COUNT_] = {
	"slice",       "decode_image", "random_resized_crop", "resize", "center_crop",
	"random_flip", "normalize",    "color_jitter",	      "boxes",
};

const char *pl_step_type_name(enum pl_step_type t)
{
	return (unsigned)t < PL_STEP_COUNT_ ? step_names[t] : "?";
}

bool pl_step_is_image(enum pl_step_type t)
{
	return t != PL_STEP_SLICE && t != PL_STEP_BOXES && (unsigned)t < PL_STEP_COUNT_;
}

int pl_spec_step_type(const struct jsonmsg_ctx *c, const json_t *v, const char *path,
		      enum pl_step_type *ret)
{
	unsigned t;
	int r = jsonmsg_get_enum(c, v, path, step_names, PL_STEP_COUNT_,
				 "\"slice\", \"decode_image\", \"random_resized_crop\", "
				 "\"resize\", "
				 "\"center_crop\", \"random_flip\", \"normalize\", "
				 "\"color_jitter\" or \"boxes\"",
				 &t);
	*ret = (enum pl_step_type)t;
	return r;
}

static const char *const interp_names[PL_INTERP_COUNT_] = { "nearest", "bilinear", "area" };

const char *pl_interp_name(enum pl_interp i)
{
	return (unsigned)i < PL_INTERP_COUNT_ ? interp_names[i] : "?";
}

static const char *const norm_names[PL_NORM_COUNT_] = { "uint8", "float16", "bfloat16", "float32" };
static const char *const layout_names[] = { "HWC", "CHW" };
static const char *const dct_names[] = { "accurate", "fast" };

/* A JSON number in [lo, hi] (lo_open: > lo). */
static int get_number(const struct jsonmsg_ctx *c, const json_t *v, const char *path, double lo,
		      bool lo_open, double hi, double *ret)
{
	char buf[DESCRIBE_MAX + 8];
	double d = json_is_number(v) ? json_number_value(v) : NAN;
	if (json_is_number(v) && (lo_open ? d > lo : d >= lo) && d <= hi) {
		*ret = d;
		return 0;
	}
	return jsonmsg_fail(c, path, "expected a number %s %g and <= %g, got %s",
			    lo_open ? ">" : ">=", lo, hi, jsonmsg_describe(v, buf, sizeof(buf)));
}

/* [lo, hi] with 0 < lo <= hi (<= max). */
static int get_range(const struct jsonmsg_ctx *c, const json_t *v, const char *path, double max,
		     double out[2])
{
	char buf[DESCRIBE_MAX + 8], sub[PATH_LEN];
	if (!json_is_array(v) || json_array_size(v) != 2)
		return jsonmsg_fail(c, path, "expected [low, high], got %s",
				    jsonmsg_describe(v, buf, sizeof(buf)));
	for (size_t i = 0; i < 2; i++) {
		pl_spec_path_printf(sub, sizeof(sub), "%s[%zu]", path, i);
		int r = get_number(c, json_array_get(v, i), sub, 0, true, max, &out[i]);
		if (r < 0)
			return r;
	}
	if (out[0] > out[1])
		return jsonmsg_fail(c, path, "expected low <= high, got [%g, %g]", out[0], out[1]);
	return 0;
}

/* [h, w] of integers in [1, 65535]. */
static int get_size(const struct jsonmsg_ctx *c, const json_t *v, const char *path, uint32_t out[2])
{
	char buf[DESCRIBE_MAX + 8];
	unsigned rank = 0;
	int64_t dims[PL_MAX_RANK];
	if (!json_is_array(v) || json_array_size(v) != 2)
		return jsonmsg_fail(c, path, "expected [height, width], got %s",
				    jsonmsg_describe(v, buf, sizeof(buf)));
	int r = pl_spec_get_dims(c, v, path, 1, "", &rank, dims);
	if (r < 0)
		return r;
	for (unsigned i = 0; i < 2; i++) {
		if (dims[i] > 65535)
			return jsonmsg_fail(c, path, "expected sides of at most 65535, got %lld",
					    (long long)dims[i]);
		out[i] = (uint32_t)dims[i];
	}
	return 0;
}

/* mean or std: one number or one per channel (at most 4). */
static int get_channels(const struct jsonmsg_ctx *c, const json_t *v, const char *path,
			bool positive, unsigned *ret_n, float *out)
{
	char buf[DESCRIBE_MAX + 8], sub[PATH_LEN];
	size_t n = json_is_array(v) ? json_array_size(v) : 1;
	if (json_is_array(v) && (n < 1 || n > 4))
		return jsonmsg_fail(c, path, "expected 1 to 4 numbers (one per channel), got %s",
				    jsonmsg_describe(v, buf, sizeof(buf)));
	for (size_t i = 0; i < n; i++) {
		const json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
		if (json_is_array(v))
			pl_spec_path_printf(sub, sizeof(sub), "%s[%zu]", path, i);
		else
			pl_spec_path_printf(sub, sizeof(sub), "%s", path);
		double d;
		int r = get_number(c, e, sub, positive ? 0 : -1e9, positive, 1e9, &d);
		if (r < 0)
			return r;
		out[i] = (float)d;
	}
	*ret_n = (unsigned)n;
	return 0;
}

/* Each step type's keys ("" ends a list). */
static const char *const keys_decode[] = { "channels", "dct_method", "max_pixels", "scaled_idct" };
static const char *const keys_rrc[] = { "size", "scale", "ratio", "interpolation", "draw" };
static const char *const keys_resize[] = { "size", "shorter_side", "interpolation" };
static const char *const keys_center[] = { "size" };
static const char *const keys_flip[] = { "axis", "probability", "draw" };
static const char *const keys_norm[] = { "mean", "std", "dtype", "layout" };
static const char *const keys_jitter[] = { "brightness", "contrast", "saturation", "hue" };
static const char *const keys_boxes[] = { "image", "format", "normalized" };
static const char *const box_formats[] = { "yxyx", "xyxy" };

/*
 * A color_jitter argument as torchvision's ColorJitter takes it: a number x (>= 0; hue: at
 * most 0.5) for [max(0, 1 - x), 1 + x] (hue: [-x, x]), or [lo, hi] (0 <= lo <= hi; hue:
 * -0.5 <= lo <= hi <= 0.5). k: 0..2 brightness, contrast, saturation; 3 hue.
 */
static int get_jitter(const struct jsonmsg_ctx *c, const json_t *v, const char *path, unsigned k,
		      struct pl_image_args *a)
{
	char buf[DESCRIBE_MAX + 8], sub[PATH_LEN];
	double centre = k == 3 ? 0.0 : 1.0, lo = k == 3 ? -0.5 : 0.0, hi = k == 3 ? 0.5 : 1e6;
	double *out = a->jitter[k];
	if (json_is_number(v)) {
		double x;
		int r = get_number(c, v, path, 0, false, k == 3 ? 0.5 : 1e6, &x);
		if (r < 0)
			return r;
		out[0] = k == 3 ? -x : (1.0 - x > 0.0 ? 1.0 - x : 0.0);
		out[1] = centre + x;
	} else if (json_is_array(v) && json_array_size(v) == 2) {
		for (size_t i = 0; i < 2; i++) {
			pl_spec_path_printf(sub, sizeof(sub), "%s[%zu]", path, i);
			int r = get_number(c, json_array_get(v, i), sub, lo, false, hi, &out[i]);
			if (r < 0)
				return r;
		}
		if (out[0] > out[1])
			return jsonmsg_fail(c, path, "expected low <= high, got [%g, %g]", out[0],
					    out[1]);
	} else {
		return jsonmsg_fail(c, path, "expected a number or [low, high], got %s",
				    jsonmsg_describe(v, buf, sizeof(buf)));
	}
	a->jitter_on[k] = !(out[0] == centre && out[1] == centre);
	return 0;
}

int pl_spec_check_draws(const struct jsonmsg_ctx *c, struct pl_spec *s)
{
	char path[PATH_LEN], buf[DESCRIBE_MAX + 8];
	for (size_t i = 0; i < s->n_steps; i++) {
		struct pl_step *st = &s->steps[i];
		st->img.draw_step = i;
		if (!st->img.draw)
			continue;
		for (size_t j = 0; j < i; j++) {
			const struct pl_step *o = &s->steps[j];
			if (!o->img.draw || strcmp(o->img.draw, st->img.draw) != 0)
				continue;
			st->img.draw_step = j;
			const struct pl_image_args *a = &st->img, *b = &o->img;
			const char *what = NULL;
			if (st->type != o->type)
				what = "type";
			else if (st->type == PL_STEP_RANDOM_RESIZED_CROP &&
				 (a->scale[0] != b->scale[0] || a->scale[1] != b->scale[1]))
				what = "scale";
			else if (st->type == PL_STEP_RANDOM_RESIZED_CROP &&
				 (a->ratio[0] != b->ratio[0] || a->ratio[1] != b->ratio[1]))
				what = "ratio";
			else if (st->type == PL_STEP_RANDOM_FLIP &&
				 a->probability != b->probability)
				what = "probability";
			else if (strcmp(st->tensor, o->tensor) == 0)
				what = "tensor";
			if (what) {
				pl_spec_path_printf(path, sizeof(path),
						    "args.processing_steps[%zu].args.draw", i);
				return jsonmsg_fail(c, path,
						    "draw %s is also args.processing_steps[%zu]'s: "
						    "steps that share a draw need the same type, "
						    "scale, "
						    "ratio and probability, on other tensors (%s "
						    "differs)",
						    jsonmsg_quote(st->img.draw, buf, sizeof(buf)),
						    j, what);
			}
			break;
		}
	}
	return 0;
}

int pl_spec_parse_image_args(const struct jsonmsg_ctx *c, const json_t *args, const char *path,
			     struct pl_step *st)
{
	struct pl_image_args *a = &st->img;
	const char *const *keys;
	size_t n_keys;
	const char *list;
	switch (st->type) {
	case PL_STEP_DECODE_IMAGE:
		keys = keys_decode, n_keys = ARRAY_LEN(keys_decode);
		list = "channels, dct_method, max_pixels, scaled_idct";
		break;
	case PL_STEP_RANDOM_RESIZED_CROP:
		keys = keys_rrc, n_keys = ARRAY_LEN(keys_rrc);
		list = "size, scale, ratio, interpolation, draw";
		break;
	case PL_STEP_RESIZE:
		keys = keys_resize, n_keys = ARRAY_LEN(keys_resize);
		list = "size, shorter_side, interpolation";
		break;
	case PL_STEP_CENTER_CROP:
		keys = keys_center, n_keys = ARRAY_LEN(keys_center);
		list = "size";
		break;
	case PL_STEP_RANDOM_FLIP:
		keys = keys_flip, n_keys = ARRAY_LEN(keys_flip);
		list = "axis, probability, draw";
		break;
	case PL_STEP_NORMALIZE:
		keys = keys_norm, n_keys = ARRAY_LEN(keys_norm);
		list = "mean, std, dtype, layout";
		break;
	case PL_STEP_COLOR_JITTER:
		keys = keys_jitter, n_keys = ARRAY_LEN(keys_jitter);
		list = "brightness, contrast, saturation, hue";
		break;
	case PL_STEP_BOXES:
		keys = keys_boxes, n_keys = ARRAY_LEN(keys_boxes);
		list = "image, format, normalized";
		break;
	default:
		return -EINVAL;
	}
	/* the defaults: tf.io.decode_image's channels, torchvision's ranges and filters */
	a->channels = 0;
	a->dct_fast = false;
	a->max_pixels = 64ll << 20;
	a->scale[0] = 0.08, a->scale[1] = 1.0;
	a->ratio[0] = 3.0 / 4.0, a->ratio[1] = 4.0 / 3.0;
	a->interp = PL_INTERP_BILINEAR;
	a->axis = 1;
	a->probability = 0.5;
	a->dtype = PL_NORM_FLOAT32;
	a->chw = true;
	bool has_size = false, has_shorter = false, has_mean = false, has_std = false;
	char sub[PATH_LEN], want[160];
	const char *key;
	const json_t *v;
	json_object_foreach ((json_t *)args, key, v) {
		int k = jsonmsg_key_index(key, keys, n_keys), r = 0;
		if (k < 0) {
			snprintf(want, sizeof(want), "%s (for type \"%s\")", list,
				 pl_step_type_name(st->type));
			return jsonmsg_unknown_key(c, path, key, want);
		}
		jsonmsg_path_key(sub, sizeof(sub), path, key);
		unsigned e = 0;
		int64_t x = 0;
		if (strcmp(key, "channels") == 0) {
			r = pl_spec_get_int(c, v, sub, 0, 3, 0, &x);
			if (r == 0 && x == 2)
				return jsonmsg_fail(c, sub,
						    "expected 0 (as stored), 1 or 3, got 2 (alpha "
						    "is "
						    "dropped: there is no gray + alpha output)");
			a->channels = (unsigned)x;
		} else if (strcmp(key, "dct_method") == 0) {
			r = jsonmsg_get_enum(c, v, sub, dct_names, 2, "\"accurate\" or \"fast\"",
					     &e);
			a->dct_fast = e == 1;
		} else if (strcmp(key, "scaled_idct") == 0) {
			r = jsonmsg_get_bool(c, v, sub, &a->scaled_idct);
		} else if (strcmp(key, "max_pixels") == 0) {
			r = pl_spec_get_int(c, v, sub, 1, 1ll << 40, 0, &a->max_pixels);
		} else if (strcmp(key, "size") == 0) {
			r = get_size(c, v, sub, a->size);
			has_size = true;
		} else if (strcmp(key, "shorter_side") == 0) {
			r = pl_spec_get_int(c, v, sub, 1, 65535, 0, &x);
			a->shorter_side = (uint32_t)x;
			has_shorter = true;
		} else if (strcmp(key, "scale") == 0) {
			r = get_range(c, v, sub, 1.0, a->scale);
		} else if (strcmp(key, "ratio") == 0) {
			r = get_range(c, v, sub, 1e6, a->ratio);
		} else if (strcmp(key, "interpolation") == 0) {
			r = jsonmsg_get_enum(c, v, sub, interp_names, PL_INTERP_COUNT_,
					     "\"bilinear\", \"nearest\" or \"area\"", &e);
			a->interp = (enum pl_interp)e;
		} else if (strcmp(key, "axis") == 0) {
			r = pl_spec_get_int(c, v, sub, 0, 1, 0, &x);
			a->axis = (unsigned)x;
		} else if (strcmp(key, "probability") == 0) {
			r = get_number(c, v, sub, 0, false, 1, &a->probability);
		} else if (strcmp(key, "draw") == 0) {
			r = pl_spec_get_name(c, v, sub, &a->draw);
		} else if (st->type == PL_STEP_COLOR_JITTER) {
			r = get_jitter(c, v, sub, (unsigned)k, a);
		} else if (strcmp(key, "image") == 0) {
			r = pl_spec_get_name(c, v, sub, &a->box_image);
		} else if (strcmp(key, "format") == 0) {
			r = jsonmsg_get_enum(c, v, sub, box_formats, 2, "\"yxyx\" or \"xyxy\"", &e);
			a->box_xyxy = e == 1;
		} else if (strcmp(key, "normalized") == 0) {
			bool b = true;
			r = jsonmsg_get_bool(c, v, sub, &b);
			a->box_pixels = !b;
		} else if (strcmp(key, "mean") == 0) {
			r = get_channels(c, v, sub, false, &a->n_mean, a->mean);
			has_mean = true;
		} else if (strcmp(key, "std") == 0) {
			unsigned n = 0;
			r = get_channels(c, v, sub, true, &n, a->std);
			if (r == 0 && has_mean && n != a->n_mean)
				return jsonmsg_fail(c, sub,
						    "expected %u numbers, as mean has, got %u",
						    a->n_mean, n);
			a->n_mean = n;
			has_std = true;
		} else if (strcmp(key, "dtype") == 0) {
			r = jsonmsg_get_enum(c, v, sub, norm_names, PL_NORM_COUNT_,
					     "\"uint8\", \"float16\", \"bfloat16\" or \"float32\"",
					     &e);
			a->dtype = (enum pl_norm_dtype)e;
		} else { /* layout */
			r = jsonmsg_get_enum(c, v, sub, layout_names, 2, "\"HWC\" or \"CHW\"", &e);
			a->chw = e == 1;
		}
		if (r < 0)
			return r;
	}
	const char *missing = NULL;
	if ((st->type == PL_STEP_RANDOM_RESIZED_CROP || st->type == PL_STEP_CENTER_CROP) &&
	    !has_size)
		missing = "size";
	if (st->type == PL_STEP_BOXES && !a->box_image)
		missing = "image";
	if (st->type == PL_STEP_RESIZE && has_size == has_shorter)
		return jsonmsg_fail(c, path,
				    "expected exactly one of size and shorter_side, got %s",
				    has_size ? "both" : "neither");
	if (st->type == PL_STEP_NORMALIZE && a->dtype != PL_NORM_UINT8 && !(has_mean && has_std))
		missing = has_mean ? "std" : "mean";
	if (missing) {
		snprintf(want, sizeof(want), " (for type \"%s\")", pl_step_type_name(st->type));
		return jsonmsg_missing(c, path, missing, want);
	}
	if (st->type == PL_STEP_NORMALIZE && !has_mean) { /* uint8: only the layout */
		a->n_mean = 1;
		a->mean[0] = 0.0f;
		a->std[0] = 1.0f;
	}
	return 0;
}
