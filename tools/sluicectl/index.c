/* SPDX-License-Identifier: Apache-2.0 */
/* sluicectl index: build or check the record index (DIR/.sluice-index) of TFRecord files. */
#include "sluicectl.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/dataset.h"
#include "io/ioerr.h"
#include "io/tfr.h"
#include "io/tfr_index.h"
#include "jsonout.h"

static const char index_usage[] =
	"usage: sluicectl index [--check] [--json] [--offsets] "
	"[--compression auto|none|gzip|zlib] [--threads N] PATH...\n"
	"\n"
	"Index the records of TFRecord files: per file its record count and the offsets of its\n"
	"records, in DIR/.sluice-index for each directory DIR holding one of the files (the\n"
	"entries of other files already there are kept while they are fresh). A PATH is a\n"
	"dataset directory (DIR/__manifest__.json: every data file of the dataset, in the\n"
	"manifest's compression) or a data file. Prints per file its path, records and\n"
	"compression, then a total.\n"
	"\n"
	"options:\n"
	"  --check        write nothing: say per file whether its entry is fresh, stale,\n"
	"                 missing or corrupt (exit 1 unless every one is fresh)\n"
	"  --json         one JSON object per file per line, then {\"total\": ...}\n"
	"  --offsets      with --json: the indexed offsets and their stride too\n"
	"  --compression  of data files named as PATH; auto (default) looks at their first\n"
	"                 bytes\n"
	"  --threads N    files scanned at once (default: the CPUs online, at most the files)\n"
	"\n"
	"exit status: 0 done, 1 a file could not be indexed (or, with --check, is not fresh),\n"
	"2 usage.\n";

struct job {
	char *dir;  /* realpath of the file's directory */
	char *path; /* as printed */
	char *name; /* basename */
	enum tfr_compression c;
};

struct index_cmd {
	bool check, json, offsets;
	bool comp_auto;
	bool serial;	  /* hidden --serial: one cursor per file (benchmarks) */
	unsigned threads; /* files scanned at once (0: the CPUs online) */
	enum tfr_compression comp;
	struct job *jobs;
	size_t n, cap;
	struct jsonout out;
	uint64_t files, records, not_fresh, failed;
};

static int job_add(struct index_cmd *ic, const char *path, enum tfr_compression c)
{
	char *copy = strdup(path), *slash, *dir;
	const char *name;
	struct job *j;

	if (!copy)
		return -ENOMEM;
	slash = strrchr(copy, '/');
	if (slash == copy) {
		dir = realpath("/", NULL);
		name = slash + 1;
	} else if (slash) {
		*slash = '\0';
		dir = realpath(copy, NULL);
		name = slash + 1;
	} else {
		dir = realpath(".", NULL);
		name = copy;
	}
	if (!dir || !*name) {
		int ret = dir ? -EINVAL : -errno;

		fprintf(stderr, "sluicectl index: %s: %s\n", path,
			*name ? strerror(-ret) : "not a file name");
		free(dir);
		free(copy);
		return ret;
	}
	for (size_t i = 0; i < ic->n; i++) {
		if (!strcmp(ic->jobs[i].dir, dir) && !strcmp(ic->jobs[i].name, name)) {
			free(dir);
			free(copy);
			return 0; /* named twice */
		}
	}
	if (ic->n == ic->cap) {
		size_t cap = ic->cap ? ic->cap * 2 : 64;

		j = realloc(ic->jobs, cap * sizeof(*j));
		if (!j) {
			free(dir);
			free(copy);
			return -ENOMEM;
		}
		ic->jobs = j;
		ic->cap = cap;
	}
	j = &ic->jobs[ic->n];
	j->dir = dir;
	j->path = strdup(path);
	j->name = strdup(name);
	j->c = c;
	free(copy);
	if (!j->path || !j->name) {
		free(j->dir);
		free(j->path);
		free(j->name);
		return -ENOMEM;
	}
	ic->n++;
	return 0;
}

static int add_dir(struct index_cmd *ic, const char *dir)
{
	struct dataset *ds;
	struct io_error err;
	char man[PATH_MAX];
	struct stat st;
	int ret;

	snprintf(man, sizeof(man), "%s/__manifest__.json", dir);
	if (stat(man, &st) < 0) {
		fprintf(stderr,
			"sluicectl index: %s: no __manifest__.json (name its data files instead)\n",
			dir);
		return -ENOENT;
	}
	ret = dataset_open_dir(dir, NULL, &ds, &err);
	if (ret) {
		fprintf(stderr, "sluicectl index: %s\n", err.msg);
		return ret;
	}
	for (size_t i = 0; !ret && i < ds->n_files; i++)
		ret = job_add(ic, ds->files[i].path, ds->manifest->compression);
	dataset_destroy(ds);
	return ret;
}

