/* SPDX-License-Identifier: Apache-2.0 */
/* Pipeline spec (DESIGN.md §3.4): parse and validate the JSON into a struct pl_spec. */
#ifndef SLUICE_PIPELINE_SPEC_H
#define SLUICE_PIPELINE_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/ioerr.h"
#include "io/manifest.h"

/*
 * A spec is the dataset specification's batch-loader configuration ({"type", "args"}) plus
 * sluice's "name" beside them and "seed", "on_corrupt", "shard" and "auto" inside args. Every
 * key, type, default and rule is in docs/pipeline-spec.md. pl_spec_parse() checks everything
 * that can be checked without opening the dataset; pl_plan_create() (plan.h) checks the rest
 * against the manifest (feature names, dtypes, shapes).
 *
 * Errors are one line: origin, JSON path, what was expected and what was there:
 *   spec.json: args.primary_features[1].to_name: duplicate "label" (also
 *     args.primary_features[0].to_name)
 *   spec.json: args.num_prefetch: expected an integer >= 0 or "auto", got -1
 *   spec.json: args.shuffel: unknown key (expected one of: dataset, ...)
 */

#define PL_AUTO	    (-2) /* a knob given as "auto" */
#define PL_NULL	    (-1) /* "epochs": null, "stride": null */
#define PL_MAX_RANK 8	 /* of a batch tensor, the batch dimension included */

/* "cycle_length" not given: num_parallel_reads is the cycle (pl_spec_cycle). */
#define PL_CYCLE_UNSET 0

/* "ram_budget" not given: the tuner's fixed bounds alone; else bytes within MIN .. MAX. */
#define PL_RAM_BUDGET_UNSET 0
#define PL_RAM_BUDGET_MIN   ((int64_t)1 << 20)
#define PL_RAM_BUDGET_MAX   ((int64_t)1 << 40)

enum pl_loader_type {
	PL_LOADER_INDEPENDENT,
	PL_LOADER_CONTINUOUS_SEQUENCE,
	PL_LOADER_DISCRETE_SEQUENCE,
};

enum pl_dataset_type {
	PL_DATASET_DIR,
	PL_DATASET_LIST,
};

enum pl_on_corrupt {
	PL_ON_CORRUPT_FAIL,
	PL_ON_CORRUPT_SKIP_RECORD,
	PL_ON_CORRUPT_SKIP_FILE,
};

/* A JSON scalar as written: for const values and padding values. */
enum pl_value_kind {
	PL_VALUE_NONE, /* absent or null: 0 / "" */
	PL_VALUE_BOOL,
	PL_VALUE_INT,
	PL_VALUE_REAL,
	PL_VALUE_STRING,
};

struct pl_value {
	enum pl_value_kind kind;
	bool b;
	int64_t i;
	double r;
	char *s; /* PL_VALUE_STRING: owned, NUL-terminated (JSON strings have no NUL) */
	size_t s_len;
};

struct pl_primary {
	char *from_name; /* the manifest feature */
	char *to_name;	 /* the output tensor */
};

enum pl_secondary_type {
	PL_SECONDARY_CONST,
};

struct pl_secondary {
	char *to_name;
	enum pl_secondary_type type;
	/* const: "shape" is a list (rank, shape) or the to_name of a primary (shape_from) */
	char *shape_from; /* NULL when shape is a literal */
	unsigned rank;
	int64_t shape[PL_MAX_RANK]; /* literal, no batch dimension, each >= 0 */
	/* "dtype" is a dtype name (dtype) or the to_name of a primary (dtype_from) */
	char *dtype_from; /* NULL when dtype is a literal */
	enum manifest_dtype dtype;
	struct pl_value value; /* PL_VALUE_NONE when absent: 0 or "" */
};

enum pl_slice_kind {
	PL_SLICE_INDEX, /* an integer: the axis is dropped */
	PL_SLICE_RANGE, /* start:stop[:step] with each part optional */
};

struct pl_slice_dim {
	enum pl_slice_kind kind;
	int64_t index; /* PL_SLICE_INDEX, may be negative */
	bool has_start, has_stop, has_step;
	int64_t start, stop, step; /* step != 0 */
};

enum pl_step_type {
	PL_STEP_SLICE,
	/* sluice's image steps (docs/pipeline-spec.md, "Image steps"; docs/image.md) */
	PL_STEP_DECODE_IMAGE,
	PL_STEP_RANDOM_RESIZED_CROP,
	PL_STEP_RESIZE,
	PL_STEP_CENTER_CROP,
	PL_STEP_RANDOM_FLIP,
	PL_STEP_NORMALIZE,
	PL_STEP_COLOR_JITTER,
	PL_STEP_BOXES, /* box coordinates that follow an image tensor's crops, resizes, flips */
	PL_STEP_COUNT_
};

