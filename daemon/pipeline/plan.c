/* SPDX-License-Identifier: Apache-2.0 */
/* The plan: a spec checked against its dataset's manifest and compiled into output tensors. */
#include "plan.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/tfr_index.h"
#include "index_store.h"

#include "ipc/batch.h"
#include "read.h"
#include "rng.h"

_Static_assert((int)MANIFEST_DTYPE_INT8 == IPC_DTYPE_INT8 &&
		       (int)MANIFEST_DTYPE_UINT64 == IPC_DTYPE_UINT64 &&
		       (int)MANIFEST_DTYPE_FLOAT16 == IPC_DTYPE_FLOAT16 &&
		       (int)MANIFEST_DTYPE_BOOL == IPC_DTYPE_BOOL &&
		       (int)MANIFEST_DTYPE_STRING == IPC_DTYPE_STRING &&
		       (int)MANIFEST_DTYPE_BFLOAT16 == IPC_DTYPE_BFLOAT16 &&
		       (int)MANIFEST_DTYPE_ALL_ == IPC_DTYPE_COUNT_,
	       "ipc_dtype numbers are manifest_dtype numbers");

static char *xstrdup(const char *s)
{
	return s ? strdup(s) : NULL;
}

static void shape_str(const int64_t *shape, unsigned rank, char *buf, size_t cap)
{
	size_t o = 0;
	int n = snprintf(buf, cap, "[");
	o = n > 0 ? (size_t)n : 0;
	for (unsigned i = 0; i < rank && o < cap; i++) {
		n = snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
		if (n > 0)
			o += (size_t)n;
	}
	if (o < cap)
		snprintf(buf + o, cap - o, "]");
}

void pl_plan_destroy(struct pl_plan *plan)
{
	if (!plan)
		return;
	for (size_t i = 0; i < plan->n_out; i++) {
		struct pl_out *o = &plan->out[i];
		free(o->name);
		free(o->c_str);
		free(o->pad_str);
		for (size_t k = 0; k < o->n_steps; k++)
			free(o->steps[k].text);
		free(o->steps);
		pl_imgchain_destroy(o->img);
	}
	free(plan->out);
	pbex_schema_destroy(plan->ctx);
	pbex_schema_destroy(plan->lists);
	for (size_t k = 0; plan->dflt_rec && k < plan->n_ctx; k++)
		free(plan->dflt_rec[k]);
	free(plan->dflt_rec);
	free(plan->dflt_len);
	free(plan->dflt);
	free(plan->files);
	dataset_destroy(plan->ds);
	io_creds_clear(&plan->own_creds);
	free(plan);
}

static long out_find(const struct pl_plan *plan, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(plan->out[i].name, name) == 0)
			return (long)i;
	return -1;
}

static int open_dataset(const struct pl_spec *spec, struct pl_plan *plan, struct io_error *err)
{
	/* this thread opens the dataset with the requester's rights: what it cannot read
	   fails here as it would for the requester, and no content of it is ever quoted */
	int r = io_creds_enter(plan->creds);
	if (r < 0) {
		io_error_set(err, "cannot take the rights of uid %u to read the dataset",
			     (unsigned)plan->creds->uid);
		return r;
	}
	if (spec->dataset_type == PL_DATASET_DIR)
		r = dataset_open_dir(spec->data_dir, spec->pattern, &plan->ds, err);
	else
		r = dataset_open_list(spec->manifest_file, spec->list_file, &plan->ds, err);
	io_creds_leave(plan->creds);
	if (r < 0) {
		io_error_prefix(err, "args.dataset: ");
		return r;
	}
	plan->files = calloc(plan->ds->n_files ? plan->ds->n_files : 1, sizeof(*plan->files));
	if (!plan->files)
		return -ENOMEM;
	uint32_t count = spec->has_shard ? spec->shard_count : 1;
	uint32_t index = spec->has_shard ? spec->shard_index : 0;
	for (size_t i = 0; i < plan->ds->n_files; i++)
		if (i % count == index)
			plan->files[plan->n_files++] = (uint32_t)i;
	if (plan->n_files == 0) {
		io_error_set(err, "args.shard: shard %u of %u has no files (the dataset has %zu)",
			     index, count, plan->ds->n_files);
		return -ENOENT;
	}
	plan->sequence_example = plan->ds->manifest->allow_var_len;
	return 0;
}

/* The index of the directory of path (DIR/.sluice-index), reusing *ix when it is that one's. */
static struct tfr_index *dir_index(const char *path, struct tfr_index **ix, char *dir,
				   size_t dir_cap)
{
	const char *slash = strrchr(path, '/');
	size_t n = slash ? (size_t)(slash - path) : 0;
	if (n + sizeof(TFR_INDEX_NAME) + 1 >= dir_cap)
		return NULL;
	if (*ix && strncmp(dir, path, n) == 0 && dir[n] == '\0')
		return *ix;
	tfr_index_destroy(*ix);
	*ix = NULL;
	memcpy(dir, path, n);
	dir[n] = '\0';
	char ipath[4096 + sizeof(TFR_INDEX_NAME) + 1];
	snprintf(ipath, sizeof(ipath), "%s/%s", dir, TFR_INDEX_NAME);
	struct io_error ignored;
	ignored.msg[0] = 0;
	if (tfr_index_open(ipath, ix, &ignored) < 0)
		*ix = NULL; /* none, or damaged: counted by hopping, or not known */
	return *ix;
}

