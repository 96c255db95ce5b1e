/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced: serve pipelines' batches to training processes through shared-memory rings. */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon/pipeline/cache.h"
#include "log.h"
#include "sched/sched.h"

/*
 * The daemon runs in the foreground (systemd, or a terminal) with one server thread: an epoll
 * loop over the listening socket, the client connections and a signalfd. Every pipeline adds
 * its engine's driver thread (which also publishes), and all share one parse pool. SIGTERM or
 * SIGINT stops it cleanly: clients get a SHUTDOWN notice, the socket is unlinked.
 */

#define DMN_TICK_MS 50

static void usage(FILE *f)
{
	fprintf(f, "usage: sluiced [--socket PATH] [--config-dir DIR] [--workers N]\n"
		   "               [--pipeline-memory BYTES] [--memory BYTES]\n"
		   "               [--max-pipelines N] [--max-readers N] [--ring-slots N]\n"
		   "               [--ring-commit BYTES|all] [--direct-io] [--cache-memory BYTES]\n"
		   "               [--cache-uncompressed] [--lease SECONDS] [--linger SECONDS]\n"
		   "               [--idle-timeout SECONDS]\n"
		   "               [--user-connections N] [--state-dir DIR] [--help] [--version]\n"
		   "\n"
		   "Serve pipelines (DESIGN.md §3.4 specs) to training processes on this host.\n"
		   "  --socket PATH        the control socket (default: $SLUICE_SOCKET, else\n"
		   "                       $RUNTIME_DIRECTORY/sluice.sock, else\n"
		   "                       $XDG_RUNTIME_DIR/sluice/sluice.sock, else "
		   "/run/sluice/sluice.sock)\n"
		   "  --config-dir DIR     start every DIR/*.json pipeline spec at start; SIGHUP\n"
		   "                       reads DIR again (new specs start, removed ones are\n"
		   "                       drained and dropped, changed ones are refused)\n"
		   "  --workers N          parse pool workers (default: every CPU)\n"
		   "  --pipeline-memory B  the shared memory of one pipeline's ring (default\n"
		   "                       256M; more for batches of a known size that need\n"
		   "                       it: num_prefetch + 2 of them, within --memory)\n"
		   "  --memory B           the record cache and all rings' --pipeline-memory\n"
		   "                       together (default half the memory.max of sluiced's\n"
		   "                       cgroup, else of the host's memory)\n"
		   "  --user-pipelines N   pipelines one uid may run, root's not counted\n"
		   "                       (default 16; 0: no cap)\n"
		   "  --user-memory B      ring bytes one uid's pipelines may hold (default half\n"
		   "                       of --memory; 0: no cap)\n"
		   "  --ring-commit B|all  a ring's memory allocated at its start; it grows with\n"
		   "                       the batches it holds (default 4M; all: the whole ring)\n"
		   "  --max-pipelines N    (default 64)   --max-readers N  per pipeline (default "
		   "64)\n"
		   "  --ring-slots N       batches a ring holds, a power of two (default 64)\n"
		   "  --direct-io          read the files with O_DIRECT: no page cache and no "
		   "kernel\n"
		   "                       copy (for datasets on NVMe that do not fit in memory; "
		   "where\n"
		   "                       the file system refuses it, reads stay buffered)\n"
		   "  --cache-memory B     the shared record cache: files framed once are kept\n"
		   "                       (after decompression) for every pipeline and epoch\n"
		   "                       that reads them again, within B bytes (default 0: "
		   "off);\n"
		   "                       files of compressed datasets only, unless\n"
		   "  --cache-uncompressed cache uncompressed files too (slow or remote storage:\n"
		   "                       local ones are cheaper to read again from the page "
		   "cache)\n"
		   "  --lease S            a split or rank reader that holds a batch (handed to\n"
		   "                       it, taken or not) longer than S seconds is removed and\n"
		   "                       its batches go to its group (default 600; 0: never)\n"
		   "  --linger S           a pipeline that ended (finished or failed) is dropped\n"
		   "                       once it has had no reader for S seconds, and at once\n"
		   "                       when --memory needs its room (default 60; the config\n"
		   "                       dir's stay)\n"
		   "  --idle-timeout S     close a connection without readers that sends no\n"
		   "                       request for S seconds (default 60; 0: never;\n"
		   "                       libsluice reconnects when it next asks)\n"
		   "  --user-connections N connections one uid may hold, root's not counted\n"
		   "                       (default 256; 0: no cap)\n"
		   "  --state-dir DIR      keep each pipeline's position there, so that readers\n"
		   "                       resume where they were after sluiced restarts\n"
		   "                       (default $STATE_DIRECTORY; none: they get ESTALE)\n"
		   "  --help, --version    this text, the version\n"
		   "Options take their value as --opt VALUE or --opt=VALUE.\n");
}

