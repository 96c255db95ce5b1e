/* SPDX-License-Identifier: Apache-2.0 */
/* sluicectl run: run a pipeline spec in process and print (or digest) the batches it produces. */
#include "sluicectl.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/pipeline/cache.h"
#include "daemon/pipeline/pipeline.h"
#include "daemon/pipeline/spec.h"
#include "io/file.h"
#include "ipc/batch.h"
#include "sched/sched.h"
#include "tools/common/cliarg.h"
#include "tools/common/jsonout.h"
#include "tools/common/scan.h"
#include "tools/common/tensorjson.h"

#define RUN_STATE_IN_MAX (1u << 20)
#define RUN_MAX_WORKERS	 4096

static void run_usage(FILE *f)
{
	fprintf(f, "usage: sluicectl run SPEC [options]\n"
		   "\n"
		   "Run the pipeline spec SPEC (a JSON file) in this process and read its\n"
		   "batches until the end of the stream (or --batches N), checking each\n"
		   "batch's layout.\n"
		   "\n"
		   "options:\n"
		   "  --batches N        stop after N batches\n"
		   "  --json             one JSON line per batch: seq, epoch, rows, end_epoch,\n"
		   "                     and per tensor its dtype, shape, ragged, CRC-32 digest\n"
		   "  --values NAME,...  (with --json) also print these tensors' values (and\n"
		   "                     a ragged tensor's row_splits)\n"
		   "  --state-in FILE    resume from a state written by --state-out\n"
		   "  --state-out FILE   after the last batch, write the pipeline's state\n"
		   "  --engine E         auto (default), uring or pread\n"
		   "  --direct           read with O_DIRECT (no page cache, no kernel copy)\n"
		   "  --workers N        parse on a pool of N workers (default: the pipeline's\n"
		   "                     own pool of num_parallel_parses workers)\n"
		   "  --cache-memory B   keep up to B bytes of framed records: a second epoch\n"
		   "                     reads the files it holds from memory (as sluiced\n"
		   "                     --cache-memory does for every pipeline)\n"
		   "  --cache-uncompressed=false  compressed files only (as sluiced's option)\n"
		   "\n"
		   "Without --json: one line per batch, the rate on stderr every second, and\n"
		   "totals. Exit status: 0 done, 1 the pipeline failed (error on stderr),\n"
		   "2 usage.\n");
}

/* A name inside an argument (not NUL-terminated). */
struct run_name {
	const char *s;
	size_t len;
};

struct run_opts {
	const char *spec_path;
	uint64_t max_batches; /* UINT64_MAX: no limit */
	bool json;
	struct run_name *values; /* --values names (in argv) */
	size_t n_values;
	const char *state_in, *state_out;
	enum iox_engine engine;
	bool direct;
	uint64_t workers;	 /* 0: the pipeline's own pool */
	uint64_t cache_bytes;	 /* 0: no record cache */
	bool cache_uncompressed; /* else only compressed files are cached */
};

/* Append the comma-separated names of arg to o->values. -ENOMEM or -EINVAL (an empty name). */
static int add_values(struct run_opts *o, const char *arg)
{
	struct run_name *nv;
	const char *s = arg;
	size_t count = 1, k;

	for (k = 0; arg[k]; k++)
		count += arg[k] == ',';
	nv = realloc(o->values, (o->n_values + count) * sizeof(*nv));
	if (!nv)
		return -ENOMEM;
	o->values = nv;
	for (k = 0; k < count; k++) {
		const char *comma = strchr(s, ',');
		size_t len = comma ? (size_t)(comma - s) : strlen(s);

		if (!len)
			return -EINVAL;
		o->values[o->n_values].s = s;
		o->values[o->n_values++].len = len;
		s += len + 1;
	}
	return 0;
}

static int write_file(const char *path, const void *buf, size_t len)
{
	FILE *f = fopen(path, "wb");
	int e = 0;

	if (!f)
		return -errno;
	if (fwrite(buf, 1, len, f) != len)
		e = -EIO;
	if (fclose(f) != 0 && !e)
		e = -errno;
	return e;
}