/*
 * The records of an epoch, counted ahead (PL_COUNT_AHEAD_NS at most): from each file's fresh
 * entry in the record index beside it (sluicectl index), else from sluiced's own index (a
 * pipeline framed the file whole before: index_store.h), else, uncompressed, by hopping from
 * header to header (tfr_index_build_fd: no payload read). A compressed file not indexed, or a
 * scan past the time bound, leaves the count unknown (the first epoch counts it). With the
 * requester's rights, as the dataset was opened.
 */
#define PL_COUNT_AHEAD_NS (2 * 1000000000ll)
static void count_ahead(struct pl_plan *plan)
{
	struct tfr_index *ix = NULL;
	char dir[4096];
	uint64_t records = 0;
	bool known = true;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	dir[0] = '\0';
	for (size_t i = 0; i < plan->n_files && known; i++) {
		const char *path = plan->ds->files[plan->files[i]].path;
		struct stat st;
		int fd = io_creds_open_file(plan->creds, path, 0, &st); /* a FIFO never blocks */
		if (fd < 0) {
			known = false;
			break;
		}
		const struct tfr_index_entry *e = NULL;
		struct tfr_index *dix = dir_index(path, &ix, dir, sizeof(dir));
		const char *base = strrchr(path, '/');
		base = base ? base + 1 : path;
		struct io_error err;
		err.msg[0] = 0;
		uint64_t own_records;
		if (dix && tfr_index_lookup(dix, base, &st, &e, &err) == 0) {
			records += e->records;
		} else if (pl_own_index_records(path, &st, plan->ds->manifest->compression,
						&own_records) == 0) {
			records += own_records; /* sluiced's own entry, fresh against this fd */
		} else if (plan->ds->manifest->compression == TFR_COMPRESSION_NONE) {
			struct tfr_index_entry *own = NULL;
			/* serial: it hops header to header and touches no page between (the
			   parallel scan looks for headers inside huge records: their pages) */
			struct tfr_index_build_opts bo;
			tfr_index_build_opts_init(&bo);
			bo.serial = true;
			if (tfr_index_build_fd(fd, path, &bo, &own, &err) == 0)
				records += own->records;
			else
				known = false; /* a bad file: the epoch says where, as it reads it */
			tfr_index_entry_destroy(own);
		} else {
			known = false;
		}
		close(fd);
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000000000ll + (t.tv_nsec - t0.tv_nsec) >
		    PL_COUNT_AHEAD_NS)
			known = false;
	}
	tfr_index_destroy(ix);
	if (!known)
		return;
	uint64_t b = (uint64_t)plan->cfg.target_batch_size;
	plan->ahead_records = records;
	plan->ahead_batches = plan->cfg.drop_remainder ? records / b : (records + b - 1) / b;
	plan->ahead_known = true;
}

/* A primary: the manifest feature and where it is decoded from. */
static int add_primary(struct pl_plan *plan, size_t i, const struct pl_primary *p,
		       const char ***names, size_t *n_names_ctx, size_t *n_names_lists,
		       struct io_error *err)
{
	const struct manifest *m = plan->ds->manifest;
	long fi = manifest_find(m, p->from_name);
	if (fi < 0) {
		io_error_set(err,
			     "args.primary_features[%zu].from_name: feature \"%s\" is not in the "
			     "dataset's manifest",
			     i, p->from_name);
		return -EINVAL;
	}
	struct pl_out *o = &plan->out[i];
	const struct manifest_feature *f = &m->features[fi];
	o->name = xstrdup(p->to_name);
	if (!o->name)
		return -ENOMEM;
	o->src = PL_OUT_FEATURE;
	o->feat = f;
	o->dtype = f->dtype;
	o->elem_size = manifest_dtype_size(f->dtype);
	int rank = manifest_feature_record_shape(f, o->rec_shape);
	if (rank < 0) {
		io_error_set(err,
			     "args.primary_features[%zu]: feature \"%s\" has too many dimensions",
			     i, p->from_name);
		return -EINVAL;
	}
	o->rec_rank = (unsigned)rank;
	o->rec_elems = 1;
	for (int d = 0; d < rank; d++)
		o->rec_elems *= o->rec_shape[d] < 0 ? 0 : o->rec_shape[d];
	o->var_count = manifest_feature_var_count(f);
	o->step_elems = 1;
	for (unsigned d = o->var_count ? 1 : 0; d < f->rank; d++)
		o->step_elems = f->shape[d] < 0 ? -1 : o->step_elems * f->shape[d];
	if (o->step_elems < 0)
		o->step_elems = -1;
	o->in_lists = f->var_len;
	/* one decode slot per distinct feature name and place */
	const char **list = names[o->in_lists ? 1 : 0];
	size_t *n = o->in_lists ? n_names_lists : n_names_ctx;
	size_t k;
	for (k = 0; k < *n; k++)
		if (strcmp(list[k], f->name) == 0)
			break;
	if (k == *n)
		list[(*n)++] = f->name;
	o->slot = (unsigned)k;
	memcpy(o->row_shape, o->rec_shape, sizeof(o->row_shape));
	o->row_rank = o->rec_rank;
	return 0;
}

