/* SPDX-License-Identifier: Apache-2.0 */
/* Stage "files": the epoch's file order (a shuffle buffer over the shard's file names). */
#include "files.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

struct pl_files {
	struct pl_files_opts o;
	uint32_t *order; /* this epoch's */
	size_t next;
};

int pl_files_create(const struct pl_files_opts *opts, struct pl_files **ret)
{
	struct pl_files *f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->o = *opts;
	f->order = calloc(opts->n_files ? opts->n_files : 1, sizeof(*f->order));
	if (!f->order) {
		free(f);
		return -ENOMEM;
	}
	*ret = f;
	return 0;
}

void pl_files_destroy(struct pl_files *f)
{
	if (!f)
		return;
	free(f->order);
	free(f);
}

/* The file order of an epoch: a shuffle buffer over the shard's files (semantics doc). */
static void epoch_order(struct pl_files *f, uint64_t epoch)
{
	const uint32_t *files = f->o.files;
	size_t n = f->o.n_files;
	if (!f->o.shuffle) {
		memcpy(f->order, files, n * sizeof(*f->order));
		return;
	}
	struct pl_rng rng;
	pl_rng_init(&rng, f->o.seed, epoch, PL_STREAM_FILES, 0);
	size_t b = (size_t)f->o.buffer;
	if (b > n)
		b = n;
	uint32_t *buf = malloc((b ? b : 1) * sizeof(*buf));
	size_t len = 0, in = 0, out = 0;
	if (!buf) { /* keep going in file order rather than fail: only the order differs */
		memcpy(f->order, files, n * sizeof(*f->order));
		return;
	}
	while (in < b)
		buf[len++] = files[in++];
	while (len > 0) {
		size_t i = (size_t)pl_rng_below(&rng, len);
		f->order[out++] = buf[i];
		if (in < n)
			buf[i] = files[in++];
		else
			buf[i] = buf[--len];
	}
	free(buf);
}

void pl_files_begin_epoch(struct pl_files *f, uint64_t epoch)
{
	unsigned prev = pl_prof_enter(f->o.prof, PL_STAGE_FILES);
	epoch_order(f, epoch);
	f->next = 0;
	f->o.st->elems_in += f->o.n_files;
	f->o.st->capacity = f->o.n_files;
	f->o.st->buffered = f->o.n_files;
	pl_prof_leave(f->o.prof, prev);
}

int pl_files_next(struct pl_files *f, uint32_t *ret_file)
{
	if (f->next >= f->o.n_files)
		return 0;
	*ret_file = f->order[f->next++];
	f->o.st->elems_out++;
	f->o.st->buffered = f->o.n_files - f->next;
	return 1;
}
