/* SPDX-License-Identifier: Apache-2.0 */
/* The decode/augment stage (decode.h): image steps compiled per tensor, run per record. */
#include "decode.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "imgops.h"
#include "io/image.h"
#include "io/manifest.h"
#include "rng.h"
#include "stage.h"

#define MAX_OPS 16

struct img_op {
	enum pl_step_type type;
	struct pl_image_args a;
	uint64_t stream; /* PL_STREAM_AUGMENT + the step's index */
};

struct pl_imgchain {
	struct pl_image_args dec;
	size_t n_ops;
	struct img_op ops[MAX_OPS];
	bool norm;
	struct pl_image_args na; /* the normalize step's */
	int64_t sdims[3];	 /* static [h, w, c] before the layout: -1 where it varies */
};

/* What one image's steps come to: crops and resizes in order, flips at the end. */
enum geo_kind { GEO_CROP, GEO_RESIZE, GEO_COLOR, GEO_PAD };
struct geo_op {
	enum geo_kind kind;
	struct pl_rect r;      /* GEO_CROP, in the current image; GEO_PAD: where it goes */
	uint32_t h, w;	       /* GEO_RESIZE, GEO_PAD: the new size */
	enum pl_interp interp; /* GEO_RESIZE */
	struct pl_jitter j;    /* GEO_COLOR: in place, where it stands (contrast takes a mean) */
};
struct geo {
	uint32_t h0, w0, c; /* the decoded image */
	size_t n;
	struct geo_op op[2 * MAX_OPS];
	bool flip_x, flip_y;
	uint32_t h, w;	/* the result */
	unsigned denom; /* > 1: decode at 1/denom (op[0], a crop, in full-size pixels) */
};

struct pl_img_work {
	struct pl_decode_counts n;
	struct img_scratch *codec;
	struct pl_resampler *rs;
	uint8_t *buf[2];
	size_t cap[2];
};

int pl_imgchain_create(const struct pl_step *const *steps, size_t n, size_t first,
		       struct pl_imgchain **ret, struct io_error *err)
{
	if (n == 0 || steps[0]->type != PL_STEP_DECODE_IMAGE || n > MAX_OPS + 1) {
		io_error_set(err,
			     "args.processing_steps[%zu]: at most %d image steps after "
			     "decode_image",
			     first, MAX_OPS);
		return -EINVAL;
	}
	struct pl_imgchain *ch = calloc(1, sizeof(*ch));
	if (!ch)
		return -ENOMEM;
	ch->dec = steps[0]->img;
	ch->sdims[0] = ch->sdims[1] = -1;
	ch->sdims[2] = ch->dec.channels ? (int64_t)ch->dec.channels : -1;
	for (size_t i = 1; i < n; i++) {
		const struct pl_step *st = steps[i];
		if (ch->norm) {
			io_error_set(err,
				     "args.processing_steps[%zu]: \"%s\" after normalize on tensor "
				     "\"%s\" (normalize is the last image step)",
				     first + i, pl_step_type_name(st->type), st->tensor);
			pl_imgchain_destroy(ch);
			return -EINVAL;
		}
		if (st->type == PL_STEP_DECODE_IMAGE) {
			io_error_set(err,
				     "args.processing_steps[%zu]: tensor \"%s\" is decoded twice",
				     first + i, st->tensor);
			pl_imgchain_destroy(ch);
			return -EINVAL;
		}
		if (st->type == PL_STEP_NORMALIZE) {
			ch->norm = true;
			ch->na = st->img;
			if (ch->sdims[2] > 0 && st->img.n_mean != 1 &&
			    st->img.n_mean != (unsigned)ch->sdims[2]) {
				io_error_set(err,
					     "args.processing_steps[%zu].args.mean: %u values for "
					     "%lld channels",
					     first + i, st->img.n_mean, (long long)ch->sdims[2]);
				pl_imgchain_destroy(ch);
				return -EINVAL;
			}
			continue;
		}
		struct img_op *op = &ch->ops[ch->n_ops++];
		op->type = st->type;
		op->a = st->img;
		op->stream = PL_STREAM_AUGMENT + steps[i]->img.draw_step;
		if (st->type == PL_STEP_RANDOM_RESIZED_CROP || st->type == PL_STEP_CENTER_CROP ||
		    (st->type == PL_STEP_RESIZE && st->img.size[0])) {
			ch->sdims[0] = st->img.size[0];
			ch->sdims[1] = st->img.size[1];
		} else if (st->type == PL_STEP_RESIZE) {
			ch->sdims[0] = ch->sdims[1] = -1;
		}
	}
	*ret = ch;
	return 0;
}

