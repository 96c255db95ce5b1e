/* SPDX-License-Identifier: Apache-2.0 */
/* What the iox tests share: pattern files, an iox per engine, a gate before the backend. */
#ifndef SLUICE_TESTS_IOX_FIXTURE_H
#define SLUICE_TESTS_IOX_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "io/iox.h"
#include "io/iox_internal.h"

/* SplitMix64's finaliser, for patterns and random requests. */
uint64_t mix64(uint64_t x);
/* Byte pos of a pattern file is byte (pos % 8) of mix64(seed + pos / 8): any range checks. */
void pattern_fill(uint64_t seed, uint64_t off, uint8_t *out, size_t len);
/* A file of size bytes of the pattern of seed at path (asserts on failure). */
void write_pattern(const char *path, uint64_t seed, uint64_t size);

/*
 * An iox on the test's engine (*state points to an enum iox_engine); skips the test when
 * io_uring is refused here.
 */
struct iox *make_iox(void **state, struct iox_opts *o);

/*
 * A gate in front of the real backend, for what real files rarely do: it holds reads back
 * (closed: timeouts), or cuts them short (shorten: partial reads). One per test program.
 */
struct gate {
	const struct iox_backend_ops *real;
	struct iox_backend_ops ops;
	int closed;
	int shorten;
	struct iox_rd held[256];
	unsigned nheld;
	unsigned cut;
};
extern struct gate g_gate;
/* Put the gate in front of iox's backend (open, not shortening). */
void gate_install(struct iox *iox);
/* Let the reads held back through. */
void gate_open(struct iox *iox);

#endif
