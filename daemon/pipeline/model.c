/* SPDX-License-Identifier: Apache-2.0 */
/* The resource model of a pipeline's window of counters (model.h, docs/plumber.md). */
#include "model.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pipeline.h"

/* A stage blocked this share of the window or more is what holds the pipeline back. */
#define BLOCKED_SHARE 0.5
/* A pool busy this share of its workers' time has no room: jobs wait for a worker. */
#define POOL_SATURATED 0.9
/* A reader that waits this share of the window or more takes all it is given. */
#define GREEDY_SHARE 0.9

static const char *const limit_names[] = {
	[PL_LIMIT_UNKNOWN] = "unknown",	      [PL_LIMIT_CONSUMER] = "consumer",
	[PL_LIMIT_SEQUENTIAL] = "sequential", [PL_LIMIT_STAGE_CPU] = "stage_cpu",
	[PL_LIMIT_CORES] = "cores",	      [PL_LIMIT_DISK] = "disk",
	[PL_LIMIT_MEMORY] = "memory",
};

const char *pl_limit_name(enum pl_limit l)
{
	return (unsigned)l < sizeof(limit_names) / sizeof(limit_names[0]) ? limit_names[l] : "?";
}

bool pl_stage_sequential(unsigned stage)
{
	/* parse and decode run as tasks on the pool; the rest on the driver thread */
	return stage != PL_STAGE_PARSE && stage != PL_STAGE_DECODE;
}

/* The smaller of two bounds, 0 meaning none. */
static double min_bound(double a, double b)
{
	if (a <= 0)
		return b;
	if (b <= 0)
		return a;
	return a < b ? a : b;
}

/*
 * Per-batch CPU of the sequential and the parallel work: by thread where known (the driver's
 * CPU is sequential whatever stage it ran, the parse tasks it took on itself included: they
 * take its time), else by the stages' classes.
 */
static void costs(const struct pl_model *m, double *ret_seq, double *ret_par)
{
	if (m->drv_ns_per_batch > 0 || m->pool_ns_per_batch > 0) {
		*ret_seq = m->drv_ns_per_batch;
		*ret_par = m->pool_ns_per_batch;
		return;
	}
	double s = 0, p = 0;
	for (unsigned i = 0; i < PL_STAGE_COUNT_; i++) {
		if (pl_stage_sequential(i))
			s += m->stages[i].cpu_per_batch_ns;
		else
			p += m->stages[i].cpu_per_batch_ns;
	}
	*ret_seq = s;
	*ret_par = p;
}

static double pool_cap(double par_ns, unsigned workers)
{
	return par_ns > 0 && workers ? workers * 1e9 / par_ns : 0;
}

static double cores_cap(double seq_ns, double par_ns, double cpus)
{
	return seq_ns + par_ns > 0 && cpus > 0 ? cpus * 1e9 / (seq_ns + par_ns) : 0;
}

double pl_model_predict(const struct pl_model *m, unsigned workers, double cpus)
{
	double s, p;
	costs(m, &s, &p);
	double r = min_bound(m->seq_cap, m->disk_cap);
	r = min_bound(r, pool_cap(p, workers));
	return min_bound(r, cores_cap(s, p, cpus));
}

/* The stage with the most CPU per batch among the sequential ones (seq), the parallel, or all. */
static int heaviest(const struct pl_model *m, int seq)
{
	int best = -1;
	for (unsigned i = 0; i < PL_STAGE_COUNT_; i++) {
		if (seq >= 0 && pl_stage_sequential(i) != (seq == 1))
			continue;
		if (m->stages[i].cpu_per_batch_ns > 0 &&
		    (best < 0 || m->stages[i].cpu_per_batch_ns > m->stages[best].cpu_per_batch_ns))
			best = (int)i;
	}
	return best;
}

