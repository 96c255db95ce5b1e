/* SPDX-License-Identifier: Apache-2.0 */
/* sluicectl list, stats, register, drain: the commands that talk to sluiced through libsluice. */
#include "sluicectl.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sluice/sluice.h"
#include "tools/common/cliarg.h"
#include "tools/common/jsonout.h"
#include "tools/common/scan.h"
#include "tools/common/tensorjson.h"

#define SPEC_MAX (60u * 1024)

const char *sluicectl_socket; /* --socket, or NULL: $SLUICE_SOCKET and the defaults */

int ctl_fail(const char *cmd, const char *msg)
{
	fprintf(stderr, "sluicectl: %s: %s\n", cmd, msg);
	return 1;
}

int ctl_usage_error(const char *cmd, const char *msg, const char *usage)
{
	fprintf(stderr, "sluicectl: %s: %s\n%s", cmd, msg, usage);
	return 2;
}

int ctl_connect(const char *cmd, struct sluice_client **ret)
{
	struct sluice_error err = { 0, "" };

	if (sluice_connect(sluicectl_socket, ret, &err) < 0)
		return ctl_fail(cmd, err.msg);
	return 0;
}

int ctl_getopt(const char *cmd, int argc, char **argv, const struct option *opts, const char *usage)
{
	opterr = 0; /* named below, as the other programs name them */
	int o = getopt_long(argc, argv, ":h", opts, NULL);
	if (o == 'h') {
		fputs(usage, stdout);
		return -2;
	}
	if (o == '?' || o == ':') {
		const char *a = argv[optind - 1];
		char msg[300];
		if (o == '?' && optopt)
			snprintf(msg, sizeof(msg), "unknown option -%c", optopt);
		else
			snprintf(msg, sizeof(msg), "%s %.*s",
				 o == ':' ? "a value is needed by" : "unknown option",
				 (int)strcspn(a, "="), a);
		ctl_usage_error(cmd, msg, usage);
		return -3;
	}
	return o;
}

/* ---- list ---- */

static const char list_usage[] =
	"usage: sluicectl [--socket PATH] list [--json]\n"
	"\n"
	"One line per pipeline of sluiced that you may read: name, status, readers, batches\n"
	"published, ring occupancy (slots used/slots), owner (who registered it: a user name,\n"
	"the uid where it has none, (config) for the config dir's); with --json one JSON\n"
	"document: {\"pipelines\": [{\"name\", \"owner_uid\", \"owner\", \"fingerprint\",\n"
	"\"status\", \"readers\", \"batches_published\", \"ring_slots_used\", \"ring_slots\"},\n"
	"...]} (owner_uid is null for the config dir's; both are null from a sluiced too old\n"
	"to say).\n";

const char *ctl_status_name(uint32_t s)
{
	switch (s) {
	case SLUICE_PIPELINE_RUNNING:
		return "running";
	case SLUICE_PIPELINE_FINISHED:
		return "finished";
	case SLUICE_PIPELINE_FAILED:
		return "failed";
	default:
		return "?";
	}
}

/*
 * Who owns a pipeline, for a person: its user's name, else its uid; "(config)" for the config
 * dir's; NULL when the daemon did not say. Points at buf or at a constant.
 */
static const char *owner_name(uint32_t uid, char *buf, size_t cap)
{
	struct passwd pw, *found = NULL;
	char pwbuf[4096];

	if (uid == SLUICE_OWNER_UNKNOWN)
		return NULL;
	if (uid == SLUICE_OWNER_HOST)
		return "(config)";
	if (getpwuid_r((uid_t)uid, &pw, pwbuf, sizeof(pwbuf), &found) == 0 && found &&
	    found->pw_name[0])
		snprintf(buf, cap, "%s", found->pw_name);
	else
		snprintf(buf, cap, "%" PRIu32, uid);
	return buf;
}

