/* SPDX-License-Identifier: Apache-2.0 */
/* sluice-bench next: sluice_next latency, throughput through sluiced, and the cost of sharing. */
#include "bench.h"
#include "bench_next.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/pipeline/pipeline.h"
#include "daemon/pipeline/spec.h"
#include "sched/sched.h"
#include "sluice/sluice.h"
#include "tools/common/cliarg.h"
#include "tools/common/scan.h"

/*
 * Every measurement runs against a sluiced of its own (bench_next_daemon.c starts it, and stops
 * it with SIGTERM), whose config dir holds one spec, so that each starts with a fresh, full ring
 * and the daemon's CPU time covers that measurement only. The bench reads the daemon's counters
 * (published batches) through the control socket with libsluice's sluice_stats, as
 * sluicectl does.
 */

#define NB_BATCH   256
#define NB_BURST   16		  /* timed calls per burst of next_ready */
#define NB_BACKLOG (NB_BURST + 8) /* published but unread batches a burst starts with */

static const char *const nb_features[] = { "dense0", "dense1", "sparse0", "sparse1", "label", NULL };

static void next_usage(FILE *f)
{
	fprintf(f,
		"usage: sluice-bench next --ctr DIR [--sluiced PATH] [--batches N]\n"
		"                         [--samples N] [--repeat R]\n"
		"\n"
		"Starts its own sluiced (PATH, default: daemon/sluiced of this build) on a\n"
		"socket in a temporary directory, with a config dir holding one spec over DIR\n"
		"(made by `sluicectl gen ctr DIR`): independent loader, batches of 256, the\n"
		"features dense0, dense1, sparse0, sparse1 and label, epochs null, no shuffle,\n"
		"num_prefetch 8. A fresh daemon for each measurement, so every ring starts\n"
		"empty and then full:\n"
		"  next_ready       sluice_next on batches already published: bursts of %d\n"
		"                   take+release from a ring with at least %d unread batches\n"
		"                   (read from the daemon's counters between bursts); only\n"
		"                   calls that returned a batch at once are timed. One line\n"
		"                   with timeout 0, one with timeout -1. N samples each\n"
		"                   (--samples, default 4096).\n"
		"  next_throughput  one reader drains N batches (--batches, default 10000)\n"
		"                   through the daemon, after a warm-up that empties the\n"
		"                   ring; inprocess: the same spec in this process with the\n"
		"                   pipeline engine on a pool of every CPU, the same count;\n"
		"                   ratio = daemon / in-process batches per second.\n"
		"  share            the daemon's CPU time (/proc/PID/stat utime + stime) per\n"
		"                   batch it published while 1, then 4 broadcast readers\n"
		"                   (threads, each its own connection) drain N batches each;\n"
		"                   cpu_ratio = per batch with 4 / with 1. R pairs\n"
		"                   (--repeat, default 3, at most 15), then share_median:\n"
		"                   the medians and the ratio of the medians.\n",
		NB_BURST, NB_BACKLOG);
}

/* ---- the spec ---- */

/* The spec as JSON text; the caller frees *ret_text. */
static int make_spec(const char *dir, char **ret_text)
{
	char feats[1024], *text;
	size_t off = 0;
	int n;

	for (size_t i = 0; nb_features[i]; i++) {
		n = snprintf(feats + off, sizeof(feats) - off,
			     "%s{\"from_name\": \"%s\", \"to_name\": \"%s\"}", i ? ", " : "",
			     nb_features[i], nb_features[i]);
		if (n < 0 || (size_t)n >= sizeof(feats) - off)
			return -ENAMETOOLONG;
		off += (size_t)n;
	}
	text = malloc(PATH_MAX + 2048);
	if (!text)
		return -ENOMEM;
	/* dir comes from realpath(); a quote or backslash in it would break the JSON. */
	if (strpbrk(dir, "\"\\")) {
		free(text);
		return -EINVAL;
	}
	n = snprintf(text, PATH_MAX + 2048,
		     "{\"name\": \"%s\", \"type\": \"independent\", \"args\": {\n"
		     "  \"dataset\": {\"type\": \"dir\", \"args\": {\"data_dir\": \"%s\"}},\n"
		     "  \"target_batch_size\": %d, \"drop_remainder\": true, \"epochs\": null,\n"
		     "  \"num_parallel_reads\": 4, \"num_parallel_parses\": \"auto\",\n"
		     "  \"num_read_buffer_bytes\": 1048576, \"num_prefetch\": 8,\n"
		     "  \"shuffle\": false,\n"
		     "  \"primary_features\": [%s]}}\n",
		     NB_PIPELINE, dir, NB_BATCH, feats);
	if (n < 0 || n >= PATH_MAX + 2048) {
		free(text);
		return -ENAMETOOLONG;
	}
	*ret_text = text;
	return 0;
}

