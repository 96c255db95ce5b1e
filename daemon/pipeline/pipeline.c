/* SPDX-License-Identifier: Apache-2.0 */
/* placeholder until the engine lands: every entry point reports ENOSYS. */
#include "pipeline.h"

#include <errno.h>
#include <string.h>

void pl_pipeline_opts_init(struct pl_pipeline_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->size = sizeof(*opts);
}
int pl_pipeline_create(const struct pl_spec *spec, const struct pl_pipeline_opts *opts,
		       struct pl_pipeline **ret_p, struct io_error *err)
{
	io_error_set(err, "pipeline engine not built yet");
	return -ENOSYS;
}
void pl_pipeline_destroy(struct pl_pipeline *p) {}
size_t pl_pipeline_n_tensors(const struct pl_pipeline *p) { return 0; }
const struct pl_tensor_info *pl_pipeline_tensor(const struct pl_pipeline *p, size_t i) { return NULL; }
int pl_pipeline_next(struct pl_pipeline *p, int timeout_ms, struct pl_batch **ret_batch,
		     struct io_error *err) { return -ENOSYS; }
void pl_batch_release(struct pl_pipeline *p, struct pl_batch *b) {}
int pl_pipeline_save(const struct pl_pipeline *p, void *buf, size_t cap) { return -ENOSYS; }
void pl_pipeline_get_stats(const struct pl_pipeline *p, struct pl_stats *ret_stats)
{
	memset(ret_stats, 0, sizeof(*ret_stats));
}
