/* SPDX-License-Identifier: Apache-2.0 */
/* Control protocol: the header, the TLV builder and reader, fd passing, peer credentials. */
#include "ctl.h"

#include <endian.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "errmsg.h"

/*
 * Everything read here comes from another process and may be anything: every length is checked
 * against the bytes that are left before it is used, every number is loaded with memcpy (fields
 * are not aligned) and converted from little-endian once, into a local.
 */

static uint16_t ld16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return le16toh(v);
}

static uint32_t ld32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return le32toh(v);
}

static uint64_t ld64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return le64toh(v);
}

static void st16(uint8_t *p, uint16_t v)
{
	v = htole16(v);
	memcpy(p, &v, sizeof(v));
}

static void st32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, sizeof(v));
}

static void st64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, sizeof(v));
}

const char *ipc_ctl_type_name(unsigned type)
{
	switch (type) {
	case IPC_CTL_HELLO:
		return "HELLO";
	case IPC_CTL_REGISTER:
		return "REGISTER";
	case IPC_CTL_ATTACH:
		return "ATTACH";
	case IPC_CTL_DETACH:
		return "DETACH";
	case IPC_CTL_SAVE_STATE:
		return "SAVE_STATE";
	case IPC_CTL_LIST:
		return "LIST";
	case IPC_CTL_STATS:
		return "STATS";
	case IPC_CTL_REMOVE:
		return "REMOVE";
	case IPC_CTL_ERROR:
		return "ERROR";
	case IPC_CTL_HELLO_OK:
		return "HELLO_OK";
	case IPC_CTL_REGISTERED:
		return "REGISTERED";
	case IPC_CTL_ATTACHED:
		return "ATTACHED";
	case IPC_CTL_DETACHED:
		return "DETACHED";
	case IPC_CTL_STATE:
		return "STATE";
	case IPC_CTL_LIST_REPLY:
		return "LIST_REPLY";
	case IPC_CTL_STATS_REPLY:
		return "STATS_REPLY";
	case IPC_CTL_REMOVED:
		return "REMOVED";
	case IPC_CTL_SHUTDOWN:
		return "SHUTDOWN";
	default:
		return "?";
	}
}

unsigned ipc_ctl_type_fds(unsigned type)
{
	return type == IPC_CTL_ATTACHED ? 2 : 0;
}

/* ---- header ---- */

int ipc_ctl_msg_parse(const void *buf, size_t len, struct ipc_ctl_msg *ret_msg, char *emsg,
		      size_t emsg_cap)
{
	const uint8_t *p = buf;
	struct ipc_ctl_msg m;
	uint32_t magic;

	if (!p || len < IPC_CTL_HDR_SIZE)
		return ipc_errmsg(-EBADMSG, emsg, emsg_cap,
				  "ctl: message of %zu bytes is shorter than the %d-byte header",
				  len, IPC_CTL_HDR_SIZE);
	magic = ld32(p + offsetof(struct ipc_ctl_hdr, magic));
	if (magic != IPC_CTL_MAGIC)
		return ipc_errmsg(-EBADMSG, emsg, emsg_cap,
				  "ctl: bad magic 0x%08x, expected 0x%08x (\"SLCL\"): not a sluice "
				  "peer",
				  magic, IPC_CTL_MAGIC);
	m.version = ld16(p + offsetof(struct ipc_ctl_hdr, version));
	m.type = ld16(p + offsetof(struct ipc_ctl_hdr, type));
	m.flags = ld32(p + offsetof(struct ipc_ctl_hdr, flags));
	m.req_id = ld32(p + offsetof(struct ipc_ctl_hdr, req_id));
	m.body_len = ld32(p + offsetof(struct ipc_ctl_hdr, body_len));
	m.body = p + IPC_CTL_HDR_SIZE;
	if (m.version != IPC_CTL_VERSION) {
		if (len > IPC_CTL_MAX_MSG || m.body_len != len - IPC_CTL_HDR_SIZE) {
			m.body = NULL;
			m.body_len = 0;
		}
		*ret_msg = m;
		return ipc_errmsg(-EPROTONOSUPPORT, emsg, emsg_cap,
				  "ctl: peer speaks protocol version %u, this side speaks %d",
				  m.version, IPC_CTL_VERSION);
	}
	if (len > IPC_CTL_MAX_MSG)
		return ipc_errmsg(-EBADMSG, emsg, emsg_cap,
				  "ctl %s: message of %zu bytes, at most %u",
				  ipc_ctl_type_name(m.type), len, IPC_CTL_MAX_MSG);
	if (m.body_len != len - IPC_CTL_HDR_SIZE)
		return ipc_errmsg(-EBADMSG, emsg, emsg_cap,
				  "ctl %s: header says %u body bytes, the message has %zu",
				  ipc_ctl_type_name(m.type), m.body_len, len - IPC_CTL_HDR_SIZE);
	if (m.flags & ~IPC_CTL_F_OPTIONAL_MASK)
		return ipc_errmsg(-EBADMSG, emsg, emsg_cap, "ctl %s: unknown required flags 0x%08x",
				  ipc_ctl_type_name(m.type), m.flags & ~IPC_CTL_F_OPTIONAL_MASK);
	*ret_msg = m;
	return 0;
}

