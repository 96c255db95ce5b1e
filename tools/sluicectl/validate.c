/* SPDX-License-Identifier: Apache-2.0 */
/* sluicectl validate: decode every record of a dataset against its manifest and report. */
#include "sluicectl.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/dataset.h"
#include "sched/sched.h"
#include "tools/common/check.h"
#include "tools/common/cliarg.h"
#include "tools/common/scan.h"

static void validate_usage(FILE *f)
{
	fprintf(f, "usage: sluicectl validate DIR [options]\n"
		   "       sluicectl validate MANIFEST LIST [options]\n"
		   "\n"
		   "Decode every record of a dataset (DIR/__manifest__.json and "
		   "DIR/**/*.tfrecords,\n"
		   "or a manifest file and a file listing data files) and check each manifest\n"
		   "feature:\n"
		   "presence, list kind, element count against shape, values against dtype.\n"
		   "Records are SequenceExamples when the manifest has allow_var_len.\n"
		   "\n"
		   "options:\n"
		   "  --threads N      decode workers (default: online CPUs)\n"
		   "  --no-pool        decode on the reading threads instead of the task pool\n"
		   "  --max-errors N   problems to print (default 20)\n"
		   "  --no-crc         do not verify record CRCs\n"
		   "\n"
		   "exit status: 0 valid, 1 problems found (or the dataset cannot be read), 2 "
		   "usage.\n"
		   "SLUICE_IO_ENGINE=pread forces the pread engine instead of io_uring.\n");
}

static void print_problem(const struct dataset *ds, const struct check_problem *p)
{
	if (p->cls == CHECK_FRAMING) {
		/* The reader's message names the file, record and offset itself. */
		printf("%s\n", p->msg);
		return;
	}
	printf("%s: record %" PRIu64 " (offset %" PRIu64 "): %s\n",
	       p->file_index < ds->n_files ? ds->files[p->file_index].path : "?", p->record,
	       p->offset, p->msg);
}

