/* SPDX-License-Identifier: Apache-2.0 */
/* The tuner's policy: knob steps from a window, and the host's allocation (tune.h). */
#include "tune.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Append to why (a sentence per move, "; " between them). */
__attribute__((format(printf, 3, 4))) static void say(char *why, size_t cap, const char *fmt, ...)
{
	size_t len = cap ? strlen(why) : 0;
	if (len + 2 >= cap)
		return;
	if (len) {
		memcpy(why + len, "; ", 3);
		len += 2;
	}
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why + len, cap - len, fmt, ap);
	va_end(ap);
}

/* The hold after a step of knob k taken back: PL_TUNE_HOLD, doubled each time in a row, up to
   PL_TUNE_HOLD_MAX (a pipeline whose best setting was found stops paying for trials). */
static unsigned backoff(struct pl_tune_probe *pr, int k)
{
	unsigned h = pr->held[k] ? pr->held[k] * 2 : PL_TUNE_HOLD;
	pr->held[k] = h < PL_TUNE_HOLD_MAX ? h : PL_TUNE_HOLD_MAX;
	return pr->held[k];
}

static void hist_push(struct pl_tune_probe *pr, double rate)
{
	if (pr->n_hist == PL_TUNE_HIST) {
		memmove(pr->hist, pr->hist + 1, (PL_TUNE_HIST - 1) * sizeof(pr->hist[0]));
		pr->n_hist--;
	}
	pr->hist[pr->n_hist++] = rate;
}

static double hist_mean(const struct pl_tune_probe *pr)
{
	double sum = 0;
	for (unsigned i = 0; i < pr->n_hist; i++)
		sum += pr->hist[i];
	return pr->n_hist ? sum / pr->n_hist : 0;
}

/*
 * A step starts from the current setting's windows: their mean is the base, their spread the
 * noise of a comparison of that mean with the mean of the step's PL_TUNE_PROBE_WINDOWS.
 */
static void step_begin(struct pl_tune_probe *pr, unsigned knob, size_t from, bool waited)
{
	double m = hist_mean(pr), var = 0;
	for (unsigned i = 0; i < pr->n_hist; i++)
		var += (pr->hist[i] - m) * (pr->hist[i] - m);
	double sd = pr->n_hist >= 3 && m > 0 ? sqrt(var / (pr->n_hist - 1)) / m : 0;
	pr->knob = knob;
	pr->waited = waited;
	pr->from = from;
	pr->windows = 0;
	pr->base = m;
	pr->noise = sd * sqrt(1.0 / (pr->n_hist ? pr->n_hist : 1) + 1.0 / PL_TUNE_PROBE_WINDOWS);
	pr->n_hist = 0; /* the step's windows are the new setting's */
}

/* A step under way: its window counted, and after the last, kept or taken back. */
static unsigned trial_window(const struct pl_tune_obs *o, const struct pl_tune *now,
			     struct pl_tune_probe *pr, struct pl_tune *next, char *why, size_t cap)
{
	hist_push(pr, o->rate);
	if (++pr->windows < PL_TUNE_PROBE_WINDOWS)
		return 0;
	double r = hist_mean(pr), margin = pr->noise;
	unsigned knob = pr->knob;
	int k = knob == PL_TUNE_MOVED_PREFETCH ? (pr->waited ? 2 : 0) : 1;
	pr->knob = 0;
	bool keep = pr->waited ? r >= pr->base * (PL_TUNE_PROBE_LOSS - margin)
			       : pr->base > 0 && r >= pr->base * (PL_TUNE_PROBE_GAIN + margin);
	if (keep) {
		pr->held[k] = 0; /* kept: no backoff */
		return 0;	 /* (said when stepped) */
	}
	pr->n_hist = 0; /* back at the setting before: its windows from now on */
	unsigned h = backoff(pr, k);
	if (knob == PL_TUNE_MOVED_PREFETCH) {
		/* the same step held, whether a wait or a trial would take it */
		pr->hold[0] = pr->hold[0] > h ? pr->hold[0] : h;
		pr->hold[2] = pr->hold[2] > h ? pr->hold[2] : h;
		next->prefetch = (unsigned)pr->from;
		say(why, cap, "%u jobs in flight made %.0f batches/s, %u made %.0f: taken back",
		    now->prefetch, r, next->prefetch, pr->base);
	} else {
		pr->hold[1] = h;
		next->read_chunk = pr->from;
		say(why, cap, "reads of %zu KiB made %.0f batches/s, of %zu KiB %.0f: taken back",
		    now->read_chunk >> 10, r, next->read_chunk >> 10, pr->base);
	}
	return knob;
}

