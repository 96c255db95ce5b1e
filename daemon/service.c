/* SPDX-License-Identifier: Apache-2.0 */
/* What sluiced reads from its environment: systemd's variables, the socket path, cgroups. */
#include "service.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool set(const char *v)
{
	return v && *v;
}

int dmn_socket_path(const char *option, const struct dmn_sock_env *env, char *buf, size_t cap)
{
	const size_t max = sizeof(((struct sockaddr_un *)0)->sun_path) - 1;
	int from, n;
	size_t first;
	if (option) {
		from = DMN_SOCK_OPTION;
		n = snprintf(buf, cap, "%s", option);
	} else if (set(env->sluice_socket)) {
		from = DMN_SOCK_ENV;
		n = snprintf(buf, cap, "%s", env->sluice_socket);
	} else if (set(env->runtime_directory) &&
		   (first = strcspn(env->runtime_directory, ":")) > 0) {
		/* systemd: several directories are separated by ':'; ours is the first (as
		   libsluice reads it) */
		from = DMN_SOCK_RUNTIME_DIR;
		n = snprintf(buf, cap, "%.*s/sluice.sock", (int)first, env->runtime_directory);
	} else if (set(env->xdg_runtime_dir)) {
		from = DMN_SOCK_XDG;
		n = snprintf(buf, cap, "%s/sluice/sluice.sock", env->xdg_runtime_dir);
	} else {
		from = DMN_SOCK_SYSTEM;
		n = snprintf(buf, cap, "%s", DMN_SYSTEM_SOCKET);
	}
	if (n < 0 || (size_t)n >= cap || (size_t)n > max)
		return -ENAMETOOLONG;
	return from;
}

int dmn_first_dir(const char *list, char *buf, size_t cap)
{
	size_t n = list ? strcspn(list, ":") : 0;
	if (!n)
		return -ENOENT;
	if (n >= cap)
		return -ENAMETOOLONG;
	memcpy(buf, list, n);
	buf[n] = '\0';
	return 0;
}

/* A decimal number and nothing else, or -EINVAL. */
static int whole_number(const char *s, unsigned long long *ret_v)
{
	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	*ret_v = v;
	return 0;
}

uint64_t dmn_watchdog_ms(const char *usec, const char *pid, long self)
{
	unsigned long long us, p;
	if (whole_number(usec, &us) < 0 || us == 0)
		return 0;
	if (set(pid) && (whole_number(pid, &p) < 0 || p != (unsigned long long)self))
		return 0;
	uint64_t ms = us / 2000;
	return ms ? ms : 1;
}

bool dmn_listen_fds_ours(const char *pid, const char *fds, long self)
{
	unsigned long long p, n;
	return whole_number(pid, &p) == 0 && p == (unsigned long long)self &&
	       whole_number(fds, &n) == 0 && n == 1;
}

int dmn_notify_addr(const char *path, struct sockaddr_un *ret_sa, socklen_t *ret_len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t len = path ? strlen(path) : 0;
	if (len < 2 || len >= sizeof(sa.sun_path) || (path[0] != '/' && path[0] != '@'))
		return -EINVAL;
	memcpy(sa.sun_path, path, len);
	if (sa.sun_path[0] == '@')
		sa.sun_path[0] = '\0'; /* the abstract namespace: the length says where it ends */
	*ret_sa = sa;
	*ret_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
	return 0;
}

uint64_t dmn_cgroup_parse_max(const char *text)
{
	if (!text || *text < '0' || *text > '9')
		return UINT64_MAX;
	errno = 0;
	unsigned long long v = strtoull(text, NULL, 10);
	return errno ? UINT64_MAX : v;
}

uint64_t dmn_cgroup_parse_cpu_max(const char *text)
{
	unsigned long long quota, period;
	if (!text || sscanf(text, "%llu %llu", &quota, &period) != 2 || !period ||
	    quota > UINT64_MAX / 1000)
		return UINT64_MAX;
	return quota * 1000 / period;
}

/* The first line of a small file, or NULL. */
static char *first_line(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return NULL;
	char *r = fgets(buf, (int)cap, f);
	fclose(f);
	return r;
}

/* What one cgroup directory says: its limit, or UINT64_MAX. */
typedef uint64_t (*dir_reader)(const char *dir, const void *ctx);

struct file_parse {
	const char *file;
	uint64_t (*parse)(const char *text);
};

static uint64_t read_file_in(const char *dir, const void *ctx)
{
	const struct file_parse *fp = ctx;
	char path[2200], text[128];
	int w = snprintf(path, sizeof(path), "%s/%s", dir, fp->file);
	if (w <= 0 || (size_t)w >= sizeof(path) || !first_line(path, text, sizeof(text)))
		return UINT64_MAX;
	return fp->parse(text);
}

/*
 * The smallest of what read says of base + cg and of each parent below the first level ("/a/b":
 * /a/b and /a; "/" itself, a cgroup namespace's own, is read too).
 */
