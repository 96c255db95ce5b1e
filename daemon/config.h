/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced's settings: one table of options for the command line and the config file. */
#ifndef SLUICE_DAEMON_CONFIG_H
#define SLUICE_DAEMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "registry.h"

/*
 * Every setting of sluiced is one row of dmn_opts: main.c builds getopt_long's options from
 * it (--NAME VALUE, --NAME=VALUE; a boolean --NAME or --NAME=BOOL) and the config file's parser
 * looks its keys up in it (NAME = VALUE), so that a new setting is both a flag and a key by
 * construction. --help's option list and the installed example file are printed from it too.
 */
enum dmn_opt_kind {
	DMN_OPT_STRING,	 /* const char *: a path (the caller keeps the text alive) */
	DMN_OPT_UINT,	 /* unsigned: a number (K, M, G suffixes as for sizes), capped at max */
	DMN_OPT_BYTES,	 /* uint64_t: a size, BYTES or N followed by K, M or G */
	DMN_OPT_SECONDS, /* uint64_t: whole seconds, stored as nanoseconds */
	DMN_OPT_BOOL,	 /* bool: true/false, yes/no, 1/0 (on the command line alone: true) */
	DMN_OPT_COMMIT,	 /* uint64_t: a size or "all" (UINT64_MAX) */
	DMN_OPT_CPUS,	 /* double: a number of cores > 0, decimals allowed ("1.5") */
};

struct dmn_opt {
	const char *name; /* the long option without "--", the file's key */
	enum dmn_opt_kind kind;
	size_t off;	  /* of the field in struct dmn_config */
	uint64_t max;	  /* DMN_OPT_UINT: larger values are taken as this */
	bool empty_ok;	  /* DMN_OPT_STRING: "" is a value (state-dir: none) */
	const char *arg;  /* what --help shows after the name ("PATH", "N"); NULL: boolean */
	const char *def;  /* the default as a value, or NULL when sluiced works it out at start */
	const char *help; /* lines for --help and the example file, '\n' between them */
};

#define DMN_OPTS_MAX 64 /* rows dmn_opts may have */
extern const struct dmn_opt dmn_opts[];
extern const size_t dmn_n_opts;

/* The defaults of every setting (those computed at start are left at their "unset" value). */
void dmn_config_defaults(struct dmn_config *cfg);

/* The row named name (a key or a long option without "--"), or NULL. */
const struct dmn_opt *dmn_opt_find(const char *name);
/* The row whose name comes closest to name (names.c's measure), or NULL when none is close. */
const struct dmn_opt *dmn_opt_suggest(const char *name);

/*
 * Set o's field of cfg from value (a flag's or a key's); value NULL: a boolean flag given
 * alone (true). 0, or -EINVAL with err saying what is wrong with value ("not a number: 12X"),
 * without the option's name (the caller says where it came from). String values are stored
 * as pointers to value.
 */
int dmn_opt_set(const struct dmn_opt *o, const char *value, struct dmn_config *cfg, char *err,
		size_t cap);

/*
 * A size: decimal digits, then nothing or one of K, M, G (binary; either case). 0 and
 * *ret_v, or -EINVAL (-ERANGE past 2^64).
 */
int dmn_parse_size(const char *s, uint64_t *ret_v);

/*
 * A config file's text: lines of KEY = VALUE (keys are dmn_opts' names), blank lines and
 * comments (from a '#' that starts a line or follows a space or tab, to the end of the line).
 * text must be NUL-terminated and is changed in place: the string values set in cfg point
 * into it, so it must outlive cfg's use. name is the file as errors name it. The settings are
 * applied in order; a key given twice is an error. 0, or -EINVAL with err "NAME:LINE: what"
 * (cfg may then hold the lines before it).
 */
int dmn_config_parse(const char *name, char *text, struct dmn_config *cfg, char *err, size_t cap);

/*
 * Read the file at path (at most DMN_CONFIG_MAX bytes) and dmn_config_parse it into cfg.
 * 0, and *ret_text: the file's text that cfg's strings point into, for the caller to free()
 * after cfg's last use. -ENOENT when there is no such file; other errors -errno or -EINVAL,
 * with err naming the file and what is wrong.
 */
#define DMN_CONFIG_MAX (1u << 20)
int dmn_config_load(const char *path, struct dmn_config *cfg, char **ret_text, char *err,
		    size_t cap);

/*
 * The budgets within --memory (cfg->total_bytes set): the record cache may hold at most half of
 * it (unset, UINT64_MAX: half), within the same --memory as the pipelines, which it gives its
 * unread entries back to first (docs/security.md, "Memory"); --pipeline-memory unset
 * (UINT64_MAX) becomes 256 MiB, or an eighth of --memory when that is less; a ring is at most
 * --memory;
 * --user-memory unset (UINT64_MAX) becomes half of --memory. Returns true when --cache-memory
 * was cut to half of --memory (the caller says so).
 */
bool dmn_config_split_memory(struct dmn_config *cfg);

/* --help's list of options, from dmn_opts. */
void dmn_opts_usage(FILE *f);
/* The example config file (every key commented out, at its default), from dmn_opts. */
void dmn_config_example(FILE *f, const char *path);

#endif
