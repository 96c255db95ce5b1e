/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sluice-bench autotune: issue 20's acceptance. Does sluiced's online autotuner, given a spec
 * whose num_prefetch and num_read_buffer_bytes are "auto", reach the rate of the best fixed
 * setting of the two, how soon, and does it share a CPU budget between a paced pipeline and a
 * greedy one so that the paced one gets what it asks for?
 */
#include "bench.h"
#include "bench_autotune.h"
#include "bench_next.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/pipeline/spec.h"
#include "tools/common/cliarg.h"

/* The runs and their samples: bench_autotune_run.c (bench_autotune.h). */
#define AT_REACH      0.9 /* seconds_to_90: the rate over AT_REACH_S reaches this share */
#define AT_MAX_REPEAT 16
#define AT_AUTO	      (-1) /* a knob's value "auto" */
#define AT_PIPE_A     "at-a"
#define AT_PIPE_B     "at-b"

static const int64_t at_prefetch[] = { 1, 2, 4, 8, 16 };
static const int64_t at_read_buffer[] = { 65536, 1048576, 4194304 };

static void autotune_usage(FILE *f)
{
	fprintf(f,
		"usage: sluice-bench autotune [--seconds S] [--tune-seconds T] [--repeat N]\n"
		"                             [--sluiced PATH] NAME=SPEC...\n"
		"       sluice-bench autotune --pair [--demand-a PER_S] [--demand-b PER_S]\n"
		"                             [--cpus N] [--seconds S]\n"
		"                             [--tune-seconds T] [--repeat N] [--sluiced PATH]\n"
		"                             A=SPEC B=SPEC\n"
		"\n"
		"The online autotuner of sluiced against the best fixed setting of the knobs it\n"
		"turns (issue 20). SPEC is a pipeline spec file (JSON, endless: epochs null);\n"
		"NAME labels it; its num_prefetch and num_read_buffer_bytes are set by the\n"
		"benchmark. Every run starts its own sluiced (PATH, default daemon/sluiced of "
		"this\n"
		"build) with the spec in its config dir and reads it with one reader thread "
		"taking\n"
		"batches as fast as it can (sluice_next + release, touching nothing); batches are\n"
		"counted every %.2f s from the attach.\n"
		"  grid    each of num_prefetch 1, 2, 4, 8, 16 x num_read_buffer_bytes 65536,\n"
		"          1048576, 4194304, for S seconds (default 4): the rate over the last\n"
		"          S/2, the median of N runs (--repeat, default 1, at most %d). One\n"
		"          line each: bench=autotune-grid spec=NAME prefetch= read_buffer_bytes=\n"
		"          per_s= repeat=\n"
		"  tuned   both knobs \"auto\" (sluiced's --autotune left at its default, on),\n"
		"          for T seconds (default 15): tuned_per_s is the rate over the last\n"
		"          %.0f s (the last T/2 when T is under %.0f); seconds_to_90 the first\n"
		"          sample time at which the rate over the preceding %.0f s reaches %.0f "
		"%%\n"
		"          of best_fixed_per_s (-1: never); tune_* the tuner's counters at the\n"
		"          end (-1: the daemon does not give them). N runs as the grid's\n"
		"          points, each after a run of the grid's best point for as long,\n"
		"          measured the same way (best_fixed_per_s: a fresh measure of it, not\n"
		"          the luckiest of 15 medians); a bench=autotune-run line each; the\n"
		"          medians.\n"
		"  One line per spec: bench=autotune spec=NAME tuned_per_s= best_fixed_per_s=\n"
		"  grid_best_per_s= grid_best=pf:N,rb:B ratio=(the median of each tuned run's\n"
		"  rate over the best point's run before it) ratio_of_medians=(tuned/best_fixed)\n"
		"  ratio_grid=(tuned/grid_best) seconds_to_90= tune_prefetch=\n"
		"  tune_read_buffer_bytes= tune_moves= tune_weight= repeat=\n"
		"\n"
		"--pair: one sluiced with --cpus N (default 2) serving A and B, both knobs "
		"\"auto\";\n"
		"A read by a paced reader asking PER_S batches a second (an absolute schedule,\n"
		"never ahead of it; default: half of A's grid best, the grid measured first), B\n"
		"by a greedy reader (--demand-b: paced as A is), together for T seconds; the\n"
		"same with sluiced\n"
		"--autotune=false (\"auto\" fixed, equal weights); then A alone and B alone,\n"
		"greedy, each on a fresh sluiced --cpus N for T seconds (the solo maxima). Rates\n"
		"over the last %.0f s as above. One line: bench=autotune spec=pair a_spec=\n"
		"b_spec= a_demand_per_s= a_per_s= b_per_s= a_solo_per_s= b_solo_per_s=\n"
		"a_ratio=(a_per_s/a_demand) b_share=(b_per_s/b_solo) a_tune_weight=\n"
		"b_tune_weight= untuned_a_per_s= untuned_b_per_s= untuned_a_ratio=\n"
		"untuned_b_share= (the same figures with the tuner off) b_demand_per_s=\n"
		"b_ratio=(b_per_s/b_demand) untuned_b_ratio= (--demand-b PER_S: B paced too, as\n"
		"A; 0 and 0 when B is greedy) cores= untuned_cores= (the daemon's CPU seconds a\n"
		"second over the same window, tuned and untuned) a_cores= b_cores=\n"
		"untuned_a_cores= untuned_b_cores= (each pipeline's: its driver's CPU and its\n"
		"pool tasks' time, a second)\n"
		"\n"
		"SLUICE_BENCH_LOGS=DIR keeps each daemon's log there.\n"
		"\n"
		"Exit status 1 when sluiced does not start, a spec is bad or a pipeline fails\n"
		"(the daemon's log is printed), 2 on a usage error.\n",
		AT_TICK_S, AT_MAX_REPEAT, AT_WINDOW_S, 2 * AT_WINDOW_S, AT_REACH_S, AT_REACH * 100,
		AT_WINDOW_S);
}