static void json_tensor(struct jsonout *j, const char *name, const struct ipc_tensor_view *t,
			uint64_t rows, bool values)
{
	char buf[16];
	int n;

	jsonout_str(j, name, strlen(name));
	jsonout_raw(j, ": {\"dtype\": \"", 13);
	jsonout_cstr(j, ipc_dtype_name(t->dtype));
	jsonout_cstr(j, "\", \"shape\": ");
	tj_int64s(j, t->shape, t->rank);
	jsonout_cstr(j,
		     t->kind == IPC_TENSOR_RAGGED ? ", \"ragged\": true" : ", \"ragged\": false");
	n = snprintf(buf, sizeof(buf), "%08" PRIx32,
		     tj_tensor_crc(0, t->splits, rows, t->offsets, t->n_elems, t->data,
				   t->data_len));
	jsonout_cstr(j, ", \"digest\": \"");
	jsonout_raw(j, buf, (size_t)n);
	jsonout_char(j, '"');
	if (values) {
		jsonout_cstr(j, ", \"values\": ");
		tj_values(j, t->dtype, t->data, t->offsets, t->n_elems);
		if (t->kind == IPC_TENSOR_RAGGED) {
			jsonout_cstr(j, ", \"row_splits\": ");
			tj_int64s(j, t->splits, rows + 1);
		}
	}
	jsonout_char(j, '}');
}

/* ---- the run ---- */

struct run {
	struct run_opts o;
	struct pl_pipeline *p;
	size_t n_schema;
	bool *want_values;		/* per schema index */
	struct ipc_tensor_view *tviews; /* per schema index, for the batch at hand */
	struct jsonout out;
	uint64_t batches, rows;
};

/* Check a batch against the layout and the schema; tviews[] in schema order. */
static int check_batch(struct run *r, const struct pl_batch *b, struct ipc_batch_view *v, char *msg,
		       size_t cap)
{
	size_t s;
	unsigned i, d;
	int rc;

	rc = ipc_batch_view(b->mem, b->len, v, msg, cap);
	if (rc < 0)
		return rc;
	if (v->seq != b->seq || v->epoch != b->epoch || v->rows != b->rows ||
	    v->flags != b->flags) {
		snprintf(msg, cap,
			 "the header (seq %" PRIu64 ", epoch %" PRIu64 ", rows %" PRIu64
			 ", flags 0x%x) disagrees with pl_batch (seq %" PRIu64 ", epoch %" PRIu64
			 ", rows %" PRIu64 ", flags 0x%x)",
			 v->seq, v->epoch, v->rows, v->flags, b->seq, b->epoch, b->rows, b->flags);
		return -EBADMSG;
	}
	if (v->flags & IPC_BATCH_F_ERROR)
		return 0;
	if (v->n_tensors != r->n_schema) {
		snprintf(msg, cap, "the batch has %u tensors, the schema %zu", v->n_tensors,
			 r->n_schema);
		return -EBADMSG;
	}
	for (s = 0; s < r->n_schema; s++)
		r->tviews[s].rank = 0; /* not seen yet */
	for (i = 0; i < v->n_tensors; i++) {
		struct ipc_tensor_view t;
		const struct pl_tensor_info *info;

		rc = ipc_batch_tensor(v, i, &t, msg, cap);
		if (rc < 0)
			return rc;
		if (t.schema_index >= r->n_schema || r->tviews[t.schema_index].rank) {
			snprintf(msg, cap, "tensor %u: schema_index %u is out of range or repeated",
				 i, t.schema_index);
			return -EBADMSG;
		}
		info = pl_pipeline_tensor(r->p, t.schema_index);
		if ((unsigned)info->dtype != (unsigned)t.dtype || info->rank != t.rank ||
		    info->ragged != (t.kind == IPC_TENSOR_RAGGED)) {
			snprintf(msg, cap,
				 "tensor %u (%s): %s rank %u%s, the schema says %s rank "
				 "%u%s",
				 i, info->name, ipc_dtype_name(t.dtype), t.rank,
				 t.kind == IPC_TENSOR_RAGGED ? " ragged" : "",
				 ipc_dtype_name((unsigned)info->dtype), info->rank,
				 info->ragged ? " ragged" : "");
			return -EBADMSG;
		}
		for (d = 1; d < t.rank; d++) {
			if (info->shape[d] >= 0 && info->shape[d] != t.shape[d]) {
				snprintf(msg, cap,
					 "tensor %u (%s): shape[%u] is %" PRId64 ", the "
					 "schema says %" PRId64,
					 i, info->name, d, t.shape[d], info->shape[d]);
				return -EBADMSG;
			}
		}
		r->tviews[t.schema_index] = t;
	}
	return 0;
}