static int parse_size(const char *s, uint64_t *ret)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	uint64_t mul = 1;
	if (*end == 'K' || *end == 'k')
		mul = 1ull << 10;
	else if (*end == 'M' || *end == 'm')
		mul = 1ull << 20;
	else if (*end == 'G' || *end == 'g')
		mul = 1ull << 30;
	else if (*end)
		return -EINVAL;
	if (mul > 1 && end[1])
		return -EINVAL;
	*ret = v * mul;
	return 0;
}

/* The number in a cgroup file such as memory.max ("max" and errors: UINT64_MAX). */
static uint64_t read_limit(const char *path)
{
	char buf[64];
	FILE *f = fopen(path, "re");
	if (!f)
		return UINT64_MAX;
	uint64_t v = UINT64_MAX;
	if (fgets(buf, sizeof(buf), f) && buf[0] >= '0' && buf[0] <= '9')
		v = strtoull(buf, NULL, 10);
	fclose(f);
	return v;
}

/* cpu.max ("QUOTA PERIOD" or "max PERIOD") as thousandths of a core (UINT64_MAX: no limit). */
static uint64_t read_cpu_max(const char *path)
{
	char buf[64];
	FILE *f = fopen(path, "re");
	if (!f)
		return UINT64_MAX;
	unsigned long long quota, period;
	uint64_t v = UINT64_MAX;
	if (fgets(buf, sizeof(buf), f) && sscanf(buf, "%llu %llu", &quota, &period) == 2 && period)
		v = quota * 1000 / period;
	fclose(f);
	return v;
}

/*
 * The smallest value of a cgroup v2 file (read by read) on sluiced's cgroup path: the cgroup and
 * each parent, what bounds it. UINT64_MAX: none. SLUICED_TEST_CGROUP_ROOT stands for
 * /sys/fs/cgroup (tests).
 */
static uint64_t cgroup_min(const char *file, uint64_t (*read)(const char *path))
{
	const char *root = getenv("SLUICED_TEST_CGROUP_ROOT");
	if (!root || !*root)
		root = "/sys/fs/cgroup";
	char line[512], path[1024];
	uint64_t lim = UINT64_MAX;
	FILE *f = fopen("/proc/self/cgroup", "re");
	while (f && fgets(line, sizeof(line), f)) {
		if (strncmp(line, "0::", 3) != 0)
			continue;    /* cgroup v1 controllers: not read */
		char *cg = line + 3; /* "/system.slice/sluiced.service": it, then each parent */
		cg[strcspn(cg, "\n")] = '\0';
		for (char *slash;; *slash = '\0') {
			snprintf(path, sizeof(path), "%s%s/%s", root, cg, file);
			uint64_t v = read(path);
			if (v < lim)
				lim = v;
			slash = strrchr(cg, '/');
			if (!slash || slash == cg)
				break; /* the root cgroup has none */
		}
	}
	if (f)
		fclose(f);
	return lim;
}

/* The cores sluiced may use: its CPU affinity, bounded by its cgroup's cpu.max. */
static double host_cpus_allowed(void)
{
	cpu_set_t set;
	double n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
	uint64_t milli = cgroup_min("cpu.max", read_cpu_max);
	if (milli != UINT64_MAX && (double)milli / 1000 < n)
		n = (double)milli / 1000;
	return n > 0 ? n : 1;
}