struct at_args {
	const char *sluiced;
	double seconds, tune_seconds, demand_a, demand_b;
	uint64_t repeat, cpus;
	bool pair;
};

/* ---- specs ---- */

/*
 * The spec file as JSON (*ret_spec, the caller's), its relative dataset paths made absolute
 * (the daemon reads it from a config dir elsewhere; docs/pipeline-spec.md, "Relative paths").
 */
static int spec_load(const char *path, json_t **ret_spec)
{
	static const char *const keys[] = { "data_dir", "manifest_file", "list_file" };
	json_error_t jerr;
	json_t *spec = json_load_file(path, 0, &jerr), *ds;
	char *real, *slash;

	if (!spec) {
		fprintf(stderr, "sluice-bench autotune: %s:%d:%d: %s\n", path, jerr.line,
			jerr.column, jerr.text);
		return -EINVAL;
	}
	if (!json_is_object(json_object_get(spec, "args"))) {
		fprintf(stderr,
			"sluice-bench autotune: %s: not a pipeline spec (no \"args\" object)\n",
			path);
		json_decref(spec);
		return -EINVAL;
	}
	real = realpath(path, NULL);
	if (!real) {
		int rc = -errno;

		fprintf(stderr, "sluice-bench autotune: %s: %s\n", path, strerror(-rc));
		json_decref(spec);
		return rc;
	}
	slash = strrchr(real, '/');
	*slash = '\0'; /* realpath is absolute: there is one */
	ds = json_object_get(json_object_get(json_object_get(spec, "args"), "dataset"), "args");
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const char *v = json_string_value(json_object_get(ds, keys[i]));
		char abs[PATH_MAX];

		if (!v || !*v || v[0] == '/')
			continue;
		if ((size_t)snprintf(abs, sizeof(abs), "%s/%s", real, v) >= sizeof(abs) ||
		    json_object_set_new(ds, keys[i], json_string(abs)) < 0) {
			fprintf(stderr, "sluice-bench autotune: %s: dataset.args.%s: too long\n",
				path, keys[i]);
			free(real);
			json_decref(spec);
			return -ENAMETOOLONG;
		}
	}
	free(real);
	*ret_spec = spec;
	return 0;
}

static json_t *knob(int64_t v)
{
	return v == AT_AUTO ? json_string("auto") : json_integer((json_int_t)v);
}

/*
 * The spec as pipeline name with the two knobs set (AT_AUTO: "auto"), checked by the spec
 * parser here so that a bad spec fails before a daemon starts. The caller frees *ret_text.
 */
