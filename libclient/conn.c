/* SPDX-License-Identifier: Apache-2.0 */
/* libsluice: the control connection to sluiced (socket path, HELLO, requests, notices). */
#include "client_internal.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int lc_fail(struct sluice_error *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (err) {
		err->code = code;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		va_end(ap);
	}
	return code;
}

/* ---- the socket path ---- */

#define LC_SYSTEM_SOCKET "/run/sluice/sluice.sock"

int lc_socket_path(const char *socket_path, char *buf, size_t cap, struct sluice_error *err)
{
	const char *env;
	int n;

	if (socket_path) {
		n = snprintf(buf, cap, "%s", socket_path);
	} else if ((env = getenv("SLUICE_SOCKET")) && env[0]) {
		n = snprintf(buf, cap, "%s", env);
	} else if ((env = getenv("RUNTIME_DIRECTORY")) && env[0] && env[0] != ':') {
		/* systemd: a list separated by ':' when there are several; ours is the first
		   (an empty first one counts as unset, as sluiced takes it) */
		const char *colon = strchr(env, ':');
		int len = colon ? (int)(colon - env) : (int)strlen(env);

		n = snprintf(buf, cap, "%.*s/sluice.sock", len, env);
	} else if (access(LC_SYSTEM_SOCKET, F_OK) == 0 || !(env = getenv("XDG_RUNTIME_DIR")) ||
		   !env[0]) {
		n = snprintf(buf, cap, "%s", LC_SYSTEM_SOCKET);
	} else {
		n = snprintf(buf, cap, "%s/sluice/sluice.sock", env);
	}
	if (n < 0 || (size_t)n >= cap || n == 0)
		return lc_fail(err, -ENAMETOOLONG,
			       "socket path \"%.200s\": empty or longer than the %zu bytes a Unix "
			       "socket address holds",
			       buf, cap - 1);
	return 0;
}

int lc_spec_dir(const char *dir, const char *what, char **ret, struct sluice_error *err)
{
	char *p = dir && dir[0] ? realpath(dir, NULL) : getcwd(NULL, 0);

	if (!p)
		return lc_fail(err, -errno, "%s: the spec's directory %s: %s", what,
			       dir && dir[0] ? dir : "(the working directory)", strerror(errno));
	if (strlen(p) > IPC_CTL_DIR_MAX) {
		free(p);
		return lc_fail(err, -ENAMETOOLONG,
			       "%s: the spec's directory is longer than %d bytes", what,
			       IPC_CTL_DIR_MAX);
	}
	*ret = p;
	return 0;
}

/* ---- connecting ---- */

uint32_t lc_req_id_locked(struct sluice_client *c)
{
	if (++c->next_req == 0)
		c->next_req = 1; /* 0 is the notices' */
	return c->next_req;
}

void lc_close_locked(struct sluice_client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Remember a SHUTDOWN notice. */
static void take_shutdown(struct sluice_client *c, const struct ipc_ctl_msg *m)
{
	struct ipc_ctl_shutdown s;

	c->shutdown_seen = true;
	if (ipc_ctl_decode_shutdown(m, &s, NULL, 0) == 0) {
		c->shutdown_flags = s.flags;
		memcpy(c->shutdown_reason, s.reason, sizeof(c->shutdown_reason));
	} else {
		c->shutdown_flags = 0;
		c->shutdown_reason[0] = '\0';
	}
}

/*
 * The server closed the connection with a request of ours unread: Linux then fails the next
 * receive with ECONNRESET, ahead of what the server had sent. Take a SHUTDOWN notice from that
 * (why it closed: idle, over a limit), so that the error can say why.
 */
static void take_last_words(struct sluice_client *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN };

	for (int i = 0; i < 8 && poll(&p, 1, 0) == 1 && (p.revents & POLLIN); i++) {
		int fds[IPC_CTL_MAX_FDS];
		size_t nfds = 0;
		struct ipc_ctl_msg m;
		char emsg[64];
		int n = ipc_ctl_recv(c->fd, c->rbuf, IPC_CTL_MAX_MSG, fds, IPC_CTL_MAX_FDS, &nfds);

		for (size_t k = 0; k < nfds; k++)
			close(fds[k]);
		if (n <= 0)
			break;
		if (ipc_ctl_msg_parse(c->rbuf, (size_t)n, &m, emsg, sizeof(emsg)) == 0 &&
		    m.type == IPC_CTL_SHUTDOWN) {
			take_shutdown(c, &m);
			break;
		}
	}
}