/* ---- statistics ---- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The q-quantile of sorted v[0..n) (nearest rank), in microseconds. */
static double quantile_us(const uint64_t *v, size_t n, double q)
{
	size_t k;

	if (!n)
		return 0;
	k = (size_t)(q * (double)n + 0.999999);
	if (k < 1)
		k = 1;
	if (k > n)
		k = n;
	return (double)v[k - 1] / 1e3;
}

static inline uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The timer's own cost: p50 of back-to-back clock_gettime pairs, in microseconds. */
static double timer_floor_us(void)
{
	enum { N = 10000 };
	static uint64_t v[N];

	for (size_t i = 0; i < N; i++) {
		uint64_t t0 = mono_ns();

		v[i] = mono_ns() - t0;
	}
	qsort(v, N, sizeof(v[0]), cmp_u64);
	return quantile_us(v, N, 0.5);
}

/* ---- 1. next on a batch already published ---- */

struct nb_lat {
	uint64_t *next_ns, *rel_ns;
	size_t n, cap;
	uint64_t not_ready;
};

static void lat_print(struct nb_lat *l, int timeout_ms, double timer_us)
{
	qsort(l->next_ns, l->n, sizeof(uint64_t), cmp_u64);
	qsort(l->rel_ns, l->n, sizeof(uint64_t), cmp_u64);
	printf("bench=next_ready timeout_ms=%d n=%zu p50_us=%.3f p90_us=%.3f p99_us=%.3f "
	       "max_us=%.3f not_ready=%" PRIu64 " release_p50_us=%.3f release_p99_us=%.3f "
	       "timer_p50_us=%.3f\n",
	       timeout_ms, l->n, quantile_us(l->next_ns, l->n, 0.5),
	       quantile_us(l->next_ns, l->n, 0.9), quantile_us(l->next_ns, l->n, 0.99),
	       l->n ? (double)l->next_ns[l->n - 1] / 1e3 : 0, l->not_ready,
	       quantile_us(l->rel_ns, l->n, 0.5), quantile_us(l->rel_ns, l->n, 0.99), timer_us);
	fflush(stdout);
}

/*
 * Bursts of NB_BURST take+release, each started only when the daemon's counters say that at
 * least NB_BACKLOG batches are published and not yet taken by us (our reader attached to a
 * full, fresh ring at seq 0, so unread = published - taken). Bursts alternate between timeout 0
 * and timeout -1. A timeout-0 call that finds nothing is counted in not_ready and not timed;
 * with -1 a call cannot find nothing by the counters, so every call is timed.
 */
