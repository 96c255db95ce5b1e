/* SPDX-License-Identifier: Apache-2.0 */
/* daemon/config.c: sluiced's option table, the config file's parser, sizes, the memory split. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "daemon/config.h"

#define NS 1000000000ull

/* Parse text (copied: the parser writes into it) into *cfg, from the defaults. */
static int parse(const char *text, struct dmn_config *cfg, char *err, size_t cap, char **keep)
{
	dmn_config_defaults(cfg);
	*keep = strdup(text);
	assert_non_null(*keep);
	err[0] = '\0';
	return dmn_config_parse("sluiced.conf", *keep, cfg, err, cap);
}

/* The error text parsing text gives. */
static void expect_error(const char *text, const char *want)
{
	struct dmn_config cfg;
	char err[512], *keep;
	int r = parse(text, &cfg, err, sizeof(err), &keep);
	if (r != -EINVAL || strcmp(err, want) != 0)
		fail_msg("%s\n  gave %d \"%s\"\n  want \"%s\"", text, r, err, want);
	free(keep);
}

static size_t field_size(const struct dmn_opt *o)
{
	switch (o->kind) {
	case DMN_OPT_STRING:
		return sizeof(const char *);
	case DMN_OPT_UINT:
		return sizeof(unsigned);
	case DMN_OPT_BOOL:
		return sizeof(bool);
	case DMN_OPT_CPUS:
		return sizeof(double);
	default:
		return sizeof(uint64_t);
	}
}

static void test_every_kind(void **state)
{
	(void)state;
	struct dmn_config cfg;
	char err[512], *keep;
	const char *text = "# sluiced's settings\n"
			   "\n"
			   "socket = /tmp/s.sock   # after a space: a comment\n"
			   "  config-dir=/etc/sluice/pipe#lines.d\n" /* '#' in a word: kept */
			   "state-dir =\n"			     /* empty: none */
			   "workers = 3\n"
			   "cpus = 1.5\n"
			   "memory = 8G\n"
			   "pipeline-memory = 64m\n"
			   "cache-memory = 512K\n"
			   "max-readers = 1000\n" /* past its maximum: the maximum */
			   "direct-io = yes\n"
			   "cache-uncompressed = 0\n"
			   "lease = 30\n"
			   "linger\t=\t5\r\n" /* tabs, CRLF */
			   "ring-commit = all\n"
			   "idle-timeout = 99999999999\n"
			   "user-connections = 7"; /* no newline at the end */
	assert_int_equal(parse(text, &cfg, err, sizeof(err), &keep), 0);
	assert_string_equal(cfg.socket_path, "/tmp/s.sock");
	assert_string_equal(cfg.config_dir, "/etc/sluice/pipe#lines.d");
	assert_string_equal(cfg.state_dir, "");
	assert_int_equal(cfg.workers, 3);
	assert_true(cfg.cpus_limit == 1.5);
	assert_true(cfg.total_bytes == 8ull << 30);
	assert_true(cfg.pipeline_bytes == 64ull << 20);
	assert_true(cfg.cache_bytes == 512ull << 10);
	assert_int_equal(cfg.max_readers, IPC_RING_MAX_READERS);
	assert_true(cfg.direct_io);
	assert_false(cfg.cache_uncompressed);
	assert_true(cfg.lease_ns == 30 * NS);
	assert_true(cfg.linger_ns == 5 * NS);
	assert_true(cfg.ring_commit == UINT64_MAX);
	assert_int_equal(cfg.idle_timeout_s, 86400 * 365);
	assert_int_equal(cfg.user_connections, 7);
	/* what the file does not name stays at its default */
	assert_int_equal(cfg.max_pipelines, 64);
	assert_int_equal(cfg.user_pipelines, 16);
	free(keep);
}

static void test_booleans(void **state)
{
	(void)state;
	static const char *yes[] = { "true", "yes", "1" }, *no[] = { "false", "no", "0" };
	struct dmn_config cfg;
	char err[512], line[64], *keep;
	for (size_t i = 0; i < 3; i++) {
		snprintf(line, sizeof(line), "direct-io = %s\n", yes[i]);
		assert_int_equal(parse(line, &cfg, err, sizeof(err), &keep), 0);
		assert_true(cfg.direct_io);
		free(keep);
		snprintf(line, sizeof(line), "direct-io = %s\n", no[i]);
		assert_int_equal(parse(line, &cfg, err, sizeof(err), &keep), 0);
		assert_false(cfg.direct_io);
		free(keep);
	}
	expect_error("direct-io = on\n", "sluiced.conf:1: direct-io: not true, false, yes, no, 1 "
					 "or 0: on");
	expect_error("direct-io = True\n", "sluiced.conf:1: direct-io: not true, false, yes, no, 1 "
					   "or 0: True");
	/* a flag alone on the command line (value NULL) is true */
	dmn_config_defaults(&cfg);
	assert_int_equal(
		dmn_opt_set(dmn_opt_find("cache-uncompressed"), NULL, &cfg, err, sizeof(err)), 0);
	assert_true(cfg.cache_uncompressed);
}

