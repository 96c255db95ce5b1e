/* SPDX-License-Identifier: Apache-2.0 */
/* Test support for daemon/pipeline/spec.c: JSON with single quotes, minimal specs, parse checks. */
#ifndef SLUICE_TESTS_SPEC_FIXTURE_H
#define SLUICE_TESTS_SPEC_FIXTURE_H

#include "daemon/pipeline/spec.h"

/* The loader types, as mk() takes them. */
#define IND  "independent"
#define CONT "continuous_sequence"
#define DISC "discrete_sequence"

/* A processing_steps entry that slices tensor t with the slice text sl (single quotes). */
#define STEP(t, sl)                                                  \
	"'processing_steps': [{'tensor': '" t "', 'type': 'slice', " \
	"'args': {'slice': '" sl "'}}]"

/*
 * JSON in these tests is written with single quotes, turned into double quotes by q() (no test
 * string needs a real apostrophe). The returned buffer is static: one JSON text at a time.
 */
const char *q(const char *s);

/* Parse json (origin "spec.json"), asserting success; the caller destroys the spec. */
struct pl_spec *parse_ok(const char *json);

/*
 * Parse json, asserting it fails with want and a one-line message that starts with
 * "spec.json" and contains want1 (and want2 unless NULL); also with err == NULL.
 */
void parse_err(const char *json, int want, const char *want1, const char *want2);

/*
 * A spec of the given loader type: the minimal args, less the keys named in drop (space
 * separated) and those that add sets again, followed by add. Returns q()'s static buffer.
 */
const char *mk(const char *type, const char *drop, const char *add);

#endif /* SLUICE_TESTS_SPEC_FIXTURE_H */
