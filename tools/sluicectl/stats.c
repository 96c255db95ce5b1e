/* SPDX-License-Identifier: Apache-2.0 */
/* sluicectl stats: a pipeline's counters as lines, a stage table, JSON or Prometheus text. */
#include "sluicectl.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "sluice/sluice.h"
#include "tools/common/jsonout.h"

/* ---- stats ---- */

static const char stats_usage[] =
	"usage: sluicectl [--socket PATH] stats NAME [--json]\n"
	"       sluicectl [--socket PATH] stats --prometheus [--textfile PATH] "
	"[NAME]\n"
	"\n"
	"The statistics of pipeline NAME: one 'key value' per line and "
	"a\n"
	"table of the engine's stages (docs/pipeline.md), or with --json "
	"one\n"
	"JSON object of every key (stage.STAGE.COUNTER among them) and\n"
	"\"stages\": {STAGE: {COUNTER: value}}. Both end with the resource\n"
	"model since the pipeline started (\"model\": docs/plumber.md): each\n"
	"stage's rate, CPU per batch, cores and share, the rate its readers\n"
	"ask for, the rate predicted at this allocation and with every core,\n"
	"and what limits it. 'sluicectl top' shows it live. With --prometheus, the\n"
	"counters of NAME (default: of every pipeline) in Prometheus' text\n"
	"format (sluice_COUNTER{pipeline=...}); --textfile PATH writes them\n"
	"to PATH atomically (node_exporter's textfile collector) instead.\n";

#define STAGE_PREFIX "stage."

/* "stage.parse.cpu_ns" -> its stage ("parse", *ret_len bytes) and counter, or NULL. */
static const char *stage_key(const char *key, size_t *ret_len, const char **ret_counter)
{
	if (strncmp(key, STAGE_PREFIX, strlen(STAGE_PREFIX)) != 0)
		return NULL;
	const char *st = key + strlen(STAGE_PREFIX), *dot = strchr(st, '.');
	if (!dot || dot == st || !dot[1])
		return NULL;
	*ret_len = (size_t)(dot - st);
	*ret_counter = dot + 1;
	return st;
}

/* The stages in the order the daemon listed them: for stage i, the key index it starts at. */
static size_t stage_starts(const struct sluice_stats *s, size_t *starts, size_t cap)
{
	size_t n = 0, len, prev_len = 0;
	const char *prev = NULL, *counter;
	int64_t v;
	for (size_t i = 0; i < sluice_stats_count(s); i++) {
		const char *st = stage_key(sluice_stats_at(s, i, &v), &len, &counter);
		if (st && (!prev || len != prev_len || strncmp(st, prev, len) != 0) && n < cap) {
			starts[n++] = i;
			prev = st;
			prev_len = len;
		}
	}
	return n;
}

static void stats_json(const struct sluice_stats *s, struct jsonout *j)
{
	size_t len = 0;
	const char *counter;
	int64_t v;
	jsonout_char(j, '{');
	for (size_t i = 0; i < sluice_stats_count(s); i++) {
		const char *key = sluice_stats_at(s, i, &v);
		if (i)
			jsonout_raw(j, ", ", 2);
		jsonout_str(j, key, strlen(key));
		jsonout_raw(j, ": ", 2);
		jsonout_int64(j, v);
	}
	report_stats_json(s, j); /* "model": the resource model since the pipeline started */
	size_t starts[64], n = stage_starts(s, starts, 64);
	if (n == 0) {
		jsonout_char(j, '}');
		return;
	}
	jsonout_raw(j, ", ", 2);
	jsonout_str(j, "stages", 6);
	jsonout_raw(j, ": {", 3);
	for (size_t k = 0; k < n; k++) {
		const char *st = stage_key(sluice_stats_at(s, starts[k], &v), &len, &counter);
		jsonout_raw(j, k ? ", " : "", k ? 2 : 0);
		jsonout_str(j, st, len);
		jsonout_raw(j, ": {", 3);
		size_t end = k + 1 < n ? starts[k + 1] : sluice_stats_count(s);
		for (size_t i = starts[k]; i < end; i++) {
			const char *sk = stage_key(sluice_stats_at(s, i, &v), &len, &counter);
			if (!sk)
				break;
			jsonout_raw(j, i > starts[k] ? ", " : "", i > starts[k] ? 2 : 0);
			jsonout_str(j, counter, strlen(counter));
			jsonout_raw(j, ": ", 2);
			jsonout_int64(j, v);
		}
		jsonout_char(j, '}');
	}
	jsonout_raw(j, "}}", 2);
}