void pl_imgchain_destroy(struct pl_imgchain *ch)
{
	free(ch);
}

unsigned pl_imgchain_static_shape(const struct pl_imgchain *ch, int64_t dims[3])
{
	bool chw = ch->norm && ch->na.chw;
	dims[0] = chw ? ch->sdims[2] : ch->sdims[0];
	dims[1] = chw ? ch->sdims[0] : ch->sdims[1];
	dims[2] = chw ? ch->sdims[1] : ch->sdims[2];
	return 3;
}

size_t pl_imgchain_elem_size(const struct pl_imgchain *ch)
{
	if (!ch->norm || ch->na.dtype == PL_NORM_UINT8)
		return 1;
	return ch->na.dtype == PL_NORM_FLOAT32 ? 4 : 2;
}

int pl_imgchain_dtype(const struct pl_imgchain *ch)
{
	if (!ch->norm || ch->na.dtype == PL_NORM_UINT8)
		return MANIFEST_DTYPE_UINT8;
	if (ch->na.dtype == PL_NORM_FLOAT16)
		return MANIFEST_DTYPE_FLOAT16;
	if (ch->na.dtype == PL_NORM_FLOAT32)
		return MANIFEST_DTYPE_FLOAT32;
	return MANIFEST_DTYPE_BFLOAT16; /* an output dtype only */
}

struct pl_img_work *pl_img_work_create(void)
{
	struct pl_img_work *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->rs = pl_resampler_create();
	w->codec = img_scratch_create();
	if (!w->rs || !w->codec) {
		pl_img_work_destroy(w);
		return NULL;
	}
	return w;
}

void pl_img_work_destroy(struct pl_img_work *w)
{
	if (!w)
		return;
	pl_resampler_destroy(w->rs);
	img_scratch_destroy(w->codec);
	free(w->buf[0]);
	free(w->buf[1]);
	free(w);
}

static int grow(struct pl_img_work *w, int k, size_t n)
{
	if (n <= w->cap[k])
		return 0;
	uint8_t *p = realloc(w->buf[k], n);
	if (!p)
		return -ENOMEM;
	w->buf[k] = p;
	w->cap[k] = n;
	return 0;
}

/* torchvision's Resize(int): the shorter side to s, the longer int(s * long / short). */
static void shorter_side(uint32_t h, uint32_t w, uint32_t s, uint32_t *ret_h, uint32_t *ret_w)
{
	if (h <= w) {
		*ret_h = s;
		*ret_w = (uint32_t)((uint64_t)s * w / h);
	} else {
		*ret_w = s;
		*ret_h = (uint32_t)((uint64_t)s * h / w);
	}
	if (!*ret_h)
		*ret_h = 1;
	if (!*ret_w)
		*ret_w = 1;
}

/*
 * One image's geometry from its decoded size: the ops in order, with the random draws made.
 * A crop after a pending flip is mirrored into the unflipped image (flips are applied last).
 */
