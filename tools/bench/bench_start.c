/* SPDX-License-Identifier: Apache-2.0 */
/* sluice-bench start: what a new pipeline costs, from attach to its first batch and its epoch. */
#include "bench.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_next.h"
#include "sluice/sluice.h"
#include "tools/common/cliarg.h"
#include "tools/common/scan.h"

#define ST_MAX_TENSORS 64
#define ST_MAX_RUNS    64
#define ST_MAX_SYSTEMS 3

static void start_usage(FILE *f)
{
	fprintf(f,
		"usage: sluice-bench start --data DIR [--batch N] [--features A,B,...]\n"
		"                          [--pipeline-memory SIZE] [--repeat N]\n"
		"                          [--sluiced PATH] [--baseline-sluiced PATH]\n"
		"\n"
		"Each run starts a fresh sluiced (empty config dir), attaches to a spec over DIR\n"
		"(one epoch, batches of N records, default 64; features default image,label as\n"
		"`sluicectl gen image` writes them) and reads the epoch, touching every page of\n"
		"every tensor. Systems, alternated --repeat times (default 3):\n"
		"  by-use    this build's sluiced as it is (ring memory committed by use)\n"
		"  up-front  the same with --ring-commit all (the whole ring allocated at start:\n"
		"            the memory model before issue 15, the baseline)\n"
		"  parent    --baseline-sluiced PATH as it is (another build, e.g. the parent\n"
		"            commit's), when given\n"
		"--pipeline-memory (default 256M) is passed to every sluiced.\n"
		"\n"
		"Prints per run `bench=start system=S attach_ms= first_batch_ms= epoch_s=\n"
		"daemon_cpu_s= reader_cpu_s= committed_bytes= daemon_shmem_kb= ...` (daemon CPU\n"
		"from the attach to the epoch's end; committed_bytes -1 where the daemon does not\n"
		"say; daemon_shmem_kb: the shared memory the daemon has touched, RssShmem), then\n"
		"per system the medians and their ratio to up-front.\n");
}

struct start_args {
	const char *data;
	const char *features;
	const char *pipeline_memory;
	const char *sluiced;
	const char *baseline;
	uint64_t batch;
	uint64_t repeat;
};

struct start_run {
	double attach_ms, first_ms, epoch_s, daemon_cpu_s, reader_cpu_s;
	int64_t committed, records;
	long shmem_kb;
};