static int bench_ready(const char *sluiced, const char *spec, uint64_t samples)
{
	struct nb_lat lat[2] = { { 0 }, { 0 } }; /* [0]: timeout 0, [1]: timeout -1 */
	struct sluice_client *c = NULL;
	struct sluice_reader *r = NULL;
	struct sluice_error err = { 0, "" };
	struct nb_counters k;
	struct nb_daemon d;
	uint64_t taken = 0, burst = 0;
	double timer_us = timer_floor_us(), deadline;
	int rc;

	for (int i = 0; i < 2; i++) {
		lat[i].cap = samples;
		lat[i].next_ns = calloc(samples, sizeof(uint64_t));
		lat[i].rel_ns = calloc(samples, sizeof(uint64_t));
		if (!lat[i].next_ns || !lat[i].rel_ns) {
			rc = -ENOMEM;
			goto out_free;
		}
	}
	rc = nb_daemon_start(&d, sluiced, spec, &c);
	if (rc < 0)
		goto out_free;
	rc = nb_attach_name(c, &r);
	if (rc < 0)
		goto out;
	/* The ring fills (the daemon held its batches for a first reader): until it stops. */
	rc = nb_wait_settled(c, 3, 0.005, &k);
	if (rc < 0)
		goto out;
	deadline = scan_now_s() + 120.0;
	while (lat[0].n < samples || lat[1].n < samples) {
		struct nb_lat *l = &lat[burst & 1];
		int timeout = burst & 1 ? -1 : 0;

		burst++;
		if (l->n >= samples)
			continue;
		/* Wait until the daemon refilled the ring. */
		for (;;) {
			rc = nb_counters_get(c, &k);
			if (rc < 0)
				goto out;
			if ((uint64_t)k.published >= taken + NB_BACKLOG)
				break;
			if (scan_now_s() > deadline) {
				fprintf(stderr,
					"sluice-bench next: next_ready: the daemon "
					"published %" PRId64 " batches, %" PRIu64 " taken: it "
					"does not refill the ring\n",
					k.published, taken);
				rc = -ETIMEDOUT;
				goto out;
			}
			nb_sleep_s(0.0005);
		}
		for (int i = 0; i < NB_BURST && l->n < samples; i++) {
			struct sluice_batch *b = NULL;
			uint64_t t0, t1, t2;

			t0 = mono_ns();
			rc = sluice_next(r, timeout, &b, &err);
			t1 = mono_ns();
			if (rc == -ETIMEDOUT && timeout == 0) {
				l->not_ready++;
				continue;
			}
			if (rc <= 0) {
				fprintf(stderr, "sluice-bench next: next_ready: %s\n",
					rc == 0 ? "the stream ended" : err.msg);
				rc = rc ? rc : -ENODATA;
				goto out;
			}
			taken++;
			sluice_batch_release(b);
			t2 = mono_ns();
			l->next_ns[l->n] = t1 - t0;
			l->rel_ns[l->n] = t2 - t1;
			l->n++;
		}
	}
	lat_print(&lat[0], 0, timer_us);
	lat_print(&lat[1], -1, timer_us);
	rc = 0;
out:
	sluice_detach(r);
	sluice_disconnect(c);
	if (rc < 0)
		nb_print_log(&d);
	if (nb_daemon_stop(&d) < 0 && rc == 0)
		rc = -ECHILD;
out_free:
	for (int i = 0; i < 2; i++) {
		free(lat[i].next_ns);
		free(lat[i].rel_ns);
	}
	return rc;
}

/* ---- 2. throughput through the daemon, against the engine in process ---- */

struct nb_rate {
	uint64_t batches, records;
	double wall_s, cpu_s;
};

static int drain(struct sluice_reader *r, uint64_t n, struct nb_rate *ret)
{
	struct sluice_error err = { 0, "" };
	struct nb_rate out = { 0, 0, 0, 0 };

	while (out.batches < n) {
		struct sluice_batch *b = NULL;
		int rc = sluice_next(r, -1, &b, &err);

		if (rc <= 0) {
			fprintf(stderr, "sluice-bench next: drain: %s\n",
				rc == 0 ? "the stream ended" : err.msg);
			return rc ? rc : -ENODATA;
		}
		out.batches++;
		out.records += sluice_batch_rows(b);
		sluice_batch_release(b);
	}
	*ret = out;
	return 0;
}

static int through_daemon(const char *sluiced, const char *spec, uint64_t n, struct nb_rate *ret)
{
	struct sluice_client *c = NULL;
	struct sluice_reader *r = NULL;
	struct nb_counters k;
	struct nb_daemon d;
	struct nb_rate warm, run;
	double t0, c0, d0, d1;
	int rc;

	rc = nb_daemon_start(&d, sluiced, spec, &c);
	if (rc < 0)
		return rc;
	rc = nb_attach_name(c, &r);
	if (rc == 0)
		rc = nb_wait_settled(c, 3, 0.005, &k);
	/* Warm-up: the full ring, and as much again, so that the timed batches are made now. */
	if (rc == 0)
		rc = drain(r, (uint64_t)k.slots + n / 10, &warm);
	if (rc < 0)
		goto out;
	rc = nb_daemon_cpu_s(d.pid, &d0);
	if (rc < 0)
		goto out;
	c0 = scan_process_cpu_s();
	t0 = scan_now_s();
	rc = drain(r, n, &run);
	if (rc < 0)
		goto out;
	run.wall_s = scan_now_s() - t0;
	rc = nb_daemon_cpu_s(d.pid, &d1);
	if (rc < 0)
		goto out;
	run.cpu_s = (d1 - d0) + (scan_process_cpu_s() - c0);
	*ret = run;
out:
	sluice_detach(r);
	sluice_disconnect(c);
	if (rc < 0)
		nb_print_log(&d);
	if (nb_daemon_stop(&d) < 0 && rc == 0)
		rc = -ECHILD;
	return rc;
}

