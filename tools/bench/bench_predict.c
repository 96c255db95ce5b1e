/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sluice-bench predict: the resource model's prediction checked (issue 20). A pipeline runs in
 * process on a pool of A workers; the model fitted to its counters predicts its batch rate with
 * B workers; then it runs with B workers and the rate is measured.
 */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/pipeline/model.h"
#include "daemon/pipeline/pipeline.h"
#include "daemon/pipeline/spec.h"
#include "sched/sched.h"
#include "tools/common/cliarg.h"
#include "tools/common/scan.h"

static void predict_usage(FILE *f)
{
	fprintf(f, "usage: sluice-bench predict [--seconds S] [--from A] [--to B] [--repeat R]\n"
		   "                            NAME=SPEC...\n"
		   "\n"
		   "For each pipeline spec SPEC (a JSON file; NAME labels it): runs it in\n"
		   "process on a pool of A workers (default 1) for S seconds (default 4) after\n"
		   "a warm-up of S/2, fits the resource model (docs/plumber.md) to the window's\n"
		   "counters and predicts its batch rate with B workers (default 2) on\n"
		   "min(B, free cores) cores (the host's cores less what its other processes\n"
		   "used in the window); then runs it with B workers the same way and measures.\n"
		   "With --repeat R (at most 16): R such pairs, the medians.\n"
		   "The spec should be endless (epochs null) or long enough. One line per spec:\n"
		   "bench=predict spec=NAME from_workers=A to_workers=B measured_from_per_s=...\n"
		   "predicted_per_s=... measured_per_s=... error=... limit=... bottleneck=...\n"
		   "repeat=R\n");
}

