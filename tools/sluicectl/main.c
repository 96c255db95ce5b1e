/* SPDX-License-Identifier: Apache-2.0 */
/* sluicectl: the admin and debug CLI's entry point; dispatches to one cmd_* per subcommand. */
#include "sluicectl.h"

#include <stdio.h>
#include <string.h>

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "0.1.0"
#endif

struct subcommand {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
};

static const struct subcommand subcommands[] = {
	{ "inspect", cmd_inspect, "print the records and features of a TFRecord file" },
	{ "validate", cmd_validate, "decode every record of a dataset against its manifest" },
	{ "manifest", cmd_manifest, "infer a dataset manifest from the records of TFRecord files" },
	{ "gen", cmd_gen, "write a synthetic dataset (ctr, image, ...)" },
	{ "run", cmd_run, "run a pipeline spec in process and print or digest its batches" },
	{ "list", cmd_list, "list the pipelines of sluiced" },
	{ "stats", cmd_stats, "print the statistics of a pipeline of sluiced" },
	{ "register", cmd_register, "register a pipeline spec with sluiced" },
	{ "drain", cmd_drain, "attach to a pipeline of sluiced and read its batches" },
	{ "top", cmd_top, "every pipeline of sluiced live: rates, demand, prediction, limit" },
};

static void usage(FILE *f)
{
	size_t i;

	fprintf(f, "usage: sluicectl [--help|--version] [--socket PATH] COMMAND [ARGS...]\n\n"
		   "commands:\n");
	for (i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
		fprintf(f, "  %-10s %s\n", subcommands[i].name, subcommands[i].summary);
	fprintf(f, "\n'sluicectl COMMAND --help' describes a command's arguments.\n"
		   "--socket PATH (or $SLUICE_SOCKET) names sluiced's control socket.\n");
}

int main(int argc, char **argv)
{
	size_t i;

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
		printf("sluicectl %s\n", SLUICE_VERSION);
		return 0;
	}
	if (!strcmp(argv[1], "--socket")) {
		if (argc < 4) {
			fprintf(stderr, "sluicectl: --socket needs a PATH and a COMMAND\n");
			return 2;
		}
		sluicectl_socket = argv[2];
		argc -= 2;
		argv += 2;
	}
	for (i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++) {
		if (!strcmp(argv[1], subcommands[i].name))
			return subcommands[i].fn(argc - 1, argv + 1);
	}
	fprintf(stderr, "sluicectl: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