static uint64_t walk_min(const char *base, const char *cg_path, size_t cg_len, dir_reader read,
			 const void *ctx)
{
	uint64_t lim = UINT64_MAX;
	char cg[1024], dir[2048];
	if (cg_len >= sizeof(cg))
		return lim;
	memcpy(cg, cg_path, cg_len);
	cg[cg_len] = '\0';
	for (char *slash;; *slash = '\0') { /* it, then each parent */
		int w = snprintf(dir, sizeof(dir), "%s%s", base, strcmp(cg, "/") ? cg : "");
		if (w > 0 && (size_t)w < sizeof(dir)) {
			uint64_t v = read(dir, ctx);
			if (v < lim)
				lim = v;
		}
		slash = strrchr(cg, '/');
		/* up to the first level: the host's root cgroup has no limits */
		if (!slash || slash == cg)
			break;
	}
	return lim;
}

uint64_t dmn_cgroup_min(const char *proc_cgroup, const char *root, const char *file,
			uint64_t (*parse)(const char *text))
{
	uint64_t lim = UINT64_MAX;
	struct file_parse fp = { file, parse };
	for (const char *line = proc_cgroup; line && *line;) {
		size_t n = strcspn(line, "\n");
		/* "0::/system.slice/sluiced.service": v2; v1 controllers' lines are not read */
		if (n > 3 && strncmp(line, "0::", 3) == 0) {
			uint64_t v = walk_min(root, line + 3, n - 3, read_file_in, &fp);
			if (v < lim)
				lim = v;
		}
		line += n + (line[n] == '\n');
	}
	return lim;
}

/*
 * Each v1 hierarchy of proc_cgroup that holds controller ("4:memory:/a" or "2:cpu,cpuacct:/a"):
 * the smallest of what read says over its path, under root/<its controllers> (as mounted:
 * "cpu,cpuacct"), or root/<controller> (the usual symlink) when that does not exist.
 */
static uint64_t v1_min(const char *proc_cgroup, const char *root, const char *controller,
		       dir_reader read, const void *ctx)
{
	uint64_t lim = UINT64_MAX;
	size_t cl = strlen(controller);
	for (const char *line = proc_cgroup; line && *line;) {
		size_t n = strcspn(line, "\n");
		const char *c1 = memchr(line, ':', n);
		const char *c2 = c1 ? memchr(c1 + 1, ':', n - (size_t)(c1 + 1 - line)) : NULL;
		bool has = false;
		if (c2 &&
		    c2 > c1 + 1) { /* "hierarchy-id:controllers:path", controllers not empty */
			for (const char *c = c1 + 1; c < c2;) {
				size_t k = strcspn(c, ",:");
				if (k == cl && strncmp(c, controller, cl) == 0)
					has = true;
				c += k + (c[k] == ',');
			}
		}
		if (has) {
			char base[1024];
			struct stat st;
			int w = snprintf(base, sizeof(base), "%s/%.*s", root, (int)(c2 - c1 - 1),
					 c1 + 1);
			if (w > 0 && (size_t)w < sizeof(base) && stat(base, &st) != 0)
				w = snprintf(base, sizeof(base), "%s/%s", root, controller);
			if (w > 0 && (size_t)w < sizeof(base)) {
				const char *path = c2 + 1;
				uint64_t v =
					walk_min(base, path, n - (size_t)(path - line), read, ctx);
				if (v < lim)
					lim = v;
			}
		}
		line += n + (line[n] == '\n');
	}
	return lim;
}

uint64_t dmn_cgroup_parse_v1_limit(const char *text)
{
	uint64_t v = dmn_cgroup_parse_max(text);
	/* "no limit" reads as the page counter's maximum, 2^63 rounded down to a page */
	return v >= (1ull << 62) ? UINT64_MAX : v;
}

uint64_t dmn_cgroup_v1_memory(const char *proc_cgroup, const char *root)
{
	struct file_parse fp = { "memory.limit_in_bytes", dmn_cgroup_parse_v1_limit };
	return v1_min(proc_cgroup, root, "memory", read_file_in, &fp);
}

/* cpu.cfs_quota_us over cpu.cfs_period_us in dir: thousandths of a core (-1: no limit). */
static uint64_t read_cfs(const char *dir, const void *ctx)
{
	char path[2200], q[64], p[64];
	(void)ctx;
	snprintf(path, sizeof(path), "%s/cpu.cfs_quota_us", dir);
	if (!first_line(path, q, sizeof(q)))
		return UINT64_MAX;
	snprintf(path, sizeof(path), "%s/cpu.cfs_period_us", dir);
	if (!first_line(path, p, sizeof(p)))
		return UINT64_MAX;
	char both[130];
	snprintf(both, sizeof(both), "%s %s", q, p); /* "QUOTA PERIOD", as v2's cpu.max */
	return q[0] == '-' ? UINT64_MAX : dmn_cgroup_parse_cpu_max(both);
}

uint64_t dmn_cgroup_v1_cpu(const char *proc_cgroup, const char *root)
{
	return v1_min(proc_cgroup, root, "cpu", read_cfs, NULL);
}