/*
 * Receive one message into c->rbuf, waiting up to timeout_ms (< 0: no limit). 0 and *ret_msg,
 * -ECONNRESET (EOF: the socket is closed here), -ETIMEDOUT, -EPROTONOSUPPORT (the header of
 * another version; *ret_msg is filled), -EBADMSG / -EMSGSIZE (the socket is closed here).
 */
static int recv_msg(struct sluice_client *c, int timeout_ms, struct ipc_ctl_msg *ret_msg, int *fds,
		    size_t max_fds, size_t *ret_nfds, char *emsg, size_t cap)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	int rc, n;

	do
		n = poll(&p, 1, timeout_ms);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		rc = -errno;
		snprintf(emsg, cap, "poll: %s", strerror(-rc));
		return rc;
	}
	if (n == 0) {
		snprintf(emsg, cap, "sluiced did not answer within %d ms", timeout_ms);
		return -ETIMEDOUT;
	}
	rc = ipc_ctl_recv(c->fd, c->rbuf, IPC_CTL_MAX_MSG, fds, max_fds, ret_nfds);
	if (rc == -ECONNRESET)
		take_last_words(c);
	if (rc == 0 || rc == -ECONNRESET || rc == -EPIPE) {
		lc_close_locked(c);
		snprintf(emsg, cap, "sluiced closed the connection%s%.200s",
			 c->shutdown_seen && c->shutdown_reason[0] ? ": " : "",
			 c->shutdown_seen ? c->shutdown_reason : "");
		return -ECONNRESET;
	}
	if (rc < 0) {
		snprintf(emsg, cap, "receiving: %s", strerror(-rc));
		lc_close_locked(c);
		return rc;
	}
	rc = ipc_ctl_msg_parse(c->rbuf, (size_t)rc, ret_msg, emsg, cap);
	if (rc < 0 && rc != -EPROTONOSUPPORT) {
		/* Nothing can be trusted after a malformed message: drop the connection. */
		for (size_t i = 0; i < *ret_nfds; i++)
			close(fds[i]);
		lc_close_locked(c);
	}
	return rc;
}

/* The text of an ERROR reply, decoded from a message that parsed (or had another version). */
static int take_error(const struct ipc_ctl_msg *m, const char *what, struct sluice_error *err)
{
	struct ipc_ctl_error e;
	char emsg[256];
	int rc = ipc_ctl_decode_error(m, &e, emsg, sizeof(emsg));

	if (rc < 0)
		return lc_fail(err, -EBADMSG, "%s: a malformed ERROR reply: %s", what, emsg);
	return lc_fail(err, e.code, "%s: %s", what, e.text[0] ? e.text : sluice_strerror(e.code));
}

