/* SPDX-License-Identifier: Apache-2.0 */
/* sluice-bench: one function per benchmark, each printing `bench=NAME key=value ...` lines. */
#ifndef SLUICE_TOOLS_BENCH_H
#define SLUICE_TOOLS_BENCH_H

#include <getopt.h>

/* argv[0] is the benchmark's name; returns the exit status (0, 1 failure, 2 usage). */
int bench_read(int argc, char **argv);
int bench_crc(int argc, char **argv);
int bench_sched(int argc, char **argv);
int bench_pipeline(int argc, char **argv);
int bench_next(int argc, char **argv);
int bench_reader(int argc, char **argv);
int bench_start(int argc, char **argv);
int bench_image(int argc, char **argv);
int bench_predict(int argc, char **argv);
int bench_autotune(int argc, char **argv);

/*
 * getopt_long (opterr off, options and operands in any order) over a benchmark's arguments,
 * argv[0] being its name; set optind = 0 before the first call. Returns the option's val, 'h'
 * for -h (and for --help: opts holds { "help", no_argument, NULL, 'h' }), -1 at the end (the
 * operands are argv[optind..argc)), or '?' after saying on stderr what is wrong: "sluice-bench
 * NAME: unknown option --x (try --help)", "... --threads needs a value (try --help)". On an
 * option, *ret_name (when not NULL) is its long name, for the caller's messages.
 */
int bench_getopt(int argc, char **argv, const struct option *opts, const char **ret_name);

#endif