static int add_const(struct pl_plan *plan, size_t i, size_t si, const struct pl_secondary *s,
		     struct io_error *err)
{
	struct pl_out *o = &plan->out[i];
	o->name = xstrdup(s->to_name);
	if (!o->name)
		return -ENOMEM;
	o->src = PL_OUT_CONST;
	o->shape_from = -1;
	if (s->shape_from) {
		long k = out_find(plan, plan->n_primary, s->shape_from);
		if (k < 0) {
			io_error_set(err,
				     "args.secondary_features[%zu].args.shape: \"%s\" is not the "
				     "to_name of a primary feature",
				     si, s->shape_from);
			return -EINVAL;
		}
		o->shape_from = (int)k;
		o->c_rank = plan->out[k].rec_rank;
		memcpy(o->c_shape, plan->out[k].rec_shape, sizeof(o->c_shape));
	} else {
		o->c_rank = s->rank;
		memcpy(o->c_shape, s->shape, sizeof(o->c_shape));
	}
	if (s->dtype_from) {
		long k = out_find(plan, plan->n_primary, s->dtype_from);
		if (k < 0) {
			io_error_set(err,
				     "args.secondary_features[%zu].args.dtype: \"%s\" is neither a "
				     "dtype nor the to_name of a primary feature",
				     si, s->dtype_from);
			return -EINVAL;
		}
		o->dtype = plan->out[k].dtype;
	} else {
		o->dtype = s->dtype;
	}
	o->elem_size = manifest_dtype_size(o->dtype);
	if (o->dtype == MANIFEST_DTYPE_STRING) {
		if (s->value.kind != PL_VALUE_NONE && s->value.kind != PL_VALUE_STRING) {
			io_error_set(err,
				     "args.secondary_features[%zu].args.value: expected a string "
				     "for dtype string",
				     si);
			return -EINVAL;
		}
		o->c_str = strdup(s->value.kind == PL_VALUE_STRING ? s->value.s : "");
		if (!o->c_str)
			return -ENOMEM;
		o->c_str_len = s->value.kind == PL_VALUE_STRING ? s->value.s_len : 0;
	} else if (pl_value_to_elem(&s->value, o->dtype, o->c_elem) < 0) {
		io_error_set(err,
			     "args.secondary_features[%zu].args.value: not a value of dtype %s", si,
			     manifest_dtype_name(o->dtype));
		return -EINVAL;
	}
	o->row_rank = o->c_rank;
	memcpy(o->row_shape, o->c_shape, sizeof(o->row_shape));
	return 0;
}

/*
 * An image step on output k (or any step after its decode_image): img_first[k] is the index
 * of its decode_image step. The tensor must be a string scalar of a feature when decoded, and
 * slices cannot follow (they would index pixels the plan cannot see).
 */
static int note_image_step(const struct pl_spec *spec, struct pl_plan *plan, size_t i, size_t k,
			   size_t *img_first, struct io_error *err)
{
	const struct pl_step *st = &spec->steps[i];
	const struct pl_out *o = &plan->out[k];
	if (st->type == PL_STEP_DECODE_IMAGE && img_first[k] == SIZE_MAX) {
		if (spec->type != PL_LOADER_INDEPENDENT) {
			io_error_set(err,
				     "args.processing_steps[%zu]: image steps need the independent "
				     "loader (a window's records are not decoded one by one yet)",
				     i);
			return -EINVAL;
		}
		if (o->src != PL_OUT_FEATURE || o->dtype != MANIFEST_DTYPE_STRING ||
		    o->feat->deser != MANIFEST_DESER_STRING || o->row_rank != 0) {
			char sh[128];
			shape_str(o->row_shape, o->row_rank, sh, sizeof(sh));
			io_error_set(err,
				     "args.processing_steps[%zu]: decode_image needs one encoded "
				     "image per row, a string feature of shape [] (slice it "
				     "first), "
				     "but tensor \"%s\" is %s %s",
				     i, o->name, manifest_dtype_name(o->dtype), sh);
			return -EINVAL;
		}
		img_first[k] = i;
		return 0;
	}
	if (img_first[k] == SIZE_MAX) {
		io_error_set(err,
			     "args.processing_steps[%zu]: \"%s\" on tensor \"%s\" needs a "
			     "decode_image step before it",
			     i, pl_step_type_name(st->type), o->name);
		return -EINVAL;
	}
	if (st->type == PL_STEP_SLICE) {
		io_error_set(err,
			     "args.processing_steps[%zu]: a slice of tensor \"%s\" after its "
			     "image steps (slice the string before decode_image; crop the image "
			     "with center_crop)",
			     i, o->name);
		return -EINVAL;
	}
	return 0;
}

