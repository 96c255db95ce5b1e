/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: pl_spec_parse on any bytes; what parses must satisfy every documented rule. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/pipeline/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* abort() makes the fuzzer report the input. */
#define CHECK(cond)              \
	do {                     \
		if (!(cond))     \
			abort(); \
	} while (0)

static bool knob_ok(int64_t v, int64_t lo, int64_t hi)
{
	return v == PL_AUTO || (v >= lo && v <= hi);
}

static bool names_tensor(const struct pl_spec *s, const char *name, bool primary_only)
{
	size_t i;

	for (i = 0; i < s->n_primary; i++)
		if (strcmp(s->primary[i].to_name, name) == 0)
			return true;
	for (i = 0; !primary_only && i < s->n_secondary; i++)
		if (strcmp(s->secondary[i].to_name, name) == 0)
			return true;
	return false;
}

static void check_value(const struct pl_value *v)
{
	CHECK(v->kind <= PL_VALUE_STRING);
	CHECK((v->kind == PL_VALUE_STRING) == (v->s != NULL));
	if (v->s)
		CHECK(strlen(v->s) == v->s_len);
}

/*
 * Invariants checked:
 * - a failed parse returns a negative errno, writes a message, and leaves *ret_spec alone;
 * - a parsed spec keeps every range, default and reference rule of docs/pipeline-spec.md.
 * The input is bounded to keep the quadratic reference checks here cheap.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pl_spec *s = (struct pl_spec *)&size;
	struct io_error err = { { 0 } };
	size_t i, j;
	unsigned d;
	int r;

	if (size > (1u << 16))
		return 0;
	r = pl_spec_parse((const char *)data, size, "<fuzz>", &s, &err);
	if (r < 0) {
		CHECK(s == (struct pl_spec *)&size && err.msg[0] != '\0');
		return 0;
	}
	CHECK(r == 0);
	CHECK(s->type <= PL_LOADER_DISCRETE_SEQUENCE);
	CHECK(s->dataset_type == PL_DATASET_DIR ? s->data_dir && *s->data_dir
						: s->manifest_file && s->list_file);
	CHECK(s->target_batch_size >= 1 && s->target_batch_size <= INT32_MAX);
	CHECK(s->epochs == PL_NULL || s->epochs >= 1);
	CHECK(knob_ok(s->num_parallel_reads, 1, 1024) && knob_ok(s->num_parallel_parses, 1, 1024));
	CHECK(knob_ok(s->num_read_buffer_bytes, 0, 1 << 30) && knob_ok(s->num_prefetch, 0, 1024));
	CHECK(knob_ok(s->num_interleave_out_buffer_elements, 1, 1 << 20));
	CHECK(knob_ok(s->num_interleave_in_buffer_elements, 1, 1 << 20));
	CHECK(pl_spec_parallel_reads(s) >= 1 && pl_spec_parallel_parses(s) >= 1);
	CHECK(s->cycle_length == PL_CYCLE_UNSET ||
	      (!s->shuffle && s->cycle_length >= 1 && s->cycle_length <= 1024));
	CHECK(pl_spec_cycle(s) >= 1 && pl_spec_cycle(s) <= 1024);
	CHECK(pl_spec_prefetch(s) >= 0 && pl_spec_read_buffer_bytes(s) >= 0);
	CHECK(s->ram_budget == PL_RAM_BUDGET_UNSET ||
	      (s->ram_budget >= PL_RAM_BUDGET_MIN && s->ram_budget <= PL_RAM_BUDGET_MAX));
	if (s->shuffle)
		CHECK(s->num_shuffle_buffer_elements >= 1 && s->num_filenames_shuffle_buffer >= 1 &&
		      s->num_mix_files >= 1 && s->num_mix_files <= 1024);
	else
		CHECK(s->num_shuffle_buffer_elements == 1 && s->num_filenames_shuffle_buffer == 1 &&
		      s->num_mix_files == 1);
	CHECK(s->n_primary >= 1);
	for (i = 0; i < s->n_primary; i++)
		CHECK(*s->primary[i].from_name && *s->primary[i].to_name);
	for (i = 0; i < s->n_primary + s->n_secondary; i++) {
		const char *a = i < s->n_primary ? s->primary[i].to_name
						 : s->secondary[i - s->n_primary].to_name;

		for (j = i + 1; j < s->n_primary + s->n_secondary; j++)
			CHECK(strcmp(a, j < s->n_primary ? s->primary[j].to_name
							 : s->secondary[j - s->n_primary].to_name));
	}
	for (i = 0; i < s->n_secondary; i++) {
		const struct pl_secondary *x = &s->secondary[i];

		CHECK(x->rank < PL_MAX_RANK);
		for (d = 0; d < x->rank; d++)
			CHECK(x->shape[d] >= 0);
		if (x->shape_from)
			CHECK(names_tensor(s, x->shape_from, true));
		if (x->dtype_from)
			CHECK(names_tensor(s, x->dtype_from, true));
		else
			CHECK(manifest_dtype_size(x->dtype) > 0 ||
			      x->dtype == MANIFEST_DTYPE_STRING);
		check_value(&x->value);
	}
	for (i = 0; i < s->n_steps; i++) {
		const struct pl_step *st = &s->steps[i];

		CHECK(names_tensor(s, st->tensor, false) && st->slice_text);
		CHECK(st->n_dims >= 1 && st->n_dims < PL_MAX_RANK);
		for (d = 0; d < st->n_dims; d++)
			CHECK(st->dims[d].kind == PL_SLICE_INDEX || !st->dims[d].has_step ||
			      st->dims[d].step != 0);
	}
	CHECK(s->padding || s->n_padding == 0);
	for (i = 0; i < s->n_padding; i++) {
		const struct pl_padding *p = &s->paddings[i];

		CHECK(names_tensor(s, p->tensor, false) && p->rank < PL_MAX_RANK);
		for (d = 0; d < p->rank; d++)
			CHECK(p->shape[d] >= -1);
		for (j = i + 1; j < s->n_padding; j++)
			CHECK(strcmp(p->tensor, s->paddings[j].tensor) != 0);
		check_value(&p->value);
	}
	if (s->multi_load)
		CHECK(s->type == PL_LOADER_INDEPENDENT && !s->n_secondary && !s->n_steps &&
		      !s->padding);
	if (s->type != PL_LOADER_INDEPENDENT)
		CHECK(s->min_window >= 1 && s->max_window >= s->min_window);
	CHECK(s->stride == PL_NULL || (s->type == PL_LOADER_CONTINUOUS_SEQUENCE && s->stride >= 1));
	CHECK(s->on_corrupt <= PL_ON_CORRUPT_SKIP_FILE);
	if (s->has_shard)
		CHECK(s->shard_count >= 1 && s->shard_index < s->shard_count);
	if (s->name)
		CHECK(strlen(s->name) >= 1 && strlen(s->name) <= 128);
	pl_spec_destroy(s);
	return 0;
}