static int spec_text(const json_t *spec, const char *origin, const char *name, int64_t prefetch,
		     int64_t read_buffer, char **ret_text)
{
	json_t *s = json_deep_copy(spec), *args;
	struct pl_spec *parsed;
	struct io_error err;
	char *text = NULL;
	int rc;

	args = json_object_get(s, "args");
	if (!s || json_object_set_new(s, "name", json_string(name)) < 0 ||
	    json_object_set_new(args, "num_prefetch", knob(prefetch)) < 0 ||
	    json_object_set_new(args, "num_read_buffer_bytes", knob(read_buffer)) < 0 ||
	    !(text = json_dumps(s, JSON_COMPACT))) {
		json_decref(s);
		fprintf(stderr, "sluice-bench autotune: out of memory\n");
		return -ENOMEM;
	}
	json_decref(s);
	rc = pl_spec_parse(text, strlen(text), origin, &parsed, &err);
	if (rc < 0) {
		fprintf(stderr, "sluice-bench autotune: %s\n", err.msg);
		free(text);
		return rc;
	}
	pl_spec_destroy(parsed);
	*ret_text = text;
	return 0;
}

/* ---- the grid, the tuned run, the pair ---- */

static int cmp_double(const void *x, const void *y)
{
	double u = *(const double *)x, v = *(const double *)y;

	return u < v ? -1 : u > v;
}