static void list_json(const struct sluice_pipeline_info *list, size_t n, struct jsonout *j)
{
	jsonout_cstr(j, "{\"pipelines\": [");
	for (size_t i = 0; i < n; i++) {
		const struct sluice_pipeline_info *p = &list[i];
		char fp[33];
		for (int k = 0; k < 16; k++)
			snprintf(fp + 2 * k, 3, "%02x", p->fingerprint[k]);
		char owner_buf[64];
		const char *owner = owner_name(p->owner_uid, owner_buf, sizeof(owner_buf));
		jsonout_cstr(j, i ? ", {\"name\": " : "{\"name\": ");
		jsonout_str(j, p->name, strlen(p->name));
		jsonout_cstr(j, ", \"owner_uid\": ");
		if (p->owner_uid == SLUICE_OWNER_HOST || p->owner_uid == SLUICE_OWNER_UNKNOWN)
			jsonout_cstr(j, "null");
		else
			jsonout_uint64(j, p->owner_uid);
		jsonout_cstr(j, ", \"owner\": ");
		if (owner)
			jsonout_str(j, owner, strlen(owner));
		else
			jsonout_cstr(j, "null");
		jsonout_cstr(j, ", \"fingerprint\": \"");
		jsonout_cstr(j, fp);
		jsonout_cstr(j, "\", \"status\": \"");
		jsonout_cstr(j, ctl_status_name(p->status));
		jsonout_cstr(j, "\", \"readers\": ");
		jsonout_uint64(j, p->n_readers);
		jsonout_cstr(j, ", \"batches_published\": ");
		jsonout_uint64(j, p->batches_published);
		jsonout_cstr(j, ", \"ring_slots_used\": ");
		jsonout_uint64(j, p->ring_slots_used);
		jsonout_cstr(j, ", \"ring_slots\": ");
		jsonout_uint64(j, p->ring_slots);
		jsonout_char(j, '}');
	}
	jsonout_cstr(j, "]}");
}

int cmd_list(int argc, char **argv)
{
	static const struct option opts[] = { { "json", no_argument, NULL, 'j' },
					      { "help", no_argument, NULL, 'h' },
					      { NULL, 0, NULL, 0 } };
	struct sluice_client *c = NULL;
	struct sluice_error err = { 0, "" };
	struct sluice_pipeline_info *list = NULL;
	size_t n = 0;
	bool json = false;
	int rc, o;

	optind = 0;
	while ((o = ctl_getopt("list", argc, argv, opts, list_usage)) != -1) {
		if (o < 0)
			return o == -2 ? 0 : 2;
		json = true;
	}
	if (optind < argc)
		return ctl_usage_error("list", "too many arguments", list_usage);
	if (ctl_connect("list", &c))
		return 1;
	rc = sluice_list(c, &list, &n, &err);
	sluice_disconnect(c);
	if (rc < 0)
		return ctl_fail("list", err.msg);
	if (json) {
		struct jsonout j;
		jsonout_init(&j);
		list_json(list, n, &j);
		rc = jsonout_line_write(&j, stdout);
		jsonout_fini(&j);
	} else {
		/* OWNER came last, after the columns scripts may already split by position */
		printf("%-32s %-9s %7s %12s %11s  %s\n", "NAME", "STATUS", "READERS", "PUBLISHED",
		       "RING", "OWNER");
		for (size_t i = 0; i < n; i++) {
			const struct sluice_pipeline_info *p = &list[i];
			char ring[32], owner_buf[64];
			const char *owner = owner_name(p->owner_uid, owner_buf, sizeof(owner_buf));

			snprintf(ring, sizeof(ring), "%u/%u", p->ring_slots_used, p->ring_slots);
			printf("%-32s %-9s %7u %12" PRIu64 " %11s  %s\n", p->name,
			       ctl_status_name(p->status), p->n_readers, p->batches_published, ring,
			       owner ? owner : "?");
		}
	}
	sluice_list_free(list);
	return rc >= 0 && fflush(stdout) == 0 ? 0 : ctl_fail("list", "writing the output failed");
}

/*
 * A spec file's directory (the start of its relative paths) into *ret_dir, or NULL for a pipe
 * or device (then the working directory is): the caller frees it.
 */
static int spec_file_dir(const char *path, char **ret_dir)
{
	struct stat st;
	*ret_dir = NULL;
	if (stat(path, &st) < 0 || !S_ISREG(st.st_mode))
		return 0;
	const char *slash = strrchr(path, '/');
	*ret_dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
	return *ret_dir ? 0 : -ENOMEM;
}

