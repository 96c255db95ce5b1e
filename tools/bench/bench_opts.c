/* SPDX-License-Identifier: Apache-2.0 */
/* sluice-bench: getopt_long for the benchmarks' arguments, with the messages of every program. */
#include "bench.h"

#include <stdio.h>
#include <string.h>

int bench_getopt(int argc, char **argv, const struct option *opts, const char **ret_name)
{
	int idx = -1;
	opterr = 0; /* said below, as sluiced and sluicectl say it */
	int c = getopt_long(argc, argv, ":h", opts, &idx);
	if (c == ':') {
		fprintf(stderr, "sluice-bench %s: %s needs a value (try --help)\n", argv[0],
			argv[optind - 1]);
		return '?';
	}
	if (c == '?') {
		/* optopt is the short option; a long one is named by its argument */
		if (optopt)
			fprintf(stderr, "sluice-bench %s: unknown option -%c (try --help)\n",
				argv[0], optopt);
		else
			fprintf(stderr, "sluice-bench %s: unknown option %.*s (try --help)\n",
				argv[0], (int)strcspn(argv[optind - 1], "="), argv[optind - 1]);
		return '?';
	}
	if (c != -1 && ret_name)
		*ret_name = idx >= 0 ? opts[idx].name : "h";
	return c;
}
