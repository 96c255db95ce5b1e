/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced's settings: one table of options for the command line and the config file. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "names.h"

#define SECOND_NS	   1000000000ull
#define DMN_PIPELINE_BYTES (256ull << 20) /* --pipeline-memory's default on a host with room */
#define OFF(field)	   offsetof(struct dmn_config, field)

/*
 * The rows in --help's order. help: lines of at most 56 columns (--help indents them by 23,
 * the example file by 2). A default that sluiced works out at start (def NULL) is said in
 * help.
 */
const struct dmn_opt dmn_opts[] = {
	{ "socket", DMN_OPT_STRING, OFF(socket_path), 0, false, "PATH", NULL,
	  "the control socket (default: $SLUICE_SOCKET, else\n"
	  "$RUNTIME_DIRECTORY/sluice.sock, the first directory\n"
	  "where it lists several, else\n"
	  "$XDG_RUNTIME_DIR/sluice/sluice.sock, else\n"
	  "/run/sluice/sluice.sock)" },
	{ "config-dir", DMN_OPT_STRING, OFF(config_dir), 0, false, "DIR", NULL,
	  "start every DIR/*.json pipeline spec at start; SIGHUP\n"
	  "reads DIR again (new specs start, removed ones are\n"
	  "drained and dropped, changed ones are refused)\n"
	  "(default: none)" },
	{ "state-dir", DMN_OPT_STRING, OFF(state_dir), 0, true, "DIR", NULL,
	  "keep each pipeline's position there, so that readers\n"
	  "resume where they were after sluiced restarts\n"
	  "(default $STATE_DIRECTORY, the first directory where\n"
	  "it lists several; empty: none, readers get ESTALE)" },
	{ "cpus", DMN_OPT_CPUS, OFF(cpus_limit), 0, false, "N", NULL,
	  "the cores sluiced may use, decimals allowed (default\n"
	  "its CPU affinity, bounded by its cgroup's quota: v2\n"
	  "cpu.max or v1 cpu.cfs_quota_us/cpu.cfs_period_us):\n"
	  "the parse pool's size and the resource model's budget" },
	{ "workers", DMN_OPT_UINT, OFF(workers), UINT32_MAX, false, "N", "0",
	  "parse pool workers (default 0: one per core of --cpus,\n"
	  "rounded up)" },
	{ "autotune", DMN_OPT_BOOL, OFF(autotune), 0, false, NULL, "true",
	  "tune the knobs a spec leaves \"auto\" (batch jobs in\n"
	  "flight, read size) and every pipeline's share of the\n"
	  "pool from the measured rates, within --cpus (default\n"
	  "true; false: \"auto\" is a fixed value)" },
	{ "pipeline-memory", DMN_OPT_BYTES, OFF(pipeline_bytes), 0, false, "B", NULL,
	  "what one pipeline takes, its ring and its engine's\n"
	  "fixed needs (default 256M, or an eighth of --memory\n"
	  "when that is less; more for batches of a known size\n"
	  "that need it: num_prefetch + 2 of them, within\n"
	  "--memory)" },
	{ "memory", DMN_OPT_BYTES, OFF(total_bytes), 0, false, "B", NULL,
	  "the record cache and all rings' --pipeline-memory\n"
	  "together (default half the tightest of sluiced's\n"
	  "cgroup limits, v2 memory.max or v1\n"
	  "memory.limit_in_bytes, else of the host's memory)" },
	{ "user-pipelines", DMN_OPT_UINT, OFF(user_pipelines), UINT32_MAX, false, "N", "16",
	  "pipelines one uid may run, root's not counted\n"
	  "(default 16; 0: no cap)" },
	{ "user-memory", DMN_OPT_BYTES, OFF(user_bytes), 0, false, "B", NULL,
	  "ring bytes one uid's pipelines may hold (default half\n"
	  "of --memory's rings; 0: no cap)" },
	{ "ring-commit", DMN_OPT_COMMIT, OFF(ring_commit), 0, false, "B|all", "4M",
	  "a ring's memory allocated at its start; it grows with\n"
	  "the batches it holds (default 4M; all: the whole ring)" },
	{ "max-pipelines", DMN_OPT_UINT, OFF(max_pipelines), UINT32_MAX, false, "N", "64",
	  "pipelines sluiced runs at once (default 64)" },
	{ "max-readers", DMN_OPT_UINT, OFF(max_readers), IPC_RING_MAX_READERS, false, "N", "64",
	  "readers of one pipeline (default and at most 64)" },
	{ "ring-slots", DMN_OPT_UINT, OFF(ring_slots), UINT32_MAX, false, "N", "64",
	  "batches a ring holds, a power of two (default 64)" },
	{ "direct-io", DMN_OPT_BOOL, OFF(direct_io), 0, false, NULL, "false",
	  "read the files with O_DIRECT: no page cache and no\n"
	  "kernel copy (for datasets on NVMe that do not fit in\n"
	  "memory; where the file system refuses it, reads stay\n"
	  "buffered)" },
	{ "cache-memory", DMN_OPT_BYTES, OFF(cache_bytes), 0, false, "B", NULL,
	  "the shared record cache: files framed once are kept\n"
	  "(after decompression) for every pipeline and epoch\n"
	  "that reads them again, within B bytes of --memory,\n"
	  "given back first when pipelines need them (default\n"
	  "half of --memory, also its most; 0: off)" },
	{ "cache-uncompressed", DMN_OPT_BOOL, OFF(cache_uncompressed), 0, false, NULL, "true",
	  "cache uncompressed files too (default true; false:\n"
	  "compressed files only, and each job reads and parses\n"
	  "an uncompressed file again)" },
	{ "lease", DMN_OPT_SECONDS, OFF(lease_ns), 0, false, "S", "600",
	  "a split or rank reader that holds a batch (handed to\n"
	  "it, taken or not) longer than S seconds is removed and\n"
	  "its batches go to its group (default 600; 0: never)" },
	{ "lag-timeout", DMN_OPT_SECONDS, OFF(lag_timeout_ns), 0, false, "S", "300",
	  "a broadcast reader that holds the others back (takes\n"
	  "and releases nothing while they wait for it) longer\n"
	  "than S seconds is moved off the shared stream, unless\n"
	  "it asked to hold them (default 300, longer than a\n"
	  "checkpoint's save; 0: never by time)" },
	{ "linger", DMN_OPT_SECONDS, OFF(linger_ns), 0, false, "S", "60",
	  "a pipeline that ended (finished or failed) is dropped\n"
	  "once it has had no reader for S seconds, and at once\n"
	  "when --memory needs its room (default 60; the config\n"
	  "dir's stay)" },
	{ "idle-timeout", DMN_OPT_UINT, OFF(idle_timeout_s), 86400 * 365, false, "S", "60",
	  "close a connection without readers that sends no\n"
	  "request for S seconds (default 60; 0: never;\n"
	  "libsluice reconnects when it next asks)" },
	{ "user-connections", DMN_OPT_UINT, OFF(user_connections), UINT32_MAX, false, "N", "256",
	  "connections one uid may hold, root's not counted\n"
	  "(default 256; 0: no cap)" },
};
const size_t dmn_n_opts = sizeof(dmn_opts) / sizeof(dmn_opts[0]);