static void nap(double s)
{
	struct timespec ts = { .tv_sec = (time_t)s,
			       .tv_nsec = (long)((s - (double)(time_t)s) * 1e9) };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* The deliver callback: every batch is given back at once (a reader as fast as it can be). */
struct sink {
	struct pl_pipeline *_Atomic p;
	_Atomic int rc;
	_Atomic int ended;
};

static void sink_deliver(void *ctx, struct pl_batch *b)
{
	struct sink *s = ctx;
	struct pl_pipeline *p;
	while (!(p = atomic_load(&s->p)))
		; /* create has not returned yet: a moment */
	pl_batch_release(p, b);
}

static void sink_end(void *ctx, int rc, const struct io_error *err)
{
	struct sink *s = ctx;
	(void)err;
	atomic_store(&s->rc, rc);
	atomic_store(&s->ended, 1);
}

/* One run on workers: the model of its window and its measured batch rate. */
static int run(const struct pl_spec *spec, unsigned workers, double seconds, struct pl_model *ret_m,
	       double *ret_free_cpus, struct io_error *err)
{
	struct sched_pool_opts o;
	struct sched_pool *pool;
	sched_pool_opts_init(&o);
	o.workers = workers;
	int rc = sched_pool_create(&o, &pool);
	if (rc < 0) {
		io_error_set(err, "cannot start a pool of %u workers", workers);
		return rc;
	}
	struct sink s = { 0 };
	struct pl_pipeline_opts po;
	pl_pipeline_opts_init(&po);
	po.pool = pool;
	po.deliver = sink_deliver;
	po.end = sink_end;
	po.deliver_ctx = &s;
	struct pl_pipeline *p;
	rc = pl_pipeline_create(spec, &po, &p, err);
	if (rc < 0) {
		sched_pool_destroy(pool, SCHED_SHUTDOWN_CANCEL);
		return rc;
	}
	atomic_store(&s.p, p);
	nap(seconds / 2); /* warm-up: the shuffle buffer fills, read buffers are first touched */
	struct pl_stats a, b;
	pl_pipeline_get_stats(p, &a);
	double t0 = scan_now_s();
	uint64_t h0 = pl_model_host_busy_ns(), o0 = pl_model_own_cpu_ns();
	nap(seconds);
	pl_pipeline_get_stats(p, &b);
	double t1 = scan_now_s();
	uint64_t h1 = pl_model_host_busy_ns(), o1 = pl_model_own_cpu_ns();
	bool ended = atomic_load(&s.ended);
	pl_pipeline_destroy(p);
	sched_pool_destroy(pool, SCHED_SHUTDOWN_CANCEL);
	if (ended) {
		io_error_set(err, "the pipeline ended within %.1f s (rc %d): give an endless spec",
			     seconds * 1.5, atomic_load(&s.rc));
		return -ENODATA;
	}
	struct pl_model_in in;
	pl_model_in_from_stats(&a, &b, (uint64_t)((t1 - t0) * 1e9), &in);
	long host = sysconf(_SC_NPROCESSORS_ONLN);
	in.workers = workers;
	in.host_cpus = host > 0 ? (unsigned)host : 1;
	/* the allocation is what the host's other processes left: cores less their use */
	double others = h0 && h1 ? ((double)(h1 - h0) - (double)(o1 - o0)) / 1e9 / (t1 - t0) : 0;
	in.cpus = in.host_cpus - (others > 0 ? others : 0);
	if (in.cpus < 0.25)
		in.cpus = 0.25;
	*ret_free_cpus = in.cpus;
	pl_model_fit(&in, ret_m);
	if (getenv("SLUICE_PREDICT_DEBUG")) {
		const struct pl_model *m = ret_m;
		fprintf(stderr,
			"workers %u: %.1f/s seq_cap %.1f pool_cap %.1f cores_cap %.1f "
			"disk %.1f driver_cpu %.3f parse_ns %.3f wall %.3f read_wait %.3f\n",
			workers, m->batches_per_s, m->seq_cap, m->pool_cap, m->cores_cap,
			m->disk_cap, (double)(b.driver_cpu_ns - a.driver_cpu_ns) / 1e9,
			(double)(b.parse_ns - a.parse_ns) / 1e9, t1 - t0,
			(double)(b.read_wait_ns - a.read_wait_ns) / 1e9);
		for (unsigned i = 0; i < PL_STAGE_COUNT_; i++)
			fprintf(stderr, "  %-10s %10.1f us/batch cores %.3f\n", pl_stage_name(i),
				m->stages[i].cpu_per_batch_ns / 1e3, m->stages[i].cores);
	}
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define MAX_REPEAT 16

static int one(const char *arg, unsigned from, unsigned to, double seconds, unsigned repeat)
{
	const char *eq = strchr(arg, '=');
	if (!eq || eq == arg || !eq[1]) {
		fprintf(stderr, "sluice-bench predict: %s: give NAME=SPEC\n", arg);
		return 2;
	}
	struct io_error err;
	struct pl_spec *spec;
	int rc = pl_spec_load_file(eq + 1, &spec, &err);
	if (rc < 0) {
		fprintf(stderr, "sluice-bench predict: %s\n", err.msg);
		return 1;
	}
	struct pl_model mf, mt;
	double rate_from[MAX_REPEAT], predicted[MAX_REPEAT], measured[MAX_REPEAT];
	double free_cpus[MAX_REPEAT], ignore;
	for (unsigned k = 0; k < repeat && rc == 0; k++) {
		rc = run(spec, from, seconds, &mf, &free_cpus[k], &err);
		if (rc == 0)
			rc = run(spec, to, seconds, &mt, &ignore, &err);
		/* B workers on the cores the first run found free */
		double cores = to < free_cpus[k] ? to : free_cpus[k];
		rate_from[k] = mf.batches_per_s;
		predicted[k] = pl_model_predict(&mf, to, cores);
		measured[k] = mt.batches_per_s;
	}
	pl_spec_destroy(spec);
	if (rc < 0) {
		fprintf(stderr, "sluice-bench predict: %s: %s\n", eq + 1, err.msg);
		return 1;
	}
	double pred = median(predicted, repeat), meas = median(measured, repeat);
	double error = meas > 0 ? fabs(pred - meas) / meas : 0;
	printf("bench=predict spec=%.*s from_workers=%u to_workers=%u measured_from_per_s=%.1f "
	       "predicted_per_s=%.1f measured_per_s=%.1f error=%.3f limit=%s bottleneck=%s "
	       "free_cpus=%.2f repeat=%u\n",
	       (int)(eq - arg), arg, from, to, median(rate_from, repeat), pred, meas, error,
	       pl_limit_name(mf.limit),
	       mf.bottleneck >= 0 ? pl_stage_name((unsigned)mf.bottleneck) : "-",
	       median(free_cpus, repeat), repeat);
	fflush(stdout);
	return 0;
}

int bench_predict(int argc, char **argv)
{
	uint64_t from = 1, to = 2, repeat = 1;
	double seconds = 4;
	static const struct option opts[] = {
		{ "seconds", required_argument, NULL, 's' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "from", required_argument, NULL, 'f' },
		{ "to", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *name;
	int o;
	optind = 0;
	while ((o = bench_getopt(argc, argv, opts, &name)) != -1) {
		char *end;
		switch (o) {
		case 'h':
			predict_usage(stdout);
			return 0;
		case '?':
			return 2;
		case 's':
			seconds = strtod(optarg, &end);
			if (end == optarg || *end || !(seconds >= 0.1 && seconds <= 600)) {
				fprintf(stderr,
					"sluice-bench predict: --seconds: not 0.1 to 600: %s\n",
					optarg);
				return 2;
			}
			break;
		case 'r':
			if (cli_parse_u64(optarg, MAX_REPEAT, &repeat) < 0 || !repeat) {
				fprintf(stderr, "sluice-bench predict: --repeat: not 1 to %d: %s\n",
					MAX_REPEAT, optarg);
				return 2;
			}
			break;
		default: /* f, t */
			if (cli_parse_u64(optarg, 1024, o == 'f' ? &from : &to) < 0 ||
			    !(o == 'f' ? from : to)) {
				fprintf(stderr, "sluice-bench predict: --%s: not 1 to 1024: %s\n",
					name, optarg);
				return 2;
			}
		}
	}
	if (optind == argc) {
		predict_usage(stderr);
		return 2;
	}
	int status = 0;
	for (int i = optind; i < argc; i++) {
		int r = one(argv[i], (unsigned)from, (unsigned)to, seconds, (unsigned)repeat);
		if (r)
			status = r;
	}
	return status;
}
