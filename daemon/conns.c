/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced's connections: accepting at the fd limit, per-uid caps, idle timeouts (DESIGN.md §6). */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"

/*
 * Connections (DESIGN.md §6; docs/protocol.md, "Connections"). Every connection costs a file
 * descriptor, so a peer that opens many and says nothing could take them all: a uid other than
 * root holds at most --user-connections; one without readers that sends nothing for
 * --idle-timeout is closed (libsluice reconnects when it next asks); and at the descriptor
 * limit the server goes on serving: the connection that has been silent longest (1 s at least,
 * no readers) makes room for a new one, else the new one is taken with a spare descriptor and
 * closed at once, else accepting pauses for a while. The listening socket never stays readable
 * with nothing taken from it (the loop would spin on it). Each refusal and close says why to
 * the client (a SHUTDOWN notice), and the log says it once a minute at most.
 */

#define DMN_SHED_AGE_MS	   1000	 /* silent this long, a connection may make room */
#define DMN_NOTICE_MS	   60000 /* a repeated event is logged at most this often */
#define DMN_BACKOFF_MIN_MS 50
#define DMN_BACKOFF_MAX_MS 1000
#define DMN_SWEEP_MAX_MS   1000 /* idle connections are looked for at least this often */

/* Whether to log an event now (its first time, or a minute after it was last said). */
static bool notice_due(struct dmn_notice *n, uint64_t now, uint64_t *ret_more)
{
	n->times++;
	if (n->said && now - n->last_ms < DMN_NOTICE_MS) {
		n->more++;
		return false;
	}
	*ret_more = n->more;
	n->more = 0;
	n->said = true;
	n->last_ms = now;
	return true;
}

/* " (N more since it was last said)", or "". */
static const char *more_text(char *buf, size_t cap, uint64_t more)
{
	if (!more)
		return "";
	snprintf(buf, cap, " (%llu more times in the last minute)", (unsigned long long)more);
	return buf;
}

void dmn_conn_say_bye(int fd, const char *why)
{
	/* what it sent and we will not read first: closed with input unread, the socket would
	   fail the client's next receive with ECONNRESET before it sees the notice */
	char junk[256];
	for (int i = 0; i < 16 && recv(fd, junk, sizeof(junk), MSG_DONTWAIT | MSG_TRUNC) > 0; i++)
		;
	struct ipc_ctl_shutdown m = { .flags = 0 };
	snprintf(m.reason, sizeof(m.reason), "%s", why);
	uint8_t buf[IPC_CTL_HDR_SIZE + IPC_CTL_TEXT_MAX + 64];
	size_t len;
	if (ipc_ctl_encode_shutdown(buf, sizeof(buf), &m, &len) == 0)
		ipc_ctl_send(fd, buf, len, NULL, 0); /* best effort: it may be gone or full */
}