/* "slice", "decode_image", ... */
const char *pl_step_type_name(enum pl_step_type t);
/* Whether t is an image step (all but slice). */
bool pl_step_is_image(enum pl_step_type t);

enum pl_interp {
	PL_INTERP_NEAREST,  /* the source pixel whose centre is nearest */
	PL_INTERP_BILINEAR, /* triangle filter, widened by the scale when shrinking (antialias) */
	PL_INTERP_AREA,	    /* box filter, widened likewise: the mean of the covered pixels */
	PL_INTERP_COUNT_
};

enum pl_norm_dtype {
	PL_NORM_UINT8,	  /* no scaling: the pixels as they are (layout only) */
	PL_NORM_FLOAT16,  /* IEEE binary16, round to nearest even */
	PL_NORM_BFLOAT16, /* the top half of a float32, round to nearest even */
	PL_NORM_FLOAT32,
	PL_NORM_COUNT_
};

/* "nearest", "bilinear", "area". */
const char *pl_interp_name(enum pl_interp i);

/* The arguments of the image steps (each uses its own). */
struct pl_image_args {
	unsigned channels;     /* decode_image: 0 (as stored), 1 or 3 */
	bool dct_fast;	       /* decode_image: dct_method "fast" (else "accurate") */
	bool scaled_idct;      /* decode_image: a JPEG shrunk 2x or more decoded at 1/2 .. 1/8 */
	int64_t max_pixels;    /* decode_image: the decompression-bomb guard */
	uint32_t size[2];      /* h, w: random_resized_crop, center_crop, resize (else 0) */
	uint32_t shorter_side; /* resize: the shorter side's new length (size 0) */
	double scale[2];       /* random_resized_crop: area fraction range */
	double ratio[2];       /* random_resized_crop: aspect ratio (w / h) range */
	enum pl_interp interp; /* random_resized_crop, resize */
	unsigned axis;	       /* random_flip: 0 vertical (rows), 1 horizontal (columns) */
	double probability;    /* random_flip */
	unsigned n_mean;       /* normalize: 1 or the channels */
	float mean[4], std[4];
	enum pl_norm_dtype dtype; /* normalize */
	bool chw;		  /* normalize: layout CHW (else HWC) */
	/*
	 * random_resized_crop, random_flip: "draw", a name that random steps share to take the
	 * same random numbers (an image and its mask cropped and flipped alike), or NULL; and
	 * draw_step, the index of the first step of that draw (the step's own index without
	 * one): its random stream is PL_STREAM_AUGMENT + draw_step.
	 */
	char *draw;
	size_t draw_step;
	/*
	 * color_jitter: the factor ranges of brightness, contrast, saturation (around 1) and hue
	 * (around 0), and which apply (torchvision's: a range that is only its centre does not).
	 */
	double jitter[4][2];
	bool jitter_on[4];
	/*
	 * boxes (on a float32 tensor of boxes, last dimension 4): the image tensor whose geometry
	 * they follow, the order of the four ("yxyx": ymin, xmin, ymax, xmax as TensorFlow's
	 * detection API; "xyxy" as torchvision's) and whether they are in pixels (else
	 * normalized to [0, 1] of the image's size).
	 */
	char *box_image;
	bool box_xyxy, box_pixels;
};

struct pl_step {
	char *tensor; /* a primary or secondary to_name */
	enum pl_step_type type;
	/* slice: "[3,:,4:,:-2,1:4]"; the text is kept for messages */
	char *slice_text;
	unsigned n_dims; /* 1 .. PL_MAX_RANK - 1 */
	struct pl_slice_dim dims[PL_MAX_RANK];
	struct pl_image_args img; /* the image steps */
};

struct pl_padding {
	char *tensor;
	bool has_shape;
	unsigned rank;
	int64_t shape[PL_MAX_RANK]; /* no batch dimension; -1 = the batch maximum */
	struct pl_value value;	    /* PL_VALUE_NONE: 0 or "" */
};

struct pl_spec {
	char *name; /* NULL when absent */
	/*
	 * Who besides its owner and root may read it under sluiced ("readers": {"uids": [...],
	 * "gids": [...]}: a team's jobs under different users share one pipeline). Not part of
	 * the fingerprint: it changes no batch.
	 */
	uint32_t *reader_uids, *reader_gids;
	size_t n_reader_uids, n_reader_gids;
	enum pl_loader_type type;

	enum pl_dataset_type dataset_type;
	char *data_dir;	     /* dir */
	char *pattern;	     /* dir: which files (dataset_open_dir()), or NULL */
	char *manifest_file; /* list */
	char *list_file;     /* list */