static int in_process(const char *spec_text, uint64_t n, struct nb_rate *ret)
{
	struct sched_pool_opts so;
	struct sched_pool *pool = NULL;
	struct pl_pipeline_opts po;
	struct pl_pipeline *p = NULL;
	struct pl_spec *spec = NULL;
	struct io_error err;
	struct nb_rate out = { 0, 0, 0, 0 };
	double t0 = 0, c0 = 0;
	uint64_t warm = 64 + n / 10;
	int rc;

	err.msg[0] = '\0';
	rc = pl_spec_parse(spec_text, strlen(spec_text), "<bench next spec>", &spec, &err);
	if (rc < 0)
		goto fail;
	sched_pool_opts_init(&so); /* every CPU, as sluiced's default */
	rc = sched_pool_create(&so, &pool);
	if (rc < 0) {
		snprintf(err.msg, sizeof(err.msg), "cannot start the pool: %s", strerror(-rc));
		goto fail;
	}
	pl_pipeline_opts_init(&po);
	po.pool = pool;
	rc = pl_pipeline_create(spec, &po, &p, &err);
	if (rc < 0)
		goto fail;
	for (uint64_t i = 0; i < warm + n; i++) {
		struct pl_batch *b;

		if (i == warm) {
			t0 = scan_now_s();
			c0 = scan_process_cpu_s();
		}
		rc = pl_pipeline_next(p, -1, &b, &err);
		if (rc <= 0) {
			if (rc == 0)
				snprintf(err.msg, sizeof(err.msg), "the stream ended");
			rc = rc ? rc : -ENODATA;
			goto fail;
		}
		if (i >= warm) {
			out.batches++;
			out.records += b->rows;
		}
		pl_batch_release(p, b);
	}
	out.wall_s = scan_now_s() - t0;
	out.cpu_s = scan_process_cpu_s() - c0;
	*ret = out;
	pl_pipeline_destroy(p);
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
	pl_spec_destroy(spec);
	return 0;
fail:
	fprintf(stderr, "sluice-bench next: inprocess: %s\n", err.msg[0] ? err.msg : strerror(-rc));
	pl_pipeline_destroy(p);
	if (pool)
		sched_pool_destroy(pool, SCHED_SHUTDOWN_CANCEL);
	pl_spec_destroy(spec);
	return rc;
}

static double per_s(double x, double s)
{
	return x / (s > 0 ? s : 1e-9);
}

static int bench_throughput(const char *sluiced, const char *spec, uint64_t n)
{
	struct nb_rate dm, ip;
	int rc;

	rc = in_process(spec, n, &ip);
	if (rc < 0)
		return rc;
	printf("bench=inprocess batches=%" PRIu64 " records=%" PRIu64 " wall_s=%.4f cpu_s=%.4f "
	       "batches_per_s=%.1f records_per_s=%.0f cpu_us_per_batch=%.2f\n",
	       ip.batches, ip.records, ip.wall_s, ip.cpu_s, per_s((double)ip.batches, ip.wall_s),
	       per_s((double)ip.records, ip.wall_s), per_s(ip.cpu_s * 1e6, (double)ip.batches));
	fflush(stdout);
	rc = through_daemon(sluiced, spec, n, &dm);
	if (rc < 0)
		return rc;
	printf("bench=next_throughput batches=%" PRIu64 " records=%" PRIu64 " wall_s=%.4f "
	       "cpu_s=%.4f batches_per_s=%.1f records_per_s=%.0f cpu_us_per_batch=%.2f "
	       "ratio=%.3f\n",
	       dm.batches, dm.records, dm.wall_s, dm.cpu_s, per_s((double)dm.batches, dm.wall_s),
	       per_s((double)dm.records, dm.wall_s), per_s(dm.cpu_s * 1e6, (double)dm.batches),
	       per_s((double)dm.batches, dm.wall_s) / per_s((double)ip.batches, ip.wall_s));
	fflush(stdout);
	return 0;
}

/* ---- 3. what sharing costs the daemon ---- */

struct nb_share {
	const char *sock;
	uint64_t n;
	pthread_barrier_t *bar;
	int rc;
	uint64_t got;
};

/*
 * A reader thread: connect and attach (barrier 1), drain n batches when told (barrier 2),
 * done (barrier 3), stay attached until the daemon's CPU was read (barrier 4). It goes
 * through every barrier even when it failed, so that nobody waits for it forever.
 */
