/* SPDX-License-Identifier: Apache-2.0 */
/* sluicectl top: every pipeline of sluiced and its readers, with the resource model, live. */
#include "sluicectl.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "report.h"
#include "tools/common/cliarg.h"

static const char top_usage[] =
	"usage: sluicectl [--socket PATH] top [--interval SECONDS] [--iterations N] [--json]\n"
	"\n"
	"Every pipeline of sluiced that you may read, and its readers, refreshed every\n"
	"interval (default 1 s) until interrupted, or N times. Per pipeline: the batches it\n"
	"delivers a second, the rate its slowest reader asks for (DEMAND; '-' when every\n"
	"reader takes all it gets), the rate the resource model predicts at this allocation\n"
	"(PREDICTED) and with every core of the host (ALL_CORES), the cores it uses, what\n"
	"limits it and the bottleneck stage (docs/plumber.md). Per reader: batches taken a\n"
	"second and the share of the time it waited for one. The first refresh covers each\n"
	"pipeline's life so far, later ones the last interval. A pipeline's prediction is\n"
	"for the cores that neither the host's other processes nor sluiced's other\n"
	"pipelines used in the window. --json: one JSON object per\n"
	"refresh, {\"pipelines\": [{\"name\": ..., \"status\": ..., \"model\": {...}}]}.\n";

/* A pipeline's last reading, to take the next window from. */
struct seen {
	char name[SLUICE_NAME_MAX + 1];
	struct sluice_stats *s;
};

static const char *status_text(enum sluice_pipeline_status s)
{
	return s == SLUICE_PIPELINE_RUNNING    ? "running"
	       : s == SLUICE_PIPELINE_FINISHED ? "finished"
	       : s == SLUICE_PIPELINE_FAILED   ? "failed"
					       : "?";
}

static struct sluice_stats *seen_take(struct seen *seen, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++) {
		if (seen[i].s && strcmp(seen[i].name, name) == 0) {
			struct sluice_stats *s = seen[i].s;
			seen[i].s = NULL;
			return s;
		}
	}
	return NULL;
}

static void seen_free(struct seen *seen, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sluice_stats_free(seen[i].s);
	free(seen);
}

static void print_header(void)
{
	printf("%-24s %-9s %7s %9s %9s %10s %10s %6s %-10s %s\n", "NAME", "STATUS", "READERS",
	       "BATCH/S", "DEMAND", "PREDICTED", "ALL_CORES", "CORES", "LIMIT", "BOTTLENECK");
}

static void print_row(const struct sluice_pipeline_info *p, const struct report_window *w,
		      const struct pl_model *m)
{
	char demand[32];
	if (m->demand_per_s > 0)
		snprintf(demand, sizeof(demand), "%.1f", m->demand_per_s);
	else
		snprintf(demand, sizeof(demand), "-");
	printf("%-24s %-9s %7u %9.1f %9s %10.1f %10.1f %6.2f %-10s %s\n", p->name,
	       status_text(p->status), p->n_readers, m->batches_per_s, demand, m->predicted_per_s,
	       m->predicted_all_per_s, m->cores, pl_limit_name(m->limit),
	       m->bottleneck >= 0 ? pl_stage_name((unsigned)m->bottleneck) : "-");
	for (size_t i = 0; i < w->in.n_readers; i++) {
		const struct pl_model_reader *r = &w->readers[i];
		uint64_t win =
			r->window_ns && r->window_ns < w->in.wall_ns ? r->window_ns : w->in.wall_ns;
		double secs = (double)win / 1e9;
		printf("  reader %-15" PRIu64 " %9.1f taken/s, waiting %5.1f%%\n", w->reader_ids[i],
		       secs > 0 ? (double)r->taken / secs : 0,
		       win ? 100.0 * (double)r->wait_ns / (double)win : 0);
	}
}