/* ---- builder ---- */

void ipc_ctl_builder_init(struct ipc_ctl_builder *b, void *buf, size_t cap, uint16_t type,
			  uint32_t req_id)
{
	b->buf = buf;
	b->cap = cap < IPC_CTL_MAX_MSG ? cap : IPC_CTL_MAX_MSG;
	b->len = 0;
	b->err = 0;
	if (!buf) {
		b->err = -EINVAL;
		return;
	}
	if (b->cap < IPC_CTL_HDR_SIZE) {
		b->err = -EMSGSIZE;
		return;
	}
	st32(b->buf + offsetof(struct ipc_ctl_hdr, magic), IPC_CTL_MAGIC);
	st16(b->buf + offsetof(struct ipc_ctl_hdr, version), IPC_CTL_VERSION);
	st16(b->buf + offsetof(struct ipc_ctl_hdr, type), type);
	st32(b->buf + offsetof(struct ipc_ctl_hdr, flags), 0);
	st32(b->buf + offsetof(struct ipc_ctl_hdr, req_id), req_id);
	st32(b->buf + offsetof(struct ipc_ctl_hdr, body_len), 0);
	b->len = IPC_CTL_HDR_SIZE;
}

/* Room for a field of n value bytes: a pointer to its header, or NULL with the sticky error. */
static uint8_t *reserve(struct ipc_ctl_builder *b, uint16_t tag, size_t n)
{
	uint8_t *p;

	if (b->err)
		return NULL;
	if (tag == 0) {
		b->err = -EINVAL;
		return NULL;
	}
	if (n > b->cap - b->len || b->cap - b->len - n < IPC_CTL_FIELD_HDR) {
		b->err = -EMSGSIZE;
		return NULL;
	}
	p = b->buf + b->len;
	st16(p, tag);
	st32(p + 2, (uint32_t)n);
	b->len += IPC_CTL_FIELD_HDR + n;
	return p;
}

int ipc_ctl_put_u32(struct ipc_ctl_builder *b, uint16_t tag, uint32_t v)
{
	uint8_t *p = reserve(b, tag, 4);

	if (p)
		st32(p + IPC_CTL_FIELD_HDR, v);
	return b->err;
}

int ipc_ctl_put_i32(struct ipc_ctl_builder *b, uint16_t tag, int32_t v)
{
	return ipc_ctl_put_u32(b, tag, (uint32_t)v);
}

int ipc_ctl_put_u64(struct ipc_ctl_builder *b, uint16_t tag, uint64_t v)
{
	uint8_t *p = reserve(b, tag, 8);

	if (p)
		st64(p + IPC_CTL_FIELD_HDR, v);
	return b->err;
}