static double median(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/*
 * One greedy reader of pipeline name alone for `seconds`: its rate over the last w (and the
 * tuner's counters at the end), or with ret_s, the samples (the caller frees them).
 */
static int run_one(const struct at_args *a, const char *name, const char *text,
		   const char *const *extra, double seconds, double w, double *ret_per_s,
		   struct at_pipe *ret_pipe, struct at_samples *ret_s)
{
	struct at_pipe p = { .name = name, .text = text };
	struct at_samples s;
	int rc = at_run(a->sluiced, &p, 1, extra, seconds, &s);

	if (rc < 0)
		return rc;
	*ret_per_s = at_rate_last(&s, p.count, w);
	if (ret_s) {
		*ret_pipe = p;
		*ret_s = s;
	} else {
		at_samples_free(&s, &p, 1);
	}
	return 0;
}

/* Every grid point of spec, a line each; the best point's rate and knobs. */
static int grid(const struct at_args *a, const char *label, const json_t *spec, const char *origin,
		double *ret_best, int64_t *ret_pf, int64_t *ret_rb)
{
	double best = -1;
	int64_t best_pf = 0, best_rb = 0;

	for (size_t i = 0; i < sizeof(at_prefetch) / sizeof(at_prefetch[0]); i++) {
		for (size_t j = 0; j < sizeof(at_read_buffer) / sizeof(at_read_buffer[0]); j++) {
			double v[AT_MAX_REPEAT], m;
			char *text = NULL;
			int rc = spec_text(spec, origin, NB_PIPELINE, at_prefetch[i],
					   at_read_buffer[j], &text);

			for (unsigned r = 0; r < a->repeat && rc == 0; r++)
				rc = run_one(a, NB_PIPELINE, text, NULL, a->seconds, a->seconds / 2,
					     &v[r], NULL, NULL);
			free(text);
			if (rc < 0)
				return rc;
			m = median(v, (unsigned)a->repeat);
			printf("bench=autotune-grid spec=%s prefetch=%lld read_buffer_bytes=%lld "
			       "per_s=%.1f repeat=%u\n",
			       label, (long long)at_prefetch[i], (long long)at_read_buffer[j], m,
			       (unsigned)a->repeat);
			fflush(stdout);
			if (m > best) {
				best = m;
				best_pf = at_prefetch[i];
				best_rb = at_read_buffer[j];
			}
		}
	}
	*ret_best = best;
	*ret_pf = best_pf;
	*ret_rb = best_rb;
	return 0;
}

static int one_spec(const struct at_args *a, const char *label, const json_t *spec,
		    const char *origin)
{
	double best, fixed, tuned, paired, s90, w = at_tuned_window(a->tune_seconds);
	double t[AT_MAX_REPEAT], f[AT_MAX_REPEAT], r90[AT_MAX_REPEAT];
	struct at_samples s[AT_MAX_REPEAT] = { 0 };
	struct at_pipe p[AT_MAX_REPEAT] = { 0 };
	unsigned done = 0;
	char reach[32];
	int64_t best_pf, best_rb;
	char *text = NULL, *best_text = NULL;
	int rc;

	/* the tuned spec first: a spec the parser refuses fails before 15 grid runs */
	rc = spec_text(spec, origin, NB_PIPELINE, AT_AUTO, AT_AUTO, &text);
	if (rc == 0)
		rc = grid(a, label, spec, origin, &best, &best_pf, &best_rb);
	if (rc == 0)
		rc = spec_text(spec, origin, NB_PIPELINE, best_pf, best_rb, &best_text);
	/*
	 * As many tuned runs as each grid point had, each after a run of the best grid point for
	 * as long, measured the same way (the same stretch of a run, fresh samples: the grid's
	 * best median is the luckiest of 15, and the machine drifts over minutes).
	 */
	for (unsigned r = 0; r < a->repeat && rc == 0; r++) {
		rc = run_one(a, NB_PIPELINE, best_text, NULL, a->tune_seconds, w, &f[r], NULL,
			     NULL);
		if (rc == 0)
			rc = run_one(a, NB_PIPELINE, text, NULL, a->tune_seconds, w, &t[r], &p[r],
				     &s[r]);
		if (rc < 0)
			break;
		done++;
		printf("bench=autotune-run spec=%s run=%u tuned_per_s=%.1f best_fixed_per_s=%.1f "
		       "tune_prefetch=%lld tune_read_buffer_bytes=%lld tune_moves=%lld\n",
		       label, r, t[r], f[r], (long long)p[r].tune[AT_TUNE_PREFETCH],
		       (long long)p[r].tune[AT_TUNE_READ_BUFFER],
		       (long long)p[r].tune[AT_TUNE_MOVES]);
		fflush(stdout);
	}
	if (rc == 0) {
		double pr[AT_MAX_REPEAT];
		for (unsigned r = 0; r < done; r++)
			pr[r] = f[r] > 0 ? t[r] / f[r] : 0;
		paired = median(pr, done);
		tuned = median(t, (unsigned)a->repeat);
		fixed = median(f, (unsigned)a->repeat);
		for (unsigned r = 0; r < done; r++) {
			r90[r] = fixed > 0 ? at_time_to_reach(&s[r], p[r].count, AT_REACH * fixed)
					   : -1;
			if (r90[r] < 0)
				r90[r] = 1e9; /* never: after every run that reached it */
		}
		s90 = median(r90, done);
		if (s90 >= 1e9)
			snprintf(reach, sizeof(reach), "-1");
		else
			snprintf(reach, sizeof(reach), "%.2f", s90);
		printf("bench=autotune spec=%s tuned_per_s=%.1f best_fixed_per_s=%.1f "
		       "grid_best_per_s=%.1f grid_best=pf:%lld,rb:%lld ratio=%.3f "
		       "ratio_of_medians=%.3f ratio_grid=%.3f "
		       "seconds_to_90=%s tune_prefetch=%lld tune_read_buffer_bytes=%lld "
		       "tune_moves=%lld tune_weight=%lld repeat=%u\n",
		       label, tuned, fixed, best, (long long)best_pf, (long long)best_rb, paired,
		       fixed > 0 ? tuned / fixed : 0, best > 0 ? tuned / best : 0, reach,
		       (long long)p[done - 1].tune[AT_TUNE_PREFETCH],
		       (long long)p[done - 1].tune[AT_TUNE_READ_BUFFER],
		       (long long)p[done - 1].tune[AT_TUNE_MOVES],
		       (long long)p[done - 1].tune[AT_TUNE_WEIGHT], (unsigned)a->repeat);
		fflush(stdout);
	}
	for (unsigned r = 0; r < done; r++)
		at_samples_free(&s[r], &p[r], 1);
	free(text);
	free(best_text);
	return rc;
}

/* A pair read together for --tune-seconds, over the last w: the rates of a and b, the
   daemon's cores, a's and b's. */
struct at_pair_out {
	double a, b, cores, a_cores, b_cores;
};

static int pair_rates(const struct at_args *a, struct at_pipe p[2], const char *const *extra,
		      double w, struct at_pair_out *ret)
{
	struct at_samples s;
	int rc = at_run(a->sluiced, p, 2, extra, a->tune_seconds, &s);

	if (rc < 0)
		return rc;
	ret->a = at_rate_last(&s, p[0].count, w);
	ret->b = at_rate_last(&s, p[1].count, w);
	ret->cores = at_cores_last(&s, s.cpu, w);
	ret->a_cores = at_cores_last(&s, p[0].cpu, w);
	ret->b_cores = at_cores_last(&s, p[1].cpu, w);
	at_samples_free(&s, p, 2);
	return 0;
}

static int pair(const struct at_args *a, const char *label_a, const json_t *spec_a,
		const char *origin_a, const char *label_b, const json_t *spec_b,
		const char *origin_b)
{
	double demand = a->demand_a, w = at_tuned_window(a->tune_seconds);
	double a_solo, b_solo;
	struct at_pair_out on, off;
	struct at_pipe p[2] = { { .name = AT_PIPE_A }, { .name = AT_PIPE_B } };
	char *text_a = NULL, *text_b = NULL, cpus[24];
	const char *extra[] = { "--cpus", cpus, NULL };
	const char *untuned[] = { "--cpus", cpus, "--autotune=false", NULL };
	int rc;

	snprintf(cpus, sizeof(cpus), "%llu", (unsigned long long)a->cpus);
	rc = spec_text(spec_a, origin_a, AT_PIPE_A, AT_AUTO, AT_AUTO, &text_a);
	if (rc == 0)
		rc = spec_text(spec_b, origin_b, AT_PIPE_B, AT_AUTO, AT_AUTO, &text_b);
	if (rc == 0 && demand <= 0) {
		double best;
		int64_t pf, rb;

		rc = grid(a, label_a, spec_a, origin_a, &best, &pf, &rb);
		demand = best / 2;
		if (rc == 0 && !(demand > 0)) {
			fprintf(stderr, "sluice-bench autotune: %s: no batches in the grid\n",
				label_a);
			rc = -ENODATA;
		}
	}
	if (rc < 0)
		goto out;
	p[0].text = text_a;
	p[0].demand = demand;
	p[1].text = text_b;
	p[1].demand = a->demand_b; /* 0: greedy */
	rc = pair_rates(a, p, extra, w, &on);
	/* the same pair with the tuner off: "auto" fixed, the pool's queues weighed alike */
	struct at_pipe q[2] = { p[0], p[1] };
	if (rc == 0)
		rc = pair_rates(a, q, untuned, w, &off);
	if (rc < 0)
		goto out;
	rc = run_one(a, AT_PIPE_A, text_a, extra, a->tune_seconds, w, &a_solo, NULL, NULL);
	if (rc == 0)
		rc = run_one(a, AT_PIPE_B, text_b, extra, a->tune_seconds, w, &b_solo, NULL, NULL);
	if (rc < 0)
		goto out;
	printf("bench=autotune spec=pair a_spec=%s b_spec=%s cpus=%llu a_demand_per_s=%.1f "
	       "a_per_s=%.1f b_per_s=%.1f a_solo_per_s=%.1f b_solo_per_s=%.1f a_ratio=%.3f "
	       "b_share=%.3f a_tune_weight=%lld b_tune_weight=%lld untuned_a_per_s=%.1f "
	       "untuned_b_per_s=%.1f untuned_a_ratio=%.3f untuned_b_share=%.3f "
	       "b_demand_per_s=%.1f b_ratio=%.3f untuned_b_ratio=%.3f cores=%.2f "
	       "untuned_cores=%.2f a_cores=%.2f b_cores=%.2f untuned_a_cores=%.2f "
	       "untuned_b_cores=%.2f\n",
	       label_a, label_b, (unsigned long long)a->cpus, demand, on.a, on.b, a_solo, b_solo,
	       on.a / demand, b_solo > 0 ? on.b / b_solo : 0, (long long)p[0].tune[AT_TUNE_WEIGHT],
	       (long long)p[1].tune[AT_TUNE_WEIGHT], off.a, off.b, off.a / demand,
	       b_solo > 0 ? off.b / b_solo : 0, a->demand_b,
	       a->demand_b > 0 ? on.b / a->demand_b : 0, a->demand_b > 0 ? off.b / a->demand_b : 0,
	       on.cores, off.cores, on.a_cores, on.b_cores, off.a_cores, off.b_cores);
	fflush(stdout);
out:
	free(text_a);
	free(text_b);
	return rc;
}

/* ---- options ---- */

static int parse_seconds(const char *name, const char *v, double lo, double *ret)
{
	char *end;
	double s = strtod(v, &end);

	if (end == v || *end || !(s >= lo && s <= 600)) {
		fprintf(stderr, "sluice-bench autotune: --%s: not %g to 600: %s\n", name, lo, v);
		return -EINVAL;
	}
	*ret = s;
	return 0;
}

static int autotune_parse(int argc, char **argv, struct at_args *a)
{
	static const struct option opts[] = {
		{ "seconds", required_argument, NULL, 's' },
		{ "tune-seconds", required_argument, NULL, 't' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "sluiced", required_argument, NULL, 'S' },
		{ "pair", no_argument, NULL, 'p' },
		{ "demand-a", required_argument, NULL, 'd' },
		{ "demand-b", required_argument, NULL, 'D' },
		{ "cpus", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *name;
	int o;

	*a = (struct at_args){ .seconds = 4, .tune_seconds = 15, .repeat = 1, .cpus = 2 };
	optind = 0;
	while ((o = bench_getopt(argc, argv, opts, &name)) != -1) {
		int rc = 0;

		switch (o) {
		case 'h':
			autotune_usage(stdout);
			return 1;
		case 's':
			rc = parse_seconds(name, optarg, 0.5, &a->seconds);
			break;
		case 't':
			rc = parse_seconds(name, optarg, 2 * AT_REACH_S, &a->tune_seconds);
			break;
		case 'd':
		case 'D': {
			char *end;
			double *dst = o == 'd' ? &a->demand_a : &a->demand_b;

			*dst = strtod(optarg, &end);
			if (end == optarg || *end || !(*dst > 0 && *dst <= 1e7)) {
				fprintf(stderr,
					"sluice-bench autotune: --%s: not a rate above 0 (batches "
					"a second): %s\n",
					name, optarg);
				rc = -EINVAL;
			}
			break;
		}
		case 'r':
		case 'c': {
			uint64_t max = o == 'r' ? AT_MAX_REPEAT : 4096, *dst;

			dst = o == 'r' ? &a->repeat : &a->cpus;
			if (cli_parse_u64(optarg, max, dst) < 0 || !*dst) {
				fprintf(stderr, "sluice-bench autotune: --%s: not 1 to %llu: %s\n",
					name, (unsigned long long)max, optarg);
				rc = -EINVAL;
			}
			break;
		}
		case 'S':
			a->sluiced = optarg;
			break;
		case 'p':
			a->pair = true;
			break;
		default: /* '?', said */
			return 2;
		}
		if (rc < 0)
			return 2;
	}
	if (a->pair ? argc - optind != 2 : optind == argc) {
		fprintf(stderr, "sluice-bench autotune: give %s (try --help)\n",
			a->pair ? "--pair two specs, A=SPEC B=SPEC" : "NAME=SPEC...");
		return 2;
	}
	return 0;
}

int bench_autotune(int argc, char **argv)
{
	json_t *specs[2] = { NULL, NULL };
	const char *labels[2], *paths[2];
	char sluiced[PATH_MAX];
	struct at_args a;
	int rc = autotune_parse(argc, argv, &a), status = 0;

	if (rc)
		return rc == 1 ? 0 : rc;
	if (!a.sluiced) {
		if (nb_default_sluiced(sluiced, sizeof(sluiced)) < 0) {
			fprintf(stderr, "sluice-bench autotune: where is sluiced? (give "
					"--sluiced)\n");
			return 2;
		}
		a.sluiced = sluiced;
	}
	/* every operand checked before the first run */
	for (int i = optind; i < argc; i++) {
		const char *eq = strchr(argv[i], '=');

		if (!eq || eq == argv[i] || !eq[1]) {
			fprintf(stderr, "sluice-bench autotune: %s: give NAME=SPEC\n", argv[i]);
			return 2;
		}
		if (strcspn(argv[i], " \t=") != (size_t)(eq - argv[i])) {
			fprintf(stderr, "sluice-bench autotune: %s: NAME has a space\n", argv[i]);
			return 2;
		}
	}
	if (a.pair) {
		for (int i = 0; i < 2 && status == 0; i++) {
			char *eq = strchr(argv[optind + i], '=');

			*eq = '\0';
			labels[i] = argv[optind + i];
			paths[i] = eq + 1;
			if (spec_load(paths[i], &specs[i]) < 0)
				status = 1;
		}
		if (status == 0 &&
		    pair(&a, labels[0], specs[0], paths[0], labels[1], specs[1], paths[1]) < 0)
			status = 1;
		json_decref(specs[0]);
		json_decref(specs[1]);
		return status;
	}
	for (int i = optind; i < argc; i++) {
		char *eq = strchr(argv[i], '=');
		json_t *spec;

		*eq = '\0';
		if (spec_load(eq + 1, &spec) < 0) {
			status = 1;
			continue;
		}
		if (one_spec(&a, argv[i], spec, eq + 1) < 0)
			status = 1;
		json_decref(spec);
	}
	return status;
}