/*
 * The default of --memory: half of the smallest memory.max on sluiced's cgroup v2 path (what
 * it may use before the kernel's OOM killer ends it), else half of the host's memory; from
 * says which.
 */
static uint64_t default_memory(char *from, size_t cap)
{
	uint64_t lim = cgroup_min("memory.max", read_limit);
	if (lim != UINT64_MAX) {
		snprintf(from, cap, "half of the cgroup's memory.max, %llu KiB",
			 (unsigned long long)(lim >> 10));
		return lim / 2;
	}
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t host = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 8ull << 30;
	snprintf(from, cap, "half of the host's %llu KiB", (unsigned long long)(host >> 10));
	return host / 2;
}

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "unknown"
#endif

enum {
	OPT_SOCKET = 256,
	OPT_CONFIG_DIR,
	OPT_WORKERS,
	OPT_PIPELINE_MEMORY,
	OPT_MEMORY,
	OPT_MAX_PIPELINES,
	OPT_MAX_READERS,
	OPT_CACHE_MEMORY,
	OPT_RING_SLOTS,
	OPT_IDLE_TIMEOUT,
	OPT_USER_CONNECTIONS,
	OPT_USER_PIPELINES,
	OPT_USER_MEMORY,
	OPT_DIRECT_IO,
	OPT_CACHE_UNCOMPRESSED,
	OPT_RING_COMMIT,
	OPT_LEASE,
	OPT_LINGER,
	OPT_STATE_DIR,
	OPT_VERSION,
};

static const struct option options[] = {
	{ "socket", required_argument, NULL, OPT_SOCKET },
	{ "config-dir", required_argument, NULL, OPT_CONFIG_DIR },
	{ "workers", required_argument, NULL, OPT_WORKERS },
	{ "pipeline-memory", required_argument, NULL, OPT_PIPELINE_MEMORY },
	{ "memory", required_argument, NULL, OPT_MEMORY },
	{ "max-pipelines", required_argument, NULL, OPT_MAX_PIPELINES },
	{ "max-readers", required_argument, NULL, OPT_MAX_READERS },
	{ "ring-slots", required_argument, NULL, OPT_RING_SLOTS },
	{ "cache-memory", required_argument, NULL, OPT_CACHE_MEMORY },
	{ "direct-io", no_argument, NULL, OPT_DIRECT_IO },
	{ "cache-uncompressed", no_argument, NULL, OPT_CACHE_UNCOMPRESSED },
	{ "ring-commit", required_argument, NULL, OPT_RING_COMMIT },
	{ "lease", required_argument, NULL, OPT_LEASE },
	{ "linger", required_argument, NULL, OPT_LINGER },
	{ "idle-timeout", required_argument, NULL, OPT_IDLE_TIMEOUT },
	{ "user-connections", required_argument, NULL, OPT_USER_CONNECTIONS },
	{ "user-pipelines", required_argument, NULL, OPT_USER_PIPELINES },
	{ "user-memory", required_argument, NULL, OPT_USER_MEMORY },
	{ "help", no_argument, NULL, 'h' },
	{ "state-dir", required_argument, NULL, OPT_STATE_DIR },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ NULL, 0, NULL, 0 },
};

/*
 * The command line into cfg. 0; 1 when --help or --version was answered (exit 0); -EINVAL after
 * saying on stderr what is wrong (exit 2).
 */