/* main.c's getopt_long table and dmn_config_parse's seen_on have room for DMN_OPTS_MAX */
_Static_assert(sizeof(dmn_opts) / sizeof(dmn_opts[0]) <= DMN_OPTS_MAX, "dmn_opts: too many rows");

void dmn_config_defaults(struct dmn_config *cfg)
{
	*cfg = (struct dmn_config){
		.pipeline_bytes = UINT64_MAX, /* dmn_config_split_memory: 256M or --memory / 8 */
		.total_bytes = UINT64_MAX, /* main.c: half of the cgroup's or the host's memory */
		.user_pipelines = 16,
		.user_bytes = UINT64_MAX,  /* dmn_config_split_memory: half of --memory */
		.cache_bytes = UINT64_MAX, /* dmn_config_split_memory: half of --memory */
		.max_pipelines = 64,
		.max_readers = IPC_RING_MAX_READERS,
		.ring_slots = 64,
		.autotune = true,
		.cache_uncompressed = true,
		.lease_ns = 600 * SECOND_NS,
		.lag_timeout_ns = DMN_LAG_TIMEOUT_S * SECOND_NS,
		.linger_ns = 60 * SECOND_NS,
		.ring_commit = IPC_RING_COMMIT_DEFAULT,
		.idle_timeout_s = 60,
		.user_connections = 256,
	};
}

