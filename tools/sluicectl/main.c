/* SPDX-License-Identifier: Apache-2.0 */
/* sluicectl: the admin and debug CLI's entry point; dispatches to one cmd_* per subcommand. */
#include "sluicectl.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "unknown"
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
	{ "index", cmd_index, "index the records of TFRecord files (DIR/.sluice-index)" },
	{ "run", cmd_run, "run a pipeline spec in process and print or digest its batches" },
	{ "list", cmd_list, "list the pipelines of sluiced (--json)" },
	{ "stats", cmd_stats, "a pipeline's statistics (--json, --prometheus)" },
	{ "register", cmd_register, "register a pipeline spec with sluiced" },
	{ "drain", cmd_drain, "attach to a pipeline of sluiced and read its batches" },
	{ "rm", cmd_rm, "remove a pipeline from sluiced (its readers get an error)" },
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
	enum { OPT_SOCKET = 256, OPT_VERSION };
	static const struct option opts[] = { { "help", no_argument, NULL, 'h' },
					      { "version", no_argument, NULL, OPT_VERSION },
					      { "socket", required_argument, NULL, OPT_SOCKET },
					      { NULL, 0, NULL, 0 } };
	int o;

	opterr = 0;
	/* '+': options before the command only; the command parses its own */
	while ((o = getopt_long(argc, argv, "+:hV", opts, NULL)) != -1) {
		const char *a = argv[optind - 1];
		switch (o) {
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
		case OPT_VERSION:
			printf("sluicectl %s\n", SLUICE_VERSION);
			return 0;
		case OPT_SOCKET:
			sluicectl_socket = optarg;
			break;
		case ':':
			fprintf(stderr, "sluicectl: %s needs a value (try --help)\n", a);
			return 2;
		default:
			if (optopt)
				fprintf(stderr, "sluicectl: unknown option -%c (try --help)\n",
					optopt);
			else
				fprintf(stderr, "sluicectl: unknown option %.*s (try --help)\n",
					(int)strcspn(a, "="), a);
			return 2;
		}
	}
	opterr = 1; /* the commands' own getopt_long calls say what is wrong themselves */
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[optind], "help")) {
		usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++) {
		if (!strcmp(argv[optind], subcommands[i].name))
			return subcommands[i].fn(argc - optind, argv + optind);
	}
	fprintf(stderr, "sluicectl: unknown command '%s' (try --help)\n", argv[optind]);
	return 2;
}