int cmd_validate(int argc, char **argv)
{
	const char *pos[2] = { NULL, NULL };
	uint64_t threads = 0, max_errors = 20;
	struct scan_opts so;
	struct check_run run;
	struct dataset *ds = NULL;
	struct io_error err;
	struct sched_pool *pool = NULL;
	bool crc = true, use_pool = true;
	struct sched_worker_stats pool_total;
	unsigned workers;
	double secs, cpu;
	int npos = 0, i, rc;
	size_t k;

	static const struct option opts[] = {
		{ "threads", required_argument, NULL, 't' },
		{ "max-errors", required_argument, NULL, 'm' },
		{ "no-crc", no_argument, NULL, 'c' },
		{ "no-pool", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	opterr = 0; /* named below */
	optind = 0;
	while ((i = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		const char *a = argv[optind - 1];

		if (i == 'h') {
			validate_usage(stdout);
			return 0;
		} else if (i == 't' || i == 'm') {
			if (cli_parse_u64(optarg, 1u << 20, i == 't' ? &threads : &max_errors) <
			    0) {
				fprintf(stderr, "sluicectl validate: --%s needs a number\n",
					i == 't' ? "threads" : "max-errors");
				return 2;
			}
		} else if (i == 'c') {
			crc = false;
		} else if (i == 'p') {
			use_pool = false;
		} else {
			if (i == ':')
				fprintf(stderr, "sluicectl validate: %s needs a value\n", a);
			else if (optopt)
				fprintf(stderr, "sluicectl validate: unknown option -%c\n", optopt);
			else
				fprintf(stderr, "sluicectl validate: unknown option %.*s\n",
					(int)strcspn(a, "="), a);
			validate_usage(stderr);
			return 2;
		}
	}
	for (; optind < argc; optind++) {
		if (npos == 2) {
			fprintf(stderr, "sluicectl validate: too many arguments\n");
			validate_usage(stderr);
			return 2;
		}
		pos[npos++] = argv[optind];
	}
	if (!npos) {
		validate_usage(stderr);
		return 2;
	}

	err.msg[0] = '\0';
	if (npos == 1)
		rc = dataset_open_dir(pos[0], NULL, &ds, &err);
	else
		rc = dataset_open_list(pos[0], pos[1], &ds, &err);
	if (rc < 0) {
		fprintf(stderr, "sluicectl validate: %s\n", err.msg[0] ? err.msg : strerror(-rc));
		return 1;
	}

	scan_opts_init(&so);
	so.verify_crc = crc;
	so.max_errors = max_errors;
	if (use_pool) {
		struct sched_pool_opts po;

		sched_pool_opts_init(&po);
		po.workers = (unsigned)threads;
		rc = sched_pool_create(&po, &pool);
		if (rc < 0) {
			fprintf(stderr, "sluicectl validate: cannot start the decode pool: %s\n",
				strerror(-rc));
			dataset_destroy(ds);
			return 1;
		}
		so.pool = pool;
	} else {
		so.threads = (unsigned)threads;
	}
	rc = check_dataset(ds, &so, max_errors, &run, &err);
	workers = scan_opts_contexts(&so, ds);
	if (pool) {
		struct sched_worker_stats st[64];
		unsigned n = sched_pool_stats(pool, st, 64);

		memset(&pool_total, 0, sizeof(pool_total));
		for (unsigned w = 0; w < n; w++) {
			pool_total.tasks += st[w].tasks;
			pool_total.steals += st[w].steals;
			pool_total.steal_fails += st[w].steal_fails;
			pool_total.injected += st[w].injected;
			pool_total.parks += st[w].parks;
			pool_total.parked_ns += st[w].parked_ns;
		}
	}
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
	if (rc < 0) {
		fprintf(stderr, "sluicectl validate: %s\n", err.msg[0] ? err.msg : strerror(-rc));
		check_run_fini(&run);
		dataset_destroy(ds);
		return 1;
	}

	printf("dataset: %s%s%s (%zu files, compression %s%s)\n", pos[0], npos == 2 ? " " : "",
	       npos == 2 ? pos[1] : "", ds->n_files,
	       tfr_compression_name(ds->manifest->compression),
	       ds->manifest->allow_var_len ? ", SequenceExample" : "");
	if (run.scan.fallback_reason[0])
		printf("engine: %s (fallback: %s)\n", iox_engine_name(run.scan.engine),
		       run.scan.fallback_reason);
	else
		printf("engine: %s\n", iox_engine_name(run.scan.engine));
	printf("counts: files=%" PRIu64 " records=%" PRIu64 " file_bytes=%" PRIu64
	       " record_bytes=%" PRIu64 " bad_records=%" PRIu64 " failed_files=%" PRIu64 "\n",
	       run.scan.total.files, run.scan.total.records, run.scan.total.file_bytes,
	       run.scan.total.record_bytes, run.bad_records, run.scan.files_failed);
	printf("problems: total=%" PRIu64, run.problems_total);
	for (k = 0; k < CHECK_NCLASSES; k++)
		printf(" %s=%" PRIu64, check_class_name((enum check_class)k), run.counts[k]);
	printf("\n");
	for (k = 0; k < run.n_problems; k++)
		print_problem(ds, &run.problems[k]);
	if (run.problems_total > run.n_problems)
		printf("... and %" PRIu64 " more problems (--max-errors)\n",
		       run.problems_total - run.n_problems);

	secs = run.scan.wall_s > 0 ? run.scan.wall_s : 1e-9;
	cpu = run.scan.process_cpu_s > 0 ? run.scan.process_cpu_s : 1e-9;
	if (use_pool)
		printf("pool: workers=%u tasks=%" PRIu64 " injected=%" PRIu64 " steals=%" PRIu64
		       " steal_fails=%" PRIu64 " parks=%" PRIu64 " parked_ms=%.1f\n",
		       workers, pool_total.tasks, pool_total.injected, pool_total.steals,
		       pool_total.steal_fails, pool_total.parks,
		       (double)pool_total.parked_ns / 1e6);
	printf("speed: %s=%u io_threads=%u wall_s=%.3f cpu_s=%.3f records_per_s=%.0f "
	       "mb_per_s=%.1f records_per_cpu_s=%.0f mb_per_cpu_s=%.1f\n",
	       use_pool ? "workers" : "threads", workers, run.scan.threads, run.scan.wall_s,
	       run.scan.process_cpu_s, (double)run.scan.total.records / secs,
	       (double)run.scan.total.file_bytes / secs / 1e6, (double)run.scan.total.records / cpu,
	       (double)run.scan.total.file_bytes / cpu / 1e6);
	rc = run.problems_total ? 1 : 0;
	printf("result: %s\n", rc ? "INVALID" : "valid");
	check_run_fini(&run);
	dataset_destroy(ds);
	return rc;
}
