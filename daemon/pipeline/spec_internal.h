/* SPDX-License-Identifier: Apache-2.0 */
/* Pipeline spec parser internals shared by spec.c, spec_values.c and spec_features.c. */
#ifndef SLUICE_PIPELINE_SPEC_INTERNAL_H
#define SLUICE_PIPELINE_SPEC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "io/jsonmsg.h"
#include "spec.h"

/*
 * spec.c holds the top level, the loader's common keys and the entry points; spec_values.c reads
 * one JSON value at a time (and the slice syntax); spec_features.c the features, processing
 * steps and padding, and the rules on the names they refer to. Every function here that returns
 * int returns 0, or -EINVAL (-ENOMEM) after writing "ORIGIN: JSON.PATH: ..." into c->err, and
 * writes its out-parameters only on success. Strings it stores are copies the spec owns.
 */

#define DESCRIBE_MAX JSONMSG_DESCRIBE_MAX
#define PATH_LEN     JSONMSG_PATH_MAX
#define MAX_DIMS     (PL_MAX_RANK - 1) /* of a row: the batch dimension is not written */
#define I32_MAX	     2147483647LL

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* flags of pl_spec_get_int() */
enum { ALLOW_AUTO = 1u, ALLOW_NULL = 2u };

/* ---- messages (spec_values.c) ---- */

/* snprintf for JSON paths: a path longer than the buffer is cut (and only ever printed). */
void pl_spec_path_printf(char *out, size_t n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- values (spec_values.c; objects, booleans, enums and arrays: io/jsonmsg.h) ---- */

/* An integer in [lo, hi], or "auto" (PL_AUTO) / null (PL_NULL) where flags allow them. */
int pl_spec_get_int(const struct jsonmsg_ctx *c, const json_t *v, const char *path, int64_t lo,
		    int64_t hi, unsigned flags, int64_t *ret);
/* A copy of s in *ret (the caller frees it). */
int pl_spec_dup_str(const struct jsonmsg_ctx *c, const char *s, char **ret);
/* A non-empty string, copied into *ret. */
int pl_spec_get_name(const struct jsonmsg_ctx *c, const json_t *v, const char *path, char **ret);
/* A JSON scalar: bool, integer, real, string (copied into ret->s) or null (PL_VALUE_NONE). */
int pl_spec_get_value(const struct jsonmsg_ctx *c, const json_t *v, const char *path,
		      struct pl_value *ret);
/* A list of at most MAX_DIMS integers, each in [lo, 2^31 - 1]; alt: more for the message. */
int pl_spec_get_dims(const struct jsonmsg_ctx *c, const json_t *v, const char *path, int64_t lo,
		     const char *alt, unsigned *ret_rank, int64_t *dims);
/* The slice syntax of string v (numpy basic indexing of one row) into st->dims, st->n_dims. */
int pl_spec_parse_slice(const struct jsonmsg_ctx *c, const char *path, const json_t *v,
			struct pl_step *st);

/* ---- features, steps, padding (spec_features.c) ---- */

/* One element of primary_features, secondary_features, processing_steps at path. */
int pl_spec_parse_primary(const struct jsonmsg_ctx *c, const json_t *o, const char *path,
			  struct pl_primary *p);
int pl_spec_parse_secondary(const struct jsonmsg_ctx *c, const json_t *o, const char *path,
			    struct pl_secondary *x);
int pl_spec_parse_step(const struct jsonmsg_ctx *c, const json_t *o, const char *path,
		       struct pl_step *st);
/* args.padding: true, false or an array of objects, into s->padding and s->paddings. */
int pl_spec_parse_padding(const struct jsonmsg_ctx *c, const json_t *v, struct pl_spec *s);

/* ---- image steps (spec_image.c) ---- */

/* A step's "type" into *ret. */
int pl_spec_step_type(const struct jsonmsg_ctx *c, const json_t *v, const char *path,
		      enum pl_step_type *ret);
/* An image step's args (st->type set) into st->img, with its defaults. */
/* The steps that share a draw: the same type and random arguments; sets each draw_step. */
int pl_spec_check_draws(const struct jsonmsg_ctx *c, struct pl_spec *s);
int pl_spec_parse_image_args(const struct jsonmsg_ctx *c, const json_t *args, const char *path,
			     struct pl_step *st);
/* The second pass over the names: unique to_names, what refers to them, padding per tensor. */
int pl_spec_check_names(const struct jsonmsg_ctx *c, const struct pl_spec *s);

#endif