const struct dmn_opt *dmn_opt_find(const char *name)
{
	for (size_t i = 0; i < dmn_n_opts; i++)
		if (strcmp(dmn_opts[i].name, name) == 0)
			return &dmn_opts[i];
	return NULL;
}

const struct dmn_opt *dmn_opt_suggest(const char *name)
{
	const struct dmn_opt *best = NULL;
	unsigned best_d = 0;
	for (size_t i = 0; i < dmn_n_opts; i++) {
		if (!dmn_name_close(name, dmn_opts[i].name))
			continue;
		unsigned d = dmn_name_distance(name, dmn_opts[i].name, DMN_NAME_DIST_MAX);
		if (!best || d < best_d) {
			best = &dmn_opts[i];
			best_d = d;
		}
	}
	return best;
}

int dmn_parse_size(const char *s, uint64_t *ret_v)
{
	if (!s || *s < '0' || *s > '9')
		return -EINVAL; /* strtoull would take spaces and a sign */
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -ERANGE;
	unsigned shift = 0;
	if (*end == 'K' || *end == 'k')
		shift = 10;
	else if (*end == 'M' || *end == 'm')
		shift = 20;
	else if (*end == 'G' || *end == 'g')
		shift = 30;
	else if (*end)
		return -EINVAL;
	if (shift && end[1])
		return -EINVAL;
	if (v > (UINT64_MAX >> shift))
		return -ERANGE;
	*ret_v = (uint64_t)v << shift;
	return 0;
}

