/* SPDX-License-Identifier: Apache-2.0 */
/* What sluiced reads from its environment: systemd's variables, the socket path, cgroups. */
#ifndef SLUICE_DAEMON_SERVICE_H
#define SLUICE_DAEMON_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

/*
 * Pure functions of the values main.c reads (getenv, /proc/self/cgroup), so that the unit
 * tests run every branch (tests/unit/daemon/test_service.c). An unset variable is NULL; an
 * empty one counts as unset.
 */

/* The variables the socket path depends on. */
struct dmn_sock_env {
	const char *sluice_socket;     /* $SLUICE_SOCKET */
	const char *runtime_directory; /* $RUNTIME_DIRECTORY (systemd; ':' between several) */
	const char *xdg_runtime_dir;   /* $XDG_RUNTIME_DIR (a user's session) */
};

/* Where dmn_socket_path found the path. */
enum dmn_sock_from {
	DMN_SOCK_OPTION,      /* --socket */
	DMN_SOCK_ENV,	      /* $SLUICE_SOCKET */
	DMN_SOCK_RUNTIME_DIR, /* the first of $RUNTIME_DIRECTORY's directories */
	DMN_SOCK_XDG,	      /* $XDG_RUNTIME_DIR/sluice/: a directory sluiced makes, 0700 */
	DMN_SOCK_SYSTEM,      /* /run/sluice/: a directory sluiced makes, 0755 */
};

#define DMN_SYSTEM_SOCKET "/run/sluice/sluice.sock"

/*
 * The control socket's path (README, "The service"): option (--socket), else $SLUICE_SOCKET,
 * else the first directory $RUNTIME_DIRECTORY lists + "/sluice.sock", else
 * $XDG_RUNTIME_DIR/sluice/sluice.sock, else /run/sluice/sluice.sock. libsluice looks in the
 * same order but for the last two (the host's daemon first). The path is written to buf;
 * returns where it came from (DMN_SOCK_XDG, DMN_SOCK_SYSTEM: the caller makes the directory),
 * or -ENAMETOOLONG when it does not fit in cap or in a sockaddr_un (buf unspecified).
 */
int dmn_socket_path(const char *option, const struct dmn_sock_env *env, char *buf, size_t cap);

/*
 * The first directory of a systemd list such as $RUNTIME_DIRECTORY or $STATE_DIRECTORY
 * (':' between them) into buf. 0; -ENOENT when list is NULL or its first is empty;
 * -ENAMETOOLONG when it does not fit in cap.
 */
int dmn_first_dir(const char *list, char *buf, size_t cap);

/*
 * How often to send systemd's WATCHDOG=1, in ms: half of $WATCHDOG_USEC (at least 1 ms), or
 * 0 (none) when it is unset, not a number or 0, or when $WATCHDOG_PID is set and names a
 * process other than self (a child that inherited the environment).
 */
uint64_t dmn_watchdog_ms(const char *usec, const char *pid, long self);

/*
 * Whether systemd passed this process one socket: $LISTEN_PID is self and $LISTEN_FDS is 1
 * (sd_listen_fds(3); sluiced.socket passes one).
 */
bool dmn_listen_fds_ours(const char *pid, const char *fds, long self);

/*
 * $NOTIFY_SOCKET as an address for sendto: a path, or an abstract name ('@' first). 0, or
 * -EINVAL (unset, empty, too long). *ret_sa and *ret_len written on success only.
 */
int dmn_notify_addr(const char *path, struct sockaddr_un *ret_sa, socklen_t *ret_len);

/* A cgroup v2 limit file's text (memory.max): its number, or UINT64_MAX ("max", garbage). */
uint64_t dmn_cgroup_parse_max(const char *text);
/* cpu.max's text ("QUOTA PERIOD"): thousandths of a core, or UINT64_MAX ("max PERIOD"). */
uint64_t dmn_cgroup_parse_cpu_max(const char *text);

/*
 * The smallest value of file (parsed by parse) over the cgroup v2 path that proc_cgroup (the
 * text of /proc/self/cgroup) names, under root (/sys/fs/cgroup): the process's cgroup and each
 * parent below the root ("/a/b": /a/b and /a). A process whose cgroup reads "/" (a container's
 * cgroup namespace) reads root's own file: there it is the container's limit. UINT64_MAX: none
 * found (cgroup v1, no limit).
 */
uint64_t dmn_cgroup_min(const char *proc_cgroup, const char *root, const char *file,
			uint64_t (*parse)(const char *text));

/*
 * cgroup v1 (issue 37: many hosts mount only v1 controllers): the smallest
 * memory.limit_in_bytes over the memory hierarchy's path that proc_cgroup names, under root
 * (/sys/fs/cgroup, where each hierarchy is mounted by its controllers' names), read as
 * dmn_cgroup_min reads v2's; UINT64_MAX for none or "no limit" (the kernel's 2^63 - 4096).
 */
uint64_t dmn_cgroup_v1_memory(const char *proc_cgroup, const char *root);
/* memory.limit_in_bytes's text: its number, UINT64_MAX for none or no limit. */
uint64_t dmn_cgroup_parse_v1_limit(const char *text);
/*
 * The same for the cpu hierarchy: cpu.cfs_quota_us / cpu.cfs_period_us in thousandths of a
 * core, the smallest over the path; UINT64_MAX for none or no quota (-1).
 */
uint64_t dmn_cgroup_v1_cpu(const char *proc_cgroup, const char *root);

#endif