int lc_call_locked(struct sluice_client *c, size_t len, uint32_t req_id, uint16_t want,
		   struct ipc_ctl_msg *ret_msg, int *fds, size_t max_fds, size_t *ret_nfds,
		   const char *what, struct sluice_error *err)
{
	int64_t deadline = now_ms() + LC_REPLY_TIMEOUT_MS;
	char emsg[256];
	int rc;

	if (c->fd < 0)
		return lc_fail(err, -ECONNRESET, "%s: not connected to sluiced", what);
	rc = ipc_ctl_send(c->fd, c->sbuf, len, NULL, 0);
	if (rc < 0) {
		if (rc == -EPIPE || rc == -ECONNRESET) {
			/* it may have said why first (a SHUTDOWN notice: idle, over a limit) */
			lc_poll_locked(c, 0);
			lc_close_locked(c);
			return lc_fail(err, -ECONNRESET,
				       "%s: sluiced closed the connection%s%.200s", what,
				       c->shutdown_seen && c->shutdown_reason[0] ? ": " : "",
				       c->shutdown_seen ? c->shutdown_reason : "");
		}
		return lc_fail(err, rc, "%s: sending: %s", what, strerror(-rc));
	}
	for (;;) {
		struct ipc_ctl_msg m;
		int lfds[IPC_CTL_MAX_FDS];
		size_t nfds = 0;
		int64_t left = deadline - now_ms();

		rc = recv_msg(c, left > 0 ? (int)left : 0, &m, lfds, IPC_CTL_MAX_FDS, &nfds, emsg,
			      sizeof(emsg));
		if (rc == -EPROTONOSUPPORT) {
			struct ipc_ctl_error e;

			/* A daemon of another version: its ERROR is readable (frozen), no more. */
			for (size_t i = 0; i < nfds; i++)
				close(lfds[i]);
			lc_close_locked(c);
			if (m.type == IPC_CTL_ERROR && ipc_ctl_decode_error(&m, &e, NULL, 0) == 0 &&
			    e.code == -EPROTONOSUPPORT && e.text[0])
				return lc_fail(err, -EPROTONOSUPPORT, "%s: %s", what, e.text);
			return lc_fail(err, -EPROTONOSUPPORT, "%s: %s", what, emsg);
		}
		if (rc == -ETIMEDOUT) {
			/* A late reply would be taken for the next request's: start over. */
			lc_close_locked(c);
			return lc_fail(err, -ETIMEDOUT, "%s: %s", what, emsg);
		}
		if (rc < 0)
			return lc_fail(err, rc, "%s: %s", what, emsg);
		if (m.type == IPC_CTL_SHUTDOWN) {
			take_shutdown(c, &m);
			continue;
		}
		if (m.req_id != req_id || (m.type != want && m.type != IPC_CTL_ERROR)) {
			for (size_t i = 0; i < nfds; i++)
				close(lfds[i]);
			if (m.req_id != req_id && m.req_id != 0 && m.req_id < req_id)
				continue; /* a stale reply (cannot happen with our timeouts) */
			lc_close_locked(c);
			return lc_fail(err, -EBADMSG,
				       "%s: sluiced answered %s (req %u), expected %s (req %u)",
				       what, ipc_ctl_type_name(m.type), m.req_id,
				       ipc_ctl_type_name(want), req_id);
		}
		if (m.type == IPC_CTL_ERROR) {
			for (size_t i = 0; i < nfds; i++)
				close(lfds[i]);
			return take_error(&m, what, err);
		}
		if (nfds > max_fds) {
			for (size_t i = 0; i < nfds; i++)
				close(lfds[i]);
			return lc_fail(err, -EBADMSG, "%s: %s carried %zu fds, expected %zu", what,
				       ipc_ctl_type_name(m.type), nfds, max_fds);
		}
		for (size_t i = 0; i < nfds; i++)
			fds[i] = lfds[i];
		*ret_nfds = nfds;
		*ret_msg = m;
		return 0;
	}
}

bool lc_poll_locked(struct sluice_client *c, int wait_ms)
{
	int first = wait_ms;

	while (c->fd >= 0 && !c->shutdown_seen) {
		struct ipc_ctl_msg m;
		int fds[IPC_CTL_MAX_FDS];
		size_t nfds = 0;
		char emsg[64];
		int rc = recv_msg(c, first, &m, fds, IPC_CTL_MAX_FDS, &nfds, emsg, sizeof(emsg));

		first = 0;
		if (rc == -ETIMEDOUT)
			break;
		for (size_t i = 0; i < nfds; i++)
			close(fds[i]);
		if (rc < 0) {
			lc_close_locked(c);
			break;
		}
		if (m.type == IPC_CTL_SHUTDOWN)
			take_shutdown(c, &m);
		/* Anything else unasked is a stale reply: dropped. */
	}
	return c->fd >= 0 && !c->shutdown_seen;
}