static int plan_geometry(const struct pl_imgchain *ch, const struct pl_img_key *key, uint32_t h0,
			 uint32_t w0, uint32_t c, struct geo *g, struct io_error *err)
{
	memset(g, 0, sizeof(*g));
	g->h0 = g->h = h0;
	g->w0 = g->w = w0;
	g->c = c;
	for (size_t i = 0; i < ch->n_ops; i++) {
		const struct img_op *op = &ch->ops[i];
		struct pl_rng rng;
		pl_rng_init(&rng, key->seed, key->epoch, op->stream, key->position);
		struct pl_rect r;
		switch (op->type) {
		case PL_STEP_RANDOM_RESIZED_CROP:
			r = pl_img_random_resized_crop(&rng, g->h, g->w, op->a.scale[0],
						       op->a.scale[1], op->a.ratio[0],
						       op->a.ratio[1]);
			break;
		case PL_STEP_CENTER_CROP:
			if (op->a.size[0] > g->h || op->a.size[1] > g->w) {
				/*
				 * torchvision pads with zeros to the crop's size, the odd pixel
				 * at the bottom and right (of the image as flipped so far: in
				 * the unflipped one, mirrored), then crops the centre
				 */
				uint32_t ph = op->a.size[0] > g->h ? op->a.size[0] - g->h : 0;
				uint32_t pw = op->a.size[1] > g->w ? op->a.size[1] - g->w : 0;
				struct geo_op *o = &g->op[g->n++];
				o->kind = GEO_PAD;
				o->r = (struct pl_rect){ g->flip_x ? (pw + 1) / 2 : pw / 2,
							 g->flip_y ? (ph + 1) / 2 : ph / 2, g->w,
							 g->h };
				o->h = g->h += ph;
				o->w = g->w += pw;
			}
			r = pl_img_center_crop(g->h, g->w, op->a.size[0], op->a.size[1]);
			break;
		case PL_STEP_RESIZE: {
			struct geo_op *o = &g->op[g->n++];
			o->kind = GEO_RESIZE;
			o->interp = op->a.interp;
			if (op->a.size[0]) {
				o->h = op->a.size[0];
				o->w = op->a.size[1];
			} else {
				shorter_side(g->h, g->w, op->a.shorter_side, &o->h, &o->w);
			}
			g->h = o->h;
			g->w = o->w;
			continue;
		}
		case PL_STEP_COLOR_JITTER: { /* pixel by pixel: flips commute with it */
			struct geo_op *o = &g->op[g->n++];
			o->kind = GEO_COLOR;
			pl_jitter_draw(&rng, op->a.jitter, op->a.jitter_on, &o->j);
			continue;
		}
		case PL_STEP_RANDOM_FLIP:
			if (pl_rng_uniform(&rng) < op->a.probability) {
				if (op->a.axis == 1)
					g->flip_x = !g->flip_x;
				else
					g->flip_y = !g->flip_y;
			}
			continue;
		default:
			continue;
		}
		/* a crop of the (maybe mirrored) current image */
		if (g->flip_x)
			r.x = g->w - r.x - r.w;
		if (g->flip_y)
			r.y = g->h - r.y - r.h;
		struct geo_op *o = &g->op[g->n++];
		o->kind = GEO_CROP;
		o->r = r;
		g->h = r.h;
		g->w = r.w;
		if (op->type == PL_STEP_RANDOM_RESIZED_CROP) {
			o = &g->op[g->n++];
			o->kind = GEO_RESIZE;
			o->interp = op->a.interp;
			o->h = op->a.size[0];
			o->w = op->a.size[1];
			g->h = o->h;
			g->w = o->w;
		}
	}
	return 0;
}

/*
 * decode_image's scaled_idct, on a JPEG whose steps start with a resize, or a crop then a
 * resize, that shrinks by 2x or more: decode at 1/d (d = 2, 4 or 8, the largest the shrink
 * allows) with libjpeg's scaled IDCT. The crop, if any, is widened to whole scaled pixels
 * (by less than d pixels a side); a lone resize becomes a crop of the whole image.
 */
