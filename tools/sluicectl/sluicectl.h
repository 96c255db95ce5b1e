/* SPDX-License-Identifier: Apache-2.0 */
/* sluicectl: the admin and debug CLI; one cmd_* function per subcommand. */
#ifndef SLUICE_TOOLS_SLUICECTL_H
#define SLUICE_TOOLS_SLUICECTL_H

/*
 * Each subcommand gets argv with argv[0] = the subcommand's name and returns the process exit
 * status: 0 success, 1 the data or dataset is bad (error on stderr), 2 usage error.
 */
int cmd_inspect(int argc, char **argv);
int cmd_validate(int argc, char **argv);
int cmd_manifest(int argc, char **argv);
int cmd_gen(int argc, char **argv);
int cmd_run(int argc, char **argv);
/* The commands that talk to sluiced (client.c). */
int cmd_list(int argc, char **argv);
int cmd_stats(int argc, char **argv);
int cmd_register(int argc, char **argv);
int cmd_drain(int argc, char **argv);
/* The live view of every pipeline with the resource model (top.c). */
int cmd_top(int argc, char **argv);

/* sluiced's control socket from --socket (before the command), or NULL: $SLUICE_SOCKET and
 * libsluice's defaults. */
extern const char *sluicectl_socket;

#endif