/* HELLO on a fresh socket. */
static int hello_locked(struct sluice_client *c, struct sluice_error *err)
{
	struct ipc_ctl_hello h = { .version = IPC_CTL_VERSION, .pid = (uint32_t)getpid() };
	struct ipc_ctl_hello_ok ok;
	struct ipc_ctl_msg m;
	uint32_t req = lc_req_id_locked(c);
	size_t len, nfds = 0;
	char emsg[256];
	int rc;

	memcpy(h.client, "libsluice", sizeof("libsluice"));
	rc = ipc_ctl_encode_hello(c->sbuf, IPC_CTL_MAX_MSG, req, &h, &len);
	if (rc < 0)
		return lc_fail(err, rc, "hello: encoding: %s", strerror(-rc));
	rc = lc_call_locked(c, len, req, IPC_CTL_HELLO_OK, &m, NULL, 0, &nfds, "connect", err);
	if (rc < 0)
		return rc;
	rc = ipc_ctl_decode_hello_ok(&m, &ok, emsg, sizeof(emsg));
	if (rc < 0) {
		lc_close_locked(c);
		return lc_fail(err, rc, "connect: %s", emsg);
	}
	if (ok.version != IPC_CTL_VERSION) {
		lc_close_locked(c);
		return lc_fail(err, -EPROTONOSUPPORT,
			       "connect: sluiced speaks protocol version %u, libsluice speaks %d",
			       ok.version, IPC_CTL_VERSION);
	}
	c->hello = ok;
	return 0;
}

int lc_open_locked(struct sluice_client *c, struct sluice_error *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, rc;

	lc_close_locked(c);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return lc_fail(err, -errno, "connect: socket: %s", strerror(errno));
	memcpy(sa.sun_path, c->path, sizeof(sa.sun_path));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		rc = -errno;
		close(fd);
		return lc_fail(err, rc, "connect %s: %s%s", c->path, strerror(-rc),
			       rc == -ENOENT || rc == -ECONNREFUSED ? " (is sluiced running?)"
								    : "");
	}
	c->fd = fd;
	c->shutdown_seen = false;
	c->shutdown_flags = 0;
	c->shutdown_reason[0] = '\0';
	rc = hello_locked(c, err);
	if (rc < 0) {
		lc_close_locked(c);
		return rc;
	}
	/* Readers compare their gen with it without the lock. */
	atomic_fetch_add_explicit(&c->gen, 1, memory_order_relaxed);
	return 0;
}

int lc_ensure_locked(struct sluice_client *c, struct sluice_error *err)
{
	if (c->fd >= 0)
		lc_poll_locked(c, 0);
	if (c->fd >= 0 && !c->shutdown_seen)
		return 0;
	return lc_open_locked(c, err);
}

/* ---- the public calls of a connection ---- */

int sluice_connect(const char *socket_path, struct sluice_client **ret_client,
		   struct sluice_error *err)
{
	struct sluice_client *c;
	int rc;

