/* SPDX-License-Identifier: Apache-2.0 */
/* sluicectl: the resource model of a pipeline's stats (daemon/pipeline/model.h), for stats and top.
 */
#ifndef SLUICE_TOOLS_SLUICECTL_REPORT_H
#define SLUICE_TOOLS_SLUICECTL_REPORT_H

#include <stdio.h>

#include "daemon/pipeline/model.h"
#include "sluice/sluice.h"
#include "tools/common/jsonout.h"

#define REPORT_MAX_READERS 256

/* The model's input and its readers, from a stats reading. */
struct report_window {
	struct pl_model_in in;
	struct pl_model_reader readers[REPORT_MAX_READERS];
	uint64_t reader_ids[REPORT_MAX_READERS];
	/* the knobs as the tuner left them (docs/plumber.md, "Autotuning"); have_knobs: the
	   daemon said (an older one does not) */
	bool have_knobs, autotune;
	int64_t prefetch, prefetch_max, read_chunk, read_depth, weight, moves, alloc_per_s, knobs;
	int64_t read_chunk_max, read_depth_max; /* the tuner's bounds (ram_budget) */
};

/*
 * The window between two stats readings of one pipeline (prev NULL, or of an earlier run of
 * the pipeline: since it started), filled in w. 0, or -EINVAL when now lacks the model's keys
 * (a sluiced older than the model).
 */
int report_window(const struct sluice_stats *now, const struct sluice_stats *prev,
		  struct report_window *w);
/* The model for the human (a few lines and a table per stage), and as JSON ("model": {...}). */
void report_print(FILE *f, const struct report_window *w, const struct pl_model *m);
void report_json(struct jsonout *j, const struct report_window *w, const struct pl_model *m);

/* Both for a single reading: the model since the pipeline started (nothing if it cannot). */
void report_stats_print(const struct sluice_stats *s);
void report_stats_json(const struct sluice_stats *s, struct jsonout *j);

#endif