/* Each decoded tensor's chain, its dtype and its static row shape. */
static int make_chains(const struct pl_spec *spec, struct pl_plan *plan, const size_t *img_first,
		       int *var_axis, struct io_error *err)
{
	for (size_t k = 0; k < plan->n_out; k++) {
		if (img_first[k] == SIZE_MAX)
			continue;
		struct pl_out *o = &plan->out[k];
		const struct pl_step *list[PL_STEP_COUNT_ * 4];
		size_t n = 0;
		for (size_t i = img_first[k]; i < spec->n_steps; i++) {
			if (strcmp(spec->steps[i].tensor, o->name) != 0)
				continue;
			if (n == sizeof(list) / sizeof(list[0])) {
				io_error_set(err,
					     "args.processing_steps[%zu]: too many image steps "
					     "on tensor \"%s\"",
					     i, o->name);
				return -EINVAL;
			}
			list[n++] = &spec->steps[i];
		}
		int r = pl_imgchain_create(list, n, img_first[k], &o->img, err);
		if (r < 0)
			return r;
		o->dtype = (enum manifest_dtype)pl_imgchain_dtype(o->img);
		o->elem_size = pl_imgchain_elem_size(o->img);
		o->row_rank = pl_imgchain_static_shape(o->img, o->row_shape);
		var_axis[k] = o->row_shape[0] < 0 ? 0 : -1;
	}
	/* boxes: float32 [..., 4] of a feature, following a decoded image of the same row */
	for (size_t k = 0; k < plan->n_out; k++) {
		struct pl_out *o = &plan->out[k];
		if (!o->box_of)
			continue;
		const struct pl_out *im = &plan->out[o->box_of - 1];
		if (!im->img) {
			io_error_set(err,
				     "tensor \"%s\": boxes follow tensor \"%s\", which has no "
				     "decode_image step",
				     o->name, im->name);
			return -EINVAL;
		}
		if (o->img || o->src != PL_OUT_FEATURE || o->dtype != MANIFEST_DTYPE_FLOAT32 ||
		    o->row_rank < 1 || o->row_rank > 2 || o->row_shape[o->row_rank - 1] != 4) {
			char sh[128];
			shape_str(o->row_shape, o->row_rank, sh, sizeof(sh));
			io_error_set(err,
				     "tensor \"%s\": boxes need a float32 feature of shape [4], "
				     "[n, 4] or [-1, 4], got %s %s",
				     o->name, o->img ? "an image" : manifest_dtype_name(o->dtype),
				     sh);
			return -EINVAL;
		}
	}
	return 0;
}

/* The slices, and which tensors have image steps (note_image_step). */
static int add_slices(const struct pl_spec *spec, struct pl_plan *plan, int *var_axis,
		      size_t *img_first, struct io_error *err)
{
	for (size_t i = 0; i < spec->n_steps; i++) {
		const struct pl_step *st = &spec->steps[i];
		long k = out_find(plan, plan->n_out, st->tensor);
		if (k < 0) {
			io_error_set(err, "args.processing_steps[%zu].tensor: no tensor \"%s\"", i,
				     st->tensor);
			return -EINVAL;
		}
		struct pl_out *o = &plan->out[k];
		if (st->type == PL_STEP_BOXES) { /* checked once the chains exist */
			if (o->box_of) {
				io_error_set(err,
					     "args.processing_steps[%zu]: a second boxes step on "
					     "tensor \"%s\"",
					     i, o->name);
				return -EINVAL;
			}
			long m = out_find(plan, plan->n_out, st->img.box_image);
			if (m < 0) {
				io_error_set(err,
					     "args.processing_steps[%zu].args.image: no tensor "
					     "\"%s\"",
					     i, st->img.box_image);
				return -EINVAL;
			}
			o->box_of = (size_t)m + 1;
			o->box_xyxy = st->img.box_xyxy;
			o->box_pixels = st->img.box_pixels;
			continue;
		}
		if (pl_step_is_image(st->type) || img_first[k] != SIZE_MAX) {
			int r = note_image_step(spec, plan, i, (size_t)k, img_first, err);
			if (r < 0)
				return r;
			continue;
		}
		int64_t shape[PL_MAX_RANK];
		unsigned axis = 0;
		int r = pl_shape_slice(o->row_shape, o->row_rank, st->dims, st->n_dims, shape,
				       &axis);
		if (r < 0) {
			char sh[128];
			shape_str(o->row_shape, o->row_rank, sh, sizeof(sh));
			if (r == -ERANGE)
				io_error_set(err,
					     "args.processing_steps[%zu].args.slice: %s: index out "
					     "of "
					     "range for axis %u of tensor \"%s\" with shape %s",
					     i, st->slice_text, axis, o->name, sh);
			else
				io_error_set(err,
					     "args.processing_steps[%zu].args.slice: %s: %u "
					     "indices for tensor \"%s\" of rank %u (shape %s)",
					     i, st->slice_text, st->n_dims, o->name, o->row_rank,
					     sh);
			return -EINVAL;
		}
		if (var_axis[k] == 0 && st->dims[0].kind == PL_SLICE_INDEX)
			var_axis[k] = -1;
		struct pl_out_step *ns = realloc(o->steps, (o->n_steps + 1) * sizeof(*ns));
		if (!ns)
			return -ENOMEM;
		o->steps = ns;
		ns[o->n_steps].n_dims = st->n_dims;
		memcpy(ns[o->n_steps].dims, st->dims, sizeof(st->dims));
		ns[o->n_steps].text = xstrdup(st->slice_text);
		o->n_steps++;
		o->row_rank = (unsigned)r;
		memcpy(o->row_shape, shape, sizeof(shape));
	}
	return 0;
}

static int add_steps(const struct pl_spec *spec, struct pl_plan *plan, int *var_axis,
		     struct io_error *err)
{
	size_t *img_first = malloc((plan->n_out + 1) * sizeof(*img_first));
	if (!img_first)
		return -ENOMEM;
	for (size_t k = 0; k < plan->n_out; k++)
		img_first[k] = SIZE_MAX;
	int r = add_slices(spec, plan, var_axis, img_first, err);
	if (r == 0)
		r = make_chains(spec, plan, img_first, var_axis, err);
	free(img_first);
	return r;
}