static int add_file(struct index_cmd *ic, const char *path)
{
	enum tfr_compression c = ic->comp;

	if (ic->comp_auto) {
		uint8_t head[64];
		ssize_t n;
		int fd = open(path, O_RDONLY | O_CLOEXEC);

		if (fd < 0) {
			int ret = -errno;

			fprintf(stderr, "sluicectl index: %s: %s\n", path, strerror(-ret));
			return ret;
		}
		n = pread(fd, head, sizeof(head), 0);
		close(fd);
		c = tfr_compression_detect(head, n > 0 ? (size_t)n : 0);
	}
	return job_add(ic, path, c);
}

static int job_cmp(const void *pa, const void *pb)
{
	const struct job *a = pa, *b = pb;
	int c = strcmp(a->dir, b->dir);

	return c ? c : strcmp(a->name, b->name);
}

static void print_entry(struct index_cmd *ic, const struct job *j, const struct tfr_index_entry *e,
			const char *status, const char *msg)
{
	if (e) {
		ic->files++;
		ic->records += e->records;
	}
	if (!ic->json) {
		if (e && status)
			printf("%s: %s, %" PRIu64 " records, %s\n", j->path, status, e->records,
			       tfr_compression_name(e->compression));
		else if (e)
			printf("%s: %" PRIu64 " records, %s\n", j->path, e->records,
			       tfr_compression_name(e->compression));
		else
			printf("%s: %s: %s\n", j->path, status, msg);
		return;
	}
	jsonout_cstr(&ic->out, "{\"path\": ");
	jsonout_str(&ic->out, j->path, strlen(j->path));
	if (status) {
		jsonout_cstr(&ic->out, ", \"status\": ");
		jsonout_str(&ic->out, status, strlen(status));
	}
	if (e) {
		jsonout_cstr(&ic->out, ", \"records\": ");
		jsonout_uint64(&ic->out, e->records);
		jsonout_cstr(&ic->out, ", \"compression\": ");
		jsonout_str(&ic->out, tfr_compression_name(e->compression),
			    strlen(tfr_compression_name(e->compression)));
		jsonout_cstr(&ic->out, ", \"size\": ");
		jsonout_uint64(&ic->out, e->size);
		jsonout_cstr(&ic->out, ", \"payload_bytes\": ");
		jsonout_uint64(&ic->out, e->payload_bytes);
		if (ic->offsets) {
			jsonout_cstr(&ic->out, ", \"stride\": ");
			jsonout_uint64(&ic->out, e->stride);
			jsonout_cstr(&ic->out, ", \"offsets\": [");
			for (uint64_t i = 0; i < e->n_offsets; i++) {
				if (i)
					jsonout_cstr(&ic->out, ", ");
				jsonout_uint64(&ic->out, e->offsets[i]);
			}
			jsonout_char(&ic->out, ']');
		}
	}
	if (msg) {
		jsonout_cstr(&ic->out, ", \"message\": ");
		jsonout_str(&ic->out, msg, strlen(msg));
	}
	jsonout_char(&ic->out, '}');
	jsonout_line_write(&ic->out, stdout);
}

/* Index the files jobs[from, to) (one directory) and update its index. */
/* The scans of one directory's files, shared by the threads that run them. */
struct scans {
	const struct index_cmd *ic;
	const struct job *jobs;
	size_t n;
	atomic_size_t next;
	struct tfr_index_entry **es; /* per job: its entry, or NULL and rets/errs say why */
	int *rets;
	struct io_error *errs;
};

static void scan_one(struct scans *sc, size_t i)
{
	const struct job *j = &sc->jobs[i];
	int fd = open(j->path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		sc->rets[i] = -errno;
		io_error_set(&sc->errs[i], "%s: %s", j->path, strerror(-sc->rets[i]));
		return;
	}
	struct tfr_index_build_opts o;
	tfr_index_build_opts_init(&o);
	o.compression = j->c;
	o.serial = sc->ic->serial;
	sc->rets[i] = tfr_index_build_fd(fd, j->path, &o, &sc->es[i], &sc->errs[i]);
	close(fd);
}

static void *scan_thread(void *arg)
{
	struct scans *sc = arg;
	for (size_t i; (i = atomic_fetch_add(&sc->next, 1)) < sc->n;)
		scan_one(sc, i);
	return NULL;
}

