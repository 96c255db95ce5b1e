/* SPDX-License-Identifier: Apache-2.0 */
/* The engine's random streams, keyed by (seed, epoch, stream, index) (pipeline-semantics.md). */
#ifndef SLUICE_PIPELINE_RNG_H
#define SLUICE_PIPELINE_RNG_H

#include <stdint.h>

struct pl_rng {
	uint64_t s;
};

enum {
	PL_STREAM_FILES = 1,
	PL_STREAM_SHUFFLE = 2,
	PL_STREAM_WINDOWS = 3,
	PL_STREAM_AUGMENT = 0x100, /* + the index of a random image step in processing_steps */
};

static inline uint64_t pl_mix64(uint64_t z)
{
	z ^= z >> 30;
	z *= 0xbf58476d1ce4e5b9ull;
	z ^= z >> 27;
	z *= 0x94d049bb133111ebull;
	z ^= z >> 31;
	return z;
}

static inline void pl_rng_init(struct pl_rng *r, uint64_t seed, uint64_t epoch, uint64_t stream,
			       uint64_t index)
{
	uint64_t s = pl_mix64(seed ^ 0x736c756963650000ull);
	s = pl_mix64(s ^ epoch);
	s = pl_mix64(s ^ stream);
	r->s = pl_mix64(s ^ index);
}

static inline uint64_t pl_rng_next(struct pl_rng *r)
{
	r->s += 0x9e3779b97f4a7c15ull;
	return pl_mix64(r->s);
}

/* A number of the stream as a draw below n (pl_rng_below's, for numbers taken ahead). */
static inline uint64_t pl_rng_reduce(uint64_t v, uint64_t n)
{
	return v % n;
}

static inline uint64_t pl_rng_below(struct pl_rng *r, uint64_t n)
{
	return pl_rng_reduce(pl_rng_next(r), n);
}

#endif