/* Start a trial of the next step of a knob no wait points at, if one may take it. */
static unsigned trial_start(const struct pl_tune_obs *o, const struct pl_tune *now,
			    const struct pl_tune *max, struct pl_tune_probe *pr,
			    struct pl_tune *next, char *why, size_t cap)
{
	if (pr->n_hist < 3)
		return 0; /* the rate at this setting, and its noise, not known yet */
	unsigned knob = 0;
	if (!pr->hold[0] && max->prefetch && now->prefetch < max->prefetch &&
	    o->pool_busy < PL_TUNE_BUSY && !o->memory_refused) {
		unsigned p = now->prefetch * 2;
		next->prefetch = p < max->prefetch ? p : max->prefetch;
		step_begin(pr, knob = PL_TUNE_MOVED_PREFETCH, now->prefetch, false);
	} else if (!pr->hold[1] && max->read_chunk && now->read_chunk < max->read_chunk) {
		size_t c = now->read_chunk * 4;
		next->read_chunk = c < max->read_chunk ? c : max->read_chunk;
		step_begin(pr, knob = PL_TUNE_MOVED_CHUNK, now->read_chunk, false);
	}
	if (knob)
		say(why, cap, "no wait says what holds %.0f batches/s back: a trial", pr->base);
	return knob;
}

bool pl_tune_pipeline_limited(const struct pl_tune_obs *o)
{
	return o->batches >= 2 && o->producer_wait < PL_TUNE_CONSUMER;
}

unsigned pl_tune_step(const struct pl_tune_obs *o, const struct pl_tune *now,
		      const struct pl_tune *max, struct pl_tune_probe *pr, struct pl_tune *next,
		      char *why, size_t cap)
{
	unsigned moved = 0;
	*next = *now;
	if (cap)
		why[0] = '\0';
	for (int k = 0; k < 3; k++)
		if (pr->hold[k])
			pr->hold[k]--;
	if (o->memory_refused && max->prefetch && now->prefetch > 1) {
		pr->knob = 0; /* a trial ends here */
		pr->n_hist = 0;
		next->prefetch = now->prefetch / 2;
		say(why, cap, "the ring could not grow for a batch (%u jobs in flight were %u)",
		    next->prefetch, now->prefetch);
		return PL_TUNE_MOVED_PREFETCH;
	}
	/* nothing made, or the readers are the limit: a faster pipeline would not help (a step
	   under way is kept: the pipeline outruns its readers with it) */
	if (!pl_tune_pipeline_limited(o)) {
		pr->knob = 0;
		pr->n_hist = 0;
		return 0;
	}
	if (pr->knob)
		return trial_window(o, now, pr, next, why, cap);
	hist_push(pr, o->rate);
	if (!pr->hold[2] && max->prefetch && now->prefetch < max->prefetch &&
	    o->job_wait >= PL_TUNE_WAIT && o->pool_busy < PL_TUNE_BUSY && !o->memory_refused) {
		unsigned p = now->prefetch * 2;
		next->prefetch = p < max->prefetch ? p : max->prefetch;
		moved |= PL_TUNE_MOVED_PREFETCH;
		say(why, cap,
		    "the driver waited for batch jobs %.0f %% of the time, the pool busy %.0f %%",
		    100 * o->job_wait, 100 * o->pool_busy);
	}
	/* reads waited for: more in flight, else (none may be added) larger ones; reads that take
	   the driver's CPU: larger ones (fewer calls, fewer records across two reads to copy) */
	if (o->read_cpu >= PL_TUNE_READ_CPU && o->read_wait < PL_TUNE_WAIT && max->read_chunk &&
	    now->read_chunk < max->read_chunk) {
		size_t c = now->read_chunk * 4;
		next->read_chunk = c < max->read_chunk ? c : max->read_chunk;
		moved |= PL_TUNE_MOVED_CHUNK;
		say(why, cap, "reading took %.0f %% of the driver's time", 100 * o->read_cpu);
	} else if (o->read_wait >= PL_TUNE_WAIT) {
		if (max->read_depth && now->read_depth < max->read_depth) {
			unsigned dpt = now->read_depth * 2;
			next->read_depth = dpt < max->read_depth ? dpt : max->read_depth;
			moved |= PL_TUNE_MOVED_DEPTH;
		} else if (max->read_chunk && now->read_chunk < max->read_chunk) {
			size_t c = now->read_chunk * 4;
			next->read_chunk = c < max->read_chunk ? c : max->read_chunk;
			moved |= PL_TUNE_MOVED_CHUNK;
		}
		if (moved & (PL_TUNE_MOVED_DEPTH | PL_TUNE_MOVED_CHUNK))
			say(why, cap, "the driver waited for reads %.0f %% of the time",
			    100 * o->read_wait);
	}
	if (moved == PL_TUNE_MOVED_PREFETCH)
		step_begin(pr, moved, now->prefetch, true); /* checked as a trial is */
	else if (moved)
		pr->n_hist = 0; /* the reads' steps answer waits that do not lie: not checked */
	else
		moved = trial_start(o, now, max, pr, next, why, cap);
	return moved;
}