static int parse_args(int argc, char **argv, struct dmn_config *cfg)
{
	opterr = 0; /* getopt's own messages name the option less plainly than ours */
	int o, idx;
	while ((o = getopt_long(argc, argv, ":h", options, &idx)) != -1) {
		const char *name = argv[optind - 1];
		uint64_t n = 0;
		if (o == 'h') {
			usage(stdout);
			return 1;
		}
		if (o == OPT_VERSION) {
			printf("sluiced %s\n", SLUICE_VERSION);
			return 1;
		}
		if (o == ':') {
			fprintf(stderr, "sluiced: %s needs a value (try --help)\n", name);
			return -EINVAL;
		}
		if (o == '?') {
			/* optopt is the short option; a long one is named by its argument */
			if (optopt)
				fprintf(stderr, "sluiced: unknown option -%c (try --help)\n",
					optopt);
			else
				fprintf(stderr, "sluiced: unknown option %.*s (try --help)\n",
					(int)strcspn(name, "="), name);
			return -EINVAL;
		}
		if (o >= OPT_WORKERS && o <= OPT_USER_MEMORY && parse_size(optarg, &n) < 0) {
			fprintf(stderr, "sluiced: --%s: not a number: %s\n", options[idx].name,
				optarg);
			return -EINVAL;
		}
		switch (o) {
		case OPT_SOCKET:
			cfg->socket_path = optarg;
			break;
		case OPT_CONFIG_DIR:
			cfg->config_dir = optarg;
			break;
		case OPT_STATE_DIR:
			cfg->state_dir = optarg;
			break;
		case OPT_WORKERS:
			cfg->workers = (unsigned)n;
			break;
		case OPT_PIPELINE_MEMORY:
			cfg->pipeline_bytes = n;
			break;
		case OPT_MEMORY:
			cfg->total_bytes = n;
			break;
		case OPT_MAX_PIPELINES:
			cfg->max_pipelines = (unsigned)n;
			break;
		case OPT_MAX_READERS:
			cfg->max_readers =
				(unsigned)(n > IPC_RING_MAX_READERS ? IPC_RING_MAX_READERS : n);
			break;
		case OPT_RING_SLOTS:
			cfg->ring_slots = (unsigned)n;
			break;
		case OPT_CACHE_MEMORY:
			cfg->cache_bytes = n;
			break;
		case OPT_IDLE_TIMEOUT:
			cfg->idle_timeout_s = (unsigned)(n > 86400 * 365 ? 86400 * 365 : n);
			break;
		case OPT_USER_CONNECTIONS:
			cfg->user_connections = (unsigned)(n > UINT32_MAX ? UINT32_MAX : n);
			break;
		case OPT_USER_PIPELINES:
			cfg->user_pipelines = (unsigned)(n > UINT32_MAX ? UINT32_MAX : n);
			break;
		case OPT_USER_MEMORY:
			cfg->user_bytes = n;
			break;
		case OPT_DIRECT_IO:
			cfg->direct_io = true;
			break;
		case OPT_CACHE_UNCOMPRESSED:
			cfg->cache_uncompressed = true;
			break;
		case OPT_LEASE:
		case OPT_LINGER:
			if (parse_size(optarg, &n) < 0 || n > UINT64_MAX / 1000000000) {
				fprintf(stderr, "sluiced: --%s: not a number of seconds: %s\n",
					options[idx].name, optarg);
				return -EINVAL;
			}
			*(o == OPT_LEASE ? &cfg->lease_ns : &cfg->linger_ns) = n * 1000000000;
			break;
		case OPT_RING_COMMIT:
			if (strcmp(optarg, "all") == 0) {
				cfg->ring_commit = UINT64_MAX;
			} else if (parse_size(optarg, &cfg->ring_commit) < 0) {
				fprintf(stderr,
					"sluiced: --ring-commit: not a size nor \"all\": %s\n",
					optarg);
				return -EINVAL;
			}
			break;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "sluiced: unexpected argument %s (try --help)\n", argv[optind]);
		return -EINVAL;
	}
	return 0;
}