static void test_errors_name_file_line_key(void **state)
{
	(void)state;
	expect_error("# a\n\nworkers = 2\nmemory = 1G\n\n\ncache-memroy = 1G\n", "sluiced.conf:7: "
										 "unknown key "
										 "\"cache-memroy\" "
										 "(did you mean "
										 "\"cache-memory\"?"
										 ")");
	expect_error("lingr = 3\n", "sluiced.conf:1: unknown key \"lingr\" (did you mean "
				    "\"linger\"?)");
	expect_error("zzzzzz = 3\n", "sluiced.conf:1: unknown key \"zzzzzz\" (sluiced(8) lists "
				     "them)");
	/* the command line's own options are not settings of the file */
	expect_error("config = /x\n", "sluiced.conf:1: unknown key \"config\" (did you mean "
				      "\"config-dir\"?)");
	expect_error("help = yes\n", "sluiced.conf:1: unknown key \"help\" (sluiced(8) lists "
				     "them)");
	expect_error("--memory = 1G\n", "sluiced.conf:1: unknown key \"--memory\" (did you mean "
					"\"memory\"?)");
	expect_error("\nmemory = 12X\n", "sluiced.conf:2: memory: not a number: 12X");
	expect_error("memory = -1\n", "sluiced.conf:1: memory: not a number: -1");
	expect_error("workers = 99999999999999999999\n", "sluiced.conf:1: workers: not a number: "
							 "99999999999999999999");
	expect_error("lease = 100G\n", "sluiced.conf:1: lease: not a number of seconds: 100G");
	expect_error("cpus = 0\n", "sluiced.conf:1: cpus: not a number of cores above 0: 0");
	expect_error("cpus = -2\n", "sluiced.conf:1: cpus: not a number of cores above 0: -2");
	expect_error("cpus = 1.5x\n", "sluiced.conf:1: cpus: not a number of cores above 0: 1.5x");
	expect_error("cpus = nan\n", "sluiced.conf:1: cpus: not a number of cores above 0: nan");
	expect_error("ring-commit = most\n", "sluiced.conf:1: ring-commit: not a size nor \"all\": "
					     "most");
	expect_error("workers 3\n", "sluiced.conf:1: expected KEY = VALUE, not \"workers 3\"");
	expect_error("= 3\n", "sluiced.conf:1: no key before '='");
	expect_error("socket =\n", "sluiced.conf:1: socket: no value after '='");
	expect_error("memory = # nothing\n", "sluiced.conf:1: memory: no value after '='");
	expect_error("workers = 1\nmemory = 1G\nworkers = 2\n", "sluiced.conf:3: workers is set on "
								"line 1 already");
	expect_error("workers = 1 2\n", "sluiced.conf:1: workers: not a number: 1 2");
}

static void test_parse_size(void **state)
{
	(void)state;
	uint64_t v = 7;
	assert_int_equal(dmn_parse_size("0", &v), 0);
	assert_true(v == 0);
	assert_int_equal(dmn_parse_size("1536", &v), 0);
	assert_true(v == 1536);
	assert_int_equal(dmn_parse_size("3k", &v), 0);
	assert_true(v == 3072);
	assert_int_equal(dmn_parse_size("2M", &v), 0);
	assert_true(v == 2ull << 20);
	assert_int_equal(dmn_parse_size("16G", &v), 0);
	assert_true(v == 16ull << 30);
	assert_int_equal(dmn_parse_size("18446744073709551615", &v), 0);
	assert_true(v == UINT64_MAX);
	v = 7;
	assert_int_equal(dmn_parse_size("", &v), -EINVAL);
	assert_int_equal(dmn_parse_size(" 1", &v), -EINVAL);
	assert_int_equal(dmn_parse_size("-1", &v), -EINVAL);
	assert_int_equal(dmn_parse_size("+1", &v), -EINVAL);
	assert_int_equal(dmn_parse_size("1KB", &v), -EINVAL);
	assert_int_equal(dmn_parse_size("1T", &v), -EINVAL);
	assert_int_equal(dmn_parse_size("G", &v), -EINVAL);
	assert_int_equal(dmn_parse_size("18446744073709551616", &v), -ERANGE);
	assert_int_equal(dmn_parse_size("17179869184G", &v), -ERANGE); /* 2^34 G */
	assert_true(v == 7);					       /* written on success only */
}