static int set_pad_value(struct pl_out *o, const struct pl_value *v, size_t pi,
			 struct io_error *err)
{
	if (o->dtype == MANIFEST_DTYPE_STRING) {
		if (v->kind != PL_VALUE_NONE && v->kind != PL_VALUE_STRING) {
			io_error_set(err,
				     "args.padding[%zu].value: expected a string for tensor \"%s\" "
				     "of dtype string",
				     pi, o->name);
			return -EINVAL;
		}
		free(o->pad_str);
		o->pad_str = strdup(v->kind == PL_VALUE_STRING ? v->s : "");
		if (!o->pad_str)
			return -ENOMEM;
		o->pad_str_len = v->kind == PL_VALUE_STRING ? v->s_len : 0;
		return 0;
	}
	if (pl_value_to_elem(v, o->dtype, o->pad_elem) < 0) {
		io_error_set(err,
			     "args.padding[%zu].value: not a value of dtype %s (tensor \"%s\")", pi,
			     manifest_dtype_name(o->dtype), o->name);
		return -EINVAL;
	}
	return 0;
}

static int add_padding(const struct pl_spec *spec, struct pl_plan *plan, struct io_error *err)
{
	static const struct pl_value zero = { .kind = PL_VALUE_NONE };
	for (size_t i = 0; i < plan->n_out; i++) {
		struct pl_out *o = &plan->out[i];
		o->pad = true;
		for (unsigned d = 0; d < PL_MAX_RANK; d++)
			o->pad_shape[d] = -1;
		int r = set_pad_value(o, &zero, 0, err);
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < spec->n_padding; i++) {
		const struct pl_padding *pd = &spec->paddings[i];
		long k = out_find(plan, plan->n_out, pd->tensor);
		if (k < 0) {
			io_error_set(err, "args.padding[%zu].tensor: no tensor \"%s\"", i,
				     pd->tensor);
			return -EINVAL;
		}
		struct pl_out *o = &plan->out[k];
		if (pd->has_shape) {
			if (pd->rank != o->row_rank) {
				io_error_set(err,
					     "args.padding[%zu].shape: expected %u dimensions for "
					     "tensor \"%s\", got %u",
					     i, o->row_rank, o->name, pd->rank);
				return -EINVAL;
			}
			for (unsigned d = 0; d < pd->rank; d++) {
				if (pd->shape[d] >= 0 && o->row_shape[d] >= 0 &&
				    pd->shape[d] < o->row_shape[d]) {
					io_error_set(err,
						     "args.padding[%zu].shape[%u]: %lld is smaller "
						     "than "
						     "dimension %u of tensor \"%s\" (%lld)",
						     i, d, (long long)pd->shape[d], d, o->name,
						     (long long)o->row_shape[d]);
					return -EINVAL;
				}
				o->pad_shape[d] = pd->shape[d];
			}
		}
		int r = set_pad_value(o, &pd->value, i, err);
		if (r < 0)
			return r;
	}
	return 0;
}

static uint64_t fp_mix(uint64_t h, uint64_t v)
{
	return pl_mix64(h ^ pl_mix64(v + 0x9e3779b97f4a7c15ull));
}

static uint64_t fp_str(uint64_t h, const char *s, size_t n)
{
	h = fp_mix(h, n);
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = 0;
		memcpy(&v, s + i, n - i < 8 ? n - i : 8);
		h = fp_mix(h, v);
	}
	return h;
}

/*
 * What a saved state must match: every spec value that changes which batches come out, the
 * output tensors, and every data file's path, size and mtime. (Not the knobs that change only
 * speed, as DESIGN.md §5 asks of the fingerprint.) The interleave cycle enters as p->cycle,
 * the cycle in effect: num_parallel_reads changes the fingerprint only when it is the cycle
 * (no cycle_length, no shuffle), and a cycle_length of 3 is the same pipeline as 3 reads
 * without one.
 */
static uint64_t plan_fingerprint(const struct pl_plan *p, uint64_t h)
{
	const struct pl_spec *c = &p->cfg;
	uint64_t v[] = { c->type,
			 (uint64_t)c->target_batch_size,
			 c->drop_remainder,
			 (uint64_t)c->epochs,
			 c->shuffle,
			 (uint64_t)c->num_shuffle_buffer_elements,
			 (uint64_t)c->num_filenames_shuffle_buffer,
			 (uint64_t)c->num_mix_files,
			 c->sloppy_interleave,
			 p->cycle,
			 (uint64_t)c->min_window,
			 (uint64_t)c->max_window,
			 (uint64_t)c->stride,
			 c->seed,
			 c->on_corrupt,
			 c->shard_index,
			 c->shard_count,
			 p->n_out };
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		h = fp_mix(h, v[i]);
	if (c->global_shuffle) /* only then: every other spec keeps the fingerprint it had */
		h = fp_mix(h, 0x676c6f62616cull);
	for (size_t i = 0; i < p->n_out; i++) {
		const struct pl_out *o = &p->out[i];
		h = fp_str(h, o->name, strlen(o->name));
		h = fp_mix(h, o->dtype);
		h = fp_mix(h, o->row_rank);
		for (unsigned d = 0; d < o->row_rank; d++)
			h = fp_mix(h,
				   (uint64_t)o->row_shape[d] ^ ((uint64_t)o->pad_shape[d] << 32));
	}
	h = fp_mix(h, p->steps_fp);			 /* image steps change the values */
	for (size_t k = 0; p->dflt && k < p->n_ctx; k++) /* a default changes the values */
		if (p->dflt[k].present)
			h = fp_str(h, (const char *)p->dflt_rec[k], p->dflt_len[k]);
	for (size_t i = 0; i < p->n_files; i++) {
		const struct dataset_file *f = &p->ds->files[p->files[i]];
		h = fp_str(h, f->path, strlen(f->path));
		h = fp_mix(h, f->size);
		h = fp_mix(h, (uint64_t)f->mtime_ns);
	}
	return h;
}