static int print_json(struct run *r, const struct ipc_batch_view *v)
{
	struct jsonout *j = &r->out;
	size_t s;

	jsonout_cstr(j, "{\"seq\": ");
	jsonout_uint64(j, v->seq);
	jsonout_cstr(j, ", \"epoch\": ");
	jsonout_uint64(j, v->epoch);
	jsonout_cstr(j, ", \"rows\": ");
	jsonout_uint64(j, v->rows);
	jsonout_cstr(j, ", \"end_epoch\": ");
	jsonout_bool(j, v->flags & IPC_BATCH_F_END_EPOCH);
	jsonout_cstr(j, ", \"tensors\": {");
	for (s = 0; s < r->n_schema; s++) {
		if (s)
			jsonout_raw(j, ", ", 2);
		json_tensor(j, pl_pipeline_tensor(r->p, s)->name, &r->tviews[s], v->rows,
			    r->want_values[s]);
	}
	jsonout_cstr(j, "}}");
	return jsonout_line_write(j, stdout);
}

static void print_text(struct run *r, const struct ipc_batch_view *v)
{
	size_t s;
	unsigned d;

	printf("batch seq=%" PRIu64 " epoch=%" PRIu64 " rows=%" PRIu64 "%s%s", v->seq, v->epoch,
	       v->rows, v->flags & IPC_BATCH_F_END_EPOCH ? " end_epoch" : "",
	       v->flags & IPC_BATCH_F_END_STREAM ? " end_stream" : "");
	for (s = 0; s < r->n_schema; s++) {
		const struct ipc_tensor_view *t = &r->tviews[s];

		printf(" %s=%s[", pl_pipeline_tensor(r->p, s)->name, ipc_dtype_name(t->dtype));
		for (d = 0; d < t->rank; d++)
			printf(d ? ",%" PRId64 : "%" PRId64, t->shape[d]);
		printf("]");
		if (t->kind == IPC_TENSOR_RAGGED)
			printf("(%" PRIu64 ")", t->n_elems);
	}
	printf("\n");
}

/* Map --values names to schema indices. -ENOENT with the name in msg. */
static int resolve_values(struct run *r, char *msg, size_t cap)
{
	size_t k, s;

	for (k = 0; k < r->o.n_values; k++) {
		const struct run_name *w = &r->o.values[k];

		for (s = 0; s < r->n_schema; s++) {
			const char *name = pl_pipeline_tensor(r->p, s)->name;

			if (strlen(name) == w->len && !memcmp(name, w->s, w->len))
				break;
		}
		if (s == r->n_schema) {
			snprintf(msg, cap, "--values: the pipeline has no tensor named '%.*s'",
				 (int)w->len, w->s);
			return -ENOENT;
		}
		r->want_values[s] = true;
	}
	return 0;
}

