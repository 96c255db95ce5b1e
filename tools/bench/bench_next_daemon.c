/* SPDX-License-Identifier: Apache-2.0 */
/* sluice-bench next: start and stop a sluiced of its own, read its CPU time and its counters. */
#include "bench_next.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/common/scan.h"

#define NB_START_S  20.0 /* the daemon must listen within this */
#define NB_SETTLE_S 30.0 /* the ring must fill within this */

/* ---- the daemon ---- */

/* The sluiced next to this build: /proc/self/exe is BUILD/tools/sluice-bench. */
int nb_default_sluiced(char *buf, size_t cap)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *slash;

	if (n <= 0)
		return -errno;
	exe[n] = '\0';
	for (int i = 0; i < 2; i++) {
		slash = strrchr(exe, '/');
		if (!slash)
			return -ENOENT;
		*slash = '\0';
	}
	if ((size_t)snprintf(buf, cap, "%s/daemon/sluiced", exe) >= cap)
		return -ENAMETOOLONG;
	return 0;
}

void nb_print_log(const struct nb_daemon *d)
{
	char line[1024];
	FILE *f = fopen(d->log, "re");

	if (!f)
		return;
	fprintf(stderr, "sluice-bench next: the daemon's log (%s):\n", d->log);
	while (fgets(line, sizeof(line), f))
		fprintf(stderr, "  %s", line);
	fclose(f);
}