	if (!ret_client)
		return lc_fail(err, -EINVAL, "connect: ret_client is NULL");
	c = calloc(1, sizeof(*c));
	if (!c)
		return lc_fail(err, -ENOMEM, "connect: out of memory");
	c->fd = -1;
	rc = lc_socket_path(socket_path, c->path, sizeof(c->path), err);
	if (rc < 0)
		goto fail;
	c->sbuf = malloc(IPC_CTL_MAX_MSG);
	c->rbuf = malloc(IPC_CTL_MAX_MSG);
	if (!c->sbuf || !c->rbuf) {
		rc = lc_fail(err, -ENOMEM, "connect: out of memory");
		goto fail;
	}
	rc = pthread_mutex_init(&c->lock, NULL);
	if (rc) {
		rc = lc_fail(err, -rc, "connect: pthread_mutex_init: %s", strerror(rc));
		goto fail;
	}
	rc = lc_open_locked(c, err); /* nobody else knows c yet */
	if (rc < 0) {
		pthread_mutex_destroy(&c->lock);
		goto fail;
	}
	*ret_client = c;
	return 0;
fail:
	free(c->sbuf);
	free(c->rbuf);
	free(c);
	return rc;
}

void sluice_disconnect(struct sluice_client *c)
{
	if (!c)
		return;
	while (c->readers)
		sluice_detach(c->readers);
	pthread_mutex_lock(&c->lock);
	lc_close_locked(c);
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_destroy(&c->lock);
	free(c->sbuf);
	free(c->rbuf);
	free(c);
}

int sluice_register(struct sluice_client *c, const char *spec_json, char *ret_name, size_t name_cap,
		    uint8_t ret_fingerprint[16], struct sluice_error *err)
{
	return sluice_register_at(c, spec_json, NULL, ret_name, name_cap, ret_fingerprint, err);
}

int sluice_register_at(struct sluice_client *c, const char *spec_json, const char *spec_dir,
		       char *ret_name, size_t name_cap, uint8_t ret_fingerprint[16],
		       struct sluice_error *err)
{
	char *dir = NULL;
	struct ipc_ctl_register reg;
	struct ipc_ctl_registered out;
	struct ipc_ctl_msg m;
	size_t len, slen, nfds = 0;
	char emsg[256];
	uint32_t req;
	int rc;

	if (!c || !spec_json || !spec_json[0] || !ret_name)
		return lc_fail(err, -EINVAL, "register: no client, spec or name buffer");
	slen = strlen(spec_json);
	if (slen > IPC_CTL_MAX_BODY - 64)
		return lc_fail(err, -EMSGSIZE,
			       "register: the spec is %zu bytes, at most %u fit a "
			       "message",
			       slen, IPC_CTL_MAX_BODY - 64);
	rc = lc_spec_dir(spec_dir, "register", &dir, err);
	if (rc < 0)
		return rc;
	memset(&reg, 0, sizeof(reg));
	reg.spec = spec_json;
	reg.spec_len = (uint32_t)slen;
	reg.spec_dir = dir;
	reg.spec_dir_len = (uint32_t)strlen(dir);
	pthread_mutex_lock(&c->lock);
	rc = lc_ensure_locked(c, err);
	if (rc < 0)
		goto out;
	req = lc_req_id_locked(c);
	rc = ipc_ctl_encode_register(c->sbuf, IPC_CTL_MAX_MSG, req, &reg, &len);
	if (rc < 0) {
		rc = lc_fail(err, rc, "register: encoding: %s", strerror(-rc));
		goto out;
	}
	rc = lc_call_locked(c, len, req, IPC_CTL_REGISTERED, &m, NULL, 0, &nfds, "register", err);
	if (rc < 0)
		goto out;
	rc = ipc_ctl_decode_registered(&m, &out, emsg, sizeof(emsg));
	if (rc < 0) {
		rc = lc_fail(err, rc, "register: %s", emsg);
		goto out;
	}
	len = strlen(out.name);
	if (len >= name_cap) {
		rc = lc_fail(err, -ENOBUFS,
			     "register: the name \"%s\" needs %zu bytes, the buffer "
			     "has %zu",
			     out.name, len + 1, name_cap);
		goto out;
	}
	memcpy(ret_name, out.name, len + 1);
	if (ret_fingerprint)
		memcpy(ret_fingerprint, out.fingerprint, IPC_CTL_FP_LEN);
	rc = 0;
out:
	pthread_mutex_unlock(&c->lock);
	free(dir);
	return rc;
}
