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

/* The hold after a trial of knob k taken back: PL_TUNE_HOLD, doubled each time in a row, up to
   PL_TUNE_HOLD_MAX (a pipeline whose best setting was found stops paying for trials). */
static unsigned backoff(struct pl_tune_probe *pr, int k)
{
	unsigned h = pr->held[k] ? pr->held[k] * 2 : PL_TUNE_HOLD;
	pr->held[k] = h < PL_TUNE_HOLD_MAX ? h : PL_TUNE_HOLD_MAX;
	return pr->held[k];
}

/* A trial under way: its window counted, and after the last, kept or taken back. */
static unsigned trial_window(const struct pl_tune_obs *o, const struct pl_tune *now,
			     struct pl_tune_probe *pr, struct pl_tune *next, char *why, size_t cap)
{
	pr->sum += o->rate;
	if (++pr->windows < PL_TUNE_PROBE_WINDOWS)
		return 0;
	double r = pr->sum / pr->windows;
	unsigned knob = pr->knob;
	pr->knob = 0;
	if (pr->base > 0 && r >= pr->base * PL_TUNE_PROBE_GAIN) {
		pr->held[knob == PL_TUNE_MOVED_PREFETCH ? 0 : 1] = 0; /* kept: no backoff */
		return 0;					      /* (said when tried) */
	}
	if (knob == PL_TUNE_MOVED_PREFETCH) {
		next->prefetch = (unsigned)pr->from;
		pr->hold[0] = backoff(pr, 0);
		say(why, cap, "%u jobs in flight made %.0f batches/s, %u made %.0f: taken back",
		    now->prefetch, r, next->prefetch, pr->base);
	} else {
		next->read_chunk = pr->from;
		pr->hold[1] = backoff(pr, 1);
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
	unsigned knob = 0;
	if (!pr->hold[0] && max->prefetch && now->prefetch < max->prefetch &&
	    o->pool_busy < PL_TUNE_BUSY && !o->memory_refused) {
		unsigned p = now->prefetch * 2;
		next->prefetch = p < max->prefetch ? p : max->prefetch;
		*pr = (struct pl_tune_probe){ .knob = knob = PL_TUNE_MOVED_PREFETCH,
					      .from = now->prefetch,
					      .hold = { pr->hold[0], pr->hold[1] },
					      .held = { pr->held[0], pr->held[1] } };
	} else if (!pr->hold[1] && max->read_chunk && now->read_chunk < max->read_chunk) {
		size_t c = now->read_chunk * 4;
		next->read_chunk = c < max->read_chunk ? c : max->read_chunk;
		*pr = (struct pl_tune_probe){ .knob = knob = PL_TUNE_MOVED_CHUNK,
					      .from = now->read_chunk,
					      .hold = { pr->hold[0], pr->hold[1] },
					      .held = { pr->held[0], pr->held[1] } };
	}
	if (knob) {
		pr->base = o->rate;
		pr->last = o->rate;
		say(why, cap, "no wait says what holds %.0f batches/s back: a trial", o->rate);
	}
	return knob;
}

unsigned pl_tune_step(const struct pl_tune_obs *o, const struct pl_tune *now,
		      const struct pl_tune *max, struct pl_tune_probe *pr, struct pl_tune *next,
		      char *why, size_t cap)
{
	unsigned moved = 0;
	*next = *now;
	if (cap)
		why[0] = '\0';
	for (int k = 0; k < 2; k++)
		if (pr->hold[k])
			pr->hold[k]--;
	double before = pr->last; /* the window before this one */
	pr->last = o->batches >= 2 ? o->rate : 0;
	if (o->memory_refused && max->prefetch && now->prefetch > 1) {
		pr->knob = 0; /* a trial ends here */
		next->prefetch = now->prefetch / 2;
		say(why, cap, "the ring could not grow for a batch (%u jobs in flight were %u)",
		    next->prefetch, now->prefetch);
		return PL_TUNE_MOVED_PREFETCH;
	}
	/* nothing made, or the readers are the limit: a faster pipeline would not help (a trial
	   under way is kept: the pipeline outruns its readers with it) */
	if (o->batches < 2 || o->producer_wait >= PL_TUNE_CONSUMER) {
		pr->knob = 0;
		return 0;
	}
	if (pr->knob)
		return trial_window(o, now, pr, next, why, cap);
	if (max->prefetch && now->prefetch < max->prefetch && o->job_wait >= PL_TUNE_WAIT &&
	    o->pool_busy < PL_TUNE_BUSY && !o->memory_refused) {
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
	if (!moved) {
		moved = trial_start(o, now, max, pr, next, why, cap);
		if (moved && before > 0)
			pr->base = (before + o->rate) / 2;
	}
	return moved;
}

void pl_tune_allocate(size_t n, const double *demand, const double *cost, double cores,
		      double *ret_rate)
{
	double need = 0; /* cores the demands take */
	size_t greedy = 0;
	for (size_t i = 0; i < n; i++) {
		if (demand[i] > 0)
			need += demand[i] * cost[i];
		else
			greedy++;
	}
	/* the demands all met when the cores allow, else all met in the same proportion */
	double f = need > cores && need > 0 ? cores / need : 1;
	double left = cores - need * f;
	for (size_t i = 0; i < n; i++) {
		if (demand[i] > 0)
			ret_rate[i] = demand[i] * f;
		else
			ret_rate[i] = left > 0 && cost[i] > 0 ? left / (double)greedy / cost[i] : 0;
	}
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