	int64_t target_batch_size; /* >= 1 */
	bool drop_remainder;
	int64_t epochs;		       /* >= 1, or PL_NULL (forever) */
	int64_t num_parallel_reads;    /* >= 1 or PL_AUTO; default 1 */
	int64_t cycle_length;	       /* 1 .. 1024, or PL_CYCLE_UNSET */
	int64_t num_parallel_parses;   /* >= 1 or PL_AUTO; default 1 */
	int64_t num_read_buffer_bytes; /* >= 0 or PL_AUTO */
	int64_t num_prefetch;	       /* >= 0 or PL_AUTO */
	bool shuffle;		       /* default false; false when global */
	/* shuffle "global" (sluice, issue 36): one permutation of every record per epoch */
	bool global_shuffle;
	int64_t num_shuffle_buffer_elements;	    /* >= 1; 1 when shuffle is false */
	int64_t num_filenames_shuffle_buffer;	    /* >= 1; 1 when shuffle is false */
	int64_t num_mix_files;			    /* >= 1; 1 when shuffle is false */
	bool sloppy_interleave;			    /* default false */
	int64_t num_interleave_out_buffer_elements; /* >= 1 or PL_AUTO; default 1 */
	int64_t num_interleave_in_buffer_elements;  /* >= 1 or PL_AUTO; default 1 */

	size_t n_primary; /* >= 1 */
	struct pl_primary *primary;
	size_t n_secondary;
	struct pl_secondary *secondary;
	size_t n_steps;
	struct pl_step *steps;
	bool padding;	  /* true, or a non-empty list: every tensor is padded */
	size_t n_padding; /* entries of the list form */
	struct pl_padding *paddings;

	/* independent */
	bool multi_load; /* default false */
	/* continuous_sequence and discrete_sequence */
	int64_t min_window; /* >= 1 */
	int64_t max_window; /* >= min_window */
	int64_t stride;	    /* continuous_sequence: >= 1 or PL_NULL (default: the window length) */

	/* sluice's additions */
	uint64_t seed;		       /* default 0 */
	enum pl_on_corrupt on_corrupt; /* default fail */
	bool has_shard;
	uint32_t shard_index, shard_count; /* index < count */
	/*
	 * The most memory a tuner may give the pipeline's buffers (tf.data's
	 * AutotuneOptions.ram_budget): half to the read buffers of the cycle's readers, half to
	 * the batch jobs in flight (docs/plumber.md, "Autotuning"), or PL_RAM_BUDGET_UNSET. It
	 * bounds only knobs left "auto" and changes no batch: not part of the fingerprint.
	 */
	int64_t ram_budget;
};

/*
 * Parse and validate a spec. origin names the text in messages (a path, "<spec>"). "//"
 * comments to the end of a line (outside strings) are allowed, as in manifests. Returns 0,
 * -EBADMSG (JSON syntax, duplicate key), -EINVAL (a rule), -ENOMEM. The caller owns *ret_spec.
 */
int pl_spec_parse(const char *json, size_t len, const char *origin, struct pl_spec **ret_spec,
		  struct io_error *err);
/*
 * Read path (at most 64 MiB) and parse it; -errno for I/O, -EFBIG. Relative dataset paths are
 * made relative to the directory of path (pl_spec_rebase).
 */
int pl_spec_load_file(const char *path, struct pl_spec **ret_spec, struct io_error *err);
/*
 * The one rule for relative paths (docs/pipeline-spec.md): a relative data_dir, manifest_file
 * or list_file becomes dir + "/" + path, where dir is the directory of the spec file, or the
 * working directory of the client that sent the spec. Absolute paths stay. -ENOMEM.
 */
int pl_spec_rebase(struct pl_spec *s, const char *dir, size_t dir_len);
void pl_spec_destroy(struct pl_spec *s);

/* "independent", "continuous_sequence", "discrete_sequence". */
const char *pl_loader_type_name(enum pl_loader_type t);
/* "fail", "skip_record", "skip_file". */
const char *pl_on_corrupt_name(enum pl_on_corrupt c);

/*
 * The resolved value of a knob that may be PL_AUTO (DESIGN.md: until the autotuner exists,
 * "auto" is all online CPUs for parses, 4 reads, 2 batches of prefetch, 1 MiB read buffers,
 * and 1 for the interleave buffers).
 */
int64_t pl_spec_parallel_reads(const struct pl_spec *s);
int64_t pl_spec_parallel_parses(const struct pl_spec *s);
int64_t pl_spec_prefetch(const struct pl_spec *s);
int64_t pl_spec_read_buffer_bytes(const struct pl_spec *s);
/*
 * The interleave cycle length (docs/pipeline-semantics.md, "Interleave"): num_mix_files when
 * shuffle is true (cycle_length is then refused); else cycle_length when given, and then
 * num_parallel_reads is only the reads in flight shared by the cycle's slots (it changes no
 * batch); else num_parallel_reads ("auto": 4), as before cycle_length existed.
 */
int64_t pl_spec_cycle(const struct pl_spec *s);

#endif
