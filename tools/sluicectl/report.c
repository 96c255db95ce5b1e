/* SPDX-License-Identifier: Apache-2.0 */
/* sluicectl: the resource model of a pipeline's stats (report.h, docs/plumber.md). */
#include "report.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* A counter of a reading (0 when absent). */
static int64_t get(const struct sluice_stats *s, const char *key)
{
	int64_t v = 0;
	if (s)
		sluice_stats_get(s, key, &v);
	return v;
}

/* now's counter less prev's, 0 when it went back (a pipeline of that name made again). */
static uint64_t delta(const struct sluice_stats *now, const struct sluice_stats *prev,
		      const char *key)
{
	int64_t a = get(now, key), b = get(prev, key);
	return a > b ? (uint64_t)(a - b) : 0;
}

static void stage_deltas(const struct sluice_stats *now, const struct sluice_stats *prev,
			 struct pl_stage_stats *st, unsigned i)
{
	static const char *const names[] = { "elems_out", "cpu_ns", "wait_up_ns", "wait_down_ns" };
	uint64_t *fields[] = { &st->elems_out, &st->cpu_ns, &st->wait_up_ns, &st->wait_down_ns };
	char key[128];
	for (unsigned k = 0; k < 4; k++) {
		snprintf(key, sizeof(key), "stage.%s.%s", pl_stage_name(i), names[k]);
		*fields[k] = delta(now, prev, key);
	}
}

/* The readers of now ("reader.ID.taken", ...), each over its part of the window. */
static void readers(const struct sluice_stats *now, const struct sluice_stats *prev,
		    struct report_window *w)
{
	size_t n = 0;
	int64_t v;
	for (size_t i = 0; i < sluice_stats_count(now) && n < REPORT_MAX_READERS; i++) {
		const char *key = sluice_stats_at(now, i, &v);
		unsigned long long id;
		int end = 0;
		if (sscanf(key, "reader.%llu.taken%n", &id, &end) != 1 || key[end])
			continue;
		char k[96];
		snprintf(k, sizeof(k), "reader.%llu.attached_ns", id);
		uint64_t age = (uint64_t)get(now, k);
		struct pl_model_reader *r = &w->readers[n];
		snprintf(k, sizeof(k), "reader.%llu.taken", id);
		r->taken = delta(now, prev, k);
		snprintf(k, sizeof(k), "reader.%llu.wait_ns", id);
		r->wait_ns = delta(now, prev, k);
		r->window_ns = age; /* a reader new in the window: its part only */
		if (prev) {
			int64_t had;
			snprintf(k, sizeof(k), "reader.%llu.taken", id);
			if (sluice_stats_get(prev, k, &had) == 0)
				r->window_ns = 0; /* there before: the whole window */
		}
		w->reader_ids[n++] = id;
	}
	w->in.readers = w->readers;
	w->in.n_readers = n;
}

int report_window(const struct sluice_stats *now, const struct sluice_stats *prev,
		  struct report_window *w)
{
	memset(w, 0, sizeof(*w));
	int64_t v;
	if (sluice_stats_get(now, "uptime_ns", &v) < 0 || sluice_stats_get(now, "now_ns", &v) < 0)
		return -EINVAL;
	if (prev && get(prev, "uptime_ns") > get(now, "uptime_ns"))
		prev = NULL; /* not the same pipeline */
	struct pl_model_in *in = &w->in;
	in->wall_ns = prev ? delta(now, prev, "now_ns") : (uint64_t)get(now, "uptime_ns");
	in->batches = delta(now, prev, "batches_published");
	for (unsigned i = 0; i < PL_STAGE_COUNT_; i++)
		stage_deltas(now, prev, &in->st[i], i);
	in->read_wait_ns = delta(now, prev, "read_wait_ns");
	in->driver_cpu_ns = delta(now, prev, "driver_cpu_ns");
	in->pool_task_ns = delta(now, prev, "pool_task_ns");
	in->producer_wait_ns = delta(now, prev, "producer_wait_ns");
	in->commit_failures = delta(now, prev, "ring_commit_failures");
	in->workers = (unsigned)get(now, "workers");
	in->cpus = (double)get(now, "cpus_milli") / 1000;
	in->host_cpus = (unsigned)get(now, "host_cpus");
	if (prev && in->wall_ns && get(now, "host_busy_ns") && get(prev, "host_busy_ns")) {
		/* between two readings: the cores the host's other processes left, if fewer */
		double others = ((double)delta(now, prev, "host_busy_ns") -
				 (double)delta(now, prev, "sluiced_cpu_ns")) /
				(double)in->wall_ns;
		double free = in->host_cpus - (others > 0 ? others : 0);
		if (free < in->cpus)
			in->cpus = free > 0.25 ? free : 0.25;
	}
	readers(now, prev, w);
	w->have_knobs = sluice_stats_get(now, "tune_prefetch", &v) == 0;
	w->autotune = get(now, "autotune") != 0;
	w->prefetch = get(now, "tune_prefetch");
	w->prefetch_max = get(now, "tune_prefetch_max");
	w->read_chunk = get(now, "tune_read_buffer_bytes");
	w->weight = get(now, "tune_weight");
	w->moves = get(now, "tune_moves");
	w->alloc_per_s = get(now, "tune_alloc_per_s");
	w->knobs = get(now, "tune_knobs");
	w->read_depth = get(now, "tune_read_depth");
	w->read_chunk_max = get(now, "tune_read_buffer_max");
	w->read_depth_max = get(now, "tune_read_depth_max");
	return 0;
}