/* One refresh: every pipeline's window since its reading in *io_seen, which it replaces. */
static int refresh(struct sluice_client *c, bool json, struct seen **io_seen, size_t *io_n)
{
	struct sluice_error err = { 0, "" };
	struct sluice_pipeline_info *list = NULL;
	size_t n = 0;
	if (sluice_list(c, &list, &n, &err) < 0) {
		fprintf(stderr, "sluicectl: top: %s\n", err.msg);
		return -1;
	}
	struct seen *now = calloc(n ? n : 1, sizeof(*now));
	struct report_window *w = calloc(n ? n : 1, sizeof(*w));
	struct pl_model *m = calloc(n ? n : 1, sizeof(*m));
	bool *have = calloc(n ? n : 1, sizeof(*have));
	if (!now || !w || !m || !have) {
		free(now);
		free(w);
		free(m);
		free(have);
		sluice_list_free(list);
		return -1;
	}
	/* every pipeline's window first: the cores the others use are not this one's to have */
	double cores = 0;
	for (size_t i = 0; i < n; i++) {
		struct sluice_stats *s = NULL;
		if (sluice_stats(c, list[i].name, &s, &err) < 0)
			continue; /* gone meanwhile */
		struct sluice_stats *prev = seen_take(*io_seen, *io_n, list[i].name);
		if (report_window(s, prev, &w[i]) == 0) {
			pl_model_fit(&w[i].in, &m[i]);
			cores += m[i].cores;
			have[i] = true;
		}
		sluice_stats_free(prev);
		snprintf(now[i].name, sizeof(now[i].name), "%s", list[i].name);
		now[i].s = s;
	}
	struct jsonout j;
	jsonout_init(&j);
	if (json)
		jsonout_cstr(&j, "{\"pipelines\": [");
	else if (isatty(STDOUT_FILENO))
		fputs("\033[H\033[2J", stdout);
	if (!json)
		print_header();
	size_t shown = 0;
	for (size_t i = 0; i < n; i++) {
		if (!have[i])
			continue;
		double others = cores - m[i].cores;
		if (n > 1 && others > 0) {
			w[i].in.cpus = w[i].in.cpus - others > 0.25 ? w[i].in.cpus - others : 0.25;
			pl_model_fit(&w[i].in, &m[i]);
		}
		if (json) {
			jsonout_cstr(&j, shown ? ", {\"name\": " : "{\"name\": ");
			jsonout_str(&j, list[i].name, strlen(list[i].name));
			jsonout_cstr(&j, ", \"status\": \"");
			jsonout_cstr(&j, status_text(list[i].status));
			jsonout_cstr(&j, "\", \"model\": ");
			report_json(&j, &w[i], &m[i]);
			jsonout_char(&j, '}');
		} else {
			print_row(&list[i], &w[i], &m[i]);
		}
		shown++;
	}
	int rc = 0;
	if (json) {
		jsonout_cstr(&j, "]}");
		rc = jsonout_line_write(&j, stdout);
	}
	jsonout_fini(&j);
	seen_free(*io_seen, *io_n);
	*io_seen = now;
	*io_n = n;
	free(w);
	free(m);
	free(have);
	sluice_list_free(list);
	return rc < 0 || fflush(stdout) != 0 ? -1 : 0;
}

int cmd_top(int argc, char **argv)
{
	enum { OPT_INTERVAL = 1, OPT_ITERATIONS, OPT_JSON };
	static const struct option opts[] = {
		{ "interval", required_argument, NULL, OPT_INTERVAL },
		{ "iterations", required_argument, NULL, OPT_ITERATIONS },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	double interval = 1;
	uint64_t iterations = 0; /* for ever */
	bool json = false;
	int opt;
	char *end;
	optind = 0;
	while ((opt = ctl_getopt("top", argc, argv, opts, top_usage)) != -1) {
		switch (opt) {
		case -2:
			return 0;
		case -3:
			return 2;
		case OPT_JSON:
			json = true;
			break;
		case OPT_INTERVAL:
			interval = strtod(optarg, &end);
			if (*end || !(interval >= 0.05 && interval <= 3600))
				return ctl_usage_error("top", "--interval: 0.05 to 3600 seconds",
						       top_usage);
			break;
		case OPT_ITERATIONS:
			if (cli_parse_u64(optarg, UINT32_MAX, &iterations) < 0 || !iterations)
				return ctl_usage_error("top", "--iterations: a count of 1 or more",
						       top_usage);
			break;
		}
	}
	if (optind < argc)
		return ctl_usage_error("top", "too many arguments", top_usage);
	struct sluice_client *c = NULL;
	struct sluice_error err = { 0, "" };
	if (sluice_connect(sluicectl_socket, &c, &err) < 0) {
		fprintf(stderr, "sluicectl: top: %s\n", err.msg);
		return 1;
	}
	struct seen *seen = NULL;
	size_t n_seen = 0;
	int rc = 0;
	for (uint64_t k = 0; !iterations || k < iterations; k++) {
		if (k) {
			struct timespec ts = {
				.tv_sec = (time_t)interval,
				.tv_nsec = (long)((interval - (double)(time_t)interval) * 1e9)
			};
			while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
				;
		}
		if (refresh(c, json, &seen, &n_seen) < 0) {
			rc = 1;
			break;
		}
	}
	seen_free(seen, n_seen);
	sluice_disconnect(c);
	return rc;
}
