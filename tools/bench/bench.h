/* SPDX-License-Identifier: Apache-2.0 */
/* sluice-bench: one function per benchmark, each printing `bench=NAME key=value ...` lines. */
#ifndef SLUICE_TOOLS_BENCH_H
#define SLUICE_TOOLS_BENCH_H

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

#endif