/*
 * Scan jobs[0, n) on up to threads threads (files are independent: a dataset of several files
 * is indexed in the time of its largest share, not of their sum). Returns 0 or -ENOMEM.
 */
static int scan_all(struct scans *sc, unsigned threads)
{
	pthread_t t[64];
	unsigned nt = threads < 64 ? threads : 64;

	if (nt > sc->n)
		nt = (unsigned)sc->n;
	unsigned started = 0;
	for (; nt > 1 && started < nt - 1; started++) /* the caller is one of them */
		if (pthread_create(&t[started], NULL, scan_thread, sc) != 0)
			break;
	scan_thread(sc);
	for (unsigned k = 0; k < started; k++)
		pthread_join(t[k], NULL);
	return 0;
}

static void index_group(struct index_cmd *ic, size_t from, size_t to)
{
	const char *dir = ic->jobs[from].dir;
	struct scans sc = { .ic = ic, .jobs = ic->jobs + from, .n = to - from };
	struct tfr_index_entry **es = calloc(to - from, sizeof(*es));
	struct io_error err;
	char ipath[PATH_MAX];
	size_t n = 0;
	int ret;

	atomic_init(&sc.next, 0);
	sc.es = calloc(sc.n, sizeof(*sc.es));
	sc.rets = calloc(sc.n, sizeof(*sc.rets));
	sc.errs = calloc(sc.n, sizeof(*sc.errs));
	if (!es || !sc.es || !sc.rets || !sc.errs) {
		fprintf(stderr, "sluicectl index: out of memory\n");
		ic->failed++;
		goto out;
	}
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	scan_all(&sc, ic->threads ? ic->threads : cpus > 0 ? (unsigned)cpus : 1);
	for (size_t i = 0; i < sc.n; i++) { /* in the jobs' order, as one thread would */
		const struct job *j = &sc.jobs[i];
		if (sc.rets[i]) {
			fprintf(stderr, "sluicectl index: %s\n", sc.errs[i].msg);
			if (ic->json)
				print_entry(ic, j, NULL, "error", sc.errs[i].msg);
			ic->failed++;
			continue;
		}
		print_entry(ic, j, sc.es[i], NULL, NULL);
		es[n++] = sc.es[i];
	}
	if (n == 0) /* nothing new: the index is left as it is */
		goto out;
	snprintf(ipath, sizeof(ipath), "%s/%s", dir, TFR_INDEX_NAME);
	ret = tfr_index_update(ipath, dir, (const struct tfr_index_entry *const *)es, n, NULL,
			       &err);
	if (ret) {
		fprintf(stderr, "sluicectl index: %s\n", err.msg);
		ic->failed++;
	}
out:
	for (size_t i = 0; sc.es && i < sc.n; i++)
		tfr_index_entry_destroy(sc.es[i]);
	free(sc.es);
	free(sc.rets);
	free(sc.errs);
	free(es);
}

/* Check the files jobs[from, to) against their directory's index. */
static void check_group(struct index_cmd *ic, size_t from, size_t to)
{
	const char *dir = ic->jobs[from].dir;
	struct tfr_index *ix = NULL;
	struct io_error err, ixerr;
	char ipath[PATH_MAX];
	int ixret;

	snprintf(ipath, sizeof(ipath), "%s/%s", dir, TFR_INDEX_NAME);
	ixret = tfr_index_open(ipath, &ix, &ixerr);
	for (size_t i = from; i < to; i++) {
		const struct job *j = &ic->jobs[i];
		const struct tfr_index_entry *e = NULL;
		const char *status;
		struct stat st;
		int ret;

		if (ixret) {
			ret = ixret;
			err = ixerr;
		} else if (stat(j->path, &st) < 0) {
			ret = -errno;
			io_error_set(&err, "%s: %s", j->path, strerror(-ret));
		} else {
			ret = tfr_index_lookup(ix, j->name, &st, &e, &err);
		}
		switch (ret) {
		case 0:
			status = "fresh";
			break;
		case -ESTALE:
			status = "stale";
			break;
		case -ENOENT:
			status = "missing";
			break;
		case -EBADMSG:
			status = "corrupt";
			break;
		default:
			status = "error";
			break;
		}
		if (ret) {
			ic->not_fresh++;
			if (ic->json)
				fprintf(stderr, "sluicectl index: %s: %s\n", status, err.msg);
		}
		print_entry(ic, j, e, status, ret ? err.msg : NULL);
	}
	tfr_index_destroy(ix);
}