/*
 * Reads in flight per slot. Without cycle_length, num_parallel_reads is the cycle and each
 * slot keeps PL_READ_QUEUE_DEPTH reads in flight, as before the key. With it, the cycle is
 * fixed and num_parallel_reads is a budget of reads in flight shared by the cycle's slots:
 * ceil(reads / cycle) each, within 1 .. PL_READ_MAX_QUEUE_DEPTH ("auto": the default per
 * slot). It changes no batch, so it is not in the fingerprint.
 */
static unsigned read_depth(const struct pl_spec *spec, unsigned cycle)
{
	if (spec->shuffle || spec->cycle_length == PL_CYCLE_UNSET ||
	    spec->num_parallel_reads == PL_AUTO)
		return PL_READ_QUEUE_DEPTH;
	uint64_t d = ((uint64_t)spec->num_parallel_reads + cycle - 1) / cycle;
	if (d < 1)
		d = 1;
	if (d > PL_READ_MAX_QUEUE_DEPTH)
		d = PL_READ_MAX_QUEUE_DEPTH;
	return (unsigned)d;
}

static int make_schema(const char **names, size_t n, struct pbex_schema **ret)
{
	if (!n)
		return 0;
	size_t *lens = calloc(n, sizeof(*lens));
	if (!lens)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		lens[i] = strlen(names[i]);
	*ret = pbex_schema_create(names, lens, n);
	free(lens);
	return *ret ? 0 : -ENOMEM;
}

/* The default of a feature as an Example holding only it, every element of its shape given. */
static int encode_default(const struct manifest_feature *f, struct pbex_enc *e)
{
	const struct manifest_default *d = f->dflt;
	int64_t elems = 1;
	for (unsigned k = 0; k < f->rank; k++)
		elems *= f->shape[k];
	size_t n = (size_t)elems, one = d->n == 1 ? 1 : 0;
	size_t es = f->deser == MANIFEST_DESER_INT     ? sizeof(int64_t)
		    : f->deser == MANIFEST_DESER_FLOAT ? sizeof(float)
						       : sizeof(void *) + sizeof(size_t);
	uint8_t *tmp = malloc(n * es + 1);
	if (!tmp)
		return -ENOMEM;
	pbex_enc_reset(e, false);
	if (f->deser == MANIFEST_DESER_INT) {
		int64_t *v = (int64_t *)(void *)tmp;
		for (size_t k = 0; k < n; k++)
			v[k] = d->ints[one ? 0 : k];
		pbex_enc_add_int64s(e, f->name, v, n);
	} else if (f->deser == MANIFEST_DESER_FLOAT) {
		float *v = (float *)(void *)tmp;
		for (size_t k = 0; k < n; k++)
			v[k] = d->floats[one ? 0 : k];
		pbex_enc_add_floats(e, f->name, v, n);
	} else {
		const void **v = (const void **)(void *)tmp;
		size_t *lens = (size_t *)(void *)(v + n);
		for (size_t k = 0; k < n; k++) {
			v[k] = d->strs[one ? 0 : k];
			lens[k] = d->str_lens[one ? 0 : k];
		}
		pbex_enc_add_bytes(e, f->name, v, lens, n);
	}
	free(tmp);
	return pbex_enc_finish(e);
}

/* plan->dflt: each context feature's default, decoded as a record's feature would be. */
static int make_defaults(struct pl_plan *plan, const char **names, struct io_error *err)
{
	const struct manifest *m = plan->ds->manifest;
	plan->dflt = calloc(plan->n_ctx + 1, sizeof(*plan->dflt));
	plan->dflt_rec = calloc(plan->n_ctx + 1, sizeof(*plan->dflt_rec));
	plan->dflt_len = calloc(plan->n_ctx + 1, sizeof(*plan->dflt_len));
	if (!plan->dflt || !plan->dflt_rec || !plan->dflt_len)
		return -ENOMEM;
	struct pbex_enc e;
	pbex_enc_init(&e);
	int r = 0;
	for (size_t k = 0; r == 0 && k < plan->n_ctx; k++) {
		const struct manifest_feature *f = &m->features[manifest_find(m, names[k])];
		if (!f->dflt)
			continue;
		r = encode_default(f, &e);
		if (r < 0)
			break;
		plan->dflt_rec[k] = malloc(e.len + 1);
		if (!plan->dflt_rec[k]) {
			r = -ENOMEM;
			break;
		}
		memcpy(plan->dflt_rec[k], e.buf, e.len);
		plan->dflt_len[k] = e.len;
		size_t len = strlen(f->name);
		const char *name = f->name;
		struct pbex_schema *one = pbex_schema_create(&name, &len, 1);
		if (!one) {
			r = -ENOMEM;
			break;
		}
		r = pbex_decode_example(one, plan->dflt_rec[k], e.len, &plan->dflt[k], err);
		pbex_schema_destroy(one);
		plan->any_dflt = true;
	}
	pbex_enc_fini(&e);
	return r;
}

