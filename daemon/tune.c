/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tuner (issue 20; docs/plumber.md, "Autotuning"): every DMN_TUNE_WINDOW_NS, each running
 * pipeline's counters over the window, the resource model fitted to them, the knobs its spec
 * left "auto" stepped (pipeline/tune.c's policy), and the pool's weights set from Plumber's
 * allocation of the cores between every pipeline of the host. Server thread.
 */
#include "tune.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/pipeline/model.h"
#include "daemon/pipeline/tune.h"
#include "log.h"
#include "sched/sched.h"

static uint64_t since(uint64_t now, uint64_t then)
{
	return now > then ? now - then : 0;
}

/* The readers of pl over the window, their counters then moved on to now (at most cap). */
static size_t window_readers(struct dmn *d, struct dmn_pipeline *pl, uint64_t now, uint64_t wall,
			     struct pl_model_reader *rs, size_t cap)
{
	size_t n = 0;
	for (struct dmn_conn *c = d->conns; c; c = c->next) {
		for (struct dmn_reader *r = c->readers; r; r = r->next) {
			uint64_t taken, wait_ns;
			if (r->pl != pl ||
			    ipc_ring_reader_counters(pl->ring, r->ring_id, &taken, &wait_ns) < 0)
				continue;
			uint64_t att = since(now, r->attached_ns);
			if (n < cap && att >= wall / 2) /* one attached for most of the window */
				rs[n++] = (struct pl_model_reader){
					.taken = since(taken, r->tune_taken),
					.wait_ns = since(wait_ns, r->tune_wait_ns),
					.window_ns = att < wall ? att : 0,
				};
			r->tune_taken = taken;
			r->tune_wait_ns = wait_ns;
		}
	}
	return n;
}

/*
 * One window of pl: its model, and the knobs stepped. Returns false when there is no window
 * yet (its first reading, or a pipeline that is not running).
 */
static bool tune_one(struct dmn *d, struct dmn_pipeline *pl, uint64_t now)
{
	struct dmn_tune_win *t = &pl->tune;
	struct pl_stats st;
	struct ipc_ring_info info;
	pl_pipeline_get_stats(pl->pl, &st);
	pthread_mutex_lock(&pl->lock);
	ipc_ring_get_info(pl->ring, &info);
	uint64_t wait_ns = pl->wait_ns;
	bool running = pl->status == DMN_RUNNING;
	pthread_mutex_unlock(&pl->lock);
	uint64_t wall = since(now, t->at_ns);
	struct pl_model_reader rs[IPC_RING_MAX_READERS];
	size_t n_rs = window_readers(d, pl, now, wall, rs, IPC_RING_MAX_READERS);
	bool have = t->have && running && wall > 0;
	struct pl_model_in in;
	if (have) {
		pl_model_in_from_stats(&t->prev, &st, wall, &in);
		in.producer_wait_ns = since(wait_ns, t->wait_ns);
		in.commit_failures = since(info.commit_fails, t->commit_fails);
		in.readers = rs;
		in.n_readers = n_rs;
		in.workers = sched_pool_workers(d->reg.pool);
		in.cpus = d->reg.cfg.cpus;
		in.host_cpus = (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
	}
	uint64_t job_wait_then = t->prev.job_wait_ns;
	t->prev = st;
	t->at_ns = now;
	t->wait_ns = wait_ns;
	t->commit_fails = info.commit_fails;
	t->have = running;
	if (!have)
		return false;
	struct pl_model m;
	pl_model_fit(&in, &m);
	t->demand = m.demand_per_s;
	t->cost = m.pool_ns_per_batch / 1e9;
	t->drv_cost = m.drv_ns_per_batch / 1e9;
	t->seq_cap = m.seq_cap;

	double w = (double)wall;
	struct pl_tune_obs o = {
		.batches = in.batches,
		.job_wait = (double)since(st.job_wait_ns, job_wait_then) / w,
		.read_wait = (double)in.read_wait_ns / w,
		.producer_wait = (double)pl_model_room_ns(&in) / w,
		.pool_busy = in.workers ? (double)in.pool_task_ns / (w * in.workers) : 1,

		.read_cpu = in.driver_cpu_ns
				    ? (double)in.st[PL_STAGE_READ].cpu_ns / (double)in.driver_cpu_ns
				    : 0,
		.memory_refused = in.commit_failures > 0,
		.rate = m.batches_per_s,
	};
	/* the windows the tuner judged, those in which a knob "auto" may step, and the longest
	   run of those with no move: what its moves are counted against (sluicectl stats:
	   tune_windows, tune_limited_windows, tune_limited_run) */
	t->windows++;
	if (pl_tune_pipeline_limited(&o)) {
		t->limited++;
		if (++t->run > t->run_max)
			t->run_max = t->run;
	} else {
		t->run = 0;
	}

	struct pl_tune max, now_k, next;
	pl_pipeline_tunable(pl->pl, &max);
	if (!max.prefetch && !max.read_chunk && !max.read_depth)
		return true;
	unsigned pf_ring;
	uint64_t bb = pl_pipeline_batch_bytes(pl->pl, &pf_ring);
	if (bb && max.prefetch) { /* jobs in flight hold ring space: two batches for readers */
		uint64_t fit = info.data_size / bb;
		fit = fit > 3 ? fit - 2 : 1;
		if (fit < max.prefetch)
			max.prefetch = (unsigned)fit;
	}
	now_k = (struct pl_tune){ .prefetch = st.prefetch,
				  .read_chunk = st.read_chunk,
				  .read_depth = st.read_depth };
	char why[256];
	unsigned moved = pl_tune_step(&o, &now_k, &max, &t->probe, &next, why, sizeof(why));
	if (!moved)
		return true;
	next.weight = 0;
	pl_pipeline_tune(pl->pl, &next);
	t->moves++;
	t->run = 0; /* a run is of windows at the same knobs */
	if (moved & PL_TUNE_MOVED_PREFETCH)
		dmn_log("pipeline %s: tuned batch jobs in flight %u -> %u (%s)", pl->name,
			now_k.prefetch, next.prefetch, why);
	if (moved & PL_TUNE_MOVED_DEPTH)
		dmn_log("pipeline %s: tuned reads in flight per file %u -> %u for the next files "
			"(%s)",
			pl->name, now_k.read_depth, next.read_depth, why);
	if (moved & PL_TUNE_MOVED_CHUNK)
		dmn_log("pipeline %s: tuned the read size %zu -> %zu KiB for the next files (%s)",
			pl->name, now_k.read_chunk >> 10, next.read_chunk >> 10, why);
	return true;
}

/* Plumber's allocation of the host's cores between the pipelines that ran in the window. */
static void allocate(struct dmn *d, struct dmn_pipeline **pls, size_t n)
{
	struct pl_tune_alloc_in *in = calloc(n, sizeof(*in));
	double *rate = calloc(n, sizeof(double));
	unsigned *wt = calloc(n, sizeof(unsigned));
	if (!in || !rate || !wt)
		goto out;
	for (size_t i = 0; i < n; i++) {
		const struct dmn_tune_win *t = &pls[i]->tune;
		in[i] = (struct pl_tune_alloc_in){ .demand = t->demand,
						   .pool_cost = t->cost,
						   .drv_cost = t->drv_cost,
						   .seq_cap = t->seq_cap };
	}
	/* the drivers run on the same cores as the pool: the budget is the cores, not workers */
	double cores = d->reg.cfg.cpus;
	if (cores <= 0)
		cores = sched_pool_workers(d->reg.pool);
	pl_tune_allocate(n, in, cores, rate);
	pl_tune_weights(n, rate, wt);
	for (size_t i = 0; i < n; i++) {
		pls[i]->tune.alloc_per_s = rate[i];
		unsigned had = pls[i]->tune.prev.pool_weight; /* read at this window's start */
		if (had == wt[i])
			continue;
		pl_pipeline_tune(pls[i]->pl, &(struct pl_tune){ .weight = wt[i] });
		/* a weight matters only between pipelines that contend: said when more than one */
		if (n > 1 && (wt[i] > had * 2 || wt[i] * 2 < had))
			dmn_log("pipeline %s: its share of the pool set to %u/%u (readers ask %.0f "
				"batches/s%s, a batch costs %.2f ms of the pool and %.2f of its "
				"driver, allocated %.0f/s)",
				pls[i]->name, wt[i], (unsigned)PL_TUNE_WEIGHT, in[i].demand,
				in[i].demand > 0 ? "" : ": as many as they get",
				1e3 * in[i].pool_cost, 1e3 * in[i].drv_cost, rate[i]);
	}
out:
	free(in);
	free(rate);
	free(wt);
}

void dmn_tune_tick(struct dmn *d, uint64_t now)
{
	if (!d->reg.cfg.autotune || now - d->tune_at_ns < DMN_TUNE_WINDOW_NS)
		return;
	d->tune_at_ns = now;
	size_t n = 0;
	for (struct dmn_pipeline *pl = d->reg.pipelines; pl; pl = pl->next)
		n++;
	struct dmn_pipeline **pls = n ? calloc(n, sizeof(*pls)) : NULL;
	size_t k = 0;
	for (struct dmn_pipeline *pl = d->reg.pipelines; pl; pl = pl->next)
		if (tune_one(d, pl, now) && pls && pl->tune.cost + pl->tune.drv_cost > 0)
			pls[k++] = pl;
	if (k)
		allocate(d, pls, k);
	free(pls);
}
