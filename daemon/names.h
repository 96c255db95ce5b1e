/* SPDX-License-Identifier: Apache-2.0 */
/* How close two pipeline names are: for "did you mean" in sluiced's errors. */
#ifndef SLUICE_DAEMON_NAMES_H
#define SLUICE_DAEMON_NAMES_H

#include <stdbool.h>
#include <stddef.h>

/*
 * The optimal-string-alignment (restricted Damerau-Levenshtein) distance between a and b: the
 * fewest insertions, deletions, substitutions and swaps of two neighbouring bytes that turn
 * one into the other, counted up to max + 1 (the answer is min(distance, max + 1)). Names
 * longer than DMN_NAME_DIST_MAX bytes count as max + 1 unless equal.
 */
#define DMN_NAME_DIST_MAX 255
unsigned dmn_name_distance(const char *a, const char *b, unsigned max);
/*
 * Does candidate come close enough to what someone typed (typed) to suggest it? At most 2
 * edits apart, or one starts with the other (at least 3 bytes of it), not equal.
 */
bool dmn_name_close(const char *typed, const char *candidate);

#endif