/* A spec file's text, NUL-terminated, into *ret (the caller frees it). -errno and msg. */
static int read_spec(const char *path, char **ret, char *msg, size_t cap)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		snprintf(msg, cap, "%s: %s", path, strerror(errno));
		return -errno;
	}
	char *spec = malloc(SPEC_MAX + 1);
	if (!spec) {
		fclose(f);
		snprintf(msg, cap, "out of memory");
		return -ENOMEM;
	}
	size_t n = fread(spec, 1, SPEC_MAX + 1, f);
	int rc = ferror(f) ? -EIO : n > SPEC_MAX ? -EFBIG : n == 0 ? -ENODATA : 0;
	fclose(f);
	if (rc == 0 && memchr(spec, '\0', n))
		rc = -EINVAL;
	if (rc < 0) {
		snprintf(msg, cap, "%s: %s", path,
			 rc == -EFBIG	  ? "larger than the 60 KiB a spec may have"
			 : rc == -ENODATA ? "empty"
			 : rc == -EINVAL  ? "holds a NUL byte"
					  : "read error");
		free(spec);
		return rc;
	}
	spec[n] = '\0';
	*ret = spec;
	return 0;
}

/* ---- register ---- */

static const char register_usage[] = "usage: sluicectl [--socket PATH] register SPEC\n"
				     "\n"
				     "Register the pipeline spec SPEC (a JSON file) with sluiced, "
				     "which starts it\n"
				     "unless an identical one runs. Prints the pipeline's name and "
				     "fingerprint.\n";

int cmd_register(int argc, char **argv)
{
	struct sluice_client *c = NULL;
	struct sluice_error err = { 0, "" };
	char name[SLUICE_NAME_MAX + 1], msg[600], *spec;
	uint8_t fp[16];
	int rc;

	static const struct option opts[] = { { "help", no_argument, NULL, 'h' },
					      { NULL, 0, NULL, 0 } };
	int o;
	optind = 0;
	while ((o = ctl_getopt("register", argc, argv, opts, register_usage)) != -1)
		if (o < 0)
			return o == -2 ? 0 : 2;
	if (argc - optind != 1)
		return ctl_usage_error("register", optind >= argc ? "no SPEC given" : "one SPEC",
				       register_usage);
	const char *path = argv[optind];
	if (read_spec(path, &spec, msg, sizeof(msg)) < 0)
		return ctl_fail("register", msg);
	char *dir;
	if (spec_file_dir(path, &dir) < 0) {
		free(spec);
		return ctl_fail("register", "out of memory");
	}
	if (ctl_connect("register", &c)) {
		free(dir);
		free(spec);
		return 1;
	}
	rc = sluice_register_at(c, spec, dir, name, sizeof(name), fp, &err);
	free(dir);
	sluice_disconnect(c);
	free(spec);
	if (rc < 0)
		return ctl_fail("register", err.msg);
	printf("%s ", name);
	for (int i = 0; i < 16; i++)
		printf("%02x", fp[i]);
	printf("\n");
	return fflush(stdout) == 0 ? 0 : ctl_fail("register", "writing the output failed");
}

/* ---- drain ---- */

static const char drain_usage[] =
	"usage: sluicectl [--socket PATH] drain NAME|SPEC [options]\n"
	"\n"
	"Attach to pipeline NAME of sluiced (or to the pipeline of the spec file\n"
	"SPEC, which the daemon starts if it does not run yet) and read its batches\n"
	"(releasing each)\n"
	"until the end of the stream or --batches N.\n"
	"\n"
	"options:\n"
	"  --mode M           broadcast (default), split or rank\n"
	"  --index I --count N  (rank) this reader's rank of N\n"
	"  --group G          (split, rank) read in consumer group G (default: the\n"
	"                     pipeline's default group)\n"
	"  --batches N        stop after N batches\n"
	"  --pause-after N    after N batches, say \"paused: batches=N\" on stderr and\n"
	"                     wait for a line on stdin (tests: a reader mid-stream)\n"
	"  --json             one JSON line per batch: seq, epoch, rows and a CRC-32\n"
	"                     digest over every tensor's row_splits, offsets and data\n"
	"                     (and \"redelivered\": true for a batch another member of\n"
	"                     its group took before it went away)\n"
	"  --values NAME,...  (with --json) also print these tensors' values\n"
	"  --state-out FILE   after the last batch, write the reader's position\n"
	"  --state-in FILE    attach at that position (exactly: the daemon starts a\n"
	"                     private pipeline there if the shared one is elsewhere)\n"
	"  (broadcast) by default, more than --max-lag N batches behind the leading\n"
	"  other reader (default half the daemon's ring), or holding the others back\n"
	"  for --lag-timeout-ms MS (default the daemon's, 300 s) without reading, the\n"
	"  reader goes on from a pipeline of its own instead of stalling the others\n"
	"  --catch-up [N]     (broadcast) the same, N batches behind the newest batch\n"
	"  --hold             (broadcast) hold the other readers back instead, however\n"
	"                     long\n"
	"\n"
	"Without --json: the rate on stderr every second and a total at the end.\n"
	"Exit status: 0 done, 1 an error (on stderr), 2 usage.\n";