static double demand(const struct pl_model_in *in)
{
	double d = 0;
	for (size_t i = 0; i < in->n_readers; i++) {
		const struct pl_model_reader *r = &in->readers[i];
		uint64_t w =
			r->window_ns && r->window_ns < in->wall_ns ? r->window_ns : in->wall_ns;
		if (r->wait_ns >= GREEDY_SHARE * (double)w || !r->taken)
			continue; /* it takes what it gets */
		double rate = (double)r->taken / ((double)(w - r->wait_ns) / 1e9);
		d = d == 0 || rate < d ? rate : d;
	}
	return d;
}

/*
 * The share of the time the driver thread can work: what it worked in the window, and the time
 * it was blocked for a reason a change removes (room in the ring: faster readers; reads: the
 * disk, modelled apart; the oldest job while the pool was saturated: more workers). The rest of
 * its idle time (waits for jobs a pool with room has not started: a parked worker's wake-up;
 * runnable but not running, on a host with more busy threads than cores) more workers do not
 * remove: on 2 cores the sequence and image pipelines' drivers stayed 80 % busy with 1 worker
 * and with 2, where a sequential bound of 1 / (its CPU per batch) over-predicted them by 26 -
 * 41 %. 1 where the threads' CPU is not known.
 */
static double duty(const struct pl_model_in *in, const struct pl_model *m)
{
	if (!m->drv_ns_per_batch || !in->wall_ns)
		return 1;
	double wall = (double)in->wall_ns;
	double u = (double)in->driver_cpu_ns / wall;
	u += (double)pl_model_room_ns(in) / wall + (double)in->read_wait_ns / wall;
	double pool = in->workers ? (double)in->pool_task_ns / wall / in->workers : 1;
	if (pool >= POOL_SATURATED)
		u += (double)in->job_wait_ns / wall;
	return u > 1 ? 1 : u;
}

void pl_model_fit(const struct pl_model_in *in, struct pl_model *m)
{
	memset(m, 0, sizeof(*m));
	m->bottleneck = -1;
	if (!in->wall_ns)
		return;
	double wall_s = (double)in->wall_ns / 1e9, cpu = 0;
	for (unsigned i = 0; i < PL_STAGE_COUNT_; i++)
		cpu += (double)in->st[i].cpu_ns;
	for (unsigned i = 0; i < PL_STAGE_COUNT_; i++) {
		const struct pl_stage_stats *s = &in->st[i];
		struct pl_model_stage *o = &m->stages[i];
		o->elems_per_s = (double)s->elems_out / wall_s;
		o->cores = (double)s->cpu_ns / (double)in->wall_ns;
		o->share = cpu > 0 ? (double)s->cpu_ns / cpu : 0;
		if (in->batches) {
			o->per_batch = (double)s->elems_out / (double)in->batches;
			o->cpu_per_batch_ns = (double)s->cpu_ns / (double)in->batches;
		}
	}
	m->cores = cpu / (double)in->wall_ns;
	m->batches_per_s = (double)in->batches / wall_s;
	m->demand_per_s = demand(in);
	if (!in->batches)
		return;
	m->drv_ns_per_batch = (double)in->driver_cpu_ns / (double)in->batches;
	m->pool_ns_per_batch = (double)in->pool_task_ns / (double)in->batches;
	double s, p;
	costs(m, &s, &p);
	m->seq_cap = s > 0 ? duty(in, m) * 1e9 / s : 0;
	m->pool_cap = pool_cap(p, in->workers);
	m->cores_cap = cores_cap(s, p, in->cpus);
	double read_wait = (double)in->read_wait_ns / (double)in->wall_ns;
	if (read_wait >= BLOCKED_SHARE)
		m->disk_cap = m->batches_per_s; /* the disk gives what it can already */
	m->predicted_per_s = pl_model_predict(m, in->workers, in->cpus);
	m->predicted_all_per_s = pl_model_predict(m, in->host_cpus, in->host_cpus);

	uint64_t room = pl_model_room_ns(in);
	if (in->commit_failures) {
		m->limit = PL_LIMIT_MEMORY;
	} else if ((double)room >= BLOCKED_SHARE * (double)in->wall_ns) {
		m->limit = PL_LIMIT_CONSUMER;
	} else if (m->disk_cap > 0 && m->disk_cap <= m->predicted_per_s) {
		m->limit = PL_LIMIT_DISK;
		m->bottleneck = PL_STAGE_READ;
	} else if (m->seq_cap > 0 && m->seq_cap <= m->predicted_per_s) {
		m->limit = PL_LIMIT_SEQUENTIAL;
		m->bottleneck = heaviest(m, 1);
		/* the driver's own share of parse (collecting rows, tasks it ran) may weigh most */
		double drv_parse = m->drv_ns_per_batch;
		for (unsigned i = 0; i < PL_STAGE_COUNT_; i++)
			if (pl_stage_sequential(i))
				drv_parse -= m->stages[i].cpu_per_batch_ns;
		if (m->bottleneck < 0 || drv_parse > m->stages[m->bottleneck].cpu_per_batch_ns)
			m->bottleneck = drv_parse > 0 ? PL_STAGE_PARSE : m->bottleneck;
	} else if (m->pool_cap > 0 && m->pool_cap <= m->predicted_per_s) {
		m->limit = PL_LIMIT_STAGE_CPU;
		m->bottleneck = heaviest(m, 0);
	} else {
		m->limit = PL_LIMIT_CORES;
		m->bottleneck = heaviest(m, -1);
	}
}

