/* SPDX-License-Identifier: Apache-2.0 */
/* sluice-bench sched: tiny-task throughput against a mutex+condvar FIFO pool; parallel_for scaling.
 */
#include "bench.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sched/sched.h"
#include "tools/common/cliarg.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The tiny task's work: `spin` rounds of xorshift on a private word (a few hundred ns). */
static unsigned spin_rounds = 200;

static uint64_t work(uint64_t x)
{
	for (unsigned i = 0; i < spin_rounds; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
	}
	return x;
}

/* Results go to a per-thread word, so that tasks share no cache line but the scheduler's. */
static _Thread_local uint64_t tiny_sink;

static void tiny_task(void *arg)
{
	tiny_sink += work((uint64_t)(uintptr_t)&arg ^ tiny_sink) & 1;
}

/* ---- the baseline: one mutex, one condvar, one FIFO ring ---------------------------------- */

struct fifo_pool {
	pthread_mutex_t lock;
	pthread_cond_t more, done;
	void (**fn)(void *);
	void **arg;
	size_t cap, head, tail; /* ring indices, free running */
	uint64_t pending;
	bool stop;
	unsigned n;
	pthread_t *threads;
};

static void *fifo_worker(void *p)
{
	struct fifo_pool *f = p;

	pthread_mutex_lock(&f->lock);
	for (;;) {
		while (f->head == f->tail && !f->stop)
			pthread_cond_wait(&f->more, &f->lock);
		if (f->head == f->tail)
			break;
		size_t i = f->head++ & (f->cap - 1);
		void (*fn)(void *) = f->fn[i];
		void *arg = f->arg[i];

		pthread_mutex_unlock(&f->lock);
		fn(arg);
		pthread_mutex_lock(&f->lock);
		if (--f->pending == 0)
			pthread_cond_broadcast(&f->done);
	}
	pthread_mutex_unlock(&f->lock);
	return NULL;
}

static int fifo_create(struct fifo_pool *f, unsigned n, size_t cap)
{
	memset(f, 0, sizeof(*f));
	f->cap = cap;
	f->fn = calloc(cap, sizeof(*f->fn));
	f->arg = calloc(cap, sizeof(*f->arg));
	f->threads = calloc(n, sizeof(*f->threads));
	if (!f->fn || !f->arg || !f->threads)
		return -ENOMEM;
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->more, NULL);
	pthread_cond_init(&f->done, NULL);
	for (f->n = 0; f->n < n; f->n++)
		if (pthread_create(&f->threads[f->n], NULL, fifo_worker, f) != 0)
			return -EAGAIN;
	return 0;
}

static void fifo_submit(struct fifo_pool *f, void (*fn)(void *), void *arg)
{
	pthread_mutex_lock(&f->lock);
	f->fn[f->tail & (f->cap - 1)] = fn;
	f->arg[f->tail & (f->cap - 1)] = arg;
	f->tail++;
	f->pending++;
	pthread_cond_signal(&f->more);
	pthread_mutex_unlock(&f->lock);
}

static void fifo_wait(struct fifo_pool *f)
{
	pthread_mutex_lock(&f->lock);
	while (f->pending)
		pthread_cond_wait(&f->done, &f->lock);
	pthread_mutex_unlock(&f->lock);
}

static void fifo_destroy(struct fifo_pool *f)
{
	pthread_mutex_lock(&f->lock);
	f->stop = true;
	pthread_cond_broadcast(&f->more);
	pthread_mutex_unlock(&f->lock);
	for (unsigned i = 0; i < f->n; i++)
		pthread_join(f->threads[i], NULL);
	free(f->fn);
	free(f->arg);
	free(f->threads);
}

/*
 * The same program on both pools: a binary tree of tasks, each doing its tiny work and then
 * spawning its two children, down to `depth` (2^(depth+1) - 1 tasks). Spawning from inside
 * tasks is what a pipeline does (a batch splits into row tasks); on the baseline every spawn
 * goes through the one locked FIFO, on sched_ through the worker's own deque.
 */
static struct fifo_pool *tree_fifo;
static struct sched_group *tree_group;

static void fifo_tree(void *arg)
{
	uintptr_t depth = (uintptr_t)arg;

	tiny_task(NULL);
	if (depth > 0) {
		fifo_submit(tree_fifo, fifo_tree, (void *)(depth - 1));
		fifo_submit(tree_fifo, fifo_tree, (void *)(depth - 1));
	}
}

static void sched_tree(void *arg)
{
	uintptr_t depth = (uintptr_t)arg;

	tiny_task(NULL);
	if (depth > 0) {
		if (sched_spawn(tree_group, sched_tree, (void *)(depth - 1)) < 0 ||
		    sched_spawn(tree_group, sched_tree, (void *)(depth - 1)) < 0)
			abort();
	}
}

static double run_fifo(unsigned workers, unsigned depth)
{
	struct fifo_pool f;
	double t0, dt;
	size_t tasks = ((size_t)2 << depth) - 1, cap = 1;

	while (cap < tasks + 1)
		cap <<= 1;
	if (fifo_create(&f, workers, cap) < 0)
		return -1;
	tree_fifo = &f;
	t0 = now_s();
	fifo_submit(&f, fifo_tree, (void *)(uintptr_t)depth);
	fifo_wait(&f);
	dt = now_s() - t0;
	fifo_destroy(&f);
	return (double)tasks / dt;
}

