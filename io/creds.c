/* SPDX-License-Identifier: Apache-2.0 */
#include "creds.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

int io_creds_copy(struct io_creds *dst, const struct io_creds *src)
{
	*dst = *src;
	dst->groups = NULL;
	if (!src->n_groups)
		return 0;
	dst->groups = malloc(src->n_groups * sizeof(gid_t));
	if (!dst->groups) {
		dst->n_groups = 0;
		return -ENOMEM;
	}
	memcpy(dst->groups, src->groups, src->n_groups * sizeof(gid_t));
	return 0;
}

void io_creds_clear(struct io_creds *c)
{
	free(c->groups);
	c->groups = NULL;
	c->n_groups = 0;
}

/* The process's own supplementary groups, as they were when first needed (every thread's
   outside io_creds_enter: nothing here changes them for the process). */
static struct {
	pthread_once_t once;
	int n; /* -1: unknown */
	gid_t *list;
} own = { .once = PTHREAD_ONCE_INIT, .n = -1 };

static void own_init(void)
{
	int n = getgroups(0, NULL);
	gid_t *l = n > 0 ? malloc((size_t)n * sizeof(gid_t)) : NULL;
	if (n > 0 && l && (n = getgroups(n, l)) >= 0) {
		own.list = l;
		own.n = n;
		return;
	}
	free(l);
	own.n = n == 0 ? 0 : -1;
}

static bool is_own(const struct io_creds *c)
{
	return !c || (c->uid == geteuid() && c->gid == getegid());
}

static bool has_setid_caps(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) < 0)
		return false;
	uint32_t need = (1u << CAP_SETUID) | (1u << CAP_SETGID);
	return (d[0].effective & need) == need;
}

bool io_creds_usable(const struct io_creds *c, char *msg, size_t msg_cap)
{
	if (is_own(c) || has_setid_caps())
		return true;
	snprintf(msg, msg_cap,
		 "sluiced runs as uid %u without CAP_SETUID and CAP_SETGID, so it cannot read "
		 "files with the rights of uid %u (run it as root, as its systemd unit does, or "
		 "as that user)",
		 (unsigned)geteuid(), (unsigned)c->uid);
	return false;
}

/* setfsuid/setfsgid report no error: ask again with an id that changes nothing (-1). */
static bool fs_ids_are(uid_t uid, gid_t gid)
{
	return (uid_t)setfsuid((uid_t)-1) == uid && (gid_t)setfsgid((gid_t)-1) == gid;
}

void io_creds_leave(const struct io_creds *c)
{
	if (is_own(c))
		return;
	setfsuid(geteuid()); /* first: root's file capabilities come back with fsuid 0 */
	setfsgid(getegid());
	if (own.n >= 0)
		syscall(SYS_setgroups, (size_t)own.n,
			own.list); /* this thread only, unlike glibc's */
}

int io_creds_enter(const struct io_creds *c)
{
	if (is_own(c))
		return 0;
	pthread_once(&own.once, own_init);
	if (own.n < 0)
		return -EPERM; /* could not be put back */
	/* the raw system call: glibc's setgroups would change every thread's */
	if (syscall(SYS_setgroups, c->n_groups, c->groups) < 0)
		return -EPERM;
	setfsgid(c->gid);
	setfsuid(c->uid);
	if (!fs_ids_are(c->uid, c->gid)) {
		io_creds_leave(c);
		return -EPERM;
	}
	return 0;
}

int io_creds_open(const struct io_creds *c, const char *path, int flags)
{
	int r = io_creds_enter(c);
	if (r < 0)
		return r;
	int fd = open(path, flags);
	int e = errno;
	io_creds_leave(c);
	return fd < 0 ? -e : fd;
}

int io_creds_open_file(const struct io_creds *c, const char *path, int flags, struct stat *ret_st)
{
	struct stat st;
	int fd = io_creds_open(c, path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | flags);
	if (fd < 0)
		return fd;
	int fl;
	if (fstat(fd, &st) < 0 || (fl = fcntl(fd, F_GETFL)) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	}
	if (fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	if (ret_st)
		*ret_st = st;
	return fd;
}