static int parse_args(int argc, char **argv, struct run_opts *o)
{
	enum {
		OPT_JSON = 1,
		OPT_CACHE_UNCOMPRESSED,
		OPT_CACHE_MEMORY,
		OPT_BATCHES,
		OPT_WORKERS,
		OPT_VALUES,
		OPT_STATE_IN,
		OPT_STATE_OUT,
		OPT_DIRECT,
		OPT_ENGINE
	};
	static const struct option opts[] = {
		{ "json", no_argument, NULL, OPT_JSON },
		{ "cache-uncompressed", optional_argument, NULL, OPT_CACHE_UNCOMPRESSED },
		{ "cache-memory", required_argument, NULL, OPT_CACHE_MEMORY },
		{ "batches", required_argument, NULL, OPT_BATCHES },
		{ "workers", required_argument, NULL, OPT_WORKERS },
		{ "values", required_argument, NULL, OPT_VALUES },
		{ "state-in", required_argument, NULL, OPT_STATE_IN },
		{ "state-out", required_argument, NULL, OPT_STATE_OUT },
		{ "direct", no_argument, NULL, OPT_DIRECT },
		{ "engine", required_argument, NULL, OPT_ENGINE },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	memset(o, 0, sizeof(*o));
	o->max_batches = UINT64_MAX;
	o->engine = IOX_ENGINE_AUTO;
	o->cache_uncompressed = true; /* as sluiced's default */
	opterr = 0;		      /* named below */
	optind = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		const char *val = optarg, *a = argv[optind - 1];
		uint64_t v;

		switch (c) {
		case 'h':
			run_usage(stdout);
			return 1;
		case ':':
			fprintf(stderr, "sluicectl: run: %s needs a value\n", a);
			return -1;
		case '?':
			if (optopt)
				fprintf(stderr, "sluicectl: run: unknown option -%c\n", optopt);
			else
				fprintf(stderr, "sluicectl: run: unknown option %.*s\n",
					(int)strcspn(a, "="), a);
			return -1;
		case OPT_JSON:
			o->json = true;
			break;
		case OPT_CACHE_UNCOMPRESSED:
			if (!val || !strcmp(val, "true") || !strcmp(val, "yes") ||
			    !strcmp(val, "1")) {
				o->cache_uncompressed = true;
			} else if (!strcmp(val, "false") || !strcmp(val, "no") ||
				   !strcmp(val, "0")) {
				o->cache_uncompressed = false;
			} else {
				fprintf(stderr,
					"sluicectl: run: --cache-uncompressed: not true, false, "
					"yes, no, 1 or 0: %s\n",
					val);
				return -1;
			}
			break;
		case OPT_CACHE_MEMORY:
			if (cli_parse_u64(val, UINT64_MAX, &o->cache_bytes) < 0 ||
			    !o->cache_bytes) {
				fprintf(stderr, "sluicectl: run: --cache-memory needs a number of "
						"bytes\n");
				return -1;
			}
			break;
		case OPT_BATCHES:
		case OPT_WORKERS: {
			bool batches = c == OPT_BATCHES;

			if (cli_parse_u64(val, batches ? UINT64_MAX : RUN_MAX_WORKERS, &v) < 0 ||
			    (!batches && v == 0)) {
				fprintf(stderr, "sluicectl: run: --%s needs a number%s\n",
					batches ? "batches" : "workers",
					batches ? "" : " from 1 to 4096");
				return -1;
			}
			*(batches ? &o->max_batches : &o->workers) = v;
			break;
		}
		case OPT_VALUES: {
			int e = add_values(o, val);

			if (e == -ENOMEM) {
				fprintf(stderr, "sluicectl: run: out of memory\n");
				return -1;
			}
			if (e < 0) {
				fprintf(stderr, "sluicectl: run: --values needs NAME[,NAME...]\n");
				return -1;
			}
			break;
		}
		case OPT_STATE_IN:
			o->state_in = val;
			break;
		case OPT_STATE_OUT:
			o->state_out = val;
			break;
		case OPT_DIRECT:
			o->direct = true;
			break;
		case OPT_ENGINE:
			if (!strcmp(val, "auto")) {
				o->engine = IOX_ENGINE_AUTO;
			} else if (!strcmp(val, "uring") || !strcmp(val, "io_uring")) {
				o->engine = IOX_ENGINE_URING;
			} else if (!strcmp(val, "pread")) {
				o->engine = IOX_ENGINE_PREAD;
			} else {
				fprintf(stderr, "sluicectl: run: --engine is auto, uring or "
						"pread\n");
				return -1;
			}
			break;
		}
	}
	if (optind < argc)
		o->spec_path = argv[optind++];
	if (optind < argc) {
		fprintf(stderr, "sluicectl: run: too many arguments\n");
		return -1;
	}
	if (!o->spec_path) {
		fprintf(stderr, "sluicectl: run: no SPEC given\n");
		return -1;
	}
	if (o->n_values && !o->json) {
		fprintf(stderr, "sluicectl: run: --values needs --json\n");
		return -1;
	}
	return 0;
}