int ipc_ctl_put_i64(struct ipc_ctl_builder *b, uint16_t tag, int64_t v)
{
	return ipc_ctl_put_u64(b, tag, (uint64_t)v);
}

int ipc_ctl_put_bytes(struct ipc_ctl_builder *b, uint16_t tag, const void *v, size_t len)
{
	uint8_t *p;

	if (!b->err && len && !v)
		b->err = -EINVAL;
	p = reserve(b, tag, len);
	if (p && len)
		memcpy(p + IPC_CTL_FIELD_HDR, v, len);
	return b->err;
}

int ipc_ctl_put_str(struct ipc_ctl_builder *b, uint16_t tag, const char *s, size_t len)
{
	if (!b->err && len && (!s || memchr(s, '\0', len)))
		b->err = -EINVAL;
	return ipc_ctl_put_bytes(b, tag, s, len);
}

size_t ipc_ctl_put_begin(struct ipc_ctl_builder *b, uint16_t tag)
{
	size_t mark = b->len;

	return reserve(b, tag, 0) ? mark : 0;
}

int ipc_ctl_put_end(struct ipc_ctl_builder *b, size_t mark)
{
	if (b->err)
		return b->err;
	if (mark < IPC_CTL_HDR_SIZE || mark > b->len - IPC_CTL_FIELD_HDR) {
		b->err = -EINVAL;
		return b->err;
	}
	st32(b->buf + mark + 2, (uint32_t)(b->len - mark - IPC_CTL_FIELD_HDR));
	return 0;
}

int ipc_ctl_builder_finish(struct ipc_ctl_builder *b, size_t *ret_len)
{
	if (b->err)
		return b->err;
	st32(b->buf + offsetof(struct ipc_ctl_hdr, body_len),
	     (uint32_t)(b->len - IPC_CTL_HDR_SIZE));
	*ret_len = b->len;
	return 0;
}

/* ---- reader ---- */

void ipc_ctl_reader_init(struct ipc_ctl_reader *r, const void *body, size_t len, uint64_t repeated,
			 const char *what)
{
	r->base = body;
	r->p = body;
	r->end = r->p ? r->p + len : r->p;
	r->seen = 0;
	r->repeated = repeated;
	r->what = what ? what : "ctl";
}

int ipc_ctl_reader_next(struct ipc_ctl_reader *r, struct ipc_ctl_field *ret_field, char *emsg,
			size_t emsg_cap)
{
	size_t left = (size_t)(r->end - r->p), at = (size_t)(r->p - r->base);
	uint16_t tag;
	uint32_t len;

	if (left == 0)
		return 0;
	if (left < IPC_CTL_FIELD_HDR)
		return ipc_errmsg(-EBADMSG, emsg, emsg_cap,
				  "%s: truncated field header at byte %zu: %zu bytes left, a field "
				  "header takes %d",
				  r->what, at, left, IPC_CTL_FIELD_HDR);
	tag = ld16(r->p);
	len = ld32(r->p + 2);
	if (len > left - IPC_CTL_FIELD_HDR)
		return ipc_errmsg(-EBADMSG, emsg, emsg_cap,
				  "%s: field %u at byte %zu: length %u runs past the end "
				  "(%zu bytes left)",
				  r->what, tag, at, len, left - IPC_CTL_FIELD_HDR);
	if (tag == 0)
		return ipc_errmsg(-EBADMSG, emsg, emsg_cap,
				  "%s: field at byte %zu: tag 0 is reserved", r->what, at);
	if (tag < 64) {
		uint64_t bit = UINT64_C(1) << tag;

		if ((r->seen & bit) && !(r->repeated & bit))
			return ipc_errmsg(-EBADMSG, emsg, emsg_cap,
					  "%s: field %u at byte %zu: duplicate tag (it may appear "
					  "once)",
					  r->what, tag, at);
		r->seen |= bit;
	}
	ret_field->tag = tag;
	ret_field->len = len;
	ret_field->val = r->p + IPC_CTL_FIELD_HDR;
	r->p += IPC_CTL_FIELD_HDR + len;
	return 1;
}

