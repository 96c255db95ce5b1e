/* SPDX-License-Identifier: Apache-2.0 */
/* sluicectl stats --prometheus: pipelines' counters in Prometheus' text exposition format. */
#include "sluicectl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice/sluice.h"

/*
 * Every key of STATS becomes a sample: "KEY" is sluice_KEY{pipeline="P"}, "stage.S.C" is
 * sluice_stage_C{pipeline="P",stage="S"} and "reader.ID.M" is sluice_reader_M{pipeline="P",
 * reader="ID"}. A metric's samples (of every pipeline) come together after its HELP and TYPE
 * lines, as the format requires. Levels are gauges; everything else only grows: counters.
 */

struct sample {
	char metric[96];
	char labels[640];
	int64_t value;
	size_t order; /* keeps the daemon's order within a metric */
};

static const char *const gauges[] = {
	"status",
	"readers",
	"shard_index",
	"shard_count",
	"ring_slots_used",
	"ring_slots",
	"ring_bytes_used",
	"ring_bytes",
	"ring_bytes_committed",
	"cache_level",
	"cache_files",
	"cache_bytes",
	"cache_need_bytes",
	"cache_fits",
	"cache_memory",
	"cache_memory_used",
	"cache_entries",
	"epoch_batches",
	"io_uring",
	"direct_io",
	"reader_lag",
	"stage_buffered",
	"stage_capacity",
};

static bool is_gauge(const char *metric)
{
	for (size_t i = 0; i < sizeof(gauges) / sizeof(gauges[0]); i++)
		if (!strcmp(metric + strlen("sluice_"), gauges[i]))
			return true;
	return false;
}

/* "sluice_" and s with every byte outside [a-zA-Z0-9_] as '_'. */
static void metric_name(char *out, size_t cap, const char *s, size_t len)
{
	size_t n = (size_t)snprintf(out, cap, "sluice_");
	for (size_t i = 0; i < len && n + 1 < cap; i++) {
		char ch = s[i];
		bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			  (ch >= '0' && ch <= '9') || ch == '_';
		out[n++] = ok ? ch : '_';
	}
	out[n] = '\0';
}

/* A label value with \, " and newline escaped. */
static size_t label_value(char *out, size_t cap, const char *s, size_t len)
{
	size_t n = 0;
	for (size_t i = 0; i < len && n + 3 < cap; i++) {
		if (s[i] == '\\' || s[i] == '"' || s[i] == '\n') {
			out[n++] = '\\';
			out[n++] = s[i] == '\n' ? 'n' : s[i];
		} else {
			out[n++] = s[i];
		}
	}
	out[n] = '\0';
	return n;
}

static void to_sample(struct sample *sm, const char *pipeline, const char *key, int64_t v)
{
	char pv[300], sub[200];
	const char *kind = NULL, *rest = key, *dot;
	label_value(pv, sizeof(pv), pipeline, strlen(pipeline));
	if ((!strncmp(key, "stage.", 6) || !strncmp(key, "reader.", 7)) &&
	    (dot = strchr(strchr(key, '.') + 1, '.')) != NULL) {
		const char *first = strchr(key, '.') + 1;
		kind = key[0] == 's' ? "stage" : "reader";
		label_value(sub, sizeof(sub), first, (size_t)(dot - first));
		char m[128];
		snprintf(m, sizeof(m), "%s_%s", kind, dot + 1);
		metric_name(sm->metric, sizeof(sm->metric), m, strlen(m));
		snprintf(sm->labels, sizeof(sm->labels), "pipeline=\"%s\",%s=\"%s\"", pv, kind,
			 sub);
	} else {
		metric_name(sm->metric, sizeof(sm->metric), rest, strlen(rest));
		snprintf(sm->labels, sizeof(sm->labels), "pipeline=\"%s\"", pv);
	}
	sm->value = v;
}

static int by_metric(const void *a, const void *b)
{
	const struct sample *x = a, *y = b;
	int c = strcmp(x->metric, y->metric);
	return c ? c : (x->order > y->order) - (x->order < y->order);
}

static int prom_write(FILE *f, const struct sluice_stats *const *stats, size_t n)
{
	size_t total = 0, k = 0;
	for (size_t i = 0; i < n; i++)
		total += stats[i] ? sluice_stats_count(stats[i]) : 0;
	struct sample *sm = calloc(total + 1, sizeof(*sm));
	if (!sm)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		for (size_t j = 0; stats[i] && j < sluice_stats_count(stats[i]); j++) {
			int64_t v;
			const char *key = sluice_stats_at(stats[i], j, &v);
			to_sample(&sm[k], sluice_stats_name(stats[i]), key, v);
			sm[k].order = k;
			k++;
		}
	}
	qsort(sm, k, sizeof(*sm), by_metric);
	for (size_t i = 0; i < k; i++) {
		if (i == 0 || strcmp(sm[i].metric, sm[i - 1].metric) != 0) {
			bool gauge = is_gauge(sm[i].metric);
			fprintf(f, "# HELP %s sluiced's %s (sluicectl stats)\n", sm[i].metric,
				sm[i].metric + strlen("sluice_"));
			fprintf(f, "# TYPE %s %s\n", sm[i].metric, gauge ? "gauge" : "counter");
		}
		fprintf(f, "%s{%s} %" PRId64 "\n", sm[i].metric, sm[i].labels, sm[i].value);
	}
	free(sm);
	return ferror(f) ? -EIO : 0;
}

int prom_write_file(const char *path, const struct sluice_stats *const *stats, size_t n, char *msg,
		    size_t cap)
{
	if (!path) {
		int rc = prom_write(stdout, stats, n);
		if (rc == 0 && fflush(stdout) != 0)
			rc = -errno;
		if (rc < 0)
			snprintf(msg, cap, "writing the output: %s", strerror(-rc));
		return rc;
	}
	char tmp[4096];
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp)) {
		snprintf(msg, cap, "%s: path too long", path);
		return -ENAMETOOLONG;
	}
	FILE *f = fopen(tmp, "we");
	if (!f) {
		int e = errno;
		snprintf(msg, cap, "%s: %s", tmp, strerror(e));
		return -e;
	}
	int rc = prom_write(f, stats, n);
	if (rc == 0 && (fflush(f) != 0 || fsync(fileno(f)) != 0))
		rc = -errno;
	if (fclose(f) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) != 0)
		rc = -errno;
	if (rc < 0) {
		snprintf(msg, cap, "%s: %s", path, strerror(-rc));
		unlink(tmp);
	}
	return rc;
}