static void run_fini(struct run *r)
{
	free(r->o.values);
	free(r->want_values);
	free(r->tviews);
	jsonout_fini(&r->out);
}

/* The loop over batches. 0, or a negative errno with msg. */
static int run_batches(struct run *r, char *msg, size_t cap)
{
	double t0 = scan_now_s(), last_t = t0, now;
	uint64_t last_b = 0, last_rows = 0;
	struct io_error err;
	int rc;

	while (r->batches < r->o.max_batches) {
		struct pl_batch *b = NULL;
		struct ipc_batch_view v;

		err.msg[0] = '\0';
		rc = pl_pipeline_next(r->p, 1000, &b, &err);
		if (rc == 0)
			break;
		if (rc < 0 && rc != -ETIMEDOUT) {
			snprintf(msg, cap, "%s", err.msg[0] ? err.msg : strerror(-rc));
			return rc;
		}
		if (rc > 0) {
			char why[400];

			rc = check_batch(r, b, &v, why, sizeof(why));
			if (rc < 0) {
				snprintf(msg, cap, "internal error: batch %" PRIu64 ": %s", b->seq,
					 why);
				pl_batch_release(r->p, b);
				return rc;
			}
			if (v.flags & IPC_BATCH_F_ERROR) {
				snprintf(msg, cap, "%.*s", (int)v.msg_len, v.msg);
				pl_batch_release(r->p, b);
				return v.error;
			}
			rc = r->o.json ? print_json(r, &v) : (print_text(r, &v), 0);
			pl_batch_release(r->p, b);
			if (rc < 0) {
				snprintf(msg, cap, "writing the output: %s", strerror(-rc));
				return rc;
			}
			r->batches++;
			r->rows += v.rows;
		}
		now = scan_now_s();
		if (!r->o.json && now - last_t >= 1.0) {
			fprintf(stderr,
				"rate: batches_per_s=%.1f records_per_s=%.0f batches=%" PRIu64
				" records=%" PRIu64 "\n",
				(double)(r->batches - last_b) / (now - last_t),
				(double)(r->rows - last_rows) / (now - last_t), r->batches,
				r->rows);
			last_t = now;
			last_b = r->batches;
			last_rows = r->rows;
		}
	}
	if (!r->o.json) {
		struct pl_stats st;
		double wall = scan_now_s() - t0;

		if (wall <= 0)
			wall = 1e-9;
		pl_pipeline_get_stats(r->p, &st);
		printf("total: batches=%" PRIu64 " rows=%" PRIu64 " wall_s=%.3f batches_per_s=%.1f "
		       "rows_per_s=%.0f",
		       r->batches, r->rows, wall, (double)r->batches / wall,
		       (double)r->rows / wall);
		printf(" records=%" PRIu64 " skipped_records=%" PRIu64 " skipped_files=%" PRIu64,
		       st.records, st.skipped_records, st.skipped_files);
		printf(" record_bytes=%" PRIu64 " copied_bytes=%" PRIu64 " evacuations=%" PRIu64,
		       st.record_bytes, st.copied_bytes, st.evacuations);
		printf(" cache_level=%u cache_files=%" PRIu64 " cache_bytes=%" PRIu64,
		       st.cache_level, st.cache_files, st.cache_bytes);
		printf(" cache_filled=%" PRIu64 " cache_need_bytes=%" PRIu64 " cache_fits=%d",
		       st.cache_filled, st.cache_need, st.cache_fits);
		printf(" cached_epochs=%" PRIu64, st.cached_epochs);
		printf(" io_engine=%s%s%s\n", st.io_engine ? st.io_engine : "?",
		       st.io_fallback ? " fallback=" : "", st.io_fallback ? st.io_fallback : "");
	}
	if (fflush(stdout) != 0) {
		snprintf(msg, cap, "writing the output: %s", strerror(errno));
		return -EIO;
	}
	return 0;
}