static int field_len(const struct ipc_ctl_field *f, uint32_t want, const char *kind, char *emsg,
		     size_t emsg_cap)
{
	if (f->len != want)
		return ipc_errmsg(-EBADMSG, emsg, emsg_cap,
				  "ctl: field %u: length %u, expected %u (%s)", f->tag, f->len,
				  want, kind);
	return 0;
}

int ipc_ctl_field_u32(const struct ipc_ctl_field *f, uint32_t *ret, char *emsg, size_t emsg_cap)
{
	int r = field_len(f, 4, "u32", emsg, emsg_cap);

	if (r == 0)
		*ret = ld32(f->val);
	return r;
}

int ipc_ctl_field_i32(const struct ipc_ctl_field *f, int32_t *ret, char *emsg, size_t emsg_cap)
{
	int r = field_len(f, 4, "i32", emsg, emsg_cap);

	if (r == 0)
		*ret = (int32_t)ld32(f->val);
	return r;
}

int ipc_ctl_field_u64(const struct ipc_ctl_field *f, uint64_t *ret, char *emsg, size_t emsg_cap)
{
	int r = field_len(f, 8, "u64", emsg, emsg_cap);

	if (r == 0)
		*ret = ld64(f->val);
	return r;
}

int ipc_ctl_field_i64(const struct ipc_ctl_field *f, int64_t *ret, char *emsg, size_t emsg_cap)
{
	int r = field_len(f, 8, "i64", emsg, emsg_cap);

	if (r == 0)
		*ret = (int64_t)ld64(f->val);
	return r;
}

int ipc_ctl_field_str(const struct ipc_ctl_field *f, size_t max_len, const char **ret, char *emsg,
		      size_t emsg_cap)
{
	const void *nul;

	if (f->len > max_len)
		return ipc_errmsg(-EBADMSG, emsg, emsg_cap,
				  "ctl: field %u: string of %u bytes, at most %zu", f->tag, f->len,
				  max_len);
	nul = memchr(f->val, '\0', f->len);
	if (nul)
		return ipc_errmsg(-EBADMSG, emsg, emsg_cap,
				  "ctl: field %u: string holds a NUL at byte %zu", f->tag,
				  (size_t)((const uint8_t *)nul - f->val));
	*ret = (const char *)f->val;
	return 0;
}

/* ---- the socket ---- */

/* A control buffer with room for IPC_CTL_MAX_FDS descriptors, aligned for struct cmsghdr. */
union fd_cmsg {
	struct cmsghdr align;
	char buf[CMSG_SPACE(sizeof(int) * IPC_CTL_MAX_FDS)];
};