int dmn_opt_set(const struct dmn_opt *o, const char *value, struct dmn_config *cfg, char *err,
		size_t cap)
{
	char *field = (char *)cfg + o->off;
	uint64_t n;
	switch (o->kind) {
	case DMN_OPT_STRING:
		if (!value || (!*value && !o->empty_ok)) {
			snprintf(err, cap, "needs a value");
			return -EINVAL;
		}
		*(const char **)(void *)field = value;
		return 0;
	case DMN_OPT_BOOL:
		if (!value || !strcmp(value, "true") || !strcmp(value, "yes") ||
		    !strcmp(value, "1")) {
			*(bool *)field = true;
		} else if (!strcmp(value, "false") || !strcmp(value, "no") || !strcmp(value, "0")) {
			*(bool *)field = false;
		} else {
			snprintf(err, cap, "not true, false, yes, no, 1 or 0: %s", value);
			return -EINVAL;
		}
		return 0;
	case DMN_OPT_UINT:
	case DMN_OPT_BYTES:
		if (!value || dmn_parse_size(value, &n) < 0) {
			snprintf(err, cap, "not a number: %s", value ? value : "");
			return -EINVAL;
		}
		if (o->kind == DMN_OPT_BYTES)
			*(uint64_t *)(void *)field = n;
		else
			*(unsigned *)(void *)field = (unsigned)(n > o->max ? o->max : n);
		return 0;
	case DMN_OPT_SECONDS:
		if (!value || dmn_parse_size(value, &n) < 0 || n > UINT64_MAX / SECOND_NS) {
			snprintf(err, cap, "not a number of seconds: %s", value ? value : "");
			return -EINVAL;
		}
		*(uint64_t *)(void *)field = n * SECOND_NS;
		return 0;
	case DMN_OPT_CPUS: {
		char *end = NULL;
		errno = 0;
		double c = value && *value ? strtod(value, &end) : 0;
		if (!value || !*value || *end || errno || !(c > 0) || c > 1e6) {
			snprintf(err, cap, "not a number of cores above 0: %s", value ? value : "");
			return -EINVAL;
		}
		*(double *)(void *)field = c;
		return 0;
	}
	case DMN_OPT_COMMIT:
		if (value && !strcmp(value, "all")) {
			*(uint64_t *)(void *)field = UINT64_MAX;
			return 0;
		}
		if (!value || dmn_parse_size(value, &n) < 0) {
			snprintf(err, cap, "not a size nor \"all\": %s", value ? value : "");
			return -EINVAL;
		}
		*(uint64_t *)(void *)field = n;
		return 0;
	}
	snprintf(err, cap, "a setting of no known kind"); /* a row of dmn_opts is wrong */
	return -EINVAL;
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* s without the spaces at both ends (s is changed: a NUL after its last non-space) */
static char *trim(char *s)
{
	while (is_space(*s))
		s++;
	size_t n = strlen(s);
	while (n && is_space(s[n - 1]))
		n--;
	s[n] = '\0';
	return s;
}

int dmn_config_parse(const char *name, char *text, struct dmn_config *cfg, char *err, size_t cap)
{
	unsigned seen_on[DMN_OPTS_MAX] = { 0 }; /* the line each row was set on (0: not yet) */
	unsigned ln = 0;
	for (char *line = text, *next; line; line = next) {
		ln++;
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		next = nl ? nl + 1 : NULL;
		for (char *p = line; *p; p++) {
			if (*p == '#' && (p == line || is_space(p[-1]))) {
				*p = '\0'; /* a comment: '#' starts the line or follows a space */
				break;
			}
		}
		char *s = trim(line);
		if (!*s)
			continue;
		char *eq = strchr(s, '=');
		if (!eq) {
			snprintf(err, cap, "%s:%u: expected KEY = VALUE, not \"%.80s\"", name, ln,
				 s);
			return -EINVAL;
		}
		*eq = '\0';
		char *key = trim(s), *value = trim(eq + 1);
		if (!*key) {
			snprintf(err, cap, "%s:%u: no key before '='", name, ln);
			return -EINVAL;
		}
		const struct dmn_opt *o = dmn_opt_find(key);
		if (!o) {
			const struct dmn_opt *near = dmn_opt_suggest(key);
			if (near)
				snprintf(err, cap,
					 "%s:%u: unknown key \"%.80s\" (did you mean \"%s\"?)",
					 name, ln, key, near->name);
			else
				snprintf(err, cap,
					 "%s:%u: unknown key \"%.80s\" (sluiced(8) lists them)",
					 name, ln, key);
			return -EINVAL;
		}
		size_t i = (size_t)(o - dmn_opts);
		if (seen_on[i]) {
			snprintf(err, cap, "%s:%u: %s is set on line %u already", name, ln, key,
				 seen_on[i]);
			return -EINVAL;
		}
		seen_on[i] = ln;
		if (!*value && !(o->kind == DMN_OPT_STRING && o->empty_ok)) {
			snprintf(err, cap, "%s:%u: %s: no value after '='", name, ln, key);
			return -EINVAL;
		}
		char msg[256];
		if (dmn_opt_set(o, value, cfg, msg, sizeof(msg)) < 0) {
			snprintf(err, cap, "%s:%u: %s: %s", name, ln, key, msg);
			return -EINVAL;
		}
	}
	return 0;
}

int dmn_config_load(const char *path, struct dmn_config *cfg, char **ret_text, char *err,
		    size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		snprintf(err, cap, "%s: %s", path, strerror(e));
		return -e;
	}
	struct stat st;
	const char *why = NULL;
	int e = 0;
	if (fstat(fd, &st) < 0)
		e = errno;
	else if (!S_ISREG(st.st_mode))
		why = "not a regular file";
	else if (st.st_size > DMN_CONFIG_MAX)
		why = "larger than 1 MiB: not a config file";
	if (e || why) {
		snprintf(err, cap, "%s: %s", path, why ? why : strerror(e));
		close(fd);
		return e ? -e : -EINVAL;
	}
	char *text = malloc((size_t)st.st_size + 1);
	if (!text) {
		close(fd);
		snprintf(err, cap, "%s: out of memory", path);
		return -ENOMEM;
	}
	size_t n = 0;
	while (n < (size_t)st.st_size) {
		ssize_t r = read(fd, text + n, (size_t)st.st_size - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			e = errno;
			snprintf(err, cap, "%s: %s", path, strerror(e));
			free(text);
			close(fd);
			return -e;
		}
		if (r == 0)
			break; /* it shrank: what was there */
		n += (size_t)r;
	}
	close(fd);
	text[n] = '\0';
	if (memchr(text, '\0', n)) {
		snprintf(err, cap, "%s: a NUL byte: not a text file", path);
		free(text);
		return -EINVAL;
	}
	int r = dmn_config_parse(path, text, cfg, err, cap);
	if (r < 0) {
		free(text);
		return r;
	}
	*ret_text = text;
	return 0;
}