/* The socket path DESIGN.md §6 names; a directory of our own is created where needed. */
static const char *socket_path(const struct dmn_config *cfg, char *buf, size_t cap)
{
	if (cfg->socket_path)
		return cfg->socket_path;
	const char *e = getenv("SLUICE_SOCKET");
	if (e && *e)
		return e;
	if ((e = getenv("RUNTIME_DIRECTORY")) && *e) {
		/* systemd: a list separated by ':' when the unit has several; ours is the first
		   (as libsluice reads it) */
		snprintf(buf, cap, "%.*s/sluice.sock", (int)strcspn(e, ":"), e);
		return buf;
	}
	if ((e = getenv("XDG_RUNTIME_DIR")) && *e) {
		snprintf(buf, cap, "%s/sluice", e);
		mkdir(buf, 0700);
		snprintf(buf, cap, "%s/sluice/sluice.sock", e);
		return buf;
	}
	mkdir("/run/sluice", 0755);
	return "/run/sluice/sluice.sock";
}

/* Bind and listen; a stale socket (nobody accepts on it) is replaced, a live one is an error. */
static int listen_on(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path)) {
		dmn_log("%s: socket path too long", path);
		return -ENAMETOOLONG;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (probe >= 0) {
		if (connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(probe);
			dmn_log("%s: another sluiced is listening there", path);
			return -EADDRINUSE;
		}
		close(probe);
	}
	unlink(path);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 128) < 0) {
		int e = -errno;
		dmn_log("%s: %s", path, strerror(-e));
		close(fd);
		return e;
	}
	/* who may connect is up to the directory's permissions (systemd: the sluice group);
	 * who may read a pipeline is checked per request with SO_PEERCRED */
	chmod(path, 0666);
	return fd;
}

/* A listening socket passed by systemd (LISTEN_FDS, sluiced.socket), or -1. */
static int socket_activated(void)
{
	const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
	if (!pid || !fds || strtol(pid, NULL, 10) != (long)getpid() || strtol(fds, NULL, 10) != 1)
		return -1;
	int fd = 3; /* SD_LISTEN_FDS_START */
	int type = 0;
	socklen_t len = sizeof(type);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_SEQPACKET)
		return -1;
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	return fd;
}

/* sd_notify without libsystemd: one datagram to $NOTIFY_SOCKET. */
static void notify(const char *state)
{
	const char *p = getenv("NOTIFY_SOCKET");
	if (!p || !*p)
		return;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t len = strlen(p);
	if (len >= sizeof(sa.sun_path))
		return;
	memcpy(sa.sun_path, p, len);
	if (sa.sun_path[0] == '@')
		sa.sun_path[0] = 0; /* abstract namespace */
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa,
	       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len));
	close(fd);
}

static void shutdown_clients(struct dmn *d, const char *why)
{
	while (d->conns) {
		dmn_conn_say_bye(d->conns->fd, why);
		dmn_conn_close(d, d->conns);
	}
}