static double cost_of(const struct pl_tune_alloc_in *p)
{
	return p->pool_cost + p->drv_cost;
}

/* Rate r within what p's driver can do. */
static double capped(const struct pl_tune_alloc_in *p, double r)
{
	return p->seq_cap > 0 && r > p->seq_cap ? p->seq_cap : r;
}

/* A demanded pipeline's rate when demands are met in proportion f, within its driver's cap. */
static double demanded_rate(const struct pl_tune_alloc_in *p, double f)
{
	return capped(p, p->demand * f);
}

/* Cores the demanded pipelines take at proportion f. */
static double demanded_cores(size_t n, const struct pl_tune_alloc_in *in, double f)
{
	double c = 0;
	for (size_t i = 0; i < n; i++)
		if (in[i].demand > 0)
			c += demanded_rate(&in[i], f) * cost_of(&in[i]);
	return c;
}

/* A greedy pipeline's rate given s cores, within its driver's cap. */
static double greedy_rate(const struct pl_tune_alloc_in *p, double s)
{
	double c = cost_of(p);
	return capped(p, c > 0 ? s / c : 0);
}

static double greedy_cores(size_t n, const struct pl_tune_alloc_in *in, double s)
{
	double c = 0;
	for (size_t i = 0; i < n; i++)
		if (in[i].demand <= 0)
			c += greedy_rate(&in[i], s) * cost_of(&in[i]);
	return c;
}

/*
 * The largest x in [0, hi] with used(x) <= budget, used nondecreasing and continuous (pieces
 * of lines): bisection, to a part in 2^50 of hi.
 */
static double fill_to(size_t n, const struct pl_tune_alloc_in *in,
		      double (*used)(size_t, const struct pl_tune_alloc_in *, double), double hi,
		      double budget)
{
	if (used(n, in, hi) <= budget)
		return hi;
	double lo = 0;
	for (int k = 0; k < 50; k++) {
		double mid = (lo + hi) / 2;
		if (used(n, in, mid) <= budget)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

double pl_tune_allocate(size_t n, const struct pl_tune_alloc_in *in, double cores, double *ret_rate)
{
	double f = fill_to(n, in, demanded_cores, 1, cores);
	double left = cores - demanded_cores(n, in, f);
	if (left < 0)
		left = 0;
	/* equal cores s each, up to all that is left (one greedy pipeline, or the others capped) */
	double s = fill_to(n, in, greedy_cores, left, left);
	for (size_t i = 0; i < n; i++)
		ret_rate[i] = in[i].demand > 0 ? demanded_rate(&in[i], f) : greedy_rate(&in[i], s);
	return f;
}

void pl_tune_weights(size_t n, const double *rate, unsigned *ret_weight)
{
	double top = 0;
	for (size_t i = 0; i < n; i++)
		if (rate[i] > top)
			top = rate[i];
	for (size_t i = 0; i < n; i++) {
		double w = top > 0 ? round(PL_TUNE_WEIGHT * rate[i] / top) : PL_TUNE_WEIGHT;
		ret_weight[i] = w < 1 ? 1 : (unsigned)w;
	}
}
