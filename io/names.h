/* SPDX-License-Identifier: Apache-2.0 */
/* Names given twice (manifest features, spec tensors, list files): which, and where first. */
#ifndef SLUICE_IO_NAMES_H
#define SLUICE_IO_NAMES_H

#include <stdbool.h>
#include <stddef.h>

/* A name and where it was given (an index into the caller's list). */
struct io_name_idx {
	const char *name;
	size_t idx;
};

/*
 * Sort v[0..n) by (name, idx). If a name occurs twice: true, *ret_dup the smallest idx that is a
 * second (or later) occurrence of a name, and *ret_orig the first occurrence of that name (the
 * pair an error message names). Else false, and the out-parameters are not written.
 */
bool io_names_find_duplicate(struct io_name_idx *v, size_t n, size_t *ret_dup, size_t *ret_orig);
/* In v sorted by io_names_find_duplicate: an entry called name, or NULL. */
const struct io_name_idx *io_names_find(const struct io_name_idx *v, size_t n, const char *name);

#endif
