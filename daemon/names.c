/* SPDX-License-Identifier: Apache-2.0 */
/* How close two pipeline names are: for "did you mean" in sluiced's errors. */
#include "names.h"

#include <string.h>

unsigned dmn_name_distance(const char *a, const char *b, unsigned max)
{
	size_t n = strlen(a), m = strlen(b);
	if (n > DMN_NAME_DIST_MAX || m > DMN_NAME_DIST_MAX)
		return strcmp(a, b) == 0 ? 0 : max + 1;
	if ((n > m ? n - m : m - n) > max)
		return max + 1; /* each edit changes the length by one at most */
	/* three rows of the dynamic program: i - 2, i - 1, i */
	unsigned rows[3][DMN_NAME_DIST_MAX + 1];
	unsigned *pp = rows[0], *p = rows[1], *c = rows[2];
	for (size_t j = 0; j <= m; j++)
		p[j] = (unsigned)j;
	for (size_t i = 1; i <= n; i++) {
		c[0] = (unsigned)i;
		unsigned best = c[0];
		for (size_t j = 1; j <= m; j++) {
			unsigned cost = a[i - 1] != b[j - 1];
			unsigned v = p[j] + 1; /* delete */
			if (c[j - 1] + 1 < v)
				v = c[j - 1] + 1; /* insert */
			if (p[j - 1] + cost < v)
				v = p[j - 1] + cost; /* substitute */
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    pp[j - 2] + 1 < v)
				v = pp[j - 2] + 1; /* swap neighbours */
			c[j] = v;
			if (v < best)
				best = v;
		}
		if (best > max)
			return max + 1; /* the row's minimum never decreases */
		unsigned *t = pp;
		pp = p;
		p = c;
		c = t;
	}
	return p[m] > max ? max + 1 : p[m];
}

bool dmn_name_close(const char *typed, const char *candidate)
{
	size_t lt = strlen(typed), lc = strlen(candidate);
	if (strcmp(typed, candidate) == 0)
		return false;
	size_t shorter = lt < lc ? lt : lc;
	if (shorter >= 3 && strncmp(typed, candidate, shorter) == 0)
		return true;
	return dmn_name_distance(typed, candidate, 2) <= 2;
}