static double run_sched(struct sched_pool *pool, unsigned depth)
{
	struct sched_queue *q;
	struct sched_group g;
	size_t tasks = ((size_t)2 << depth) - 1;
	double t0, dt;

	if (sched_queue_create(pool, 1, -1, &q) < 0)
		return -1;
	sched_group_init(&g, q);
	tree_group = &g;
	t0 = now_s();
	if (sched_spawn(&g, sched_tree, (void *)(uintptr_t)depth) < 0)
		return -1;
	sched_group_wait(&g);
	dt = now_s() - t0;
	sched_queue_destroy(q);
	return (double)tasks / dt;
}

/* ---- parallel_for scaling ------------------------------------------------------------------ */

struct pfor_ctx {
	uint64_t *out;
};

static void pfor_body(void *arg, size_t lo, size_t hi)
{
	struct pfor_ctx *c = arg;

	for (size_t i = lo; i < hi; i++)
		c->out[i] = work(i + 1);
}

static double run_pfor(struct sched_pool *pool, uint64_t *out, size_t n, size_t grain)
{
	struct sched_queue *q;
	struct pfor_ctx c = { .out = out };
	double t0, dt;

	if (sched_queue_create(pool, 1, -1, &q) < 0)
		return -1;
	t0 = now_s();
	if (sched_parallel_for(q, 0, n, grain, pfor_body, &c) < 0)
		return -1;
	dt = now_s() - t0;
	sched_queue_destroy(q);
	return dt;
}

static int make_pool(unsigned workers, struct sched_pool **ret)
{
	struct sched_pool_opts o;

	sched_pool_opts_init(&o);
	o.workers = workers;
	return sched_pool_create(&o, ret);
}

static void sched_usage(FILE *f)
{
	fprintf(f, "usage: sluice-bench sched [--depth D] [--repeat R] [--workers W]\n"
		   "                          [--spin ROUNDS]\n"
		   "\n"
		   "Tiny tasks (a binary tree of spawns D deep, default 20, each task ROUNDS\n"
		   "rounds of work, default 200) on the work-stealing pool and on a\n"
		   "mutex+condvar pool, with 1 to W workers (default: online CPUs), then\n"
		   "parallel_for's scaling. Each measurement is the best of R runs (default 3).\n");
}

int bench_sched(int argc, char **argv)
{
	uint64_t depth = 20, repeat = 3, max_workers = 0, rounds = 200;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct sched_pool *pool;
	size_t n = 1u << 20;
	uint64_t *out;
	double t1 = 0, work_ns;

	static const struct option opts[] = {
		{ "depth", required_argument, NULL, 'd' },
		{ "repeat", required_argument, NULL, 'r' },
		{ "workers", required_argument, NULL, 'w' },
		{ "spin", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *name;
	int o;
	optind = 0;
	while ((o = bench_getopt(argc, argv, opts, &name)) != -1) {
		uint64_t *dst = NULL, max = 0;

		if (o == 'h' || o == '?') {
			sched_usage(o == 'h' ? stdout : stderr);
			return o == 'h' ? 0 : 2;
		}
		if (o == 'd')
			dst = &depth, max = 26;
		else if (o == 'r')
			dst = &repeat, max = 1000;
		else if (o == 'w')
			dst = &max_workers, max = 4096;
		else
			dst = &rounds, max = 1u << 20;
		if (cli_parse_u64(optarg, max, dst) < 0 || *dst == 0) {
			fprintf(stderr, "sluice-bench sched: --%s: not 1 to %llu: %s\n", name,
				(unsigned long long)max, optarg);
			return 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "sluice-bench sched: unexpected argument %s (try --help)\n",
			argv[optind]);
		return 2;
	}
	if (!max_workers)
		max_workers = ncpu > 0 ? (uint64_t)ncpu : 1;
	spin_rounds = (unsigned)rounds;
	{
		volatile uint64_t keep;
		double t0 = now_s();
		uint64_t x = 1;

		for (int i = 0; i < 100000; i++)
			x = work(x + (uint64_t)i);
		keep = x;
		(void)keep;
		work_ns = (now_s() - t0) / 100000 * 1e9;
	}

	/* Tiny tasks: best of `repeat` on each pool. */
	for (unsigned w = 1; w <= max_workers; w++) {
		double best = 0, base = 0;

		if (make_pool(w, &pool) < 0) {
			fprintf(stderr, "sluice-bench sched: cannot start a pool of %u\n", w);
			return 1;
		}
		for (uint64_t r = 0; r < repeat; r++) {
			double a = run_sched(pool, (unsigned)depth),
			       b = run_fifo(w, (unsigned)depth);

			if (a > best)
				best = a;
			if (b > base)
				base = b;
		}
		sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
		printf("bench=sched_tiny workers=%u tasks=%zu work_ns=%.0f tasks_per_s=%.0f "
		       "baseline_tasks_per_s=%.0f ratio=%.2f\n",
		       w, ((size_t)2 << depth) - 1, work_ns, best, base,
		       base > 0 ? best / base : 0);
	}

	/* parallel_for: the same loop with 1..max_workers workers. */
	out = malloc(n * sizeof(*out));
	if (!out)
		return 1;
	for (unsigned w = 1; w <= max_workers; w++) {
		double best = 1e30;

		if (make_pool(w, &pool) < 0)
			return 1;
		for (uint64_t r = 0; r < repeat; r++) {
			double dt = run_pfor(pool, out, n, 256);

			if (dt > 0 && dt < best)
				best = dt;
		}
		sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
		if (w == 1)
			t1 = best;
		printf("bench=sched_pfor workers=%u elements=%zu work_ns=%.0f seconds=%.4f "
		       "elements_per_s=%.0f speedup=%.2f efficiency=%.2f\n",
		       w, n, work_ns, best, (double)n / best, t1 / best, t1 / best / w);
	}
	free(out);
	return 0;
}