static void plan_scale(const struct pl_imgchain *ch, const struct img_info *info, struct geo *g)
{
	g->denom = 1;
	if (!ch->dec.scaled_idct || info->format != IMG_FORMAT_JPEG || g->n == 0)
		return;
	bool crop = g->op[0].kind == GEO_CROP;
	if (crop ? g->n < 2 || g->op[1].kind != GEO_RESIZE : g->op[0].kind != GEO_RESIZE)
		return;
	struct pl_rect r = crop ? g->op[0].r : (struct pl_rect){ 0, 0, g->w0, g->h0 };
	const struct geo_op *rs = &g->op[crop ? 1 : 0];
	double s = fmin((double)r.w / rs->w, (double)r.h / rs->h);
	unsigned d = s >= 8 ? 8 : s >= 4 ? 4 : s >= 2 ? 2 : 1;
	if (d == 1)
		return;
	if (!crop) { /* room for the crop op in front */
		memmove(&g->op[1], &g->op[0], g->n * sizeof(g->op[0]));
		g->n++;
		g->op[0].kind = GEO_CROP;
	}
	uint32_t x0 = r.x / d * d, y0 = r.y / d * d;
	uint32_t x1 = (r.x + r.w + d - 1) / d * d, y1 = (r.y + r.h + d - 1) / d * d;
	x1 = x1 < g->w0 ? x1 : g->w0;
	y1 = y1 < g->h0 ? y1 : g->h0;
	g->op[0].r = (struct pl_rect){ x0, y0, x1 - x0, y1 - y0 };
	g->denom = d;
}

static void out_dims(const struct pl_imgchain *ch, const struct geo *g, int64_t dims[3])
{
	if (ch->norm && ch->na.chw) {
		dims[0] = g->c, dims[1] = g->h, dims[2] = g->w;
	} else {
		dims[0] = g->h, dims[1] = g->w, dims[2] = g->c;
	}
}

/* The decoder's options for the chain (no crop yet). */
static void dec_opts(const struct pl_imgchain *ch, struct img_decode_opts *o)
{
	img_decode_opts_init(o);
	o->channels = ch->dec.channels;
	o->dct = ch->dec.dct_fast ? IMG_DCT_FAST : IMG_DCT_ACCURATE;
	o->max_pixels = (uint64_t)ch->dec.max_pixels;
}

/* The codec's errors are the record's (on_corrupt decides), but for running out of memory. */
static int record_error(int r)
{
	return r == -ENOMEM ? r : -EBADMSG;
}

/* The header, and what a full decode gives (channels as the step says, or as stored). */
static int probe(const struct pl_imgchain *ch, const uint8_t *data, size_t len,
		 struct img_info *info, struct img_shape *full, struct io_error *err)
{
	struct img_decode_opts o;
	dec_opts(ch, &o);
	int r = img_probe(data, len, info, err);
	if (r == 0)
		r = img_output_shape(info, &o, full, err);
	return r < 0 ? record_error(r) : 0;
}

static int check_norm(const struct pl_imgchain *ch, unsigned c, struct io_error *err)
{
	if (ch->norm && ch->na.n_mean != 1 && ch->na.n_mean != c) {
		io_error_set(err, "normalize: %u means for an image of %u channel%s", ch->na.n_mean,
			     c, c == 1 ? "" : "s");
		return -EBADMSG;
	}
	return 0;
}

int pl_imgchain_shape(const struct pl_imgchain *ch, const struct pl_img_key *key,
		      const uint8_t *data, size_t len, int64_t dims[3], struct pl_img_work *w,
		      struct io_error *err)
{
	(void)w;
	struct img_info info;
	struct img_shape full;
	int r = probe(ch, data, len, &info, &full, err);
	if (r < 0)
		return r;
	unsigned c = full.channels;
	r = check_norm(ch, c, err);
	if (r < 0)
		return r;
	struct geo g;
	r = plan_geometry(ch, key, full.height, full.width, c, &g, err);
	if (r < 0)
		return r;
	out_dims(ch, &g, dims);
	return 0;
}