static int compile(const struct pl_spec *spec, struct pl_plan *plan, struct io_error *err)
{
	int r = open_dataset(spec, plan, err);
	if (r < 0)
		return r;
	if (spec->global_shuffle && plan->ds->manifest->compression != TFR_COMPRESSION_NONE) {
		io_error_set(err,
			     "args.shuffle: \"global\" reads records by offset, and the dataset is "
			     "compressed (%s): an offset inside a compressed stream needs "
			     "everything "
			     "before it inflated. Use the shuffle buffer (shuffle true), or write "
			     "the "
			     "files uncompressed",
			     tfr_compression_name(plan->ds->manifest->compression));
		return -EINVAL;
	}
	/* a record is a row: the batches of an epoch follow from its records */
	if (spec->type == PL_LOADER_INDEPENDENT && !spec->multi_load)
		count_ahead(plan);
	if (spec->multi_load && plan->sequence_example) {
		io_error_set(err, "args.multi_load: true needs a dataset without variable-length "
				  "features (its manifest has allow_var_len: true)");
		return -EINVAL;
	}
	plan->n_primary = spec->n_primary;
	plan->n_out = spec->n_primary + spec->n_secondary;
	plan->out = calloc(plan->n_out, sizeof(*plan->out));
	const char **names[2];
	names[0] = calloc(spec->n_primary + 1, sizeof(char *));
	names[1] = calloc(spec->n_primary + 1, sizeof(char *));
	int *var_axis = calloc(plan->n_out + 1, sizeof(int));
	if (!plan->out || !names[0] || !names[1] || !var_axis) {
		r = -ENOMEM;
		goto out;
	}
	size_t n_ctx = 0, n_lists = 0;
	for (size_t i = 0; i < spec->n_primary; i++) {
		r = add_primary(plan, i, &spec->primary[i], names, &n_ctx, &n_lists, err);
		if (r < 0)
			goto out;
		var_axis[i] = plan->out[i].feat->var_len || plan->out[i].var_count ? 0 : -1;
	}
	for (size_t i = 0; i < spec->n_secondary; i++) {
		size_t k = spec->n_primary + i;
		r = add_const(plan, k, i, &spec->secondary[i], err);
		if (r < 0)
			goto out;
		int from = plan->out[k].shape_from;
		var_axis[k] = from >= 0 ? var_axis[from] : -1;
	}
	r = add_steps(spec, plan, var_axis, err);
	if (r < 0)
		goto out;
	if (spec->type != PL_LOADER_INDEPENDENT) {
		/* a row is a window: axis 0 is its length (semantics doc, "Sequence loaders") */
		for (size_t i = 0; i < plan->n_out; i++) {
			struct pl_out *o = &plan->out[i];
			if (o->row_rank == 0) {
				io_error_set(err,
					     "tensor \"%s\": a %s loader joins records along axis "
					     "0, "
					     "so every tensor needs at least one dimension",
					     o->name, pl_loader_type_name(spec->type));
				r = -EINVAL;
				goto out;
			}
			int64_t d0 = -1;
			if (spec->min_window == spec->max_window) {
				if (spec->type == PL_LOADER_CONTINUOUS_SEQUENCE)
					d0 = spec->min_window;
				else if (o->row_shape[0] >= 0)
					d0 = spec->min_window * o->row_shape[0];
			}
			o->row_shape[0] = d0;
			var_axis[i] = d0 < 0 ? 0 : -1;
		}
	}
	if (spec->padding) {
		r = add_padding(spec, plan, err);
		if (r < 0)
			goto out;
	}
	for (size_t i = 0; i < plan->n_out; i++) {
		struct pl_out *o = &plan->out[i];
		o->ragged = !o->pad && var_axis[i] == 0;
		o->measure = o->dtype == MANIFEST_DTYPE_STRING && !o->img;
		for (unsigned d = 0; d < o->row_rank; d++)
			if (o->row_shape[d] < 0)
				o->measure = true;
		if (o->row_rank + 1 > PL_MAX_RANK) {
			io_error_set(err,
				     "tensor \"%s\": %u dimensions with the batch axis (at most "
				     "%d)",
				     o->name, o->row_rank + 1, PL_MAX_RANK);
			r = -EINVAL;
			goto out;
		}
		o->direct = spec->type == PL_LOADER_INDEPENDENT && o->src == PL_OUT_FEATURE &&
			    !o->img && !o->box_of && !o->in_lists && o->n_steps == 0 && !o->pad &&
			    !o->measure && o->dtype != MANIFEST_DTYPE_STRING;
		o->native = o->direct && ((o->feat->deser == MANIFEST_DESER_INT &&
					   o->dtype == MANIFEST_DTYPE_INT64) ||
					  (o->feat->deser == MANIFEST_DESER_FLOAT &&
					   o->dtype == MANIFEST_DTYPE_FLOAT32));
		o->str_direct = spec->type == PL_LOADER_INDEPENDENT && o->src == PL_OUT_FEATURE &&
				!o->in_lists && !o->var_count && o->n_steps == 0 && !o->pad &&
				o->dtype == MANIFEST_DTYPE_STRING &&
				o->feat->deser == MANIFEST_DESER_STRING;
		o->list_direct = spec->type == PL_LOADER_INDEPENDENT && o->src == PL_OUT_FEATURE &&
				 o->in_lists && o->n_steps == 0 && o->ragged && o->step_elems > 0 &&
				 !o->box_of &&
				 ((o->feat->deser == MANIFEST_DESER_INT &&
				   o->dtype == MANIFEST_DTYPE_INT64) ||
				  (o->feat->deser == MANIFEST_DESER_FLOAT &&
				   o->dtype == MANIFEST_DTYPE_FLOAT32));
		plan->measure |= o->measure;
	}
	plan->n_ctx = n_ctx;
	plan->n_lists = n_lists;
	plan->all_native = !plan->sequence_example && plan->n_out > 0;
	for (size_t i = 0; i < plan->n_out; i++)
		plan->all_native &= plan->out[i].native;
	/* what a projected record keeps (the record cache's key): the kind, then the names */
	uint64_t pf = fp_mix(0x70726f6a, plan->sequence_example);
	for (size_t i = 0; i < n_ctx; i++)
		pf = fp_str(pf, names[0][i], strlen(names[0][i]));
	pf = fp_mix(pf, n_ctx);
	for (size_t i = 0; i < n_lists; i++)
		pf = fp_str(pf, names[1][i], strlen(names[1][i]));
	plan->proj_fp = pf | 1; /* never 0: the key of records kept whole */
	r = make_schema(names[0], n_ctx, &plan->ctx);
	if (r == 0)
		r = make_schema(names[1], n_lists, &plan->lists);
	if (r == 0)
		r = make_defaults(plan, names[0], err);
out:
	free(var_axis);
	free(names[0]);
	free(names[1]);
	return r;
}

