/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sluice-bench autotune: issue 20's acceptance. Does sluiced's online autotuner, given a spec
 * whose num_prefetch and num_read_buffer_bytes are "auto", reach the rate of the best fixed
 * setting of the two, how soon, and does it share a CPU budget between a paced pipeline and a
 * greedy one so that the paced one gets what it asks for?
 */
#include "bench.h"
#include "bench_next.h"

#include <assert.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/pipeline/spec.h"
#include "sluice/sluice.h"
#include "tools/common/cliarg.h"

/*
 * Every run starts a sluiced of its own (bench_next_daemon.c) whose config dir holds the run's
 * specs, so that each starts with empty rings, a tuner that has seen nothing, and its knobs
 * where the spec puts them. Readers are threads of this process, each on a connection of its
 * own; the main thread counts the batches they took every AT_TICK_S on an absolute schedule.
 */

#define AT_TICK_S     0.25 /* the sampling period */
#define AT_WINDOW_S   5.0  /* tuned_per_s: the rate over the run's last AT_WINDOW_S */
#define AT_REACH_S    1.0  /* seconds_to_90: the rate over the preceding AT_REACH_S */
#define AT_REACH      0.9  /* ... reaches this share of grid_best_per_s */
#define AT_MAX_REPEAT 16
#define AT_AUTO	      (-1) /* a knob's value "auto" */
#define AT_PIPE_A     "at-a"
#define AT_PIPE_B     "at-b"

static const int64_t at_prefetch[] = { 1, 2, 4, 8, 16 };
static const int64_t at_read_buffer[] = { 65536, 1048576, 4194304 };

/* The tuner's counters (sluice_stats); absent until sluiced has a tuner: -1 (unknown). */
enum { AT_TUNE_PREFETCH, AT_TUNE_READ_BUFFER, AT_TUNE_MOVES, AT_TUNE_WEIGHT, AT_TUNE_N };
static const char *const at_tune_keys[AT_TUNE_N] = { "tune_prefetch", "tune_read_buffer_bytes",
						     "tune_moves", "tune_weight" };

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

