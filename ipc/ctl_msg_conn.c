/* SPDX-License-Identifier: Apache-2.0 */
/* Control protocol: the connection's messages, HELLO, HELLO_OK, ERROR and SHUTDOWN. */
#include "ctl_msg_internal.h"

#include <errno.h>

#include "errmsg.h"

/* ---- the rules a table cannot say ---- */

static int check_hello(const void *v, const char *what, char *emsg, size_t cap)
{
	const struct ipc_ctl_hello *m = v;

	if (m->version == 0)
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: version: expected a protocol version, got 0", what);
	return 0;
}

static int check_hello_ok(const void *v, const char *what, char *emsg, size_t cap)
{
	const struct ipc_ctl_hello_ok *m = v;

	if (m->version == 0)
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: version: expected a protocol version, got 0", what);
	if (m->max_msg < IPC_CTL_HDR_SIZE)
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: max_msg: %u is less than a header (%d bytes)", what,
				  m->max_msg, IPC_CTL_HDR_SIZE);
	return 0;
}

static int check_error(const void *v, const char *what, char *emsg, size_t cap)
{
	const struct ipc_ctl_error *m = v;

	if (m->code >= 0 || m->code < -4095)
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: code: expected a negative errno, got %d", what, m->code);
	return 0;
}

/* ---- the tables (tags are the wire contract: docs/protocol.md) ---- */

static const struct fdesc hello_f[] = {
	NUM(1, K_U32, F_REQ, struct ipc_ctl_hello, version),
	NUM(2, K_U32, F_REQ, struct ipc_ctl_hello, pid),
	STR(3, 0, struct ipc_ctl_hello, client),
};
static const struct fdesc hello_ok_f[] = {
	NUM(1, K_U32, F_REQ, struct ipc_ctl_hello_ok, version),
	NUM(2, K_U32, F_REQ, struct ipc_ctl_hello_ok, server_pid),
	NUM(3, K_U32, F_REQ, struct ipc_ctl_hello_ok, max_msg),
	NUM(4, K_U32, 0, struct ipc_ctl_hello_ok, max_readers),
};
static const struct fdesc error_f[] = {
	NUM(1, K_I32, F_REQ, struct ipc_ctl_error, code),
	STR(2, 0, struct ipc_ctl_error, text),
};
static const struct fdesc shutdown_f[] = {
	NUM(1, K_U32, 0, struct ipc_ctl_shutdown, flags),
	STR(2, 0, struct ipc_ctl_shutdown, reason),
};

static const struct mdesc hello_d =
	MDESC("ctl HELLO", IPC_CTL_HELLO, true, struct ipc_ctl_hello, hello_f, check_hello);
static const struct mdesc hello_ok_d = MDESC("ctl HELLO_OK", IPC_CTL_HELLO_OK, false,
					     struct ipc_ctl_hello_ok, hello_ok_f, check_hello_ok);
static const struct mdesc error_d =
	MDESC("ctl ERROR", IPC_CTL_ERROR, true, struct ipc_ctl_error, error_f, check_error);
static const struct mdesc shutdown_d =
	MDESC("ctl SHUTDOWN", IPC_CTL_SHUTDOWN, false, struct ipc_ctl_shutdown, shutdown_f, NULL);

/* ---- the typed API ---- */

CODEC(hello, hello_d, struct ipc_ctl_hello)
CODEC(hello_ok, hello_ok_d, struct ipc_ctl_hello_ok)
CODEC(error, error_d, struct ipc_ctl_error)

int ipc_ctl_encode_shutdown(void *buf, size_t cap, const struct ipc_ctl_shutdown *m,
			    size_t *ret_len)
{
	return ipc_ctl_msg_encode_(&shutdown_d, IPC_CTL_SHUTDOWN, buf, cap, 0, m, ret_len);
}

int ipc_ctl_decode_shutdown(const struct ipc_ctl_msg *msg, struct ipc_ctl_shutdown *ret, char *emsg,
			    size_t emsg_cap)
{
	return ipc_ctl_msg_decode_(&shutdown_d, msg, ret, emsg, emsg_cap);
}
