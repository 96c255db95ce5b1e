/* SPDX-License-Identifier: Apache-2.0 */
/* Dataset manifest (__manifest__.json): loader and validator (DESIGN.md §3.3). */
#ifndef SLUICE_IO_MANIFEST_H
#define SLUICE_IO_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ioerr.h"
#include "tfr.h"

/*
 * A batch tensor has at most MANIFEST_MAX_RANK dimensions, the batch dimension included, so a
 * feature's per-record shape (manifest_feature_record_shape) has at most MANIFEST_MAX_RANK - 1.
 */
#define MANIFEST_MAX_RANK 8
/* A record holds at most this many values of one feature (protobuf's repeated-field limit). */
#define MANIFEST_MAX_VALUES 2147483647LL

enum manifest_dtype {
	MANIFEST_DTYPE_INT8,
	MANIFEST_DTYPE_INT16,
	MANIFEST_DTYPE_INT32,
	MANIFEST_DTYPE_INT64,
	MANIFEST_DTYPE_UINT8,
	MANIFEST_DTYPE_UINT16,
	MANIFEST_DTYPE_UINT32,
	MANIFEST_DTYPE_UINT64,
	MANIFEST_DTYPE_FLOAT16,
	MANIFEST_DTYPE_FLOAT32,
	MANIFEST_DTYPE_FLOAT64,
	MANIFEST_DTYPE_BOOL,
	MANIFEST_DTYPE_STRING,
	MANIFEST_DTYPE_COUNT_, /* the dtypes a feature may have */
	/*
	 * An output dtype only: what normalize writes (the top half of a float32, rounded to
	 * nearest even). Not a feature's: manifest_dtype_parse() does not take it.
	 */
	MANIFEST_DTYPE_BFLOAT16 = MANIFEST_DTYPE_COUNT_,
	MANIFEST_DTYPE_ALL_
};

enum manifest_deser {
	MANIFEST_DESER_INT,    /* int64_list */
	MANIFEST_DESER_FLOAT,  /* float_list */
	MANIFEST_DESER_STRING, /* bytes_list, kept as strings */
	MANIFEST_DESER_RAW,    /* bytes_list holding raw binary numbers (endian, len) */
};

struct manifest_feature {
	char *name;
	enum manifest_dtype dtype;
	enum manifest_deser deser;
	unsigned rank;			  /* number of entries of "shape" */
	int64_t shape[MANIFEST_MAX_RANK]; /* "shape" as written: of a record, or of one step when
					   * var_len; -1 is either a raw dimension inferred from
					   * the byte length (as tf.reshape does, at most once) or
					   * the first entry of a variable-length int, float or
					   * string feature (manifest_feature_var_count) */
	bool var_len;	     /* a SequenceExample feature list (allow_var_len datasets only) */
	bool raw_big_endian; /* MANIFEST_DESER_RAW only */
	int64_t raw_len;     /* MANIFEST_DESER_RAW only: deserialize_args.len, -1 when absent
			      * (then one byte string per record, or per step when var_len) */
	struct manifest_default *dflt; /* "default", or NULL */
};

/*
 * A feature's "default": the values a record takes when the feature is missing or holds no
 * values (tf.io.FixedLenFeature's default_value). Only int, float and string features of a
 * fixed shape have one. n is 1 (every element of the shape takes it) or the shape's element
 * count; the values are those of the feature's list kind, cast to dtype as a record's are.
 */
struct manifest_default {
	size_t n;
	int64_t *ints;	  /* MANIFEST_DESER_INT */
	float *floats;	  /* MANIFEST_DESER_FLOAT */
	char **strs;	  /* MANIFEST_DESER_STRING: n byte strings (may hold NUL bytes) */
	size_t *str_lens; /* their lengths */
};

/* A manifest owns its features array and every feature's name. */
struct manifest {
	enum tfr_compression compression;
	bool allow_var_len; /* records are SequenceExamples (else Examples) */
	size_t n_features;
	struct manifest_feature *features;
};

/*
 * Parse and validate (docs/manifest.md lists the rules). "//" comments outside strings are
 * allowed, as nnetmaker allows them. Errors (-EINVAL for a rule, -EBADMSG for bad JSON or a
 * duplicate key, -EFBIG for a file over 64 MiB, -errno for I/O) name the file, the JSON path
 * (features[3].deserialize_args.endian) or line:column, and what was expected vs what was there.
 * The caller owns *ret_m (manifest_destroy).
 */
int manifest_load_file(const char *path, struct manifest **ret_m, struct io_error *err);
/* origin names the text in messages (a path, "<spec>"). */
int manifest_load_string(const char *json, size_t len, const char *origin, struct manifest **ret_m,
			 struct io_error *err);
void manifest_destroy(struct manifest *m);
void manifest_default_destroy(struct manifest_default *d);

/* Write m as JSON to path (for the generator). manifest_load_file() reads it back equal. */
int manifest_write_file(const struct manifest *m, const char *path, struct io_error *err);
/*
 * m as JSON text (indented, ending in a newline). The caller owns *ret_json (free()).
 * -EINVAL when m breaks a rule (it is validated as if loaded), -ENOMEM.
 */
int manifest_format(const struct manifest *m, char **ret_json, struct io_error *err);
/* Whether a and b describe the same dataset (names, types, shapes, arguments). */
bool manifest_equal(const struct manifest *a, const struct manifest *b);
/*
 * The full per-record shape of f, as the decoder produces it: [-1 (steps) if var_len]
 * + [raw_len if raw, not var_len, and raw_len > 1] + shape. Returns the rank (at most
 * MANIFEST_MAX_RANK - 1 for a loaded manifest), or -EINVAL when it would not fit in dims.
 */
int manifest_feature_record_shape(const struct manifest_feature *f,
				  int64_t dims[MANIFEST_MAX_RANK]);

/*
 * Whether f is a variable-length Example (or context) feature: an int, float or string
 * feature whose shape starts with -1. A record holds any multiple of the other dimensions'
 * product of values (none when the feature is missing or empty), read as a ragged row.
 */
bool manifest_feature_var_count(const struct manifest_feature *f);

/* Index of the feature called name, or -1. */
long manifest_find(const struct manifest *m, const char *name);

/* "int8" .. "string"; "?" when out of range. */
const char *manifest_dtype_name(enum manifest_dtype t);
/*
 * Accepts the names manifest_dtype_name() returns and TensorFlow's aliases "half", "float"
 * and "double". -EINVAL otherwise.
 */
int manifest_dtype_parse(const char *s, enum manifest_dtype *ret_t);
/* Bytes per element (0 for string). */
size_t manifest_dtype_size(enum manifest_dtype t);
/* "int", "float", "string", "raw". */
const char *manifest_deser_name(enum manifest_deser d);
int manifest_deser_parse(const char *s, enum manifest_deser *ret_d);

#endif
