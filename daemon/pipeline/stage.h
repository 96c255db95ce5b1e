/* SPDX-License-Identifier: Apache-2.0 */
/* What every stage of the engine reports, and the driver thread's sampling clock. */
#ifndef SLUICE_PIPELINE_STAGE_H
#define SLUICE_PIPELINE_STAGE_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

/*
 * The stages of a pipeline, in stream order (docs/pipeline.md has the diagram). Each is a unit
 * with its own file and header; the driver (driver.c, chain.c) creates them, connects each to
 * its upstream through callbacks it gives, and owns the threads and the clock. This header is
 * the one thing they share: the counters each fills and the clock they tick.
 */
enum pl_stage_id {
	PL_STAGE_FILES,	     /* files.c: the epoch's file order over the shard's files */
	PL_STAGE_READ,	     /* read.c: one file at a time per slot, chunks from an iox */
	PL_STAGE_FRAME,	     /* frame.c: TFRecord framing (+ inflate, header CRC), records */
	PL_STAGE_WINDOW,     /* window.c: windows of records (sequence loaders) */
	PL_STAGE_INTERLEAVE, /* interleave.c: round robin over the slots */
	PL_STAGE_SHUFFLE,    /* shuffle.c: the shuffle buffer */
	PL_STAGE_PARSE,	     /* assemble.c, rowparse.c, ops.c: parse + steps into the batch */
	PL_STAGE_DECODE,     /* decode.c, imgops.c: image steps, called by parse's tasks */
	PL_STAGE_DELIVER,    /* deliver.c: the ready queue or the deliver callback */
	PL_STAGE_COUNT_,
	PL_STAGE_IDLE_ = PL_STAGE_COUNT_, /* the driver blocked: no stage's CPU */
};

/* "files", "read", ... (for stats keys); NULL past the end. */
const char *pl_stage_name(unsigned id);

/*
 * A stage's counters. Elements are what the stage takes and gives (files, chunks, records,
 * windows, rows, batches: docs/pipeline.md says which); bytes likewise. cpu_ns: the CPU time of
 * the stage's own work (on the driver: its share of the driver thread's CPU time, sampled; of
 * the parse stage also the pool's task time). wait_up_ns: time the stage was blocked waiting for
 * its input (the disk, for the driver's stages); wait_down_ns: time it was blocked because its
 * output had no room. buffered / capacity: elements it holds now, and at most. dropped: bad
 * elements it dropped (on_corrupt skip_*).
 */
struct pl_stage_stats {
	uint64_t elems_in, elems_out;
	uint64_t bytes_in, bytes_out;
	uint64_t completions; /* read: chunks completed; parse: batches filled; deliver: taken */
	uint64_t cpu_ns;
	uint64_t wait_up_ns, wait_down_ns;
	uint64_t buffered, capacity;
	uint64_t dropped; /* elements dropped under on_corrupt skip_record / skip_file */
};

/*
 * Counter k (0, 1, ...) of st: its name ("elems_in", ...) and *ret_value, or NULL past the last
 * (for reports that list every counter: sluiced's stats keys stage.<stage>.<counter>).
 */
const char *pl_stage_counter(const struct pl_stage_stats *st, unsigned k, uint64_t *ret_value);

/* A clock for stats and slack (CLOCK_THREAD_CPUTIME_ID is a system call; MONOTONIC a vDSO read). */
static inline uint64_t pl_clock_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * Which stage the driver thread is working for, and, in sampled rounds only, the monotonic time
 * spent in each. A stage's entry points call pl_prof_enter() with their id and pl_prof_leave()
 * with what it returned; around a blocking wait the stage enters PL_STAGE_IDLE_. Outside a
 * sampled round that is a load and a store: reading a clock at every switch (several per record)
 * would cost more than the stages' work on small records. The driver opens a round for one batch
 * in PL_PROF_EVERY; as each round closes, the thread's CPU time since the last one closed is
 * split between the stages in proportion to that round's times (pl_prof_split). Round by round,
 * not in proportion to all rounds so far: a round that pays a one-off cost (every reader's
 * buffers faulted in at the first batch: 20 ms a reader on a VM) then weighs what that stretch
 * cost, not 32 times its share of everything after it.
 */
#define PL_PROF_EVERY 32

struct pl_prof {
	bool on;
	unsigned cur;
	uint64_t t;			     /* when cur was entered (sampled rounds) */
	uint64_t round[PL_STAGE_COUNT_ + 1]; /* the open round's time per stage; [IDLE_]: blocked */
	uint64_t last[PL_STAGE_COUNT_];	     /* the last split round's (the next split's guess) */
	uint64_t cpu[PL_STAGE_COUNT_];	     /* the thread's CPU time split so far */
	uint64_t cpu_at;		     /* the thread's CPU time at the last split */
};

/*
 * The sampler's clock: only the proportions of a round's times are used, so any steady counter
 * serves. The time-stamp counter where there is one (a few cycles, where a vDSO read of the
 * monotonic clock took 6% of a later cached job's CPU); a step back (another CPU's counter)
 * counts nothing.
 */
static inline uint64_t pl_prof_ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
	return __rdtsc();
#else
	return pl_clock_ns(CLOCK_MONOTONIC);
#endif
}

static inline void pl_prof_tick_(struct pl_prof *p)
{
	uint64_t now = pl_prof_ticks();
	if (now > p->t)
		p->round[p->cur] += now - p->t;
	p->t = now;
}

static inline unsigned pl_prof_enter(struct pl_prof *p, unsigned stage)
{
	unsigned prev = p->cur;
	if (__builtin_expect(p->on, 0))
		pl_prof_tick_(p);
	p->cur = stage;
	return prev;
}

static inline void pl_prof_leave(struct pl_prof *p, unsigned prev)
{
	if (__builtin_expect(p->on, 0))
		pl_prof_tick_(p);
	p->cur = prev;
}

/*
 * The round just closed: the thread's CPU time since the last split (cpu_ns, its clock now) to
 * the stages in the round's proportions. A round that was all blocked splits nothing: its CPU
 * time waits for the next round.
 */
void pl_prof_split(struct pl_prof *p, uint64_t cpu_ns);

/* Open (on) or close a sampled round; the thread calling it is the one whose stages these are. */
static inline void pl_prof_sample(struct pl_prof *p, bool on)
{
	if (p->on) {
		pl_prof_tick_(p);
		pl_prof_split(p, pl_clock_ns(CLOCK_THREAD_CPUTIME_ID));
	}
	if (on)
		p->t = pl_prof_ticks();
	p->on = on;
}

/*
 * The stages' CPU: adds to st[i].cpu_ns what the rounds split (cpu), and the CPU time since the
 * last split (since_ns) in the last split round's proportions (last).
 */
void pl_prof_share(const uint64_t cpu[PL_STAGE_COUNT_], const uint64_t last[PL_STAGE_COUNT_],
		   uint64_t since_ns, struct pl_stage_stats st[PL_STAGE_COUNT_]);

#endif