int main(int argc, char **argv)
{
	struct dmn d = {
		.reg.cfg = {
			.pipeline_bytes = 256ull << 20,
			.total_bytes = UINT64_MAX, /* default_memory() */
			.user_pipelines = 16,
			.user_bytes = UINT64_MAX, /* half of --memory */
			.max_pipelines = 64,
			.max_readers = IPC_RING_MAX_READERS,
			.ring_slots = 64,
			.lease_ns = 600 * 1000000000ull,
			.linger_ns = 60 * 1000000000ull,
			.ring_commit = IPC_RING_COMMIT_DEFAULT,
			.idle_timeout_s = 60,
			.user_connections = 256,
		},
		.listen_fd = -1,
		.spare_fd = -1,
		.epoll_fd = -1,
		.signal_fd = -1,
	};
	dmn_log_init(); /* <N> priorities when stderr is the journal */
	int pa = parse_args(argc, argv, &d.reg.cfg);
	if (pa != 0)
		return pa < 0 ? 2 : 0;
	char mem_from[160] = "--memory";
	if (d.reg.cfg.total_bytes == UINT64_MAX)
		d.reg.cfg.total_bytes = default_memory(mem_from, sizeof(mem_from));
	/* --memory is everything the daemon holds for data: the record cache takes its part
	   first (at most half), the rings share the rest */
	uint64_t all_bytes = d.reg.cfg.total_bytes;
	if (d.reg.cfg.cache_bytes > all_bytes / 2) {
		fprintf(stderr,
			"sluiced: --cache-memory %llu is more than half of the memory budget (%llu "
			"bytes, %s): the cache gets %llu\n",
			(unsigned long long)d.reg.cfg.cache_bytes, (unsigned long long)all_bytes,
			mem_from, (unsigned long long)(all_bytes / 2));
		d.reg.cfg.cache_bytes = all_bytes / 2;
	}
	d.reg.cfg.total_bytes -= d.reg.cfg.cache_bytes;
	if (d.reg.cfg.pipeline_bytes > d.reg.cfg.total_bytes) {
		/* a small cgroup: rings grow by use, so a ring as large as the budget is fine */
		d.reg.cfg.pipeline_bytes = d.reg.cfg.total_bytes;
	}
	if (d.reg.cfg.user_bytes == UINT64_MAX)
		d.reg.cfg.user_bytes = d.reg.cfg.total_bytes / 2;
	d.reg.cfg.cpus = host_cpus_allowed();
	/* Fault injection for tests (daemon/README.md): rings cannot grow past this many bytes. */
	const char *lim = getenv("SLUICED_TEST_COMMIT_LIMIT");
	if (lim && *lim && parse_size(lim, &d.reg.cfg.ring_commit_limit) < 0) {
		fprintf(stderr, "sluiced: SLUICED_TEST_COMMIT_LIMIT: not a size: %s\n", lim);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &mask, NULL); /* before any thread starts: they inherit it */

	struct sched_pool_opts po;
	sched_pool_opts_init(&po);
	po.workers = d.reg.cfg.workers;
	int r = sched_pool_create(&po, &d.reg.pool);
	if (r < 0) {
		dmn_err("cannot start the parse pool: %s", strerror(-r));
		return 1;
	}
	if (d.reg.cfg.cache_bytes && pl_cache_create(d.reg.cfg.cache_bytes, &d.reg.cache) < 0) {
		dmn_err("cannot make the record cache: out of memory");
		sched_pool_destroy(d.reg.pool, SCHED_SHUTDOWN_CANCEL);
		return 1;
	}
	char pathbuf[4096];
	const char *path = socket_path(&d.reg.cfg, pathbuf, sizeof(pathbuf));
	d.listen_fd = socket_activated();
	if (d.listen_fd >= 0) /* systemd owns the socket file (sluiced.socket) */
		path = NULL;
	else
		d.listen_fd = listen_on(path);
	d.signal_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	d.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	if (d.listen_fd < 0 || d.signal_fd < 0 || d.epoll_fd < 0) {
		if (d.listen_fd >= 0 && path)
			unlink(path);
		sched_pool_destroy(d.reg.pool, SCHED_SHUTDOWN_CANCEL);
		pl_cache_destroy(d.reg.cache);
		return 1;
	}
	dmn_server_init(&d);
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &d.listen_fd };
	epoll_ctl(d.epoll_fd, EPOLL_CTL_ADD, d.listen_fd, &ev);
	ev.data.ptr = &d.signal_fd;
	epoll_ctl(d.epoll_fd, EPOLL_CTL_ADD, d.signal_fd, &ev);
	if (d.reg.cfg.ring_commit == UINT64_MAX)
		dmn_log("rings: %llu KiB each, allocated whole at their start (--ring-commit all)",
			(unsigned long long)(d.reg.cfg.pipeline_bytes >> 10));
	else
		dmn_log("rings: up to %llu KiB each, %llu KiB allocated at their start, more as "
			"they hold more",
			(unsigned long long)(d.reg.cfg.pipeline_bytes >> 10),
			(unsigned long long)(d.reg.cfg.ring_commit >> 10));
	dmn_log("memory: %llu KiB for rings (%s%s), %llu KiB and %u pipelines per uid other than "
		"root",
		(unsigned long long)(d.reg.cfg.total_bytes >> 10), mem_from,
		d.reg.cache ? ", less the record cache's" : "",
		(unsigned long long)(d.reg.cfg.user_bytes >> 10), d.reg.cfg.user_pipelines);
	if (d.reg.cache)
		dmn_log("record cache: up to %llu KiB of framed records of %s files, shared by "
			"every "
			"pipeline",
			(unsigned long long)(d.reg.cfg.cache_bytes >> 10),
			d.reg.cfg.cache_uncompressed ? "all" : "compressed");
	const char *sd = getenv("STATE_DIRECTORY"); /* systemd's StateDirectory= (first one) */
	char sdbuf[4096];
	if (!d.reg.cfg.state_dir && sd && *sd) {
		snprintf(sdbuf, sizeof(sdbuf), "%s", sd);
		sdbuf[strcspn(sdbuf, ":")] = '\0';
		d.reg.cfg.state_dir = sdbuf;
	}
	dmn_keep_init(&d.reg.keep, d.reg.cfg.state_dir); /* before the config dir's start */
	if (d.reg.cfg.config_dir) {
		char msg[1024];
		if (dmn_load_config_dir(&d.reg, msg, sizeof(msg)) < 0)
			dmn_log("%s", msg);
	}
	dmn_log("listening on %s (pid %d, %u parse workers)",
		path ? path : "the socket systemd passed", (int)getpid(),
		sched_pool_workers(d.reg.pool));
	notify("READY=1\nSTATUS=serving");

	uint64_t last_tick = dmn_now_ms(), last_watchdog = 0;
	/* systemd's watchdog (WatchdogSec=): pinged at half its period; WATCHDOG_PID, when set,
	   names the process it is for (not a child that inherited the environment) */
	const char *wd = getenv("WATCHDOG_USEC"), *wd_pid = getenv("WATCHDOG_PID");
	uint64_t watchdog_ms = wd ? strtoull(wd, NULL, 10) / 2000 : 0;
	if (wd_pid && *wd_pid && strtol(wd_pid, NULL, 10) != (long)getpid())
		watchdog_ms = 0;
	while (!d.stopping) {
		struct epoll_event evs[64];
		int n = epoll_wait(d.epoll_fd, evs, 64, DMN_TICK_MS);
		for (int i = 0; i < n; i++) {
			void *p = evs[i].data.ptr;
			if (p == &d.listen_fd) {
				while (dmn_conn_accept(&d) > 0)
					;
			} else if (p == &d.signal_fd) {
				struct signalfd_siginfo si;
				while (read(d.signal_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
					if (si.ssi_signo == SIGHUP) { /* logs what it did, once */
						dmn_reload_config_dir(&d.reg);
						continue;
					}
					dmn_log("signal %u: stopping", si.ssi_signo);
					d.stopping = true;
				}
			} else {
				struct dmn_conn *c = p;
				if (dmn_conn_input(&d, c) < 0)
					dmn_conn_close(&d, c);
			}
		}
		uint64_t t = dmn_now_ms();
		if (t - last_tick >= DMN_TICK_MS) {
			last_tick = t;
			dmn_server_collect(&d);
			dmn_server_tick(&d, t);
		}
		if (watchdog_ms && t - last_watchdog >= watchdog_ms) {
			last_watchdog = t;
			notify("WATCHDOG=1");
		}
	}
	notify("STOPPING=1");
	d.reg.stopping = true; /* readers leave: their positions stay kept for the restart */
	shutdown_clients(&d, "sluiced is stopping");
	if (path)
		unlink(path);
	while (d.reg.pipelines) {
		struct dmn_pipeline *pl = d.reg.pipelines;
		d.reg.pipelines = pl->next;
		dmn_pipeline_destroy(&d.reg, pl);
	}
	close(d.listen_fd);
	close(d.signal_fd);
	close(d.epoll_fd);
	dmn_server_fini(&d);
	sched_pool_destroy(d.reg.pool, SCHED_SHUTDOWN_CANCEL);
	pl_cache_destroy(d.reg.cache); /* every pipeline that read it is gone */
	dmn_keep_fini(&d.reg.keep);    /* its files stay: the restart reads them */
	dmn_log("stopped");
	return 0;
}