void dmn_server_init(struct dmn *d)
{
	d->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void dmn_server_fini(struct dmn *d)
{
	/* how often accepting met the limit in all (a loop that spins on the listening socket
	   would meet it at every turn: the count says so, where the notice is said once) */
	if (d->fd_limit.times)
		dmn_log("accepting met the limit of open files %llu times since sluiced started",
			(unsigned long long)d->fd_limit.times);
	if (d->spare_fd >= 0)
		close(d->spare_fd);
	d->spare_fd = -1;
	free(d->uids);
	d->uids = NULL;
	d->n_uids = d->cap_uids = 0;
}

/* The count of uid's connections (added at 0 with add), or NULL (not there, or no memory). */
static unsigned *uid_conns(struct dmn *d, uid_t uid, bool add)
{
	for (size_t i = 0; i < d->n_uids; i++)
		if (d->uids[i].uid == uid)
			return &d->uids[i].n;
	if (!add)
		return NULL;
	if (d->n_uids == d->cap_uids) {
		size_t nc = d->cap_uids ? d->cap_uids * 2 : 8;
		struct dmn_uid_conns *nu = realloc(d->uids, nc * sizeof(*nu));
		if (!nu)
			return NULL;
		d->uids = nu;
		d->cap_uids = nc;
	}
	d->uids[d->n_uids] = (struct dmn_uid_conns){ .uid = uid, .n = 0 };
	return &d->uids[d->n_uids++].n;
}

void dmn_conn_uncount(struct dmn *d, const struct dmn_conn *c)
{
	if (c->uid == 0 || !d->reg.cfg.user_connections)
		return;
	uid_t uid = c->uid;
	for (size_t i = 0; i < d->n_uids; i++) {
		if (d->uids[i].uid != uid)
			continue;
		if (--d->uids[i].n == 0)
			d->uids[i] = d->uids[--d->n_uids];
		return;
	}
}

/* Stop accepting for a backoff (doubling while it goes on); dmn_server_tick resumes. */
static void pause_accepting(struct dmn *d, uint64_t now)
{
	unsigned b = d->accept_backoff_ms ? d->accept_backoff_ms * 2 : DMN_BACKOFF_MIN_MS;
	d->accept_backoff_ms = b > DMN_BACKOFF_MAX_MS ? DMN_BACKOFF_MAX_MS : b;
	d->accept_resume_ms = now + d->accept_backoff_ms;
	struct epoll_event ev = { .events = 0, .data.ptr = &d->listen_fd };
	epoll_ctl(d->epoll_fd, EPOLL_CTL_MOD, d->listen_fd, &ev);
}

/*
 * The connection without readers that has been silent longest, if it has been for
 * DMN_SHED_AGE_MS and nothing it sent waits unread (a client that just connected and spoke is
 * not taken for an idle one), or NULL.
 */
static struct dmn_conn *longest_silent(struct dmn *d, uint64_t now)
{
	struct dmn_conn *best = NULL;
	for (struct dmn_conn *c = d->conns; c; c = c->next)
		if (!c->readers && now - c->last_ms >= DMN_SHED_AGE_MS &&
		    (!best || c->last_ms < best->last_ms))
			best = c;
	/* nothing waits on it (no input, no EOF, no error): no event of this round names it */
	char b;
	if (best && !(recv(best->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) < 0 &&
		      (errno == EAGAIN || errno == EWOULDBLOCK)))
		return NULL; /* the loop will serve it */
	return best;
}

/*
 * accept4 failed with EMFILE or ENFILE (err): make room, or refuse the connection that waits
 * with the spare descriptor, or pause. dmn_conn_accept's result.
 */
static int at_fd_limit(struct dmn *d, int err)
{
	uint64_t now = dmn_now_ms(), more;
	char mb[64], why[256];
	if (err == EMFILE) {
		struct rlimit rl = { 0 };
		getrlimit(RLIMIT_NOFILE, &rl);
		snprintf(why, sizeof(why), "sluiced is at its limit of %llu open files",
			 (unsigned long long)rl.rlim_cur);
	} else {
		snprintf(why, sizeof(why), "the system is at its limit of open files");
	}
	if (notice_due(&d->fd_limit, now, &more))
		dmn_log("%s (%s): a new connection closes the one silent longest (%d s or more, "
			"no readers), or is refused; it goes on serving the others (raise "
			"LimitNOFILE= or ulimit -n)%s",
			why, err == EMFILE ? "RLIMIT_NOFILE" : "fs.file-max",
			DMN_SHED_AGE_MS / 1000, more_text(mb, sizeof(mb), more));
	struct dmn_conn *old = longest_silent(d, now);
	if (old) {
		char bye[320];
		snprintf(bye, sizeof(bye),
			 "%s: closed after %llu ms without a request, for a new "
			 "connection",
			 why, (unsigned long long)(now - old->last_ms));
		dmn_conn_say_bye(old->fd, bye);
		dmn_conn_close(d, old);
		return 1;
	}
	if (d->spare_fd < 0) /* another thread took it, or /dev/null could not be opened */
		d->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (d->spare_fd >= 0) {
		close(d->spare_fd);
		int fd = accept4(d->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		int e = errno;
		if (fd >= 0) {
			char bye[320];
			snprintf(bye, sizeof(bye), "%s: try again later", why);
			dmn_conn_say_bye(fd, bye);
			close(fd);
		}
		d->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd < 0 && (e == EAGAIN || e == EWOULDBLOCK))
			return 0;
		if (fd >= 0 && d->spare_fd >= 0)
			return 1;
	}
	pause_accepting(d, now);
	return 0;
}

int dmn_conn_accept(struct dmn *d)
{
	if (d->accept_resume_ms)
		return 0; /* paused */
	int fd = accept4(d->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (fd < 0) {
		int e = errno;
		if (e == EAGAIN || e == EWOULDBLOCK)
			return 0;
		if (e == EINTR || e == ECONNABORTED || e == EPROTO || e == EPERM)
			return 1; /* that one is gone (or refused by a security module): go on */
		if (e == EMFILE || e == ENFILE)
			return at_fd_limit(d, e);
		uint64_t now = dmn_now_ms(), more;
		char mb[64];
		if (notice_due(&d->accept_error, now, &more))
			dmn_log("accept: %s: accepting pauses for a while%s", strerror(e),
				more_text(mb, sizeof(mb), more));
		pause_accepting(d, now); /* ENOBUFS, ENOMEM: it may pass */
		return 0;
	}
	d->accept_backoff_ms = 0;
	struct dmn_conn *c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return 1;
	}
	c->fd = fd;
	c->last_ms = dmn_now_ms();
	int gr = ipc_ctl_peer_cred(fd, &c->uid, &c->gid, &c->pid);
	if (gr == 0) /* an older kernel: no supplementary groups, so no rights through them */
		gr = ipc_ctl_peer_groups(fd, &c->groups, &c->n_groups) == -ENOMEM ? -ENOMEM : 0;
	if (gr < 0) {
		close(fd);
		free(c);
		return 1;
	}
	unsigned cap = d->reg.cfg.user_connections;
	unsigned *n = c->uid != 0 && cap ? uid_conns(d, c->uid, true) : NULL;
	if (c->uid != 0 && cap && !n) { /* out of memory: it could not be counted */
		close(fd);
		free(c->groups);
		free(c);
		return 1;
	}
	if (n && *n >= cap) {
		uint64_t more;
		char mb[64], bye[256];
		snprintf(bye, sizeof(bye),
			 "uid %u has its limit of %u connections to sluiced (--user-connections)",
			 (unsigned)c->uid, cap);
		if (notice_due(&d->over_cap, c->last_ms, &more))
			dmn_log("%s: a connection of pid %d refused%s", bye, (int)c->pid,
				more_text(mb, sizeof(mb), more));
		dmn_conn_say_bye(fd, bye);
		close(fd);
		free(c->groups);
		free(c);
		return 1;
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
	if (epoll_ctl(d->epoll_fd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		close(fd);
		free(c->groups);
		free(c);
		return 1;
	}
	if (n)
		++*n;
	c->next = d->conns;
	d->conns = c;
	return 1;
}

/* Close the connections without readers that sent nothing for --idle-timeout. */
static void close_idle(struct dmn *d, uint64_t now)
{
	uint64_t limit = (uint64_t)d->reg.cfg.idle_timeout_s * 1000;
	for (struct dmn_conn *c = d->conns, *next; c; c = next) {
		next = c->next;
		if (c->readers || now - c->last_ms < limit)
			continue;
		uint64_t more;
		char mb[64], bye[160];
		snprintf(bye, sizeof(bye),
			 "no request for %u s and no reader attached: connection closed "
			 "(--idle-timeout)",
			 d->reg.cfg.idle_timeout_s);
		if (notice_due(&d->idle, now, &more))
			dmn_log("client pid %d (uid %u): %s%s", (int)c->pid, (unsigned)c->uid, bye,
				more_text(mb, sizeof(mb), more));
		dmn_conn_say_bye(c->fd, bye);
		dmn_conn_close(d, c);
	}
}

void dmn_server_tick(struct dmn *d, uint64_t now)
{
	if (d->accept_resume_ms && now >= d->accept_resume_ms) {
		d->accept_resume_ms = 0;
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &d->listen_fd };
		epoll_ctl(d->epoll_fd, EPOLL_CTL_MOD, d->listen_fd, &ev);
	}
	unsigned t = d->reg.cfg.idle_timeout_s;
	if (t && now >= d->next_sweep_ms) {
		/* a quarter of the timeout late at most, and not a walk of every connection on
		   every tick */
		uint64_t every = (uint64_t)t * 1000 / 4;
		d->next_sweep_ms = now + (every < DMN_SWEEP_MAX_MS ? every : DMN_SWEEP_MAX_MS);
		close_idle(d, now);
	}
}