/* One row per stage: what it took and gave, its CPU and waits in ms, how full it is. */
static void stats_table(const struct sluice_stats *s)
{
	static const char *const cols[] = { "elems_in", "elems_out",  "bytes_in",     "bytes_out",
					    "cpu_ns",	"wait_up_ns", "wait_down_ns", "buffered",
					    "capacity", "dropped" };
	size_t starts[64], n = stage_starts(s, starts, 64);
	if (!n)
		return;
	printf("\n%-11s %12s %12s %14s %14s %9s %10s %10s %15s %8s\n", "STAGE", "IN", "OUT",
	       "BYTES_IN", "BYTES_OUT", "CPU_MS", "WAIT_UP_MS", "WAIT_DN_MS", "BUFFERED/CAP",
	       "DROPPED");
	for (size_t k = 0; k < n; k++) {
		size_t len = 0;
		const char *counter;
		int64_t v, val[10] = { 0 };
		const char *st = stage_key(sluice_stats_at(s, starts[k], &v), &len, &counter);
		char key[160];
		for (size_t c = 0; c < 10; c++) {
			snprintf(key, sizeof(key), STAGE_PREFIX "%.*s.%s", (int)len, st, cols[c]);
			sluice_stats_get(s, key, &val[c]);
		}
		char buf[40];
		snprintf(buf, sizeof(buf), "%" PRId64 "/%" PRId64, val[7], val[8]);
		printf("%-11.*s %12" PRId64 " %12" PRId64 " %14" PRId64 " %14" PRId64
		       " %9.1f %10.1f %10.1f %15s %8" PRId64 "\n",
		       (int)len, st, val[0], val[1], val[2], val[3], (double)val[4] / 1e6,
		       (double)val[5] / 1e6, (double)val[6] / 1e6, buf, val[9]);
	}
}

/* --prometheus: the counters of name (NULL: every pipeline listed) to path, or stdout. */
static int stats_prometheus(const char *name, const char *path)
{
	struct sluice_client *c = NULL;
	struct sluice_error err = { 0, "" };
	struct sluice_pipeline_info *list = NULL;
	size_t n = 0;
	char msg[600];
	int rc;

	if (ctl_connect("stats", &c))
		return 1;
	if (!name) {
		rc = sluice_list(c, &list, &n, &err);
		if (rc < 0) {
			sluice_disconnect(c);
			return ctl_fail("stats", err.msg);
		}
	}
	size_t m = name ? 1 : n;
	struct sluice_stats **all = calloc(m + 1, sizeof(*all));
	rc = all ? 0 : -ENOMEM;
	snprintf(msg, sizeof(msg), "out of memory");
	for (size_t i = 0; rc == 0 && i < m; i++) {
		rc = sluice_stats(c, name ? name : list[i].name, &all[i], &err);
		if (rc == -ENOENT && !name) { /* dropped since the list: not an error */
			all[i] = NULL;
			rc = 0;
		} else if (rc < 0) {
			snprintf(msg, sizeof(msg), "%s", err.msg);
		}
	}
	sluice_disconnect(c);
	sluice_list_free(list);
	if (rc == 0) {
		rc = prom_write_file(path, (const struct sluice_stats *const *)all, m, msg,
				     sizeof(msg));
	}
	for (size_t i = 0; all && i < m; i++)
		sluice_stats_free(all[i]);
	free(all);
	return rc < 0 ? ctl_fail("stats", msg) : 0;
}

int cmd_stats(int argc, char **argv)
{
	enum { OPT_JSON = 1, OPT_PROM, OPT_TEXTFILE };
	static const struct option opts[] = { { "json", no_argument, NULL, OPT_JSON },
					      { "prometheus", no_argument, NULL, OPT_PROM },
					      { "textfile", required_argument, NULL, OPT_TEXTFILE },
					      { "help", no_argument, NULL, 'h' },
					      { NULL, 0, NULL, 0 } };
	struct sluice_client *c = NULL;
	struct sluice_error err = { 0, "" };
	struct sluice_stats *s = NULL;
	const char *name = NULL, *textfile = NULL;
	bool json = false, prom = false;
	int rc, o;

	optind = 0;
	while ((o = ctl_getopt("stats", argc, argv, opts, stats_usage)) != -1) {
		if (o < 0)
			return o == -2 ? 0 : 2;
		if (o == OPT_JSON)
			json = true;
		else if (o == OPT_PROM)
			prom = true;
		else
			textfile = optarg;
	}
	if (optind < argc)
		name = argv[optind++];
	if (optind < argc)
		return ctl_usage_error("stats", "too many arguments", stats_usage);
	if (json && prom)
		return ctl_usage_error("stats", "--json or --prometheus, not both", stats_usage);
	if (textfile && !prom)
		return ctl_usage_error("stats", "--textfile goes with --prometheus", stats_usage);
	if (prom)
		return stats_prometheus(name, textfile);
	if (!name)
		return ctl_usage_error("stats", "no pipeline NAME given", stats_usage);
	if (ctl_connect("stats", &c))
		return 1;
	rc = sluice_stats(c, name, &s, &err);
	sluice_disconnect(c);
	if (rc < 0)
		return ctl_fail("stats", err.msg);
	if (json) {
		struct jsonout j;

		jsonout_init(&j);
		stats_json(s, &j);
		rc = jsonout_line_write(&j, stdout);
		jsonout_fini(&j);
	} else {
		size_t len;
		const char *counter;
		int64_t v;
		for (size_t i = 0; i < sluice_stats_count(s); i++) {
			const char *key = sluice_stats_at(s, i, &v);
			if (!stage_key(key, &len, &counter))
				printf("%s %" PRId64 "\n", key, v);
		}
		stats_table(s);
		report_stats_print(s);
		rc = 0;
	}
	sluice_stats_free(s);
	if (rc < 0 || fflush(stdout) != 0)
		return ctl_fail("stats", "writing the output failed");
	return 0;
}
