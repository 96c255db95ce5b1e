/* SPDX-License-Identifier: Apache-2.0 */
/* sluice-bench reader: a C training loop reading a running pipeline (the Python baseline). */
#include "bench.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/sluice.h"
#include "tools/common/cliarg.h"
#include "tools/common/scan.h"

#define MAX_TENSORS 256

static void reader_usage(FILE *f)
{
	fprintf(f, "usage: sluice-bench reader --name NAME [--socket PATH] [--batches N]\n"
		   "                           [--warmup N]\n"
		   "\n"
		   "Attaches to pipeline NAME of a running sluiced (broadcast) and reads N "
		   "batches\n"
		   "(default 20000) after N warm-up ones (default 500) the way a training loop\n"
		   "does: sluice_next, every tensor's view (sluice_batch_describe), release.\n"
		   "Prints the batches per second and the process's CPU time per batch. It is\n"
		   "the C side of tools/bench/python_reader.py, which runs the same loop in "
		   "Python.\n");
}

struct reader_args {
	const char *socket;
	const char *name;
	uint64_t batches;
	uint64_t warmup;
};

static int reader_parse(int argc, char **argv, struct reader_args *a)
{
	int i;

	a->socket = NULL;
	a->name = NULL;
	a->batches = 20000;
	a->warmup = 500;
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "name", required_argument, NULL, 'n' },
		{ "batches", required_argument, NULL, 'b' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *k;
	optind = 0;
	while ((i = bench_getopt(argc, argv, opts, &k)) != -1) {
		if (i == 'h') {
			reader_usage(stdout);
			return 1;
		} else if (i == '?') {
			return 2;
		} else if (i == 's') {
			a->socket = optarg;
		} else if (i == 'n') {
			a->name = optarg;
		} else if (cli_parse_u64(optarg, UINT32_MAX, i == 'b' ? &a->batches : &a->warmup) <
			   0) {
			fprintf(stderr, "sluice-bench reader: --%s: not a count: %s\n", k, optarg);
			return 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "sluice-bench reader: unexpected argument %s (try --help)\n",
			argv[optind]);
		return 2;
	}
	if (!a->name || a->batches == 0) {
		fprintf(stderr, "sluice-bench reader: --name and a --batches > 0 are needed\n");
		return 2;
	}
	return 0;
}

/* Take n batches; rows and tensor bytes seen are added to the counters. 0 or the error. */
static int take(struct sluice_reader *r, uint64_t n, uint64_t *rows, uint64_t *bytes,
		struct sluice_error *err)
{
	static struct sluice_tensor t[MAX_TENSORS];
	struct sluice_batch_info info;
	uint64_t k;
	int i, nt, rc;

	for (k = 0; k < n; k++) {
		struct sluice_batch *b = NULL;

		rc = sluice_next(r, -1, &b, err);
		if (rc == 0)
			return -ENODATA;
		if (rc < 0)
			return rc;
		nt = sluice_batch_describe(b, &info, t, MAX_TENSORS);
		if (nt < 0) {
			sluice_batch_release(b);
			snprintf(err->msg, sizeof(err->msg), "a corrupt batch");
			return nt;
		}
		for (i = 0; i < nt; i++)
			*bytes += t[i].nbytes;
		*rows += info.rows;
		sluice_batch_release(b);
	}
	return 0;
}

int bench_reader(int argc, char **argv)
{
	struct reader_args a;
	struct sluice_client *c = NULL;
	struct sluice_reader *r = NULL;
	struct sluice_attach_opts o;
	struct sluice_error err = { 0, "" };
	uint64_t rows = 0, bytes = 0;
	double t0, c0, wall, cpu;
	int rc;

	rc = reader_parse(argc, argv, &a);
	if (rc)
		return rc == 1 ? 0 : rc;
	rc = sluice_connect(a.socket, &c, &err);
	if (rc < 0)
		goto fail;
	sluice_attach_opts_init(&o);
	o.name = a.name;
	rc = sluice_attach(c, &o, &r, &err);
	if (rc < 0)
		goto fail;
	rc = take(r, a.warmup, &rows, &bytes, &err);
	if (rc < 0)
		goto fail;
	rows = bytes = 0;
	t0 = scan_now_s();
	c0 = scan_process_cpu_s();
	rc = take(r, a.batches, &rows, &bytes, &err);
	if (rc < 0)
		goto fail;
	wall = scan_now_s() - t0;
	cpu = scan_process_cpu_s() - c0;
	printf("bench=reader lang=c batches=%" PRIu64 " rows=%" PRIu64 " bytes=%" PRIu64
	       " wall_s=%.4f batches_per_s=%.1f cpu_us_per_batch=%.2f\n",
	       a.batches, rows, bytes, wall, (double)a.batches / wall,
	       cpu * 1e6 / (double)a.batches);
	sluice_detach(r);
	sluice_disconnect(c);
	return 0;
fail:
	fprintf(stderr, "sluice-bench reader: %s\n",
		rc == -ENODATA ? "the pipeline ended before N batches" : err.msg);
	sluice_detach(r);
	sluice_disconnect(c);
	return 1;
}