/* One table: unique names, none that the command line keeps for itself, defaults that parse to
   what dmn_config_defaults sets, fields that do not overlap. */
static void test_table(void **state)
{
	(void)state;
	struct dmn_config def, cfg;
	char err[256];
	dmn_config_defaults(&def);
	assert_true(dmn_n_opts > 0 && dmn_n_opts <= DMN_OPTS_MAX);
	for (size_t i = 0; i < dmn_n_opts; i++) {
		const struct dmn_opt *o = &dmn_opts[i];
		assert_ptr_equal(dmn_opt_find(o->name), o);
		assert_true(strcmp(o->name, "config") && strcmp(o->name, "no-config") &&
			    strcmp(o->name, "help") && strcmp(o->name, "version"));
		assert_true(o->help && *o->help && o->help[strlen(o->help) - 1] != '\n');
		assert_true((o->arg == NULL) == (o->kind == DMN_OPT_BOOL));
		assert_true(o->off + field_size(o) <= sizeof(struct dmn_config));
		for (size_t j = 0; j < i; j++) {
			const struct dmn_opt *p = &dmn_opts[j];
			assert_true(o->off + field_size(o) <= p->off ||
				    p->off + field_size(p) <= o->off);
		}
		for (const char *h = o->help; *h;) {
			size_t n = strcspn(h, "\n");
			if (n > 56)
				fail_msg("--%s: a help line of %zu columns (56 at most)", o->name,
					 n);
			h += n + (h[n] == '\n');
		}
		if (!o->def)
			continue;
		dmn_config_defaults(&cfg);
		memset((char *)&cfg + o->off, 0x5a, field_size(o));
		if (dmn_opt_set(o, o->def, &cfg, err, sizeof(err)) < 0)
			fail_msg("--%s: its default \"%s\": %s", o->name, o->def, err);
		if (memcmp((char *)&cfg + o->off, (char *)&def + o->off, field_size(o)) != 0)
			fail_msg("--%s: its default \"%s\" is not what dmn_config_defaults sets",
				 o->name, o->def);
	}
	assert_null(dmn_opt_find("bogus"));
	assert_ptr_equal(dmn_opt_suggest("cache-memroy"), dmn_opt_find("cache-memory"));
	assert_ptr_equal(dmn_opt_suggest("memroy"), dmn_opt_find("memory"));
	assert_null(dmn_opt_suggest("bogus"));
}

/* The installed example: parses to the defaults as it is (all commented out), names every
   key, and each key uncommented at its default value parses to the default. */
static void test_example(void **state)
{
	(void)state;
	char *text = NULL, err[512];
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	assert_non_null(f);
	dmn_config_example(f, "/etc/sluice/sluiced.conf");
	assert_int_equal(fclose(f), 0);
	assert_non_null(strstr(text, "/etc/sluice/sluiced.conf"));
	struct dmn_config def, cfg;
	dmn_config_defaults(&def);
	dmn_config_defaults(&cfg);
	char *copy = strdup(text);
	assert_int_equal(dmn_config_parse("ex", copy, &cfg, err, sizeof(err)), 0);
	free(copy);
	for (size_t i = 0; i < dmn_n_opts; i++) {
		const struct dmn_opt *o = &dmn_opts[i];
		assert_int_equal(
			memcmp((char *)&cfg + o->off, (char *)&def + o->off, field_size(o)), 0);
		char want[128];
		snprintf(want, sizeof(want), "\n#%s = %s\n", o->name, o->def ? o->def : o->arg);
		if (!strstr(text, want))
			fail_msg("the example has no line \"%s\"", want + 1);
		if (!o->def)
			continue;
		copy = strdup(text);
		char *at = strstr(copy, want);
		at[1] = ' '; /* uncommented */
		if (dmn_config_parse("ex", copy, &cfg, err, sizeof(err)) < 0)
			fail_msg("%s uncommented: %s", o->name, err);
		assert_int_equal(
			memcmp((char *)&cfg + o->off, (char *)&def + o->off, field_size(o)), 0);
		free(copy);
	}
	free(text);
}