int pl_imgchain_boxes(const struct pl_imgchain *ch, const struct pl_img_key *key,
		      const uint8_t *data, size_t len, float *boxes, size_t n, bool xyxy,
		      bool pixels, struct io_error *err)
{
	struct img_info info;
	struct img_shape full;
	int r = probe(ch, data, len, &info, &full, err);
	if (r < 0)
		return r;
	struct geo g;
	r = plan_geometry(ch, key, full.height, full.width, full.channels, &g, err);
	if (r < 0)
		return r;
	plan_scale(ch, &info, &g);
	unsigned iy = xyxy ? 1 : 0, ix = xyxy ? 0 : 1; /* where y and x stand in a box */
	for (size_t b = 0; b < n; b++) {
		float *p = boxes + 4 * b;
		double y0 = p[iy], x0 = p[ix], y1 = p[iy + 2], x1 = p[ix + 2];
		double h = g.h0, w = g.w0;
		if (!pixels)
			y0 *= h, y1 *= h, x0 *= w, x1 *= w;
		for (size_t i = 0; i < g.n; i++) { /* in the unflipped image, as the ops are */
			const struct geo_op *op = &g.op[i];
			if (op->kind == GEO_CROP) {
				double ch_ = op->r.h, cw = op->r.w;
				y0 = fmin(fmax(y0 - op->r.y, 0.0), ch_);
				y1 = fmin(fmax(y1 - op->r.y, 0.0), ch_);
				x0 = fmin(fmax(x0 - op->r.x, 0.0), cw);
				x1 = fmin(fmax(x1 - op->r.x, 0.0), cw);
				h = ch_, w = cw;
			} else if (op->kind == GEO_RESIZE) {
				double sy = op->h / h, sx = op->w / w;
				y0 *= sy, y1 *= sy, x0 *= sx, x1 *= sx;
				h = op->h, w = op->w;
			} else if (op->kind == GEO_PAD) {
				y0 += op->r.y, y1 += op->r.y, x0 += op->r.x, x1 += op->r.x;
				h = op->h, w = op->w;
			}
		}
		if (g.flip_x) {
			double t = x0;
			x0 = w - x1, x1 = w - t;
		}
		if (g.flip_y) {
			double t = y0;
			y0 = h - y1, y1 = h - t;
		}
		if (!pixels)
			y0 /= h, y1 /= h, x0 /= w, x1 /= w;
		p[iy] = (float)y0, p[ix] = (float)x0, p[iy + 2] = (float)y1, p[ix + 2] = (float)x1;
	}
	return 0;
}

void pl_img_work_take(struct pl_img_work *w, struct pl_decode_counts *acc)
{
	acc->images += w->n.images;
	acc->bad += w->n.bad;
	acc->bytes_in += w->n.bytes_in;
	acc->bytes_out += w->n.bytes_out;
	acc->ns += w->n.ns;
	memset(&w->n, 0, sizeof(w->n));
}

static int chain_run(const struct pl_imgchain *ch, const struct pl_img_key *key,
		     const uint8_t *data, size_t len, const int64_t dims[3], void *dst,
		     const int64_t stride[3], struct pl_img_work *w, struct io_error *err);

int pl_imgchain_run(const struct pl_imgchain *ch, const struct pl_img_key *key, const uint8_t *data,
		    size_t len, const int64_t dims[3], void *dst, const int64_t stride[3],
		    struct pl_img_work *w, struct io_error *err)
{
	uint64_t t0 = pl_clock_ns(CLOCK_MONOTONIC);
	int r = chain_run(ch, key, data, len, dims, dst, stride, w, err);
	w->n.ns += pl_clock_ns(CLOCK_MONOTONIC) - t0;
	w->n.images++;
	w->n.bytes_in += len;
	if (r < 0)
		w->n.bad++;
	else
		w->n.bytes_out +=
			(uint64_t)(dims[0] * dims[1] * dims[2]) * pl_imgchain_elem_size(ch);
	return r;
}