static void *share_reader(void *arg)
{
	struct nb_share *s = arg;
	struct sluice_client *c = NULL;
	struct sluice_reader *r = NULL;
	struct sluice_error err = { 0, "" };
	struct nb_rate got = { 0, 0, 0, 0 };

	s->rc = sluice_connect(s->sock, &c, &err);
	if (s->rc < 0)
		fprintf(stderr, "sluice-bench next: share: connect: %s\n", err.msg);
	else
		s->rc = nb_attach_name(c, &r);
	pthread_barrier_wait(s->bar);
	pthread_barrier_wait(s->bar);
	if (s->rc == 0)
		s->rc = drain(r, s->n, &got);
	s->got = got.batches;
	pthread_barrier_wait(s->bar);
	pthread_barrier_wait(s->bar);
	sluice_detach(r);
	sluice_disconnect(c);
	return NULL;
}

static int share_once(const char *sluiced, const char *spec, unsigned readers, uint64_t n,
		      double *ret_cpu_per_batch, double base_cpu_per_batch)
{
	struct nb_share s[4];
	pthread_t th[4];
	pthread_barrier_t bar;
	struct sluice_client *c = NULL;
	struct nb_counters k0, k1;
	struct nb_daemon d;
	double cpu0 = 0, cpu1 = 0, sch0, sch1, t0, wall;
	unsigned started = 0;
	int rc, status = 0;

	rc = nb_daemon_start(&d, sluiced, spec, &c);
	if (rc < 0)
		return rc;
	pthread_barrier_init(&bar, NULL, readers + 1);
	for (unsigned i = 0; i < readers; i++) {
		s[i] = (struct nb_share){ d.sock, n, &bar, 0, 0 };
		if (pthread_create(&th[i], NULL, share_reader, &s[i]) != 0)
			break;
		started++;
	}
	if (started < readers) {
		/* Cannot happen in practice; the barriers of the others would never open. */
		fprintf(stderr, "sluice-bench next: share: cannot start reader threads\n");
		abort();
	}
	pthread_barrier_wait(&bar); /* 1: attached */
	for (unsigned i = 0; i < readers; i++)
		if (s[i].rc < 0)
			status = s[i].rc;
	/* The ring is full and the daemon idle: the window starts. */
	if (status == 0)
		status = nb_wait_settled(c, 3, 0.005, &k0);
	if (status == 0)
		status = nb_daemon_cpu_s(d.pid, &cpu0);
	sch0 = nb_daemon_sched_s(d.pid);
	t0 = scan_now_s();
	pthread_barrier_wait(&bar); /* 2: go */
	pthread_barrier_wait(&bar); /* 3: drained */
	wall = scan_now_s() - t0;
	for (unsigned i = 0; i < readers; i++)
		if (s[i].rc < 0 && status == 0)
			status = s[i].rc;
	/* The daemon refills what was released, then stops: the window ends. */
	if (status == 0)
		status = nb_wait_settled(c, 3, 0.005, &k1);
	if (status == 0)
		status = nb_daemon_cpu_s(d.pid, &cpu1);
	sch1 = nb_daemon_sched_s(d.pid);
	pthread_barrier_wait(&bar); /* 4: detach */
	for (unsigned i = 0; i < readers; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&bar);
	sluice_disconnect(c);
	if (status < 0)
		nb_print_log(&d);
	rc = nb_daemon_stop(&d);
	if (status < 0)
		return status;
	if (rc < 0)
		return rc;
	{
		int64_t made = k1.published - k0.published;
		double per = per_s((cpu1 - cpu0) * 1e6, (double)(made > 0 ? made : 1));

		printf("bench=share readers=%u batches=%" PRIu64 " published=%" PRId64
		       " cpu_s=%.3f cpu_us_per_batch=%.2f sched_cpu_s=%.4f sched_us_per_batch=%.2f "
		       "wall_s=%.3f batches_per_s=%.1f",
		       readers, n, made, cpu1 - cpu0, per, sch1 - sch0,
		       per_s((sch1 - sch0) * 1e6, (double)(made > 0 ? made : 1)), wall,
		       per_s((double)n, wall));
		if (base_cpu_per_batch > 0)
			printf(" cpu_ratio=%.3f", per / base_cpu_per_batch);
		printf("\n");
		fflush(stdout);
		*ret_cpu_per_batch = per;
	}
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/*
 * 1 reader, then 4, repeat times (pairs side by side, so that a slow spell of the machine
 * hits both), and the medians: cpu_ratio of the median line is median(4) / median(1).
 */
static int bench_share(const char *sluiced, const char *spec, uint64_t n, unsigned repeat)
{
	double one[16], four[16];
	int rc = 0;

	for (unsigned i = 0; i < repeat && rc == 0; i++) {
		rc = share_once(sluiced, spec, 1, n, &one[i], 0);
		if (rc == 0)
			rc = share_once(sluiced, spec, 4, n, &four[i], one[i]);
	}
	if (rc < 0)
		return rc;
	qsort(one, repeat, sizeof(double), cmp_double);
	qsort(four, repeat, sizeof(double), cmp_double);
	printf("bench=share_median pairs=%u readers1_cpu_us_per_batch=%.2f "
	       "readers4_cpu_us_per_batch=%.2f cpu_ratio=%.3f\n",
	       repeat, one[repeat / 2], four[repeat / 2], four[repeat / 2] / one[repeat / 2]);
	fflush(stdout);
	return 0;
}

/* ---- entry ---- */

int bench_next(int argc, char **argv)
{
	const char *ctr = NULL, *sluiced = NULL;
	char exe_sluiced[PATH_MAX], dir[PATH_MAX], *spec = NULL;
	uint64_t batches = 10000, samples = 4096, repeat = 3;
	int rc;

	static const struct option opts[] = {
		{ "ctr", required_argument, NULL, 'c' },
		{ "sluiced", required_argument, NULL, 'd' },
		{ "batches", required_argument, NULL, 'b' },
		{ "samples", required_argument, NULL, 's' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *name;
	int o;
	optind = 0;
	while ((o = bench_getopt(argc, argv, opts, &name)) != -1) {
		if (o == 'h') {
			next_usage(stdout);
			return 0;
		} else if (o == '?') {
			return 2;
		} else if (o == 'c' || o == 'd') {
			*(o == 'c' ? &ctr : &sluiced) = optarg;
		} else {
			uint64_t *dst = o == 'b' ? &batches : o == 's' ? &samples : &repeat;

			if (cli_parse_u64(optarg, o == 'r' ? 15 : 1u << 30, dst) < 0 || *dst == 0) {
				fprintf(stderr, "sluice-bench next: --%s needs a positive number\n",
					name);
				return 2;
			}
		}
	}
	if (optind != argc) {
		fprintf(stderr, "sluice-bench next: unexpected argument %s (try --help)\n",
			argv[optind]);
		return 2;
	}
	if (!ctr) {
		next_usage(stderr);
		return 2;
	}
	if (!sluiced) {
		rc = nb_default_sluiced(exe_sluiced, sizeof(exe_sluiced));
		if (rc < 0) {
			fprintf(stderr,
				"sluice-bench next: cannot find sluiced from "
				"/proc/self/exe (%s): give --sluiced PATH\n",
				strerror(-rc));
			return 1;
		}
		sluiced = exe_sluiced;
	}
	if (access(sluiced, X_OK) < 0) {
		fprintf(stderr, "sluice-bench next: %s: %s (give --sluiced PATH)\n", sluiced,
			strerror(errno));
		return 1;
	}
	if (!realpath(ctr, dir)) {
		fprintf(stderr, "sluice-bench next: %s: %s\n", ctr, strerror(errno));
		return 1;
	}
	rc = make_spec(dir, &spec);
	if (rc < 0) {
		fprintf(stderr, "sluice-bench next: %s: cannot put this path in a spec: %s\n", dir,
			strerror(-rc));
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	printf("bench=next_setup sluiced=%s dir=%s batch=%d features=%zu samples=%" PRIu64
	       " batches=%" PRIu64 " cpus=%ld\n",
	       sluiced, dir, NB_BATCH, sizeof(nb_features) / sizeof(nb_features[0]) - 1, samples,
	       batches, sysconf(_SC_NPROCESSORS_ONLN));
	fflush(stdout);
	rc = bench_ready(sluiced, spec, samples);
	if (rc == 0)
		rc = bench_throughput(sluiced, spec, batches);
	if (rc == 0)
		rc = bench_share(sluiced, spec, batches, (unsigned)repeat);
	free(spec);
	return rc < 0 ? 1 : 0;
}