bool dmn_config_split_memory(struct dmn_config *cfg)
{
	bool cut = false;
	if (cfg->cache_bytes == UINT64_MAX) { /* the default: half, given back first */
		cfg->cache_bytes = cfg->total_bytes / 2;
	} else if (cfg->cache_bytes > cfg->total_bytes / 2) {
		cfg->cache_bytes = cfg->total_bytes / 2;
		cut = true;
	}
	/* a small cgroup: rings grow by use, so a ring as large as the budget is fine */
	/* unset: 256 MiB, or an eighth of --memory on a small host: eight jobs fit, with the
	   cache, where four rings of 256 MiB filled a 2 GiB cgroup's --memory */
	if (cfg->pipeline_bytes == UINT64_MAX) {
		uint64_t eighth = cfg->total_bytes / 8 & ~(uint64_t)4095;
		cfg->pipeline_bytes =
			eighth && eighth < DMN_PIPELINE_BYTES ? eighth : DMN_PIPELINE_BYTES;
	}
	if (cfg->pipeline_bytes > cfg->total_bytes)
		cfg->pipeline_bytes = cfg->total_bytes;
	if (cfg->user_bytes == UINT64_MAX)
		cfg->user_bytes = cfg->total_bytes / 2;
	return cut;
}

/* The help lines of o, each after indent (the first after first when it is not NULL). */
static void print_help(FILE *f, const struct dmn_opt *o, const char *first, const char *indent)
{
	const char *h = o->help;
	for (bool one = true; *h; one = false) {
		size_t n = strcspn(h, "\n");
		fprintf(f, "%s%.*s\n", one && first ? first : indent, (int)n, h);
		h += n + (h[n] == '\n');
	}
}

void dmn_opts_usage(FILE *f)
{
	for (size_t i = 0; i < dmn_n_opts; i++) {
		const struct dmn_opt *o = &dmn_opts[i];
		char head[64];
		if (o->kind == DMN_OPT_BOOL)
			snprintf(head, sizeof(head), "--%s[=BOOL]", o->name);
		else
			snprintf(head, sizeof(head), "--%s %s", o->name, o->arg);
		if (strlen(head) >= 20) { /* help2man needs two spaces after it */
			fprintf(f, "  %s\n", head);
			print_help(f, o, NULL, "                       ");
		} else {
			char first[sizeof(head) + 8]; /* "  ", head padded, " " */
			snprintf(first, sizeof(first), "  %-20s ", head);
			print_help(f, o, first, "                       ");
		}
	}
}

void dmn_config_example(FILE *f, const char *path)
{
	fprintf(f,
		"# %s: the settings of sluiced(8), read once at its start.\n"
		"#\n"
		"# One \"key = value\" a line; the keys are sluiced's long options without \"--\"\n"
		"# (sluiced --help), sizes take K, M or G, booleans true/false, yes/no or 1/0.\n"
		"# '#' starts a comment (at the start of a line, or after a space). An option\n"
		"# given on the command line wins over the same key here (the systemd unit\n"
		"# gives --config-dir). SIGHUP reads the config dir again, not this file:\n"
		"# after changing it, systemctl restart sluiced (readers resume where they\n"
		"# were, see --state-dir).\n"
		"#\n"
		"# Every key is shown commented out at its default; where sluiced works the\n"
		"# default out at start, the line shows the kind of value (PATH, B) and the\n"
		"# comment above it says what the default is.\n",
		path);
	for (size_t i = 0; i < dmn_n_opts; i++) {
		const struct dmn_opt *o = &dmn_opts[i];
		fprintf(f, "\n");
		print_help(f, o, NULL, "# ");
		fprintf(f, "#%s = %s\n", o->name, o->def ? o->def : o->arg);
	}
}
