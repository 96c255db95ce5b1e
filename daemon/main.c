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

#include "config.h"
#include "pipelines_internal.h"
#include "daemon/pipeline/cache.h"
#include "daemon/pipeline/index_store.h"
#include "log.h"
#include "tune.h"
#include "service.h"
#include "sched/sched.h"

/*
 * The daemon runs in the foreground (systemd, or a terminal) with one server thread: an epoll
 * loop over the listening socket, the client connections and a signalfd. Every pipeline adds
 * its engine's driver thread (which also publishes), and all share one parse pool. SIGTERM or
 * SIGINT stops it cleanly: clients get a SHUTDOWN notice, the socket is unlinked.
 */

#define DMN_TICK_MS 50

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "unknown"
#endif
#ifndef SLUICED_CONFIG_FILE /* meson: SYSCONFDIR/sluice/sluiced.conf */
#define SLUICED_CONFIG_FILE "/etc/sluice/sluiced.conf"
#endif

static void usage(FILE *f)
{
	fprintf(f, "usage: sluiced [--config FILE | --no-config] [OPTION...]\n"
		   "\n"
		   "Serve pipelines (DESIGN.md §3.4 specs) to training processes on this host.\n"
		   "  --config FILE        read the settings below from FILE (KEY = VALUE lines,\n"
		   "                       the options' names without \"--\"; default\n"
		   "                       " SLUICED_CONFIG_FILE ", when it exists);\n"
		   "                       the command line's options win over the file's\n"
		   "  --no-config          read no config file\n");
	dmn_opts_usage(f);
	fprintf(f, "  --help, --version    this text, the version\n"
		   "Options take their value as --opt VALUE or --opt=VALUE; a boolean is\n"
		   "--opt alone (true) or --opt=BOOL (true/false, yes/no, 1/0).\n");
}

/* sluiced's /proc/self/cgroup into text (cap bytes), and the root the hierarchies are under. */
static const char *proc_cgroup(char *text, size_t cap)
{
	text[0] = '\0';
	FILE *f = fopen("/proc/self/cgroup", "re");
	if (f) {
		size_t n = fread(text, 1, cap - 1, f);
		fclose(f);
		text[n] = '\0';
	}
	/* SLUICED_TEST_CGROUP_ROOT stands for /sys/fs/cgroup (tests) */
	const char *root = getenv("SLUICED_TEST_CGROUP_ROOT");
	return root && *root ? root : "/sys/fs/cgroup";
}

/*
 * The cores sluiced may use: its CPU affinity, bounded by its cgroup's quota (v2 cpu.max, or
 * v1 cpu.cfs_quota_us / cpu.cfs_period_us).
 */
static double host_cpus_allowed(void)
{
	cpu_set_t set;
	char text[4096];
	const char *root = proc_cgroup(text, sizeof(text));
	double n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
	uint64_t milli = dmn_cgroup_min(text, root, "cpu.max", dmn_cgroup_parse_cpu_max);
	uint64_t v1 = dmn_cgroup_v1_cpu(text, root);
	if (v1 < milli)
		milli = v1;
	if (milli != UINT64_MAX && (double)milli / 1000 < n)
		n = (double)milli / 1000;
	return n > 0 ? n : 1;
}

/*
 * The default of --memory: half of the tightest limit on sluiced's cgroup path, v2's
 * memory.max or v1's memory.limit_in_bytes (what it may use before the kernel's OOM killer
 * ends it), else half of the host's memory; from says which.
 */
static uint64_t default_memory(char *from, size_t cap)
{
	char text[4096];
	const char *root = proc_cgroup(text, sizeof(text));
	uint64_t v2 = dmn_cgroup_min(text, root, "memory.max", dmn_cgroup_parse_max);
	uint64_t v1 = dmn_cgroup_v1_memory(text, root);
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t host = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 8ull << 30;
	if (v2 != UINT64_MAX && v2 <= v1 && v2 < host) {
		snprintf(from, cap, "half of the cgroup's memory.max, %llu KiB",
			 (unsigned long long)(v2 >> 10));
		return v2 / 2;
	}
	if (v1 != UINT64_MAX && v1 < host) {
		snprintf(from, cap, "half of the cgroup's memory.limit_in_bytes (v1), %llu KiB",
			 (unsigned long long)(v1 >> 10));
		return v1 / 2;
	}
	snprintf(from, cap, "half of the host's %llu KiB", (unsigned long long)(host >> 10));
	return host / 2;
}

/* getopt_long's values beside the rows of dmn_opts (which are 256 + their index) */
enum { OPT_HELP = 'h', OPT_VERSION = 1, OPT_CONFIG, OPT_NO_CONFIG, OPT_ROW = 256 };