static int chain_run(const struct pl_imgchain *ch, const struct pl_img_key *key,
		     const uint8_t *data, size_t len, const int64_t dims[3], void *dst,
		     const int64_t stride[3], struct pl_img_work *w, struct io_error *err)
{
	struct img_info info;
	struct img_shape full;
	int r = probe(ch, data, len, &info, &full, err);
	if (r < 0)
		return r;
	unsigned c = full.channels;
	r = check_norm(ch, c, err);
	if (r < 0)
		return r;
	struct geo g;
	r = plan_geometry(ch, key, full.height, full.width, c, &g, err);
	if (r < 0)
		return r;
	plan_scale(ch, &info, &g);
	int64_t want[3];
	out_dims(ch, &g, want);
	for (unsigned d = 0; d < 3; d++) /* the row laid out for it, before anything is written */
		if (want[d] != dims[d]) {
			io_error_set(err, "dimension %u is %lld, expected %lld", d,
				     (long long)want[d], (long long)dims[d]);
			return -EBADMSG;
		}
	/* decode: only the first crop's region when the steps start with one (JPEG: partially) */
	struct img_decode_opts o;
	dec_opts(ch, &o);
	size_t first = 0;
	uint32_t h = g.h0, wd = g.w0;
	if (g.n && g.op[0].kind == GEO_CROP) {
		/* at 1/denom: the crop's scaled pixels (its edges are multiples of denom, or the
		 * image's edge: the last scaled pixel covers what is left) */
		unsigned d = g.denom;
		const struct pl_rect *cr = &g.op[0].r;
		o.scale_denom = d;
		o.has_crop = true;
		o.crop = (struct img_rect){ cr->x / d, cr->y / d, (cr->w + d - 1) / d,
					    (cr->h + d - 1) / d };
		wd = o.crop.w;
		h = o.crop.h;
		first = 1;
	}
	size_t need = (size_t)h * wd * c;
	if (grow(w, 0, need ? need : 1) < 0)
		return -ENOMEM;
	struct img_shape got;
	r = img_decode(data, len, &o, w->buf[0], need, &got, w->codec, err);
	if (r < 0)
		return record_error(r);
	struct pl_img cur = { w->buf[0], h, wd, c, (size_t)wd * c };
	int k = 0;
	for (size_t i = first; i < g.n; i++) {
		const struct geo_op *op = &g.op[i];
		if (op->kind == GEO_COLOR) { /* in place: cur is in our own buffers */
			pl_img_color_jitter((uint8_t *)(uintptr_t)cur.p, cur.h, cur.w, c,
					    cur.stride, &op->j);
			continue;
		}
		if (op->kind == GEO_PAD) { /* a zeroed canvas, the image placed in it */
			int nk = k ^ 1;
			size_t n = (size_t)op->h * op->w * c;
			if (grow(w, nk, n) < 0)
				return -ENOMEM;
			memset(w->buf[nk], 0, n);
			struct pl_img at = cur;
			pl_img_copy(&at, w->buf[nk] + ((size_t)op->r.y * op->w + op->r.x) * c,
				    (size_t)op->w * c, false, false);
			cur = (struct pl_img){ w->buf[nk], op->h, op->w, c, (size_t)op->w * c };
			k = nk;
			continue;
		}
		if (op->kind == GEO_CROP) { /* a view: no copy */
			cur.p += (size_t)op->r.y * cur.stride + (size_t)op->r.x * c;
			cur.h = op->r.h;
			cur.w = op->r.w;
			continue;
		}
		int nk = k ^ 1;
		size_t n = (size_t)op->h * op->w * c;
		if (grow(w, nk, n ? n : 1) < 0)
			return -ENOMEM;
		r = pl_img_resize(w->rs, &cur, w->buf[nk], (size_t)op->w * c, op->h, op->w,
				  op->interp, false, false);
		if (r < 0)
			return r;
		cur = (struct pl_img){ w->buf[nk], op->h, op->w, c, (size_t)op->w * c };
		k = nk;
	}
	/* the row: the layout's strides map (y, x, ch); flips by mirrored indices */
	int64_t s[3];
	if (ch->norm && ch->na.chw) {
		s[0] = stride[1], s[1] = stride[2], s[2] = stride[0];
	} else {
		s[0] = stride[0], s[1] = stride[1], s[2] = stride[2];
	}
	float mean[4], sd[4];
	for (unsigned i = 0; i < c && i < 4; i++) {
		unsigned j = ch->norm && ch->na.n_mean > 1 ? i : 0;
		mean[i] = ch->norm ? ch->na.mean[j] : 0.0f;
		sd[i] = ch->norm ? ch->na.std[j] : 1.0f;
	}
	pl_img_normalize(&cur, dst, ch->norm ? ch->na.dtype : PL_NORM_UINT8, s, g.flip_x, g.flip_y,
			 mean, sd);
	return 0;
}