int pl_plan_create(const struct pl_spec *spec, const struct io_creds *creds,
		   struct pl_plan **ret_plan, struct io_error *err)
{
	struct pl_plan *plan = calloc(1, sizeof(*plan));
	if (!plan)
		return -ENOMEM;
	char why[256];
	if (creds && !io_creds_usable(creds, why, sizeof(why))) {
		io_error_set(err, "%s", why);
		free(plan);
		return -EPERM;
	}
	if (creds && io_creds_copy(&plan->own_creds, creds) < 0) {
		free(plan);
		return -ENOMEM;
	}
	plan->creds = creds ? &plan->own_creds : NULL;
	plan->cfg = *spec;
	plan->cfg.name = NULL;
	plan->cfg.data_dir = plan->cfg.manifest_file = plan->cfg.list_file = NULL;
	plan->cfg.pattern = NULL;
	plan->cfg.primary = NULL;
	plan->cfg.secondary = NULL;
	plan->cfg.steps = NULL;
	plan->cfg.paddings = NULL;
	int r = compile(spec, plan, err);
	if (r < 0) {
		pl_plan_destroy(plan);
		return r;
	}
	plan->cycle = (unsigned)pl_spec_cycle(spec);
	if (plan->cycle < 1)
		plan->cycle = 1;
	plan->read_depth = read_depth(spec, plan->cycle);
	int64_t rb = pl_spec_read_buffer_bytes(spec);
	if (rb < 65536)
		rb = 65536; /* 0 ("no buffering") still reads in 64 KiB pieces */
	if (rb > (64 << 20))
		rb = 64 << 20;
	plan->read_chunk = ((size_t)rb + 4095) & ~(size_t)4095;
	int64_t pf = pl_spec_prefetch(spec);
	plan->prefetch = pf < 1 ? 1 : (unsigned)pf;
	plan->parses = (unsigned)pl_spec_parallel_parses(spec);
	for (size_t i = 0; i < spec->n_steps; i++) { /* the image steps' arguments */
		const struct pl_step *st = &spec->steps[i];
		if (st->type == PL_STEP_BOXES) { /* the image it follows, the format, the unit */
			plan->steps_fp = fp_str(plan->steps_fp, st->tensor, strlen(st->tensor));
			plan->steps_fp = fp_str(plan->steps_fp, st->img.box_image,
						strlen(st->img.box_image));
			plan->steps_fp = fp_mix(plan->steps_fp,
						0xb0 + st->img.box_xyxy * 2u + st->img.box_pixels);
			continue;
		}
		if (!pl_step_is_image(st->type))
			continue;
		const struct pl_image_args *a = &st->img;
		double d[] = { a->scale[0], a->scale[1], a->ratio[0], a->ratio[1], a->probability };
		uint64_t v[] = {
			st->type,     a->channels,   a->dct_fast,     (uint64_t)a->max_pixels,
			a->size[0],   a->size[1],    a->shorter_side, a->interp,
			a->axis,      a->n_mean,     a->dtype,	      a->chw,
			a->draw_step, a->scaled_idct
		};
		plan->steps_fp = fp_str(plan->steps_fp, st->tensor, strlen(st->tensor));
		for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); k++)
			plan->steps_fp = fp_mix(plan->steps_fp, v[k]);
		plan->steps_fp = fp_str(plan->steps_fp, (const char *)d, sizeof(d));
		plan->steps_fp =
			fp_str(plan->steps_fp, (const char *)a->mean, sizeof(float) * a->n_mean);
		plan->steps_fp =
			fp_str(plan->steps_fp, (const char *)a->std, sizeof(float) * a->n_mean);
		plan->steps_fp = fp_str(plan->steps_fp, (const char *)a->jitter, sizeof(a->jitter));
		for (size_t k = 0; k < 4; k++)
			plan->steps_fp = fp_mix(plan->steps_fp, a->jitter_on[k]);
	}
	plan->fingerprint = plan_fingerprint(plan, 0x736c75696365ull);
	plan->fingerprint2 = plan_fingerprint(plan, 0x9e3779b97f4a7c15ull);
	*ret_plan = plan;
	return 0;
}