/* The knobs' line: what is in flight, how it reads, its share of the pool, who set them. */
static void print_knobs(FILE *f, const struct report_window *w)
{
	if (!w->have_knobs)
		return;
	fprintf(f, "  knobs: %lld batch jobs in flight (%s), reads of %lld KiB (%s)",
		(long long)w->prefetch, w->knobs & 1 ? "tuned" : "fixed",
		(long long)(w->read_chunk >> 10), w->knobs & 2 ? "tuned" : "fixed");
	fprintf(f, ", %lld in flight per file (%s)", (long long)w->read_depth,
		w->knobs & 4 ? "tuned" : "fixed");
	if (w->autotune)
		fprintf(f, ", pool weight %lld, %lld tuner moves; allocated %lld batches/s",
			(long long)w->weight, (long long)w->moves, (long long)w->alloc_per_s);
	else
		fprintf(f, " (sluiced --autotune=false)");
	fputc('\n', f);
}

static const char *bottleneck(const struct pl_model *m)
{
	return m->bottleneck >= 0 ? pl_stage_name((unsigned)m->bottleneck) : NULL;
}

void report_print(FILE *f, const struct report_window *w, const struct pl_model *m)
{
	const struct pl_model_in *in = &w->in;
	fprintf(f, "\nmodel over %.1f s (docs/plumber.md):\n", (double)in->wall_ns / 1e9);
	fprintf(f, "  delivered %.1f batches/s using %.2f cores", m->batches_per_s, m->cores);
	if (m->demand_per_s > 0)
		fprintf(f, "; its slowest reader asks %.1f batches/s\n", m->demand_per_s);
	else
		fprintf(f, "; its readers take all they get\n");
	if (m->limit == PL_LIMIT_UNKNOWN) {
		fprintf(f, "  no batch in the window: nothing to predict\n");
		return;
	}
	fprintf(f,
		"  predicted at most %.1f batches/s with %u workers on %.2f cores, %.1f with "
		"all %u cores of the host\n",
		m->predicted_per_s, in->workers, in->cpus, m->predicted_all_per_s, in->host_cpus);
	const char *b = bottleneck(m);
	fprintf(f, "  limit: %s%s%s%s\n", pl_limit_name(m->limit), b ? " (stage " : "", b ? b : "",
		b ? ")" : "");
	print_knobs(f, w);
	fprintf(f, "%-11s %12s %11s %14s %7s %7s\n", "STAGE", "ELEMS/S", "PER_BATCH",
		"CPU_US/BATCH", "CORES", "SHARE");
	for (unsigned i = 0; i < PL_STAGE_COUNT_; i++) {
		const struct pl_model_stage *s = &m->stages[i];
		if (!s->elems_per_s && !s->cores)
			continue;
		fprintf(f, "%-11s %12.1f %11.2f %14.1f %7.3f %6.1f%%%s\n", pl_stage_name(i),
			s->elems_per_s, s->per_batch, s->cpu_per_batch_ns / 1e3, s->cores,
			s->share * 100, (int)i == m->bottleneck ? "  <- bottleneck" : "");
	}
}

static void key(struct jsonout *j, const char *k, bool first)
{
	if (!first)
		jsonout_raw(j, ", ", 2);
	jsonout_str(j, k, strlen(k));
	jsonout_raw(j, ": ", 2);
}

static void num(struct jsonout *j, const char *k, double v)
{
	key(j, k, false);
	jsonout_double(j, v);
}