static int start_parse(int argc, char **argv, struct start_args *a)
{
	memset(a, 0, sizeof(*a));
	a->features = "image,label";
	a->pipeline_memory = "256M";
	a->batch = 64;
	a->repeat = 3;
	static const struct option opts[] = {
		{ "data", required_argument, NULL, 'd' },
		{ "features", required_argument, NULL, 'f' },
		{ "pipeline-memory", required_argument, NULL, 'm' },
		{ "sluiced", required_argument, NULL, 's' },
		{ "baseline-sluiced", required_argument, NULL, 'B' },
		{ "batch", required_argument, NULL, 'b' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *k;
	int o;
	optind = 0;
	while ((o = bench_getopt(argc, argv, opts, &k)) != -1) {
		switch (o) {
		case 'h':
			start_usage(stdout);
			return 1;
		case '?':
			return 2;
		case 'd':
			a->data = optarg;
			break;
		case 'f':
			a->features = optarg;
			break;
		case 'm':
			a->pipeline_memory = optarg;
			break;
		case 's':
			a->sluiced = optarg;
			break;
		case 'B':
			a->baseline = optarg;
			break;
		default: { /* b, r */
			uint64_t *dst = o == 'b' ? &a->batch : &a->repeat;

			if (cli_parse_u64(optarg, o == 'b' ? 1u << 20 : ST_MAX_RUNS, dst) < 0 ||
			    *dst == 0) {
				fprintf(stderr, "sluice-bench start: --%s: not a count: %s\n", k,
					optarg);
				return 2;
			}
		}
		}
	}
	if (optind != argc) {
		fprintf(stderr, "sluice-bench start: unexpected argument %s (try --help)\n",
			argv[optind]);
		return 2;
	}
	if (!a->data) {
		fprintf(stderr, "sluice-bench start: --data DIR is needed\n");
		return 2;
	}
	return 0;
}

/* The spec: one epoch over dir, in file order, the features as they are. NULL: no memory. */
static char *make_spec(const struct start_args *a)
{
	size_t cap = strlen(a->data) + 8 * strlen(a->features) + 1024;
	char *s = malloc(cap), *p;
	const char *f = a->features;
	size_t n;

	if (!s)
		return NULL;
	n = (size_t)snprintf(s, cap,
			     "{\"name\": \"%s\", \"type\": \"independent\", \"args\": {"
			     "\"dataset\": {\"type\": \"dir\", \"args\": {\"data_dir\": \"%s\"}}, "
			     "\"target_batch_size\": %" PRIu64 ", \"drop_remainder\": false, "
			     "\"epochs\": 1, \"num_parallel_reads\": 4, "
			     "\"num_read_buffer_bytes\": 1048576, \"num_prefetch\": 8, "
			     "\"primary_features\": [",
			     NB_PIPELINE, a->data, a->batch);
	while (*f) {
		size_t len = strcspn(f, ",");

		p = s + n;
		n += (size_t)snprintf(p, cap - n,
				      "%s{\"from_name\": \"%.*s\", \"to_name\": \"%.*s\"}",
				      f == a->features ? "" : ", ", (int)len, f, (int)len, f);
		f += len + (f[len] == ',');
	}
	snprintf(s + n, cap - n, "]}}");
	return s;
}

/* RssShmem of pid in kB (the shared memory its page tables map), or -1. */
static long shmem_kb(pid_t pid)
{
	char path[64], line[256];
	long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "RssShmem: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/* Read the whole epoch: every tensor's pages touched once. Returns the records, or -errno. */
static int64_t read_epoch(struct sluice_reader *r, double t0, double *ret_first_ms,
			  volatile uint8_t *sink, struct sluice_error *err)
{
	struct sluice_tensor t[ST_MAX_TENSORS];
	struct sluice_batch_info info;
	int64_t records = 0;
	bool first = true;

	for (;;) {
		struct sluice_batch *b = NULL;
		int rc = sluice_next(r, -1, &b, err);
		int nt;

		if (rc == 0)
			return records;
		if (rc < 0)
			return rc;
		if (first) {
			*ret_first_ms = (scan_now_s() - t0) * 1e3;
			first = false;
		}
		nt = sluice_batch_describe(b, &info, t, ST_MAX_TENSORS);
		if (nt < 0) {
			sluice_batch_release(b);
			snprintf(err->msg, sizeof(err->msg), "a corrupt batch");
			return nt;
		}
		for (int i = 0; i < nt; i++) {
			const uint8_t *p = t[i].data;

			for (uint64_t o = 0; p && o < t[i].nbytes; o += 4096)
				*sink += p[o];
		}
		records += (int64_t)info.rows;
		sluice_batch_release(b);
	}
}

/* One run: a fresh sluiced, attach by spec, the epoch, the counters, stop. */
static int start_once(const char *sluiced, const char *const *extra, const char *spec,
		      struct start_run *out)
{
	struct sluice_error err = { 0, "" };
	struct sluice_client *c = NULL;
	struct sluice_reader *r = NULL;
	struct sluice_attach_opts ao;
	struct sluice_stats *st = NULL;
	static volatile uint8_t sink;
	struct nb_daemon d;
	double t0, c0, rc0, cpu;
	int64_t v = -1;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = nb_daemon_start_args(&d, sluiced, NULL, extra, &c);
	if (rc < 0)
		return rc;
	sluice_attach_opts_init(&ao);
	ao.spec_json = spec;
	rc = nb_daemon_cpu_s(d.pid, &c0);
	rc0 = scan_process_cpu_s();
	t0 = scan_now_s();
	if (rc == 0)
		rc = sluice_attach(c, &ao, &r, &err);
	out->attach_ms = (scan_now_s() - t0) * 1e3;
	if (rc == 0) {
		out->records = read_epoch(r, t0, &out->first_ms, &sink, &err);
		rc = out->records < 0 ? (int)out->records : 0;
	}
	out->epoch_s = scan_now_s() - t0;
	out->reader_cpu_s = scan_process_cpu_s() - rc0;
	if (rc == 0 && (rc = nb_daemon_cpu_s(d.pid, &cpu)) == 0)
		out->daemon_cpu_s = cpu - c0;
	out->shmem_kb = shmem_kb(d.pid);
	if (rc == 0 && sluice_stats(c, NB_PIPELINE, &st, &err) == 0) {
		sluice_stats_get(st, "ring_bytes_committed", &v);
		sluice_stats_free(st);
	}
	out->committed = v;
	if (rc < 0)
		fprintf(stderr, "sluice-bench start: %s: %s\n", sluiced,
			err.msg[0] ? err.msg : strerror(-rc));
	sluice_detach(r);
	sluice_disconnect(c);
	if (nb_daemon_stop(&d) < 0 && rc == 0)
		rc = -ECHILD;
	return rc;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(const struct start_run *runs, size_t n, size_t field_off)
{
	double v[ST_MAX_RUNS];

	for (size_t i = 0; i < n; i++)
		v[i] = *(const double *)((const char *)&runs[i] + field_off);
	qsort(v, n, sizeof(v[0]), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int bench_start(int argc, char **argv)
{
	static struct start_run runs[ST_MAX_SYSTEMS][ST_MAX_RUNS];
	struct start_args a;
	char own[4096], pm[64];
	const char *names[ST_MAX_SYSTEMS] = { "up-front", "by-use", "parent" };
	const char *bins[ST_MAX_SYSTEMS];
	const char *extra[ST_MAX_SYSTEMS][6];
	size_t n_sys;
	char *spec;
	int rc;

	rc = start_parse(argc, argv, &a);
	if (rc)
		return rc == 1 ? 0 : rc;
	if (!a.sluiced) {
		rc = nb_default_sluiced(own, sizeof(own));
		if (rc < 0) {
			fprintf(stderr, "sluice-bench start: no sluiced next to this build: %s\n",
				strerror(-rc));
			return 1;
		}
		a.sluiced = own;
	}
	spec = make_spec(&a);
	if (!spec)
		return 1;
	snprintf(pm, sizeof(pm), "--pipeline-memory=%s", a.pipeline_memory);
	bins[0] = bins[1] = a.sluiced;
	bins[2] = a.baseline;
	n_sys = a.baseline ? 3 : 2;
	for (size_t s = 0; s < ST_MAX_SYSTEMS; s++) {
		size_t k = 0;

		extra[s][k++] = pm;
		if (s == 0)
			extra[s][k++] = "--ring-commit=all";
		extra[s][k] = NULL;
	}
	for (uint64_t i = 0; i < a.repeat; i++) {
		for (size_t s = 0; s < n_sys; s++) {
			struct start_run *o = &runs[s][i];

			rc = start_once(bins[s], extra[s], spec, o);
			if (rc < 0) {
				free(spec);
				return 1;
			}
			printf("bench=start system=%s run=%" PRIu64 " records=%" PRId64
			       " attach_ms=%.2f first_batch_ms=%.2f epoch_s=%.3f "
			       "daemon_cpu_s=%.3f reader_cpu_s=%.3f committed_bytes=%" PRId64
			       " daemon_shmem_kb=%ld\n",
			       names[s], i, o->records, o->attach_ms, o->first_ms, o->epoch_s,
			       o->daemon_cpu_s, o->reader_cpu_s, o->committed, o->shmem_kb);
			fflush(stdout);
		}
	}
	double base_cpu = median(runs[0], a.repeat, offsetof(struct start_run, daemon_cpu_s));
	double base_first = median(runs[0], a.repeat, offsetof(struct start_run, first_ms));
	for (size_t s = 0; s < n_sys; s++) {
		double cpu = median(runs[s], a.repeat, offsetof(struct start_run, daemon_cpu_s));
		double first = median(runs[s], a.repeat, offsetof(struct start_run, first_ms));

		printf("bench=start_summary system=%s runs=%" PRIu64 " attach_ms=%.2f "
		       "first_batch_ms=%.2f "
		       "epoch_s=%.3f "
		       "daemon_cpu_s=%.3f "
		       "reader_cpu_s=%.3f daemon_cpu_vs_up_front=%.2f "
		       "first_batch_vs_up_front=%.2f\n",
		       names[s], a.repeat,
		       median(runs[s], a.repeat, offsetof(struct start_run, attach_ms)), first,
		       median(runs[s], a.repeat, offsetof(struct start_run, epoch_s)), cpu,
		       median(runs[s], a.repeat, offsetof(struct start_run, reader_cpu_s)),
		       base_cpu > 0 ? cpu / base_cpu : 0, base_first > 0 ? first / base_first : 0);
	}
	free(spec);
	return 0;
}