/* getopt_long's table: one option per row of dmn_opts (config.c), then the command line's own */
static void build_options(struct option *lo)
{
	size_t i;
	for (i = 0; i < dmn_n_opts; i++)
		lo[i] = (struct option){ dmn_opts[i].name,
					 dmn_opts[i].kind == DMN_OPT_BOOL ? optional_argument
									  : required_argument,
					 NULL, OPT_ROW + (int)i };
	lo[i++] = (struct option){ "config", required_argument, NULL, OPT_CONFIG };
	lo[i++] = (struct option){ "no-config", no_argument, NULL, OPT_NO_CONFIG };
	lo[i++] = (struct option){ "help", no_argument, NULL, OPT_HELP };
	lo[i++] = (struct option){ "version", no_argument, NULL, OPT_VERSION };
	lo[i] = (struct option){ NULL, 0, NULL, 0 };
}

/* An unknown option on stderr, with the known one it comes closest to. */
static void say_unknown(const char *arg)
{
	int n = (int)strcspn(arg, "=");
	char typed[128];
	snprintf(typed, sizeof(typed), "%.*s", n, arg + 2);
	const struct dmn_opt *near = strncmp(arg, "--", 2) == 0 ? dmn_opt_suggest(typed) : NULL;
	if (near)
		fprintf(stderr, "sluiced: unknown option %.*s (did you mean --%s? try --help)\n", n,
			arg, near->name);
	else
		fprintf(stderr, "sluiced: unknown option %.*s (try --help)\n", n, arg);
}

/*
 * The command line and the config file into cfg: the file first (--config FILE, else
 * SLUICED_CONFIG_FILE when it exists; --no-config: none), then the command line's options over
 * it. 0, and *ret_text: the file's text that cfg's strings may point into (NULL: none), for the
 * caller to free() at exit; 1 when --help or --version was answered (exit 0); -EINVAL after
 * saying on stderr what is wrong (exit 2); *ret_conf: the file read, or NULL.
 */
static int parse_args(int argc, char **argv, struct dmn_config *cfg, char **ret_text,
		      const char **ret_conf)
{
	struct option lo[DMN_OPTS_MAX + 5];
	build_options(lo);
	/* first pass: what is wrong, --help, --version, which file; values checked on a copy */
	struct dmn_config scratch = *cfg;
	const char *conf = SLUICED_CONFIG_FILE;
	bool conf_given = false;
	char msg[256];
	opterr = 0; /* getopt's own messages name the option less plainly than ours */
	optind = 0; /* a full start: the second pass runs it again */
	int o;
	while ((o = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
		const char *name = argv[optind - 1];
		if (o == OPT_HELP) {
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
				say_unknown(name);
			return -EINVAL;
		}
		if (o == OPT_CONFIG && !*optarg) {
			fprintf(stderr, "sluiced: --config needs a file (--no-config: none)\n");
			return -EINVAL;
		}
		if (o == OPT_CONFIG || o == OPT_NO_CONFIG) {
			conf = o == OPT_CONFIG ? optarg : NULL;
			conf_given = o == OPT_CONFIG;
			continue;
		}
		const struct dmn_opt *row = &dmn_opts[o - OPT_ROW];
		if (dmn_opt_set(row, optarg, &scratch, msg, sizeof(msg)) < 0) {
			fprintf(stderr, "sluiced: --%s: %s\n", row->name, msg);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "sluiced: unexpected argument %s (try --help)\n", argv[optind]);
		return -EINVAL;
	}
	char *text = NULL, err[1024];
	if (conf) {
		int r = dmn_config_load(conf, cfg, &text, err, sizeof(err));
		if (r == -ENOENT && !conf_given) {
			conf = NULL; /* no file where one may be: the defaults */
		} else if (r < 0) {
			fprintf(stderr, "sluiced: %s\n", err);
			return -EINVAL;
		}
	}
	/* second pass: the command line over the file (every value was checked above) */
	optind = 0;
	while ((o = getopt_long(argc, argv, ":h", lo, NULL)) != -1)
		if (o >= OPT_ROW)
			dmn_opt_set(&dmn_opts[o - OPT_ROW], optarg, cfg, msg, sizeof(msg));
	*ret_text = text;
	*ret_conf = conf;
	return 0;
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
	if (!dmn_listen_fds_ours(getenv("LISTEN_PID"), getenv("LISTEN_FDS"), (long)getpid()))
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
	struct sockaddr_un sa;
	socklen_t len;
	if (dmn_notify_addr(getenv("NOTIFY_SOCKET"), &sa, &len) < 0)
		return;
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, len);
	close(fd);
}

