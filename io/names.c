/* SPDX-License-Identifier: Apache-2.0 */
/* Names given twice. */
#include "names.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int cmp_name_idx(const void *a, const void *b)
{
	const struct io_name_idx *x = a, *y = b;
	int r = strcmp(x->name, y->name);

	if (r)
		return r;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int cmp_name(const void *key, const void *b)
{
	return strcmp(key, ((const struct io_name_idx *)b)->name);
}

bool io_names_find_duplicate(struct io_name_idx *v, size_t n, size_t *ret_dup, size_t *ret_orig)
{
	size_t i, first = 0, dup = SIZE_MAX, orig = 0;

	qsort(v, n, sizeof(*v), cmp_name_idx);
	for (i = 1; i < n; i++) {
		if (strcmp(v[i].name, v[i - 1].name) != 0) {
			first = i;
			continue;
		}
		if (v[i].idx < dup) {
			dup = v[i].idx;
			orig = v[first].idx;
		}
	}
	if (dup == SIZE_MAX)
		return false;
	*ret_dup = dup;
	*ret_orig = orig;
	return true;
}

const struct io_name_idx *io_names_find(const struct io_name_idx *v, size_t n, const char *name)
{
	return bsearch(name, v, n, sizeof(*v), cmp_name);
}
