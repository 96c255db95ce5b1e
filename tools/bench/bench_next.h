/* SPDX-License-Identifier: Apache-2.0 */
/* sluice-bench next: the sluiced it starts, stops and reads counters from (bench_next_daemon.c). */
#ifndef SLUICE_TOOLS_BENCH_NEXT_H
#define SLUICE_TOOLS_BENCH_NEXT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sluice/sluice.h"

/*
 * Each measurement starts a sluiced of its own (--no-config: the host's sluiced.conf is not the
 * benchmark's) in a new temporary directory whose config dir holds one spec, the pipeline
 * NB_PIPELINE, or several (nb_daemon_start_specs). Failures are reported on stderr, prefixed
 * "sluice-bench next: "; functions return 0 or -errno.
 */

#define NB_PIPELINE "nb"

struct nb_daemon {
	pid_t pid;
	char dir[64];	/* the temporary directory */
	char sock[128]; /* dir/s.sock */
	char conf[128]; /* dir/conf */
	char spec[160]; /* dir/conf/nb.json (nb_daemon_start_specs: the first spec's file) */
	char log[128];	/* dir/sluiced.log: the daemon's stderr */
};

/* The pipeline's counters: batches published, ring slots used and ring slots. */
struct nb_counters {
	int64_t published, slots_used, slots;
};

/*
 * Start sluiced on a socket in a new temporary directory with a config dir holding spec_text,
 * and connect to it. On success *ret_client is a connection the caller disconnects before
 * nb_daemon_stop().
 */
int nb_daemon_start(struct nb_daemon *d, const char *sluiced, const char *spec_text,
		    struct sluice_client **ret_client);
/*
 * The same with more options for sluiced (extra: NULL-terminated, or NULL), and an empty config
 * dir when spec_text is NULL.
 */
int nb_daemon_start_args(struct nb_daemon *d, const char *sluiced, const char *spec_text,
			 const char *const *extra, struct sluice_client **ret_client);
/* A spec for the config dir: it goes to conf/NAME.json; name is the spec's "name". */
struct nb_spec {
	const char *name; /* at most 64 bytes of [A-Za-z0-9._-] */
	const char *text;
};
/* The same with n specs in the config dir (n may be 0). */
int nb_daemon_start_specs(struct nb_daemon *d, const char *sluiced, const struct nb_spec *specs,
			  size_t n, const char *const *extra, struct sluice_client **ret_client);
/* Stop the daemon: SIGTERM, then SIGKILL after 10 s. 0 when it exited with status 0. */
int nb_daemon_stop(struct nb_daemon *d);
/* The daemon's stderr, copied to ours. */
void nb_print_log(const struct nb_daemon *d);
/* The sluiced next to this build: /proc/self/exe is BUILD/tools/sluice-bench. */
int nb_default_sluiced(char *buf, size_t cap);
/* nanosleep for s seconds, resumed after signals. */
void nb_sleep_s(double s);

/* The daemon's user + system time in seconds (/proc/PID/stat, clock ticks). */
int nb_daemon_cpu_s(pid_t pid, double *ret_s);
/* The daemon's threads' time on a CPU in seconds (the sum of /proc/PID/task/N/schedstat). */
double nb_daemon_sched_s(pid_t pid);
/* NB_PIPELINE's counters, through the control socket (sluice_stats). */
int nb_counters_get(struct sluice_client *c, struct nb_counters *ret);
/*
 * Wait until the daemon stops publishing (its ring is full, or it waits for readers):
 * batches_published unchanged over `quiet` polls `every` seconds apart.
 */
int nb_wait_settled(struct sluice_client *c, int quiet, double every, struct nb_counters *ret);
/*
 * The values of n keys of pipeline name's counters (sluice_stats): ret_values[i] is -1 where
 * the daemon does not give keys[i].
 */
int nb_stats_read(struct sluice_client *c, const char *name, const char *const *keys, size_t n,
		  int64_t *ret_values);
/* A broadcast reader of NB_PIPELINE. */
int nb_attach_name(struct sluice_client *c, struct sluice_reader **ret);
/* A broadcast reader of pipeline name; on failure the daemon's message is on stderr. */
int nb_attach_pipeline(struct sluice_client *c, const char *name, struct sluice_reader **ret);

#endif