int cmd_index(int argc, char **argv)
{
	enum { OPT_COMPRESSION = 256, OPT_CHECK, OPT_JSON, OPT_OFFSETS, OPT_SERIAL, OPT_THREADS };
	static const struct option longopts[] = {
		{ "check", no_argument, NULL, OPT_CHECK },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "offsets", no_argument, NULL, OPT_OFFSETS },
		/* hidden: the serial header scan only, to measure the interleaved one against */
		{ "serial", no_argument, NULL, OPT_SERIAL },
		{ "compression", required_argument, NULL, OPT_COMPRESSION },
		{ "threads", required_argument, NULL, OPT_THREADS },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct index_cmd ic;
	int o, status = 0;

	memset(&ic, 0, sizeof(ic));
	ic.comp_auto = true;
	jsonout_init(&ic.out);
	optind = 0;
	while ((o = ctl_getopt("index", argc, argv, longopts, index_usage)) != -1) {
		switch (o) {
		case -2:
			return 0;
		case -3:
			return 2;
		case OPT_CHECK:
			ic.check = true;
			break;
		case OPT_JSON:
			ic.json = true;
			break;
		case OPT_OFFSETS:
			ic.offsets = true;
			break;
		case OPT_SERIAL:
			ic.serial = true;
			break;
		case OPT_THREADS: {
			char *end;
			errno = 0;
			long t = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || t < 1 || t > 64)
				return ctl_usage_error("index", "--threads: expected 1 to 64",
						       index_usage);
			ic.threads = (unsigned)t;
			break;
		}
		case OPT_COMPRESSION:
			if (!strcmp(optarg, "auto")) {
				ic.comp_auto = true;
			} else if (*optarg && tfr_compression_parse(optarg, &ic.comp) == 0) {
				ic.comp_auto = false;
			} else {
				return ctl_usage_error("index",
						       "--compression: expected auto, none, gzip "
						       "or zlib",
						       index_usage);
			}
			break;
		default:
			return ctl_usage_error("index", "unexpected option", index_usage);
		}
	}
	if (optind >= argc)
		return ctl_usage_error("index", "expected a PATH", index_usage);

	for (int i = optind; i < argc; i++) {
		struct stat st;
		int ret;

		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "sluicectl index: %s: %s\n", argv[i], strerror(errno));
			status = 1;
			continue;
		}
		ret = S_ISDIR(st.st_mode) ? add_dir(&ic, argv[i]) : add_file(&ic, argv[i]);
		if (ret == -ENOMEM) {
			fprintf(stderr, "sluicectl index: out of memory\n");
			status = 1;
			goto out;
		}
		if (ret)
			status = 1;
	}
	qsort(ic.jobs, ic.n, sizeof(*ic.jobs), job_cmp);
	for (size_t from = 0, to; from < ic.n; from = to) {
		for (to = from + 1; to < ic.n && !strcmp(ic.jobs[to].dir, ic.jobs[from].dir); to++)
			;
		if (ic.check)
			check_group(&ic, from, to);
		else
			index_group(&ic, from, to);
	}
	if (ic.json) {
		jsonout_cstr(&ic.out, "{\"total\": {\"files\": ");
		jsonout_uint64(&ic.out, ic.files);
		jsonout_cstr(&ic.out, ", \"records\": ");
		jsonout_uint64(&ic.out, ic.records);
		jsonout_cstr(&ic.out, ", \"failed\": ");
		jsonout_uint64(&ic.out, ic.failed);
		if (ic.check) {
			jsonout_cstr(&ic.out, ", \"not_fresh\": ");
			jsonout_uint64(&ic.out, ic.not_fresh);
		}
		jsonout_cstr(&ic.out, "}}");
		jsonout_line_write(&ic.out, stdout);
	} else if (ic.check) {
		printf("total: %" PRIu64 " fresh, %" PRIu64 " records, %" PRIu64 " not fresh\n",
		       ic.files, ic.records, ic.not_fresh);
	} else {
		printf("total: %" PRIu64 " files, %" PRIu64 " records%s\n", ic.files, ic.records,
		       ic.failed ? " (some failed)" : "");
	}
	if (ic.failed || ic.not_fresh)
		status = 1;
	if (fflush(stdout) != 0) {
		fprintf(stderr, "sluicectl index: writing the output: %s\n", strerror(errno));
		status = 1;
	}
out:
	for (size_t i = 0; i < ic.n; i++) {
		free(ic.jobs[i].dir);
		free(ic.jobs[i].path);
		free(ic.jobs[i].name);
	}
	free(ic.jobs);
	jsonout_fini(&ic.out);
	return status;
}