/* ---- readers ---- */

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Sleep until CLOCK_MONOTONIC reads t_ns. */
static void sleep_until_ns(int64_t t_ns)
{
	struct timespec ts = { (time_t)(t_ns / 1000000000), (long)(t_ns % 1000000000) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

/* What the main thread and the reader threads of a run share. */
struct at_start {
	atomic_uint attached; /* readers that connected and attached, or failed to */
	atomic_bool go;	      /* t0_ns is set: read */
	atomic_bool stop;
	int64_t t0_ns; /* the readers' origin: written before go, read after it */
};

/*
 * A reader thread of one pipeline: it connects and attaches (then counts itself in
 * `attached`), waits for `go`, and takes batches until `stop`. demand > 0: batch k is taken no
 * earlier than t0 + k / demand (a training step of fixed pace, which catches up when a batch
 * came late but never reads ahead); 0: as fast as it can.
 */
struct at_reader {
	const char *sock, *name;
	double demand;
	struct at_start *start;
	pthread_t thread;
	_Atomic uint64_t taken; /* sampled by the main thread; a count, nothing published by it */
	atomic_bool failed;	/* rc and msg are set (read after pthread_join) */
	int rc;
	char msg[600];
};

/* Take one batch and give it back: 1, 0 when stopped, or -errno with r->msg. */
static int take_one(struct at_reader *r, struct sluice_reader *rd)
{
	struct sluice_error err = { 0, "" };

	while (!atomic_load_explicit(&r->start->stop, memory_order_relaxed)) {
		struct sluice_batch *b = NULL;
		int rc = sluice_next(rd, 100, &b, &err);

		if (rc == -ETIMEDOUT)
			continue;
		if (rc == 0) {
			snprintf(r->msg, sizeof(r->msg),
				 "%s: the stream ended (give an endless spec: epochs null)",
				 r->name);
			return -ENODATA;
		}
		if (rc < 0) {
			snprintf(r->msg, sizeof(r->msg), "%s: %s", r->name, err.msg);
			return rc;
		}
		sluice_batch_release(b);
		atomic_fetch_add_explicit(&r->taken, 1, memory_order_relaxed);
		return 1;
	}
	return 0;
}

static int read_loop(struct at_reader *r, struct sluice_reader *rd, int64_t t0_ns)
{
	for (uint64_t k = 0;; k++) {
		int rc;

		if (r->demand > 0) {
			int64_t due = t0_ns + (int64_t)((double)k * 1e9 / r->demand), now;

			/* in steps of at most 0.1 s, so that a slow pace still sees the stop */
			while ((now = mono_ns()) < due &&
			       !atomic_load_explicit(&r->start->stop, memory_order_relaxed))
				sleep_until_ns(due - now > 100000000 ? now + 100000000 : due);
		}
		rc = take_one(r, rd);
		if (rc <= 0)
			return rc;
	}
}

static void *reader_main(void *arg)
{
	struct at_reader *r = arg;
	struct sluice_error err = { 0, "" };
	struct sluice_client *c = NULL;
	struct sluice_reader *rd = NULL;
	int rc = sluice_connect(r->sock, &c, &err);

	if (rc < 0)
		snprintf(r->msg, sizeof(r->msg), "connect %s: %s", r->sock, err.msg);
	else if ((rc = nb_attach_pipeline(c, r->name, &rd)) < 0)
		snprintf(r->msg, sizeof(r->msg),
			 "cannot read pipeline %s (the daemon's log follows)", r->name);
	r->rc = rc;
	/* release: r->rc and r->msg, for the main thread's acquire load of attached */
	atomic_fetch_add_explicit(&r->start->attached, 1, memory_order_release);
	/* acquire: pairs with the main thread's release store of go, after t0_ns */
	while (!atomic_load_explicit(&r->start->go, memory_order_acquire))
		sleep_until_ns(mono_ns() + 1000000);
	if (rc == 0 && !atomic_load_explicit(&r->start->stop, memory_order_relaxed)) {
		rc = read_loop(r, rd, r->start->t0_ns);
		r->rc = rc;
		if (rc < 0)
			atomic_store(&r->failed, true);
	}
	sluice_detach(rd);
	sluice_disconnect(c);
	return NULL;
}

/* ---- one run: a fresh sluiced, its pipelines read, the batches counted ---- */

struct at_pipe {
	const char *name, *text;
	double demand; /* batches a second; 0: greedy */
	/* out */
	int64_t tune[AT_TUNE_N];
	uint64_t *count; /* count[k]: the batches taken by sample k */
	double *cpu;	 /* cpu[k]: its driver's CPU and its pool tasks' time by then, seconds */
};

/* A pipeline's CPU (its driver's, and its tasks' on the pool) from its counters. */
static const char *const at_cpu_keys[2] = { "driver_cpu_ns", "pool_task_ns" };

struct at_samples {
	unsigned n;
	double seconds; /* sample k is due at min(k * AT_TICK_S, seconds) */
	double *t;	/* t[k]: when it was taken, seconds since the readers' start */
	double *cpu;	/* cpu[k]: the daemon's CPU seconds then (user + system) */
};

/* When sample k was due (t[k] is that and the sleep's lateness). */
static double due_s(const struct at_samples *s, unsigned k)
{
	return fmin((double)k * AT_TICK_S, s->seconds);
}

static void samples_free(struct at_samples *s, struct at_pipe *p, unsigned np)
{
	free(s->t);
	s->t = NULL;
	free(s->cpu);
	s->cpu = NULL;
	for (unsigned i = 0; i < np; i++) {
		free(p[i].count);
		p[i].count = NULL;
		free(p[i].cpu);
		p[i].cpu = NULL;
	}
}

/*
 * Start sluiced (extra: its options, or NULL) with np (at most 2) pipelines, read each with a
 * thread for `seconds`, counting every AT_TICK_S; the tuner's counters at the end. On success
 * the caller frees the samples (samples_free); on failure there are none.
 */
static int run(const struct at_args *a, struct at_pipe *p, unsigned np, const char *const *extra,
	       double seconds, struct at_samples *s)
{
	struct at_reader *rs = calloc(np, sizeof(*rs));
	struct at_start st = { 0 };
	struct nb_spec specs[2];
	struct sluice_client *c = NULL;
	struct nb_daemon d;
	unsigned started = 0;
	bool oom = !rs;
	int rc = 0;

	assert(np >= 1 && np <= 2);
	s->n = (unsigned)ceil(seconds / AT_TICK_S - 1e-9) + 1;
	s->seconds = seconds;
	s->t = calloc(s->n, sizeof(*s->t));
	s->cpu = calloc(s->n, sizeof(*s->cpu));
	oom |= !s->t || !s->cpu;
	for (unsigned i = 0; i < np; i++) {
		p[i].count = calloc(s->n, sizeof(*p[i].count));
		p[i].cpu = calloc(s->n, sizeof(*p[i].cpu));
		oom |= !p[i].count || !p[i].cpu;
		specs[i] = (struct nb_spec){ p[i].name, p[i].text };
	}
	if (oom) {
		fprintf(stderr, "sluice-bench autotune: out of memory\n");
		rc = -ENOMEM;
		goto fail_free;
	}
	rc = nb_daemon_start_specs(&d, a->sluiced, specs, np, extra, &c);
	if (rc < 0)
		goto fail_free;
	for (unsigned i = 0; i < np && rc == 0; i++) {
		rs[i].sock = d.sock;
		rs[i].name = p[i].name;
		rs[i].demand = p[i].demand;
		rs[i].start = &st;
		rc = -pthread_create(&rs[i].thread, NULL, reader_main, &rs[i]);
		if (rc < 0)
			fprintf(stderr, "sluice-bench autotune: pthread_create: %s\n",
				strerror(-rc));
		else
			started++;
	}
	/* acquire: pairs with each reader's release increment, after its rc and msg */
	while (atomic_load_explicit(&st.attached, memory_order_acquire) < started)
		sleep_until_ns(mono_ns() + 1000000);
	for (unsigned i = 0; i < started; i++) {
		if (rs[i].rc < 0) {
			fprintf(stderr, "sluice-bench autotune: %s\n", rs[i].msg);
			rc = rs[i].rc;
		}
	}
	if (rc < 0) {
		nb_print_log(&d); /* a spec the daemon refused: its log says why */
		atomic_store(&st.stop, true);
	}
	st.t0_ns = mono_ns();
	/* release: t0_ns, for the readers' acquire load of go */
	atomic_store_explicit(&st.go, true, memory_order_release);
	for (unsigned k = 0; k < s->n && rc == 0; k++) {
		sleep_until_ns(st.t0_ns + (int64_t)(due_s(s, k) * 1e9));
		s->t[k] = (double)(mono_ns() - st.t0_ns) / 1e9;
		if (nb_daemon_cpu_s(d.pid, &s->cpu[k]) < 0)
			s->cpu[k] = k ? s->cpu[k - 1] : 0;
		for (unsigned i = 0; i < np; i++) {
			p[i].count[k] = atomic_load_explicit(&rs[i].taken, memory_order_relaxed);
			int64_t v[2];
			p[i].cpu[k] = nb_stats_read(c, p[i].name, at_cpu_keys, 2, v) == 0
					      ? (double)(v[0] + v[1]) / 1e9
					      : (k ? p[i].cpu[k - 1] : 0);
			if (atomic_load(&rs[i].failed))
				rc = -EIO; /* said after the join */
		}
	}
	for (unsigned i = 0; i < np && rc == 0; i++)
		rc = nb_stats_read(c, p[i].name, at_tune_keys, AT_TUNE_N, p[i].tune);
	atomic_store(&st.stop, true);
	for (unsigned i = 0; i < started; i++) {
		pthread_join(rs[i].thread, NULL);
		if (atomic_load(&rs[i].failed)) {
			fprintf(stderr, "sluice-bench autotune: %s\n", rs[i].msg);
			rc = rs[i].rc;
		}
	}
	sluice_disconnect(c);
	if (nb_daemon_stop(&d) < 0 && rc == 0)
		rc = -ECHILD;
	if (rc == 0) {
		free(rs);
		return 0;
	}
fail_free:
	free(rs);
	samples_free(s, p, np);
	return rc;
}

/*
 * The batch rate of count over the last w seconds of the run: from the sample due w before
 * the last (or the nearest after), over the time between the two samples as taken.
 */
static double rate_last(const struct at_samples *s, const uint64_t *count, double w)
{
	unsigned last = s->n - 1, k = last;

	while (k > 0 && due_s(s, last) - due_s(s, k - 1) <= w + 1e-9)
		k--;
	if (k == last)
		return 0;
	return (double)(count[last] - count[k]) / (s->t[last] - s->t[k]);
}

/* The daemon's cores (CPU seconds a second) over the last w seconds of the run, as rate_last. */
static double cores_last(const struct at_samples *s, const double *cpu, double w)
{
	unsigned last = s->n - 1, k = last;

	while (k > 0 && due_s(s, last) - due_s(s, k - 1) <= w + 1e-9)
		k--;
	return k == last ? 0 : (cpu[last] - cpu[k]) / (s->t[last] - s->t[k]);
}

/* The first sample time at which the rate over the preceding AT_REACH_S reaches target, or -1. */
static double time_to_reach(const struct at_samples *s, const uint64_t *count, double target)
{
	unsigned back = (unsigned)(AT_REACH_S / AT_TICK_S + 0.5);

	for (unsigned k = back; k < s->n; k++) {
		double dt = s->t[k] - s->t[k - back];

		if (dt > 0 && (double)(count[k] - count[k - back]) / dt >= target)
			return due_s(s, k);
	}
	return -1;
}

/* The window of the tuned rates: AT_WINDOW_S, or half the run when it is shorter than two. */
static double tuned_window(double seconds)
{
	return seconds >= 2 * AT_WINDOW_S ? AT_WINDOW_S : seconds / 2;
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
	int rc = run(a, &p, 1, extra, seconds, &s);

	if (rc < 0)
		return rc;
	*ret_per_s = rate_last(&s, p.count, w);
	if (ret_s) {
		*ret_pipe = p;
		*ret_s = s;
	} else {
		samples_free(&s, &p, 1);
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
	double best, fixed, tuned, paired, s90, w = tuned_window(a->tune_seconds);
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
			r90[r] =
				fixed > 0 ? time_to_reach(&s[r], p[r].count, AT_REACH * fixed) : -1;
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
		samples_free(&s[r], &p[r], 1);
	free(text);
	free(best_text);
	return rc;
}

/* Both pipes of a pair read together for --tune-seconds: their rates over the last w. */
/* Rates and cores of a pair run: a, b, then the daemon's cores, a's and b's. */
struct at_pair_out {
	double a, b, cores, a_cores, b_cores;
};

static int pair_rates(const struct at_args *a, struct at_pipe p[2], const char *const *extra,
		      double w, struct at_pair_out *ret)
{
	struct at_samples s;
	int rc = run(a, p, 2, extra, a->tune_seconds, &s);

	if (rc < 0)
		return rc;
	ret->a = rate_last(&s, p[0].count, w);
	ret->b = rate_last(&s, p[1].count, w);
	ret->cores = cores_last(&s, s.cpu, w);
	ret->a_cores = cores_last(&s, p[0].cpu, w);
	ret->b_cores = cores_last(&s, p[1].cpu, w);
	samples_free(&s, p, 2);
	return 0;
}

static int pair(const struct at_args *a, const char *label_a, const json_t *spec_a,
		const char *origin_a, const char *label_b, const json_t *spec_b,
		const char *origin_b)
{
	double demand = a->demand_a, w = tuned_window(a->tune_seconds);
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