void report_json(struct jsonout *j, const struct report_window *w, const struct pl_model *m)
{
	jsonout_char(j, '{');
	key(j, "window_s", true);
	jsonout_double(j, (double)w->in.wall_ns / 1e9);
	num(j, "batches_per_s", m->batches_per_s);
	num(j, "cores", m->cores);
	num(j, "demand_per_s", m->demand_per_s);
	num(j, "predicted_per_s", m->predicted_per_s);
	num(j, "predicted_all_per_s", m->predicted_all_per_s);
	num(j, "workers", w->in.workers);
	num(j, "cpus", w->in.cpus);
	num(j, "host_cpus", w->in.host_cpus);
	key(j, "limit", false);
	jsonout_str(j, pl_limit_name(m->limit), strlen(pl_limit_name(m->limit)));
	key(j, "bottleneck", false);
	const char *b = bottleneck(m);
	if (b)
		jsonout_str(j, b, strlen(b));
	else
		jsonout_cstr(j, "null");
	key(j, "stages", false);
	jsonout_char(j, '{');
	for (unsigned i = 0; i < PL_STAGE_COUNT_; i++) {
		const struct pl_model_stage *s = &m->stages[i];
		key(j, pl_stage_name(i), i == 0);
		jsonout_char(j, '{');
		key(j, "elems_per_s", true);
		jsonout_double(j, s->elems_per_s);
		num(j, "per_batch", s->per_batch);
		num(j, "cpu_per_batch_us", s->cpu_per_batch_ns / 1e3);
		num(j, "cores", s->cores);
		num(j, "share", s->share);
		jsonout_char(j, '}');
	}
	jsonout_char(j, '}');
	if (w->have_knobs) {
		key(j, "knobs", false);
		jsonout_char(j, '{');
		key(j, "autotune", true);
		jsonout_cstr(j, w->autotune ? "true" : "false");
		key(j, "prefetch_tuned", false);
		jsonout_cstr(j, w->knobs & 1 ? "true" : "false");
		key(j, "read_buffer_tuned", false);
		jsonout_cstr(j, w->knobs & 2 ? "true" : "false");
		num(j, "prefetch", (double)w->prefetch);
		num(j, "prefetch_max", (double)w->prefetch_max);
		num(j, "read_buffer_bytes", (double)w->read_chunk);
		key(j, "read_depth_tuned", false);
		jsonout_cstr(j, w->knobs & 4 ? "true" : "false");
		num(j, "read_depth", (double)w->read_depth);
		num(j, "read_buffer_max", (double)w->read_chunk_max);
		num(j, "read_depth_max", (double)w->read_depth_max);
		num(j, "weight", (double)w->weight);
		num(j, "moves", (double)w->moves);
		num(j, "alloc_per_s", (double)w->alloc_per_s);
		jsonout_char(j, '}');
	}
	key(j, "readers", false);
	jsonout_char(j, '{');
	for (size_t i = 0; i < w->in.n_readers; i++) {
		const struct pl_model_reader *r = &w->readers[i];
		char id[32];
		snprintf(id, sizeof(id), "%" PRIu64, w->reader_ids[i]);
		key(j, id, i == 0);
		uint64_t win =
			r->window_ns && r->window_ns < w->in.wall_ns ? r->window_ns : w->in.wall_ns;
		jsonout_char(j, '{');
		key(j, "taken_per_s", true);
		jsonout_double(j, win ? (double)r->taken / ((double)win / 1e9) : 0);
		num(j, "waiting", win ? (double)r->wait_ns / (double)win : 0);
		jsonout_char(j, '}');
	}
	jsonout_raw(j, "}}", 2);
}

void report_stats_print(const struct sluice_stats *s)
{
	struct report_window *w = malloc(sizeof(*w));
	struct pl_model m;
	if (w && report_window(s, NULL, w) == 0) {
		pl_model_fit(&w->in, &m);
		report_print(stdout, w, &m);
	}
	free(w);
}

void report_stats_json(const struct sluice_stats *s, struct jsonout *j)
{
	struct report_window *w = malloc(sizeof(*w));
	struct pl_model m;
	if (w && report_window(s, NULL, w) == 0) {
		pl_model_fit(&w->in, &m);
		jsonout_raw(j, ", ", 2);
		jsonout_str(j, "model", 5);
		jsonout_raw(j, ": ", 2);
		report_json(j, w, &m);
	}
	free(w);
}