int ipc_ctl_send(int fd, const void *msg, size_t len, const int *fds, size_t n_fds)
{
	union fd_cmsg cm;
	struct iovec iov;
	struct msghdr mh;
	struct cmsghdr *c;
	ssize_t n;

	if (!msg || len < IPC_CTL_HDR_SIZE || (n_fds && !fds))
		return -EINVAL;
	if (len > IPC_CTL_MAX_MSG)
		return -EMSGSIZE;
	if (n_fds >
	    ipc_ctl_type_fds(ld16((const uint8_t *)msg + offsetof(struct ipc_ctl_hdr, type))))
		return -EINVAL;
	memset(&mh, 0, sizeof(mh));
	iov.iov_base = (void *)msg;
	iov.iov_len = len;
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	if (n_fds) {
		memset(&cm, 0, sizeof(cm));
		mh.msg_control = cm.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
	}
	do
		n = sendmsg(fd, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	/* SOCK_SEQPACKET sends a datagram whole or not at all. */
	if ((size_t)n != len)
		return -EIO;
	return 0;
}

static void close_all(const int *fds, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		close(fds[i]);
}

int ipc_ctl_recv(int fd, void *buf, size_t cap, int *fds, size_t max_fds, size_t *ret_nfds)
{
	int got[IPC_CTL_MAX_FDS + 4];
	size_t n_got = 0, keep, i;
	union fd_cmsg cm;
	struct iovec iov;
	struct msghdr mh;
	struct cmsghdr *c;
	ssize_t n;

	if (!buf || cap == 0 || (max_fds && !fds))
		return -EINVAL;
	if (!ret_nfds)
		max_fds = 0;
	if (max_fds > IPC_CTL_MAX_FDS)
		max_fds = IPC_CTL_MAX_FDS;
	memset(&mh, 0, sizeof(mh));
	iov.iov_base = buf;
	iov.iov_len = cap < INT_MAX ? cap : INT_MAX;
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	if (max_fds) {
		memset(&cm, 0, sizeof(cm));
		mh.msg_control = cm.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * max_fds);
	}
	do
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;

	/* Collect every descriptor that arrived, whatever happens next, so that none leaks. */
	for (c = mh.msg_controllen ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c)) {
		size_t k, cnt;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
		    c->cmsg_len < CMSG_LEN(0))
			continue;
		cnt = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		/* The kernel never says more than the buffer holds; do not trust that blindly. */
		if (cnt > (size_t)(cm.buf + mh.msg_controllen - (char *)CMSG_DATA(c)) / sizeof(int))
			cnt = (size_t)(cm.buf + mh.msg_controllen - (char *)CMSG_DATA(c)) /
			      sizeof(int);
		for (k = 0; k < cnt; k++) {
			int v;

			memcpy(&v, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
			if (n_got < sizeof(got) / sizeof(got[0]))
				got[n_got++] = v;
			else
				close(v);
		}
	}
	if (mh.msg_flags & MSG_TRUNC) {
		close_all(got, n_got);
		return -EMSGSIZE;
	}
	if (mh.msg_flags & MSG_CTRUNC) {
		close_all(got, n_got);
		return -EBADMSG;
	}
	if (n == 0) {
		close_all(got, n_got);
		return 0;
	}

	/* Keep only what the caller has room for and the message's type carries. */
	keep = n_got < max_fds ? n_got : max_fds;
	if (keep) {
		const uint8_t *p = buf;
		unsigned allowed = 0;

		if ((size_t)n >= IPC_CTL_HDR_SIZE &&
		    ld32(p + offsetof(struct ipc_ctl_hdr, magic)) == IPC_CTL_MAGIC &&
		    ld16(p + offsetof(struct ipc_ctl_hdr, version)) == IPC_CTL_VERSION)
			allowed = ipc_ctl_type_fds(ld16(p + offsetof(struct ipc_ctl_hdr, type)));
		if (keep > allowed)
			keep = allowed;
	}
	close_all(got + keep, n_got - keep);
	for (i = 0; i < keep; i++)
		fds[i] = got[i];
	if (ret_nfds)
		*ret_nfds = keep;
	return (int)n;
}

int ipc_ctl_peer_groups(int fd, gid_t **ret_groups, size_t *ret_n)
{
	socklen_t len = 16 * sizeof(gid_t);
	*ret_groups = NULL;
	*ret_n = 0;
	for (int tries = 0; tries < 4; tries++) { /* ERANGE says how much it needs */
		gid_t *g = malloc(len ? len : sizeof(gid_t));
		if (!g)
			return -ENOMEM;
		socklen_t got = len;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &got) == 0) {
			if (got == 0)
				free(g);
			else
				*ret_groups = g;
			*ret_n = got / sizeof(gid_t);
			return 0;
		}
		int e = errno;
		free(g);
		if (e != ERANGE || got <= len)
			return -e;
		len = got;
	}
	return -ERANGE;
}

int ipc_ctl_peer_cred(int fd, uid_t *ret_uid, gid_t *ret_gid, pid_t *ret_pid)
{
	struct ucred uc;
	socklen_t len = sizeof(uc);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0)
		return -errno;
	if (len != sizeof(uc))
		return -EIO;
	if (ret_uid)
		*ret_uid = uc.uid;
	if (ret_gid)
		*ret_gid = uc.gid;
	if (ret_pid)
		*ret_pid = uc.pid;
	return 0;
}
