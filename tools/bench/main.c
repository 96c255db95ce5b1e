/* SPDX-License-Identifier: Apache-2.0 */
/* sluice-bench: entry point; dispatches to one benchmark per subcommand. */
#include "bench.h"

#include <stdio.h>
#include <string.h>

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "unknown"
#endif

struct bench {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
};

static const struct bench benches[] = {
	{ "read", bench_read, "read + frame + CRC + decode a dataset, against memcpy and read()" },
	{ "sched", bench_sched, "tiny tasks vs a mutex+condvar pool; parallel_for scaling" },
	{ "crc", bench_crc, "CRC32C (table, SSE4.2, VPCLMULQDQ) per buffer size, against memcpy" },
	{ "pipeline", bench_pipeline,
	  "batches per CPU-second of the pipeline engine, against memcpy" },
	{ "next", bench_next,
	  "sluice_next latency and throughput through sluiced; sharing's cost" },
	{ "reader", bench_reader,
	  "a C training loop over a running sluiced (python_reader.py baseline)" },
	{ "start", bench_start,
	  "a new pipeline's cost: attach to first batch, daemon CPU for an epoch" },
	{ "image", bench_image,
	  "JPEG/PNG decodes per CPU-second: full, RandomResizedCrop crops, scaled IDCT" },
	{ "predict", bench_predict,
	  "the resource model's predicted rate at more workers, against the measured one" },
};

static void usage(FILE *f)
{
	size_t i;

	fprintf(f, "usage: sluice-bench [--help|--version] BENCHMARK [ARGS...]\n\nbenchmarks:\n");
	for (i = 0; i < sizeof(benches) / sizeof(benches[0]); i++)
		fprintf(f, "  %-8s %s\n", benches[i].name, benches[i].summary);
	fprintf(f, "\nOutput: one `bench=NAME key=value ...` line per measurement.\n");
}

int main(int argc, char **argv)
{
	size_t i;

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
		printf("sluice-bench %s\n", SLUICE_VERSION);
		return 0;
	}
	if (argv[1][0] == '-') {
		fprintf(stderr, "sluice-bench: unknown option %.*s (try --help)\n",
			(int)strcspn(argv[1], "="), argv[1]);
		return 2;
	}
	for (i = 0; i < sizeof(benches) / sizeof(benches[0]); i++) {
		if (!strcmp(argv[1], benches[i].name))
			return benches[i].fn(argc - 1, argv + 1);
	}
	fprintf(stderr, "sluice-bench: unknown benchmark '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
