/* SPDX-License-Identifier: Apache-2.0 */
/* The decode/augment stage: an output tensor's image steps, run per record into its batch row. */
#ifndef SLUICE_PIPELINE_DECODE_H
#define SLUICE_PIPELINE_DECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/ioerr.h"
#include "spec.h"
#include "stage.h"

/*
 * A chain is the image steps of one output tensor, from decode_image on, compiled by the plan.
 * The parse tasks call it per row: pl_imgchain_shape in the measuring pass (the image's header
 * and the random draws give the row's shape), pl_imgchain_run in the fill pass (decode, crop,
 * resize, flip, normalize, written into the row in the batch). Both draw the same random
 * numbers: each random step has a stream keyed by (seed, epoch, PL_STREAM_AUGMENT + the step's
 * index in processing_steps, the record's position in the epoch), so the batches are the same
 * for any number of workers, after a resume, and in the reference model (docs/image.md).
 */
struct pl_imgchain;

/* Where a record's random draws come from. */
struct pl_img_key {
	uint64_t seed, epoch, position;
};

/*
 * steps[0] is the decode_image step, the others image steps on the same tensor (the plan
 * checks that); first is steps[0]'s index in processing_steps. The caller owns *ret.
 */
int pl_imgchain_create(const struct pl_step *const *steps, size_t n, size_t first,
		       struct pl_imgchain **ret, struct io_error *err);
void pl_imgchain_destroy(struct pl_imgchain *ch);

/*
 * The static row shape ([h, w, c] or [c, h, w]; -1 where it varies by image) and dtype size:
 * 1 (uint8) or 2 / 4 after a normalize.
 */
unsigned pl_imgchain_static_shape(const struct pl_imgchain *ch, int64_t dims[3]);
size_t pl_imgchain_elem_size(const struct pl_imgchain *ch);
/* The manifest dtype of the output: uint8, float16, float32 or (an output dtype only) bfloat16. */
int pl_imgchain_dtype(const struct pl_imgchain *ch);

/* A worker's scratch (decoder state, buffers, resampler): one per pool worker. */
struct pl_img_work;
struct pl_img_work *pl_img_work_create(void);
void pl_img_work_destroy(struct pl_img_work *w);

/*
 * The decode stage's counters, kept per scratch (one thread) by pl_imgchain_run: images run,
 * of which bad (a record error), their encoded bytes in, the bytes written out, and the
 * monotonic time spent (two clock reads per image: an image costs a million times more).
 */
struct pl_decode_counts {
	uint64_t images, bad, bytes_in, bytes_out, ns;
};
/* Add w's counters to *acc and zero them (the task that used w, when it ends). */
void pl_img_work_take(struct pl_img_work *w, struct pl_decode_counts *acc);

/*
 * The row shape of the image in data (its header only) after the steps: dims[3] as
 * pl_imgchain_static_shape. -EBADMSG with the decoder's message (not yet prefixed with the
 * record: the caller does that), -ENOMEM.
 */
int pl_imgchain_shape(const struct pl_imgchain *ch, const struct pl_img_key *key,
		      const uint8_t *data, size_t len, int64_t dims[3], struct pl_img_work *w,
		      struct io_error *err);

/*
 * Decode and transform the image into dst: element (i, j, k) of the row's dims at
 * dst + (i * stride[0] + j * stride[1] + k * stride[2]) * elem_size. dims is the shape the
 * caller laid the row out for (what pl_imgchain_shape gave, or the static shape): another
 * shape is -EBADMSG ("dimension D is X, expected Y") before anything is written. Errors
 * otherwise as pl_imgchain_shape.
 */
/*
 * Boxes that follow the image data (the same row's encoded bytes and key): n boxes of 4
 * floats in place, in the order ymin, xmin, ymax, xmax (xyxy: xmin, ymin, xmax, ymax), in
 * pixels or normalized to the image's size, moved through the chain's crops (clipped to each:
 * a box outside becomes empty, its count kept so that it stays aligned with its labels),
 * pads, resizes and flips, as torchvision's v2 transforms move BoundingBoxes. Reads the
 * image's header only. A record error as pl_imgchain_run's.
 */
int pl_imgchain_boxes(const struct pl_imgchain *ch, const struct pl_img_key *key,
		      const uint8_t *data, size_t len, float *boxes, size_t n, bool xyxy,
		      bool pixels, struct io_error *err);

int pl_imgchain_run(const struct pl_imgchain *ch, const struct pl_img_key *key, const uint8_t *data,
		    size_t len, const int64_t dims[3], void *dst, const int64_t stride[3],
		    struct pl_img_work *w, struct io_error *err);

#endif
