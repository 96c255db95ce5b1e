/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sluice-bench autotune's runs (bench_autotune.h): every run starts a sluiced of its own
 * (bench_next_daemon.c) whose config dir holds the run's specs, so that each starts with empty
 * rings, a tuner that has seen nothing, and its knobs where the spec puts them. Readers are
 * threads of this process, each on a connection of its own; the main thread counts the batches
 * they took every AT_TICK_S on an absolute schedule.
 */
#include "bench_autotune.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_next.h"
#include "sluice/sluice.h"

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

/* The tuner's counters (sluice_stats); absent until sluiced has a tuner: -1 (unknown). */
static const char *const at_tune_keys[AT_TUNE_N] = { "tune_prefetch", "tune_read_buffer_bytes",
						     "tune_moves", "tune_weight" };
/* A pipeline's CPU (its driver's, and its tasks' on the pool) from its counters. */
static const char *const at_cpu_keys[2] = { "driver_cpu_ns", "pool_task_ns" };

/* When sample k was due (t[k] is that and the sleep's lateness). */
static double due_s(const struct at_samples *s, unsigned k)
{
	return fmin((double)k * AT_TICK_S, s->seconds);
}

void at_samples_free(struct at_samples *s, struct at_pipe *p, unsigned np)
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

int at_run(const char *sluiced, struct at_pipe *p, unsigned np, const char *const *extra,
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
	rc = nb_daemon_start_specs(&d, sluiced, specs, np, extra, &c);
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
		/* the cores: a pair's figures only (a stats request a pipe and a tick) */
		if (np > 1 && nb_daemon_cpu_s(d.pid, &s->cpu[k]) < 0)
			s->cpu[k] = k ? s->cpu[k - 1] : 0;
		for (unsigned i = 0; i < np; i++) {
			p[i].count[k] = atomic_load_explicit(&rs[i].taken, memory_order_relaxed);
			int64_t v[2];
			if (np > 1)
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
	at_samples_free(s, p, np);
	return rc;
}

/*
 * The sample the last w seconds of the run start at: the one due w before the last (or the
 * nearest after); the last itself when the run is shorter than a tick.
 */
static unsigned window_from(const struct at_samples *s, double w)
{
	unsigned last = s->n - 1, k = last;

	while (k > 0 && due_s(s, last) - due_s(s, k - 1) <= w + 1e-9)
		k--;
	return k;
}

double at_rate_last(const struct at_samples *s, const uint64_t *count, double w)
{
	unsigned last = s->n - 1, k = window_from(s, w);

	return k == last ? 0 : (double)(count[last] - count[k]) / (s->t[last] - s->t[k]);
}

double at_cores_last(const struct at_samples *s, const double *cpu, double w)
{
	unsigned last = s->n - 1, k = window_from(s, w);

	return k == last ? 0 : (cpu[last] - cpu[k]) / (s->t[last] - s->t[k]);
}

double at_time_to_reach(const struct at_samples *s, const uint64_t *count, double target)
{
	unsigned back = (unsigned)(AT_REACH_S / AT_TICK_S + 0.5);

	for (unsigned k = back; k < s->n; k++) {
		double dt = s->t[k] - s->t[k - back];

		if (dt > 0 && (double)(count[k] - count[k - back]) / dt >= target)
			return due_s(s, k);
	}
	return -1;
}

double at_tuned_window(double seconds)
{
	return seconds >= 2 * AT_WINDOW_S ? AT_WINDOW_S : seconds / 2;
}