/*
 * The control socket's path (service.c says where it comes from), with the directory of our
 * own made where it is one; NULL after saying why not.
 */
static const char *socket_path(const struct dmn_config *cfg, char *buf, size_t cap)
{
	const struct dmn_sock_env env = {
		.sluice_socket = getenv("SLUICE_SOCKET"),
		.runtime_directory = getenv("RUNTIME_DIRECTORY"),
		.xdg_runtime_dir = getenv("XDG_RUNTIME_DIR"),
	};
	int from = dmn_socket_path(cfg->socket_path, &env, buf, cap);
	if (from < 0) {
		dmn_err("the socket path is longer than a Unix socket address holds (%zu bytes): "
			"give a shorter --socket",
			sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
		return NULL;
	}
	if (from == DMN_SOCK_XDG || from == DMN_SOCK_SYSTEM) {
		char *slash = strrchr(buf, '/');
		*slash = '\0';
		mkdir(buf, from == DMN_SOCK_XDG ? 0700 : 0755);
		*slash = '/';
	}
	return buf;
}

static void freep(char **p)
{
	free(*p);
}

/*
 * SIGHUP reads the config dir again, not the config file (sluiced(8)): say so when the file
 * changed since the start (st: what stat said then; st_mtim.tv_sec -1: it could not).
 */
static void conf_changed(const char *conf, struct stat *st)
{
	struct stat now;
	if (!conf || stat(conf, &now) < 0 ||
	    (now.st_mtim.tv_sec == st->st_mtim.tv_sec &&
	     now.st_mtim.tv_nsec == st->st_mtim.tv_nsec && now.st_size == st->st_size &&
	     now.st_ino == st->st_ino))
		return;
	dmn_warn("%s changed since sluiced started: its settings apply at the next start "
		 "(SIGHUP reads the config dir only)",
		 conf);
	*st = now; /* said once per change */
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
		.listen_fd = -1,
		.spare_fd = -1,
		.epoll_fd = -1,
		.signal_fd = -1,
	};
	dmn_config_defaults(&d.reg.cfg);
	dmn_log_init(); /* <N> priorities when stderr is the journal */
	/* the config file's text: d.reg.cfg's strings may point into it until the end */
	char *conf_text __attribute__((cleanup(freep))) = NULL;
	const char *conf = NULL;
	int pa = parse_args(argc, argv, &d.reg.cfg, &conf_text, &conf);
	if (pa != 0)
		return pa < 0 ? 2 : 0;
	struct stat conf_st = { 0 }; /* SIGHUP says when the file changed since */
	if (conf && stat(conf, &conf_st) < 0)
		conf_st.st_mtim.tv_sec = -1;
	char mem_from[160] = "--memory";
	if (d.reg.cfg.total_bytes == UINT64_MAX)
		d.reg.cfg.total_bytes = default_memory(mem_from, sizeof(mem_from));
	/* --memory is everything the daemon holds for data: the record cache may hold up to
	   half of it, and gives it back first when pipelines need it */
	uint64_t cache_asked = d.reg.cfg.cache_bytes;
	if (dmn_config_split_memory(&d.reg.cfg))
		dmn_warn("--cache-memory %llu is more than half of the memory budget (%llu bytes, "
			 "%s): the cache gets %llu",
			 (unsigned long long)cache_asked, (unsigned long long)d.reg.cfg.total_bytes,
			 mem_from, (unsigned long long)d.reg.cfg.cache_bytes);
	dmn_budget_init(&d.reg);
	d.reg.cfg.cpus = host_cpus_allowed();
	if (d.reg.cfg.cpus_limit > 0 && d.reg.cfg.cpus_limit < d.reg.cfg.cpus)
		d.reg.cfg.cpus = d.reg.cfg.cpus_limit;
	if (!d.reg.cfg.workers) { /* a worker per core it may use: more only wait for the quota */
		d.reg.cfg.workers = (unsigned)d.reg.cfg.cpus;
		if (d.reg.cfg.workers < d.reg.cfg.cpus)
			d.reg.cfg.workers++;
	}
	/* Fault injection for tests (daemon/README.md): rings cannot grow past this many bytes. */
	const char *lim = getenv("SLUICED_TEST_COMMIT_LIMIT");
	if (lim && *lim && dmn_parse_size(lim, &d.reg.cfg.ring_commit_limit) < 0) {
		fprintf(stderr, "sluiced: SLUICED_TEST_COMMIT_LIMIT: not a size: %s\n", lim);
		free(conf_text);
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
	if (dmn_budget_cache(&d.reg) < 0) {
		dmn_err("cannot make the record cache: out of memory");
		sched_pool_destroy(d.reg.pool, SCHED_SHUTDOWN_CANCEL);
		return 1;
	}
	char pathbuf[4096];
	const char *path = NULL; /* systemd's socket: it owns the file (sluiced.socket) */
	d.listen_fd = socket_activated();
	if (d.listen_fd < 0) {
		path = socket_path(&d.reg.cfg, pathbuf, sizeof(pathbuf));
		d.listen_fd = path ? listen_on(path) : -ENAMETOOLONG;
	}
	d.signal_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	d.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	if (d.listen_fd < 0 || d.signal_fd < 0 || d.epoll_fd < 0) {
		if (d.listen_fd >= 0 && path)
			unlink(path);
		sched_pool_destroy(d.reg.pool, SCHED_SHUTDOWN_CANCEL);
		dmn_budget_fini(&d.reg);
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
	dmn_log("memory: %llu KiB for rings, engines and the record cache (%s), %llu KiB and %u "
		"pipelines per uid other than root",
		(unsigned long long)(d.reg.cfg.total_bytes >> 10), mem_from,
		(unsigned long long)(d.reg.cfg.user_bytes >> 10), d.reg.cfg.user_pipelines);
	if (d.reg.cache)
		dmn_log("record cache: up to %llu KiB of framed records of %s files (%s), shared "
			"by every pipeline, given back first when pipelines need the memory",
			(unsigned long long)(d.reg.cfg.cache_bytes >> 10),
			d.reg.cfg.cache_uncompressed ? "all" : "compressed",
			cache_asked == UINT64_MAX ? "half of --memory" : "--cache-memory");
	else
		dmn_log("record cache: off (--cache-memory 0)");
	char sdbuf[4096]; /* systemd's StateDirectory= (the first where it lists several) */
	if (!d.reg.cfg.state_dir &&
	    dmn_first_dir(getenv("STATE_DIRECTORY"), sdbuf, sizeof(sdbuf)) == 0)
		d.reg.cfg.state_dir = sdbuf;
	dmn_keep_init(&d.reg.keep, d.reg.cfg.state_dir); /* before the config dir's start */
	/* sluiced's own record index: in STATE/index when there is a state directory */
	int oir = pl_own_index_init(d.reg.keep.dir);
	if (oir < 0)
		dmn_log("state directory %s: index: %s: sluiced's own record index is kept in "
			"memory only",
			d.reg.keep.dir, strerror(-oir));
	if (d.reg.cfg.config_dir) {
		char msg[1024];
		if (dmn_load_config_dir(&d.reg, msg, sizeof(msg)) < 0)
			dmn_log("%s", msg);
	}
	dmn_log("settings: %s%s", conf ? conf : "no config file",
		conf ? ", then the command line's" : "");
	dmn_log("listening on %s (pid %d, %u parse workers)",
		path ? path : "the socket systemd passed", (int)getpid(),
		sched_pool_workers(d.reg.pool));
	notify("READY=1\nSTATUS=serving");

	uint64_t last_tick = dmn_now_ms(), last_watchdog = 0;
	/* systemd's watchdog (WatchdogSec=): pinged at half its period; WATCHDOG_PID, when set,
	   names the process it is for (not a child that inherited the environment) */
	uint64_t watchdog_ms =
		dmn_watchdog_ms(getenv("WATCHDOG_USEC"), getenv("WATCHDOG_PID"), (long)getpid());
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
						conf_changed(conf, &conf_st);
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
			dmn_tune_tick(&d, dmn_now_ns());
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
		dmn_reap(&d.reg, pl, NULL, false); /* their records stay for the restart */
	}
	if (!dmn_reap_wait(DMN_STOP_WAIT_MS)) {
		/* a thread is stuck in a pipeline's engine: what it may still use stays, and the
		   process ends without freeing it (nor running the leak checker over it) */
		dmn_log("stopped, leaving the stuck pipelines above");
		fflush(stderr);
		_exit(0);
	}
	close(d.listen_fd);
	close(d.signal_fd);
	close(d.epoll_fd);
	dmn_server_fini(&d);
	sched_pool_destroy(d.reg.pool, SCHED_SHUTDOWN_CANCEL);
	dmn_budget_fini(&d.reg);    /* and the cache: every pipeline that read it is gone */
	pl_own_index_fini();	    /* writes what it has not written yet */
	dmn_keep_fini(&d.reg.keep); /* its files stay: the restart reads them */
	dmn_log("stopped");
	return 0;
}