uint64_t pl_model_room_ns(const struct pl_model_in *in)
{
	uint64_t engine =
		in->st[PL_STAGE_PARSE].wait_down_ns + in->st[PL_STAGE_DELIVER].wait_down_ns;
	return engine > in->producer_wait_ns ? engine : in->producer_wait_ns;
}

static uint64_t since(uint64_t now, uint64_t then)
{
	return now > then ? now - then : 0;
}

void pl_model_in_from_stats(const struct pl_stats *a, const struct pl_stats *b, uint64_t wall_ns,
			    struct pl_model_in *in)
{
	static const struct pl_stats zero;
	if (!a)
		a = &zero;
	memset(in, 0, sizeof(*in));
	in->wall_ns = wall_ns;
	in->batches = since(b->batches, a->batches);
	in->read_wait_ns = since(b->read_wait_ns, a->read_wait_ns);
	in->driver_cpu_ns = since(b->driver_cpu_ns, a->driver_cpu_ns);
	in->pool_task_ns = since(b->pool_task_ns, a->pool_task_ns);
	in->job_wait_ns = since(b->job_wait_ns, a->job_wait_ns);
	for (unsigned i = 0; i < PL_STAGE_COUNT_; i++) {
		const struct pl_stage_stats *x = &a->stages[i], *y = &b->stages[i];
		struct pl_stage_stats *o = &in->st[i];
		o->elems_in = since(y->elems_in, x->elems_in);
		o->elems_out = since(y->elems_out, x->elems_out);
		o->bytes_in = since(y->bytes_in, x->bytes_in);
		o->bytes_out = since(y->bytes_out, x->bytes_out);
		o->completions = since(y->completions, x->completions);
		o->cpu_ns = since(y->cpu_ns, x->cpu_ns);
		o->wait_up_ns = since(y->wait_up_ns, x->wait_up_ns);
		o->wait_down_ns = since(y->wait_down_ns, x->wait_down_ns);
		o->dropped = since(y->dropped, x->dropped);
	}
}

uint64_t pl_model_host_busy_ns(void)
{
	FILE *f = fopen("/proc/stat", "re");
	unsigned long long v[8] = { 0 };
	int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
			   &v[3], &v[4], &v[5], &v[6], &v[7])
		  : 0;
	if (f)
		fclose(f);
	long hz = sysconf(_SC_CLK_TCK);
	if (n < 8 || hz <= 0)
		return 0;
	return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) * (1000000000ull / (uint64_t)hz);
}

uint64_t pl_model_own_cpu_ns(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) < 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
