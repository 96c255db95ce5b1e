/* SPDX-License-Identifier: Apache-2.0 */
/* sluicectl: the admin and debug CLI; one cmd_* function per subcommand. */
#ifndef SLUICE_TOOLS_SLUICECTL_H
#define SLUICE_TOOLS_SLUICECTL_H

#include <stddef.h>
#include <stdint.h>

/*
 * Each subcommand gets argv with argv[0] = the subcommand's name and returns the process exit
 * status: 0 success, 1 the data or dataset is bad (error on stderr), 2 usage error.
 */
int cmd_inspect(int argc, char **argv);
int cmd_validate(int argc, char **argv);
int cmd_manifest(int argc, char **argv);
int cmd_gen(int argc, char **argv);
int cmd_run(int argc, char **argv);
/* Build or check DIR/.sluice-index, the record index (index.c). */
int cmd_index(int argc, char **argv);
/* The commands that talk to sluiced (client.c). */
int cmd_list(int argc, char **argv);
int cmd_stats(int argc, char **argv);
int cmd_register(int argc, char **argv);
int cmd_drain(int argc, char **argv);
int cmd_rm(int argc, char **argv);
/* The live view of every pipeline with the resource model (top.c). */
int cmd_top(int argc, char **argv);

struct option;
struct sluice_client;
struct sluice_stats;
/* client.c: what the commands share. Each prints "sluicectl: CMD: msg" and returns 1 (2). */
int ctl_fail(const char *cmd, const char *msg);
int ctl_usage_error(const char *cmd, const char *msg, const char *usage);
/* Connect to sluiced: 0, or 1 after saying why not. */
int ctl_connect(const char *cmd, struct sluice_client **ret);
/*
 * getopt_long over a command's argv (optind = 0 before the first call): the option's value,
 * -1 at the end, -2 after printing usage for --help (exit 0), -3 after naming an unknown option
 * or one without its value (exit 2).
 */
int ctl_getopt(const char *cmd, int argc, char **argv, const struct option *opts,
	       const char *usage);
const char *ctl_status_name(uint32_t status);

/*
 * prom.c: the counters of n pipelines (NULL entries skipped) in Prometheus' text exposition
 * format, to path (written to path.tmp, then renamed over it: node_exporter's textfile
 * collector never reads half a file) or to stdout when path is NULL. 0, or -errno and msg.
 */
int prom_write_file(const char *path, const struct sluice_stats *const *stats, size_t n, char *msg,
		    size_t cap);

/* sluiced's control socket from --socket (before the command), or NULL: $SLUICE_SOCKET and
 * libsluice's defaults. */
extern const char *sluicectl_socket;

#endif