struct drain_opts {
	const char *name;
	char *spec;	/* NAME was a spec file: its text */
	char *spec_dir; /* and its directory */
	struct sluice_attach_opts ao;
	uint64_t max_batches;
	uint64_t pause_after; /* UINT64_MAX: never */
	bool json, have_index, have_count;
	const char *values; /* the --values argument */
	const char *state_in, *state_out;
	uint8_t state[SLUICE_STATE_MAX];
};

static int drain_args(int argc, char **argv, struct drain_opts *o)
{
	enum {
		OPT_JSON = 1,
		OPT_MODE,
		OPT_BATCHES,
		OPT_INDEX,
		OPT_COUNT,
		OPT_CATCH_UP,
		OPT_GROUP,
		OPT_VALUES,
		OPT_STATE_IN,
		OPT_STATE_OUT,
		OPT_PAUSE_AFTER,
		OPT_HOLD,
		OPT_MAX_LAG,
		OPT_LAG_TIMEOUT
	};
	static const struct option opts[] = {
		{ "json", no_argument, NULL, OPT_JSON },
		{ "mode", required_argument, NULL, OPT_MODE },
		{ "batches", required_argument, NULL, OPT_BATCHES },
		{ "index", required_argument, NULL, OPT_INDEX },
		{ "count", required_argument, NULL, OPT_COUNT },
		{ "catch-up", optional_argument, NULL, OPT_CATCH_UP },
		{ "group", required_argument, NULL, OPT_GROUP },
		{ "values", required_argument, NULL, OPT_VALUES },
		{ "state-in", required_argument, NULL, OPT_STATE_IN },
		{ "state-out", required_argument, NULL, OPT_STATE_OUT },
		{ "pause-after", required_argument, NULL, OPT_PAUSE_AFTER },
		{ "hold", no_argument, NULL, OPT_HOLD },
		{ "max-lag", required_argument, NULL, OPT_MAX_LAG },
		{ "lag-timeout-ms", required_argument, NULL, OPT_LAG_TIMEOUT },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int opt;
	sluice_attach_opts_init(&o->ao);
	o->max_batches = UINT64_MAX;
	o->pause_after = UINT64_MAX;
	optind = 0;
	while ((opt = ctl_getopt("drain", argc, argv, opts, drain_usage)) != -1) {
		const char *val = optarg;
		uint64_t v;

		switch (opt) {
		case -2:
			return 1;
		case -3:
			return 2;
		case OPT_JSON:
			o->json = true;
			break;
		case OPT_MODE:
			if (!strcmp(val, "broadcast"))
				o->ao.mode = SLUICE_MODE_BROADCAST;
			else if (!strcmp(val, "split"))
				o->ao.mode = SLUICE_MODE_SPLIT;
			else if (!strcmp(val, "rank"))
				o->ao.mode = SLUICE_MODE_RANK;
			else
				return ctl_usage_error(
					"drain", "--mode is broadcast, split or rank", drain_usage);
			break;
		case OPT_PAUSE_AFTER:
			if (cli_parse_u64(val, UINT64_MAX, &v))
				return ctl_usage_error("drain", "--pause-after needs a number",
						       drain_usage);
			o->pause_after = v;
			break;
		case OPT_BATCHES:
		case OPT_INDEX:
		case OPT_COUNT:
			if (cli_parse_u64(val, opt == OPT_BATCHES ? UINT64_MAX : UINT32_MAX, &v))
				return ctl_usage_error("drain",
						       "--batches, --index and --count need "
						       "a number",
						       drain_usage);
			if (opt == OPT_BATCHES) {
				o->max_batches = v;
			} else if (opt == OPT_INDEX) {
				o->ao.rank_index = (uint32_t)v;
				o->have_index = true;
			} else {
				o->ao.rank_count = (uint32_t)v;
				o->have_count = true;
			}
			break;
		case OPT_CATCH_UP:
			o->ao.lag_policy = SLUICE_LAG_CATCH_UP;
			/* --catch-up=N, or --catch-up N: a number that follows is its N */
			if (!val && optind < argc && argv[optind][0] >= '0' &&
			    argv[optind][0] <= '9')
				val = argv[optind++];
			if (val) {
				if (cli_parse_u64(val, UINT32_MAX, &v) || v == 0)
					return ctl_usage_error("drain", "--catch-up N: N >= 1",
							       drain_usage);
				o->ao.max_lag = v;
			}
			break;
		case OPT_HOLD:
			o->ao.lag_policy = SLUICE_LAG_HOLD;
			break;
		case OPT_MAX_LAG:
		case OPT_LAG_TIMEOUT:
			if (cli_parse_u64(val, UINT32_MAX, &v) || v == 0)
				return ctl_usage_error("drain",
						       "--max-lag N and --lag-timeout-ms MS: "
						       "a number >= 1",
						       drain_usage);
			if (opt == OPT_MAX_LAG)
				o->ao.max_lag = v;
			else
				o->ao.lag_timeout_ms = v;
			break;
		case OPT_GROUP:
			if (!val[0])
				return ctl_usage_error("drain", "--group needs a name",
						       drain_usage);
			o->ao.group = val;
			break;
		case OPT_VALUES:
			if (!val[0])
				return ctl_usage_error("drain", "--values needs NAME[,NAME...]",
						       drain_usage);
			o->values = val;
			break;
		case OPT_STATE_IN:
			o->state_in = val;
			break;
		case OPT_STATE_OUT:
			o->state_out = val;
			break;
		}
	}
	if (optind < argc)
		o->name = argv[optind++];
	if (optind < argc)
		return ctl_usage_error("drain", "too many arguments", drain_usage);
	if (!o->name)
		return ctl_usage_error("drain", "no pipeline NAME given", drain_usage);
	if (o->values && !o->json)
		return ctl_usage_error("drain", "--values needs --json", drain_usage);
	if ((o->ao.mode == SLUICE_MODE_RANK) != (o->have_index && o->have_count) ||
	    (o->ao.mode != SLUICE_MODE_RANK && (o->have_index || o->have_count)))
		return ctl_usage_error("drain", "--mode rank goes with --index I --count N",
				       drain_usage);
	if (o->ao.mode == SLUICE_MODE_RANK && o->ao.rank_index >= o->ao.rank_count)
		return ctl_usage_error("drain", "--index must be below --count", drain_usage);
	if (o->ao.lag_policy && o->ao.mode != SLUICE_MODE_BROADCAST)
		return ctl_usage_error("drain", "--catch-up and --hold are for broadcast readers",
				       drain_usage);
	if ((o->ao.max_lag || o->ao.lag_timeout_ms) &&
	    (o->ao.lag_policy == SLUICE_LAG_HOLD || o->ao.mode != SLUICE_MODE_BROADCAST))
		return ctl_usage_error("drain",
				       "--max-lag and --lag-timeout-ms bound a broadcast reader "
				       "that does not --hold",
				       drain_usage);
	if (o->ao.group && o->ao.mode == SLUICE_MODE_BROADCAST)
		return ctl_usage_error("drain",
				       "--group is for split and rank readers (a broadcast "
				       "reader is a group of its own)",
				       drain_usage);
	struct stat st;
	if (stat(o->name, &st) == 0 && S_ISREG(st.st_mode)) {
		/* a spec file: attach by spec (the daemon starts it, or finds it running) */
		char msg[600];
		if (read_spec(o->name, &o->spec, msg, sizeof(msg)) < 0) {
			ctl_fail("drain", msg);
			return 3;
		}
		o->ao.spec_json = o->spec;
		if (spec_file_dir(o->name, &o->spec_dir) < 0) {
			ctl_fail("drain", "out of memory");
			return 3;
		}
		o->ao.spec_dir = o->spec_dir;
	} else {
		o->ao.name = o->name;
	}
	return 0;
}

/* Is tensor name among the comma-separated names of list? */
static bool listed(const char *list, const char *name)
{
	size_t len = strlen(name);

	while (list && *list) {
		const char *comma = strchr(list, ',');
		size_t n = comma ? (size_t)(comma - list) : strlen(list);

		if (n == len && !memcmp(list, name, n))
			return true;
		list = comma ? comma + 1 : NULL;
	}
	return false;
}

/* Every name of --values must be a tensor of the batch's schema. */
static int check_values(const char *list, const struct sluice_batch *b, char *msg, size_t cap)
{
	while (list && *list) {
		const char *comma = strchr(list, ',');
		size_t n = comma ? (size_t)(comma - list) : strlen(list), i;
		struct sluice_tensor t;

		for (i = 0; i < sluice_batch_num_tensors(b); i++)
			if (sluice_batch_tensor_at(b, i, &t) == 0 && strlen(t.name) == n &&
			    !memcmp(t.name, list, n))
				break;
		if (n == 0 || i == sluice_batch_num_tensors(b)) {
			snprintf(msg, cap, "--values: the pipeline has no tensor named '%.*s'",
				 (int)n, list);
			return -ENOENT;
		}
		list = comma ? comma + 1 : NULL;
	}
	return 0;
}

static int drain_json(struct jsonout *j, const struct drain_opts *o, const struct sluice_batch *b,
		      char *msg, size_t cap)
{
	size_t n = sluice_batch_num_tensors(b), i;
	uint32_t crc = 0;
	char hex[16];
	bool first = true;
	int rc;

	for (i = 0; i < n; i++) {
		struct sluice_tensor t;

		rc = sluice_batch_tensor_at(b, i, &t);
		if (rc < 0) {
			snprintf(msg, cap, "batch %" PRIu64 ": tensor %zu: %s", sluice_batch_seq(b),
				 i, sluice_strerror(rc));
			return rc;
		}
		crc = tj_tensor_crc(crc, t.row_splits, sluice_batch_rows(b), t.offsets, t.n_elems,
				    t.data, t.nbytes);
	}
	jsonout_cstr(j, "{\"seq\": ");
	jsonout_uint64(j, sluice_batch_seq(b));
	jsonout_cstr(j, ", \"epoch\": ");
	jsonout_uint64(j, sluice_batch_epoch(b));
	jsonout_cstr(j, ", \"rows\": ");
	jsonout_uint64(j, sluice_batch_rows(b));
	snprintf(hex, sizeof(hex), "%08" PRIx32, crc);
	jsonout_cstr(j, ", \"digest\": \"");
	jsonout_cstr(j, hex);
	jsonout_char(j, '"');
	if (sluice_batch_redelivered(b)) /* a group member took it before and went away */
		jsonout_cstr(j, ", \"redelivered\": true");
	if (o->values) {
		jsonout_cstr(j, ", \"values\": {");
		for (i = 0; i < n; i++) {
			struct sluice_tensor t;

			if (sluice_batch_tensor_at(b, i, &t) < 0 || !listed(o->values, t.name))
				continue;
			if (!first)
				jsonout_raw(j, ", ", 2);
			first = false;
			jsonout_str(j, t.name, strlen(t.name));
			jsonout_raw(j, ": ", 2);
			tj_values(j, (unsigned)t.dtype, t.data, t.offsets, t.n_elems);
		}
		jsonout_char(j, '}');
	}
	jsonout_char(j, '}');
	rc = jsonout_line_write(j, stdout);
	/* a line per batch as it comes, for whoever follows the output through a pipe */
	if (rc >= 0 && fflush(stdout) != 0)
		rc = -errno;
	if (rc < 0)
		snprintf(msg, cap, "writing the output: %s", strerror(-rc));
	return rc;
}

int cmd_drain(int argc, char **argv)
{
	struct drain_opts o;
	struct sluice_client *c = NULL;
	struct sluice_reader *r = NULL;
	struct sluice_error err = { 0, "" };
	struct jsonout j;
	uint64_t batches = 0, rows = 0, last_b = 0, last_rows = 0;
	double t0, last_t, now, wall;
	char msg[700] = "";
	int rc, status = 1;

	memset(&o, 0, sizeof(o));
	rc = drain_args(argc, argv, &o);
	if (rc == 3) /* a spec file that could not be read */
		return 1;
	if (rc)
		return rc == 1 ? 0 : rc;
	jsonout_init(&j);
	if (ctl_connect("drain", &c))
		goto out_quiet;
	if (o.state_in) {
		FILE *f = fopen(o.state_in, "rb");
		size_t n = f ? fread(o.state, 1, sizeof(o.state), f) : 0;
		if (f)
			fclose(f);
		if (!f || n == 0) {
			snprintf(msg, sizeof(msg), "%s: %s", o.state_in,
				 f ? "empty" : strerror(errno));
			goto out;
		}
		o.ao.state = o.state;
		o.ao.state_len = n;
	}
	rc = sluice_attach(c, &o.ao, &r, &err);
	if (rc < 0) {
		snprintf(msg, sizeof(msg), "%s", err.msg);
		goto out;
	}
	t0 = last_t = scan_now_s();
	while (batches < o.max_batches) {
		struct sluice_batch *b = NULL;

		rc = sluice_next(r, 1000, &b, &err);
		if (rc == 0)
			break;
		if (rc < 0 && rc != -ETIMEDOUT) {
			snprintf(msg, sizeof(msg), "%s", err.msg);
			goto out;
		}
		if (rc > 0) {
			if (batches == 0 && o.values)
				rc = check_values(o.values, b, msg, sizeof(msg));
			if (rc >= 0 && o.json)
				rc = drain_json(&j, &o, b, msg, sizeof(msg));
			batches++;
			rows += sluice_batch_rows(b);
			sluice_batch_release(b);
			if (rc < 0)
				goto out;
			if (batches == o.pause_after) { /* tests: a reader provably mid-stream */
				char line[64];
				fflush(stdout);
				fprintf(stderr, "paused: batches=%" PRIu64 "\n", batches);
				fflush(stderr);
				if (!fgets(line, sizeof(line), stdin))
					clearerr(stdin);
			}
		}
		now = scan_now_s();
		if (!o.json && now - last_t >= 1.0) {
			fprintf(stderr,
				"rate: batches_per_s=%.1f records_per_s=%.0f batches=%" PRIu64
				" records=%" PRIu64 "\n",
				(double)(batches - last_b) / (now - last_t),
				(double)(rows - last_rows) / (now - last_t), batches, rows);
			last_t = now;
			last_b = batches;
			last_rows = rows;
		}
	}
	if (!o.json) {
		wall = scan_now_s() - t0;
		if (wall <= 0)
			wall = 1e-9;
		printf("total: batches=%" PRIu64 " rows=%" PRIu64 " wall_s=%.3f batches_per_s=%.1f "
		       "rows_per_s=%.0f\n",
		       batches, rows, wall, (double)batches / wall, (double)rows / wall);
	}
	if (o.state_out) {
		uint8_t st[SLUICE_STATE_MAX];
		size_t n = 0;
		FILE *f = NULL;
		rc = sluice_reader_save(r, st, sizeof(st), &n, &err);
		if (rc < 0 || !(f = fopen(o.state_out, "wb")) || fwrite(st, 1, n, f) != n ||
		    fclose(f) != 0) {
			snprintf(msg, sizeof(msg), "%s: %s", o.state_out,
				 rc < 0 ? err.msg : strerror(errno));
			goto out;
		}
	}
	if (fflush(stdout) != 0) {
		snprintf(msg, sizeof(msg), "writing the output failed");
		goto out;
	}
	status = 0;
out:
	if (status)
		ctl_fail("drain", msg[0] ? msg : "failed");
out_quiet:
	sluice_detach(r);
	sluice_disconnect(c);
	jsonout_fini(&j);
	free(o.spec);
	free(o.spec_dir);
	return status;
}

/* ---- rm ---- */

static const char rm_usage[] = "usage: sluicectl [--socket PATH] rm NAME\n"
			       "\n"
			       "Remove pipeline NAME from sluiced: its engine stops and its "
			       "readers'\n"
			       "next call fails, saying who removed it. Only its owner or root "
			       "may\n"
			       "(root only for the pipelines of sluiced's --config-dir).\n";

int cmd_rm(int argc, char **argv)
{
	static const struct option opts[] = { { "help", no_argument, NULL, 'h' },
					      { NULL, 0, NULL, 0 } };
	struct sluice_client *c = NULL;
	struct sluice_error err = { 0, "" };
	int o, rc;

	optind = 0;
	while ((o = ctl_getopt("rm", argc, argv, opts, rm_usage)) != -1)
		if (o < 0)
			return o == -2 ? 0 : 2;
	if (optind >= argc)
		return ctl_usage_error("rm", "no pipeline NAME given", rm_usage);
	if (optind + 1 < argc)
		return ctl_usage_error("rm", "one NAME", rm_usage);
	if (ctl_connect("rm", &c))
		return 1;
	rc = sluice_remove(c, argv[optind], &err);
	sluice_disconnect(c);
	if (rc < 0)
		return ctl_fail("rm", err.msg);
	return 0;
}