void nb_sleep_s(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Write text to path. */
static int write_spec(const char *path, const char *text)
{
	FILE *f = fopen(path, "we");
	int rc = 0;

	if (!f)
		return -errno;
	if (fputs(text, f) == EOF)
		rc = -EIO;
	if (fclose(f) != 0 && rc == 0)
		rc = -errno;
	return rc;
}

/* Remove the temporary directory: every spec of the config dir, the log, the socket. */
static void daemon_cleanup(struct nb_daemon *d)
{
	DIR *conf = opendir(d->conf);
	struct dirent *e;

	while (conf && (e = readdir(conf))) {
		size_t l = strlen(e->d_name);

		if (l > 5 && !strcmp(e->d_name + l - 5, ".json"))
			unlinkat(dirfd(conf), e->d_name, 0);
	}
	if (conf)
		closedir(conf);
	rmdir(d->conf);
	/* SLUICE_BENCH_LOGS=DIR: each daemon's log kept there (what the tuner did, and why) */
	const char *keep = getenv("SLUICE_BENCH_LOGS");
	char to[sizeof(d->dir) + 64];
	static unsigned kept;
	if (keep && *keep &&
	    (size_t)snprintf(to, sizeof(to), "%s/sluiced-%d-%u.log", keep, (int)getpid(), kept++) <
		    sizeof(to) &&
	    rename(d->log, to) == 0)
		fprintf(stderr, "sluice-bench: the daemon's log is %s\n", to);
	else
		unlink(d->log);
	unlink(d->sock);
	rmdir(d->dir);
}

/* Stop the daemon: SIGTERM, then SIGKILL after 10 s. 0 when it exited with status 0. */
int nb_daemon_stop(struct nb_daemon *d)
{
	double deadline = scan_now_s() + 10.0;
	int status = 0, rc = -ETIMEDOUT;

	if (d->pid <= 0)
		return 0;
	kill(d->pid, SIGTERM);
	while (scan_now_s() < deadline) {
		pid_t w = waitpid(d->pid, &status, WNOHANG);

		if (w == d->pid) {
			rc = WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -ECHILD;
			break;
		}
		if (w < 0) {
			rc = -errno;
			break;
		}
		nb_sleep_s(0.005);
	}
	if (rc == -ETIMEDOUT) {
		fprintf(stderr,
			"sluice-bench next: sluiced (pid %d) ignored SIGTERM for 10 s: "
			"killed\n",
			(int)d->pid);
		kill(d->pid, SIGKILL);
		waitpid(d->pid, &status, 0);
	} else if (rc < 0) {
		fprintf(stderr,
			"sluice-bench next: sluiced (pid %d) did not exit cleanly "
			"(status 0x%x)\n",
			(int)d->pid, status);
		nb_print_log(d);
	}
	d->pid = 0;
	daemon_cleanup(d);
	return rc;
}

int nb_daemon_start(struct nb_daemon *d, const char *sluiced, const char *spec_text,
		    struct sluice_client **ret_client)
{
	return nb_daemon_start_args(d, sluiced, spec_text, NULL, ret_client);
}

int nb_daemon_start_args(struct nb_daemon *d, const char *sluiced, const char *spec_text,
			 const char *const *extra, struct sluice_client **ret_client)
{
	const struct nb_spec one = { NB_PIPELINE, spec_text };

	return nb_daemon_start_specs(d, sluiced, &one, spec_text ? 1 : 0, extra, ret_client);
}

/* A pipeline name that is safe as a file name in the config dir. */
static bool name_ok(const char *name)
{
	size_t l = strlen(name);

	return l > 0 && l <= 64 && name[0] != '.' &&
	       strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") ==
		       l;
}

int nb_daemon_start_specs(struct nb_daemon *d, const char *sluiced, const struct nb_spec *specs,
			  size_t n, const char *const *extra, struct sluice_client **ret_client)
{
	struct sluice_error err = { 0, "" };
	const char *argv[32];
	size_t argc = 0;
	double deadline;
	int rc, logfd;

	memset(d, 0, sizeof(*d));
	for (size_t i = 0; i < n; i++) {
		if (!name_ok(specs[i].name)) {
			fprintf(stderr, "sluice-bench next: '%s': not a pipeline name for a file\n",
				specs[i].name);
			return -EINVAL;
		}
	}
	snprintf(d->dir, sizeof(d->dir), "/tmp/sluice-bench-XXXXXX");
	if (!mkdtemp(d->dir)) {
		rc = -errno;
		fprintf(stderr, "sluice-bench next: mkdtemp %s: %s\n", d->dir, strerror(-rc));
		return rc;
	}
	snprintf(d->sock, sizeof(d->sock), "%s/s.sock", d->dir);
	snprintf(d->conf, sizeof(d->conf), "%s/conf", d->dir);
	snprintf(d->spec, sizeof(d->spec), "%s/conf/%s.json", d->dir,
		 n ? specs[0].name : NB_PIPELINE);
	snprintf(d->log, sizeof(d->log), "%s/sluiced.log", d->dir);
	rc = mkdir(d->conf, 0700) < 0 ? -errno : 0;
	if (rc < 0)
		fprintf(stderr, "sluice-bench next: mkdir %s: %s\n", d->conf, strerror(-rc));
	for (size_t i = 0; i < n && rc == 0; i++) {
		char path[sizeof(d->spec)];

		snprintf(path, sizeof(path), "%s/%s.json", d->conf, specs[i].name);
		rc = write_spec(path, specs[i].text);
		if (rc < 0)
			fprintf(stderr, "sluice-bench next: writing %s: %s\n", path, strerror(-rc));
	}
	if (rc < 0) {
		daemon_cleanup(d);
		return rc;
	}
	logfd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (logfd < 0) {
		rc = -errno;
		fprintf(stderr, "sluice-bench next: %s: %s\n", d->log, strerror(-rc));
		daemon_cleanup(d);
		return rc;
	}
	fflush(NULL);
	d->pid = fork();
	if (d->pid < 0) {
		rc = -errno;
		close(logfd);
		fprintf(stderr, "sluice-bench next: fork: %s\n", strerror(-rc));
		daemon_cleanup(d);
		return rc;
	}
	if (d->pid == 0) {
		/* The daemon goes when the bench goes, however it ends. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		dup2(logfd, STDOUT_FILENO);
		dup2(logfd, STDERR_FILENO);
		argv[argc++] = "sluiced";
		/* first, so that an extra --config FILE still wins */
		argv[argc++] = "--no-config";
		argv[argc++] = "--socket";
		argv[argc++] = d->sock;
		argv[argc++] = "--config-dir";
		argv[argc++] = d->conf;
		for (size_t i = 0; extra && extra[i] && argc + 1 < sizeof(argv) / sizeof(argv[0]);
		     i++)
			argv[argc++] = extra[i];
		argv[argc] = NULL;
		execv(sluiced, (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", sluiced, strerror(errno));
		_exit(127);
	}
	close(logfd);
	deadline = scan_now_s() + NB_START_S;
	for (;;) {
		int status;

		if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
			fprintf(stderr, "sluice-bench next: %s exited at start (status 0x%x)\n",
				sluiced, status);
			nb_print_log(d);
			d->pid = 0;
			daemon_cleanup(d);
			return -ECHILD;
		}
		if (access(d->sock, F_OK) == 0 && sluice_connect(d->sock, ret_client, &err) == 0)
			return 0;
		if (scan_now_s() > deadline) {
			fprintf(stderr,
				"sluice-bench next: %s does not listen on %s after %.0f s%s%s\n",
				sluiced, d->sock, NB_START_S, err.msg[0] ? ": " : "", err.msg);
			nb_print_log(d);
			nb_daemon_stop(d);
			return -ETIMEDOUT;
		}
		nb_sleep_s(0.01);
	}
}

/* The daemon's user + system time in seconds (/proc/PID/stat, clock ticks). */
int nb_daemon_cpu_s(pid_t pid, double *ret_s)
{
	char path[64], buf[2048], *p, *end;
	unsigned long long ut = 0, st = 0;
	ssize_t n;
	int fd, field;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -EIO;
	buf[n] = '\0';
	/* "pid (comm) state ...": comm may hold spaces and ')'; count fields after the last ')'. */
	p = strrchr(buf, ')');
	if (!p)
		return -EBADMSG;
	p++;
	for (field = 3; field <= 15; field++) {
		while (*p == ' ')
			p++;
		if (!*p)
			return -EBADMSG;
		if (field == 14 || field == 15) {
			errno = 0;
			unsigned long long v = strtoull(p, &end, 10);

			if (errno || end == p)
				return -EBADMSG;
			*(field == 14 ? &ut : &st) = v;
			p = end;
		} else {
			while (*p && *p != ' ')
				p++;
		}
	}
	*ret_s = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
	return 0;
}

/* The daemon's threads' time on a CPU in seconds (the sum of /proc/PID/task/N/schedstat). */
double nb_daemon_sched_s(pid_t pid)
{
	char path[64], file[384], buf[128];
	struct dirent *e;
	uint64_t sum = 0;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	if (!dir)
		return 0;
	while ((e = readdir(dir))) {
		ssize_t n;
		int fd;

		if (e->d_name[0] == '.')
			continue;
		snprintf(file, sizeof(file), "%s/%s/schedstat", path, e->d_name);
		fd = open(file, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n > 0) {
			buf[n] = '\0';
			sum += strtoull(buf, NULL, 10);
		}
	}
	closedir(dir);
	return (double)sum / 1e9;
}

int nb_counters_get(struct sluice_client *c, struct nb_counters *ret)
{
	struct sluice_error err = { 0, "" };
	struct sluice_stats *s = NULL;
	struct nb_counters out = { -1, -1, -1 };
	int rc;

	rc = sluice_stats(c, NB_PIPELINE, &s, &err);
	if (rc < 0) {
		fprintf(stderr, "sluice-bench next: stats %s: %s\n", NB_PIPELINE, err.msg);
		return rc;
	}
	sluice_stats_get(s, "batches_published", &out.published);
	sluice_stats_get(s, "ring_slots_used", &out.slots_used);
	sluice_stats_get(s, "ring_slots", &out.slots);
	sluice_stats_free(s);
	if (out.published < 0 || out.slots_used < 0 || out.slots <= 0) {
		fprintf(stderr,
			"sluice-bench next: stats %s: no batches_published, "
			"ring_slots_used or ring_slots\n",
			NB_PIPELINE);
		return -EBADMSG;
	}
	*ret = out;
	return 0;
}

/*
 * Wait until the daemon stops publishing (its ring is full, or it waits for readers):
 * batches_published unchanged over `quiet` polls `every` seconds apart.
 */
int nb_wait_settled(struct sluice_client *c, int quiet, double every, struct nb_counters *ret)
{
	double deadline = scan_now_s() + NB_SETTLE_S;
	struct nb_counters prev, cur;
	int same = 0, rc;

	rc = nb_counters_get(c, &prev);
	while (rc == 0 && same < quiet) {
		if (scan_now_s() > deadline) {
			fprintf(stderr,
				"sluice-bench next: the daemon still publishes after "
				"%.0f s "
				"(published %" PRId64 ")\n",
				NB_SETTLE_S, prev.published);
			return -ETIMEDOUT;
		}
		nb_sleep_s(every);
		rc = nb_counters_get(c, &cur);
		if (rc == 0) {
			same = cur.published == prev.published && cur.published > 0 ? same + 1 : 0;
			prev = cur;
		}
	}
	if (rc == 0)
		*ret = prev;
	return rc;
}

int nb_stats_read(struct sluice_client *c, const char *name, const char *const *keys, size_t n,
		  int64_t *ret_values)
{
	struct sluice_error err = { 0, "" };
	struct sluice_stats *s = NULL;
	int rc = sluice_stats(c, name, &s, &err);

	if (rc < 0) {
		fprintf(stderr, "sluice-bench next: stats %s: %s\n", name, err.msg);
		return rc;
	}
	for (size_t i = 0; i < n; i++) {
		int64_t v;

		ret_values[i] = sluice_stats_get(s, keys[i], &v) == 0 ? v : -1;
	}
	sluice_stats_free(s);
	return 0;
}

int nb_attach_name(struct sluice_client *c, struct sluice_reader **ret)
{
	return nb_attach_pipeline(c, NB_PIPELINE, ret);
}

int nb_attach_pipeline(struct sluice_client *c, const char *name, struct sluice_reader **ret)
{
	struct sluice_attach_opts ao;
	struct sluice_error err = { 0, "" };
	int rc;

	sluice_attach_opts_init(&ao);
	ao.name = name;
	ao.mode = SLUICE_MODE_BROADCAST;
	rc = sluice_attach(c, &ao, ret, &err);
	if (rc < 0)
		fprintf(stderr, "sluice-bench next: %s\n", err.msg);
	return rc;
}
