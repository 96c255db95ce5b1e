/* SPDX-License-Identifier: Apache-2.0 */
/* sluice-bench: entry point; dispatches to one benchmark per subcommand. */
#include "bench.h"

#include <getopt.h>
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
	{ "autotune", bench_autotune,
	  "sluiced's autotuner against the best fixed prefetch and read buffer; two pipelines" },
};

static void usage(FILE *f)
{
	size_t i;

	fprintf(f, "usage: sluice-bench [--help|--version] BENCHMARK [ARGS...]\n\nbenchmarks:\n");
	for (i = 0; i < sizeof(benches) / sizeof(benches[0]); i++)
		fprintf(f, "  %-8s %s\n", benches[i].name, benches[i].summary);
	fprintf(f, "\nOutput: one `bench=NAME key=value ...` line per measurement.\n"
		   "sluice-bench BENCHMARK --help says what BENCHMARK measures and its options.\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	size_t i;
	int c;

	opterr = 0; /* said below */
	/* '+': the options before the benchmark's name are sluice-bench's, the rest its own */
	while ((c = getopt_long(argc, argv, "+hV", opts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return 0;
		}
		if (c == 'V') {
			printf("sluice-bench %s\n", SLUICE_VERSION);
			return 0;
		}
		if (optopt)
			fprintf(stderr, "sluice-bench: unknown option -%c (try --help)\n", optopt);
		else
			fprintf(stderr, "sluice-bench: unknown option %.*s (try --help)\n",
				(int)strcspn(argv[optind - 1], "="), argv[optind - 1]);
		return 2;
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	for (i = 0; i < sizeof(benches) / sizeof(benches[0]); i++) {
		if (!strcmp(argv[optind], benches[i].name))
			return benches[i].fn(argc - optind, argv + optind);
	}
	fprintf(stderr, "sluice-bench: unknown benchmark '%s'\n", argv[optind]);
	usage(stderr);
	return 2;
}