static void test_split_memory(void **state)
{
	(void)state;
	struct dmn_config cfg;
	dmn_config_defaults(&cfg);
	/* the defaults: the cache and each uid half of --memory, which the cache shares */
	cfg.total_bytes = 1ull << 30;
	assert_false(dmn_config_split_memory(&cfg));
	assert_true(cfg.total_bytes == 1ull << 30 && cfg.cache_bytes == 512ull << 20);
	assert_true(cfg.pipeline_bytes == 128ull << 20); /* an eighth of --memory */
	assert_true(cfg.user_bytes == 512ull << 20);
	dmn_config_defaults(&cfg);
	cfg.total_bytes = 12ull << 30; /* a host with room: 256 MiB */
	assert_false(dmn_config_split_memory(&cfg));
	assert_true(cfg.pipeline_bytes == 256ull << 20);
	dmn_config_defaults(&cfg);
	cfg.total_bytes = 1ull << 30;
	cfg.pipeline_bytes = 512ull << 20; /* set: kept */
	assert_false(dmn_config_split_memory(&cfg));
	assert_true(cfg.pipeline_bytes == 512ull << 20);
	/* set: kept, 0 too (off) */
	dmn_config_defaults(&cfg);
	cfg.total_bytes = 1ull << 30;
	cfg.cache_bytes = 256ull << 20;
	assert_false(dmn_config_split_memory(&cfg));
	assert_true(cfg.total_bytes == 1ull << 30 && cfg.cache_bytes == 256ull << 20);
	cfg.cache_bytes = 0;
	assert_false(dmn_config_split_memory(&cfg));
	assert_true(cfg.cache_bytes == 0);
	/* the cache gets at most half; a ring is at most --memory */
	dmn_config_defaults(&cfg);
	cfg.total_bytes = 96ull << 20;
	cfg.cache_bytes = 1ull << 30;
	cfg.user_bytes = 0; /* set: no cap, kept */
	cfg.pipeline_bytes = 256ull << 20;
	assert_true(dmn_config_split_memory(&cfg));
	assert_true(cfg.cache_bytes == 48ull << 20 && cfg.total_bytes == 96ull << 20);
	assert_true(cfg.pipeline_bytes == 96ull << 20);
	assert_true(cfg.user_bytes == 0);
}

static void test_load(void **state)
{
	(void)state;
	char dir[] = "/tmp/sluice-config-XXXXXX", path[256], err[512];
	assert_non_null(mkdtemp(dir));
	struct dmn_config cfg;
	dmn_config_defaults(&cfg);
	char *text = (char *)0x1;
	snprintf(path, sizeof(path), "%s/none.conf", dir);
	assert_int_equal(dmn_config_load(path, &cfg, &text, err, sizeof(err)), -ENOENT);
	assert_ptr_equal(text, (char *)0x1);
	assert_non_null(strstr(err, "none.conf: No such file"));
	/* a directory */
	assert_int_equal(dmn_config_load(dir, &cfg, &text, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "not a regular file"));
	/* a NUL byte */
	snprintf(path, sizeof(path), "%s/nul.conf", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fwrite("workers = 1\n\0\n", 1, 14, f);
	fclose(f);
	assert_int_equal(dmn_config_load(path, &cfg, &text, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "NUL byte"));
	unlink(path);
	/* a good one: strings point into the text handed back */
	snprintf(path, sizeof(path), "%s/sluiced.conf", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("socket = /run/x.sock\nworkers = 5\n", f);
	fclose(f);
	assert_int_equal(dmn_config_load(path, &cfg, &text, err, sizeof(err)), 0);
	assert_int_equal(cfg.workers, 5);
	assert_string_equal(cfg.socket_path, "/run/x.sock");
	assert_true(cfg.socket_path >= text && cfg.socket_path < text + 64);
	free(text);
	/* an error names the path and the line */
	f = fopen(path, "w");
	fputs("\n\nworkers = lots\n", f);
	fclose(f);
	text = (char *)0x1;
	assert_int_equal(dmn_config_load(path, &cfg, &text, err, sizeof(err)), -EINVAL);
	assert_ptr_equal(text, (char *)0x1);
	char want[512];
	snprintf(want, sizeof(want), "%s:3: workers: not a number: lots", path);
	assert_string_equal(err, want);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_kind),
		cmocka_unit_test(test_booleans),
		cmocka_unit_test(test_errors_name_file_line_key),
		cmocka_unit_test(test_parse_size),
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_example),
		cmocka_unit_test(test_split_memory),
		cmocka_unit_test(test_load),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