int cmd_run(int argc, char **argv)
{
	struct run r;
	struct pl_spec *spec = NULL;
	struct pl_pipeline_opts po;
	struct sched_pool *pool = NULL;
	struct pl_cache *cache = NULL;
	struct io_error err;
	char *state = NULL;
	size_t state_len = 0;
	char msg[1024];
	int rc, status = 1;

	memset(&r, 0, sizeof(r));
	jsonout_init(&r.out);
	rc = parse_args(argc, argv, &r.o);
	if (rc) {
		if (rc < 0)
			run_usage(stderr);
		run_fini(&r);
		return rc < 0 ? 2 : 0;
	}

	msg[0] = '\0';
	err.msg[0] = '\0';
	rc = pl_spec_load_file(r.o.spec_path, &spec, &err);
	if (rc < 0) {
		snprintf(msg, sizeof(msg), "%s", err.msg[0] ? err.msg : strerror(-rc));
		goto out;
	}
	if (r.o.state_in) {
		rc = io_file_read(r.o.state_in, RUN_STATE_IN_MAX, &state, &state_len, &err);
		if (rc < 0) {
			snprintf(msg, sizeof(msg), "%s", err.msg);
			goto out;
		}
	}
	if (r.o.workers) {
		struct sched_pool_opts so;

		sched_pool_opts_init(&so);
		so.workers = (unsigned)r.o.workers;
		rc = sched_pool_create(&so, &pool);
		if (rc < 0) {
			snprintf(msg, sizeof(msg), "cannot start a pool of %u workers: %s",
				 (unsigned)r.o.workers, strerror(-rc));
			goto out;
		}
	}
	if (r.o.cache_bytes) {
		rc = pl_cache_create(r.o.cache_bytes, &cache);
		if (rc < 0) {
			snprintf(msg, sizeof(msg), "out of memory");
			goto out;
		}
	}
	pl_pipeline_opts_init(&po);
	po.pool = pool;
	po.cache = cache;
	po.cache_uncompressed = r.o.cache_uncompressed;
	po.engine = r.o.engine;
	po.direct = r.o.direct;
	po.state = state;
	po.state_len = state_len;
	err.msg[0] = '\0';
	rc = pl_pipeline_create(spec, &po, &r.p, &err);
	pl_spec_destroy(spec);
	spec = NULL;
	if (rc < 0) {
		snprintf(msg, sizeof(msg), "%s", err.msg[0] ? err.msg : strerror(-rc));
		goto out;
	}

	r.n_schema = pl_pipeline_n_tensors(r.p);
	r.want_values = calloc(r.n_schema ? r.n_schema : 1, sizeof(*r.want_values));
	r.tviews = calloc(r.n_schema ? r.n_schema : 1, sizeof(*r.tviews));
	if (!r.want_values || !r.tviews) {
		snprintf(msg, sizeof(msg), "out of memory");
		goto out;
	}
	rc = resolve_values(&r, msg, sizeof(msg));
	if (rc < 0) {
		status = 2;
		goto out;
	}

	rc = run_batches(&r, msg, sizeof(msg));
	if (rc < 0)
		goto out;

	if (r.o.state_out) {
		uint8_t buf[PL_STATE_MAX];
		int n = pl_pipeline_save(r.p, buf, sizeof(buf));

		if (n < 0) {
			snprintf(msg, sizeof(msg), "saving the state: %s", strerror(-n));
			goto out;
		}
		rc = write_file(r.o.state_out, buf, (size_t)n);
		if (rc < 0) {
			snprintf(msg, sizeof(msg), "%s: %s", r.o.state_out, strerror(-rc));
			goto out;
		}
	}
	status = 0;
out:
	if (status)
		fprintf(stderr, "sluicectl: run: %s\n", msg[0] ? msg : "failed");
	pl_pipeline_destroy(r.p);
	pl_cache_destroy(cache);
	sched_pool_destroy(pool, SCHED_SHUTDOWN_DRAIN);
	pl_spec_destroy(spec);
	free(state);
	run_fini(&r);
	return status;
}
