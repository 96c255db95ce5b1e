/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the control protocol's header and body decoders for every message type. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/ctl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * Each input is decoded twice over: as a whole datagram (header and body, the decoder of the
 * type its header names), and as the body of a valid header of every type, so that the fuzzer
 * reaches each type's fields without having to guess a header.
 *
 * Invariants checked (abort() makes the fuzzer report them):
 * - ipc_ctl_msg_parse and the decoders answer 0, -EBADMSG with a message, -EPROTONOSUPPORT
 *   (another protocol version) or -ENOMEM; a parsed body lies inside the input;
 * - whatever a decoder accepts, the matching encoder accepts too (they check the same rules),
 *   and the encoding is canonical: encode(decode(encode(decode(x)))) == encode(decode(x));
 * - every array a decoder allocated is freed by the type's _fini (LeakSanitizer), and every
 *   view lies inside the message.
 */

static uint8_t enc1[IPC_CTL_MAX_MSG], enc2[IPC_CTL_MAX_MSG];
static char emsg[512];

static void check_rc(int r)
{
	if (r == 0 || r == -EPROTONOSUPPORT || r == -ENOMEM)
		return;
	if (r != -EBADMSG || !emsg[0])
		abort();
}

static void check_view(const struct ipc_ctl_msg *m, const void *p, uint32_t len)
{
	const uint8_t *b = p;

	if (!len)
		return;
	if (!b || b < m->body || len > m->body_len || b - m->body > (ptrdiff_t)(m->body_len - len))
		abort();
}

static void no_fini(void *p)
{
	(void)p;
}

static int enc_shutdown(void *buf, size_t cap, uint32_t req_id, const struct ipc_ctl_shutdown *s,
			size_t *ret_len)
{
	(void)req_id;
	return ipc_ctl_encode_shutdown(buf, cap, s, ret_len);
}

static int dec_shutdown(const struct ipc_ctl_msg *m, struct ipc_ctl_shutdown *s, char *e,
			size_t cap)
{
	return ipc_ctl_decode_shutdown(m, s, e, cap);
}

#define REF_CODEC(name, type)                                                                     \
	static int enc_##name(void *buf, size_t cap, uint32_t req_id,                             \
			      const struct ipc_ctl_reader_ref *r, size_t *ret_len)                \
	{                                                                                         \
		return ipc_ctl_encode_reader_ref(buf, cap, type, req_id, r, ret_len);             \
	}                                                                                         \
	static int dec_##name(const struct ipc_ctl_msg *m, struct ipc_ctl_reader_ref *r, char *e, \
			      size_t cap)                                                         \
	{                                                                                         \
		return ipc_ctl_decode_reader_ref(m, type, r, e, cap);                             \
	}
REF_CODEC(detach, IPC_CTL_DETACH)
REF_CODEC(save_state, IPC_CTL_SAVE_STATE)
REF_CODEC(detached, IPC_CTL_DETACHED)

#define REMOVE_CODEC(name, type)                                                              \
	static int enc_##name(void *buf, size_t cap, uint32_t req_id,                         \
			      const struct ipc_ctl_remove *r, size_t *ret_len)                \
	{                                                                                     \
		return ipc_ctl_encode_remove(buf, cap, type, req_id, r, ret_len);             \
	}                                                                                     \
	static int dec_##name(const struct ipc_ctl_msg *m, struct ipc_ctl_remove *r, char *e, \
			      size_t cap)                                                     \
	{                                                                                     \
		return ipc_ctl_decode_remove(m, type, r, e, cap);                             \
	}
REMOVE_CODEC(remove, IPC_CTL_REMOVE)
REMOVE_CODEC(removed, IPC_CTL_REMOVED)

/*
 * Decode m as st; when accepted, check its views (CHECK, a statement using `a`), encode it,
 * decode that, encode again, and compare the two encodings.
 */
#define RUN(fn, st, dec, enc, fini, CHECK)                                \
	static void fn(const struct ipc_ctl_msg *m)                       \
	{                                                                 \
		struct ipc_ctl_msg m1;                                    \
		st a, b;                                                  \
		size_t l1, l2;                                            \
		int r;                                                    \
                                                                          \
		emsg[0] = '\0';                                           \
		r = dec(m, &a, emsg, sizeof(emsg));                       \
		check_rc(r);                                              \
		if (r)                                                    \
			return;                                           \
		CHECK;                                                    \
		if (enc(enc1, sizeof(enc1), m->req_id, &a, &l1))          \
			abort();                                          \
		fini(&a);                                                 \
		if (ipc_ctl_msg_parse(enc1, l1, &m1, emsg, sizeof(emsg))) \
			abort();                                          \
		if (dec(&m1, &b, emsg, sizeof(emsg)))                     \
			abort();                                          \
		if (enc(enc2, sizeof(enc2), m->req_id, &b, &l2))          \
			abort();                                          \
		fini(&b);                                                 \
		if (l1 != l2 || memcmp(enc1, enc2, l1))                   \
			abort();                                          \
	}

#define NOCHECK ((void)0)

RUN(run_hello, struct ipc_ctl_hello, ipc_ctl_decode_hello, ipc_ctl_encode_hello, no_fini, NOCHECK)
RUN(run_hello_ok, struct ipc_ctl_hello_ok, ipc_ctl_decode_hello_ok, ipc_ctl_encode_hello_ok,
    no_fini, NOCHECK)
RUN(run_register, struct ipc_ctl_register, ipc_ctl_decode_register, ipc_ctl_encode_register,
    no_fini, check_view(m, a.spec, a.spec_len))
RUN(run_registered, struct ipc_ctl_registered, ipc_ctl_decode_registered, ipc_ctl_encode_registered,
    no_fini, NOCHECK)
RUN(run_attach, struct ipc_ctl_attach, ipc_ctl_decode_attach, ipc_ctl_encode_attach, no_fini,
    check_view(m, a.spec, a.spec_len);
    check_view(m, a.state, a.state_len))
RUN(run_attached, struct ipc_ctl_attached, ipc_ctl_decode_attached, ipc_ctl_encode_attached,
    ipc_ctl_attached_fini, if (a.n_tensors && !a.tensors) abort())
RUN(run_detach, struct ipc_ctl_reader_ref, dec_detach, enc_detach, no_fini, NOCHECK)
RUN(run_save_state, struct ipc_ctl_reader_ref, dec_save_state, enc_save_state, no_fini, NOCHECK)
RUN(run_detached, struct ipc_ctl_reader_ref, dec_detached, enc_detached, no_fini, NOCHECK)
RUN(run_state, struct ipc_ctl_state, ipc_ctl_decode_state, ipc_ctl_encode_state, no_fini,
    check_view(m, a.state, a.state_len))
RUN(run_list_reply, struct ipc_ctl_list_reply, ipc_ctl_decode_list_reply, ipc_ctl_encode_list_reply,
    ipc_ctl_list_reply_fini, if (a.n_pipelines && !a.pipelines) abort())
RUN(run_stats, struct ipc_ctl_stats, ipc_ctl_decode_stats, ipc_ctl_encode_stats, no_fini, NOCHECK)
RUN(run_stats_reply, struct ipc_ctl_stats_reply, ipc_ctl_decode_stats_reply,
    ipc_ctl_encode_stats_reply, ipc_ctl_stats_reply_fini, if (a.n_stats && !a.stats) abort())
RUN(run_remove, struct ipc_ctl_remove, dec_remove, enc_remove, no_fini, NOCHECK)
RUN(run_removed, struct ipc_ctl_remove, dec_removed, enc_removed, no_fini, NOCHECK)
RUN(run_error, struct ipc_ctl_error, ipc_ctl_decode_error, ipc_ctl_encode_error, no_fini, NOCHECK)
RUN(run_shutdown, struct ipc_ctl_shutdown, dec_shutdown, enc_shutdown, no_fini, NOCHECK)

static void run_list(const struct ipc_ctl_msg *m)
{
	int r;

	emsg[0] = '\0';
	r = ipc_ctl_decode_empty(m, IPC_CTL_LIST, emsg, sizeof(emsg));
	check_rc(r);
}

static const struct {
	uint16_t type;
	void (*run)(const struct ipc_ctl_msg *m);
} runs[] = {
	{ IPC_CTL_HELLO, run_hello },	    { IPC_CTL_HELLO_OK, run_hello_ok },
	{ IPC_CTL_REGISTER, run_register }, { IPC_CTL_REGISTERED, run_registered },
	{ IPC_CTL_ATTACH, run_attach },	    { IPC_CTL_ATTACHED, run_attached },
	{ IPC_CTL_DETACH, run_detach },	    { IPC_CTL_SAVE_STATE, run_save_state },
	{ IPC_CTL_DETACHED, run_detached }, { IPC_CTL_STATE, run_state },
	{ IPC_CTL_LIST, run_list },	    { IPC_CTL_LIST_REPLY, run_list_reply },
	{ IPC_CTL_STATS, run_stats },	    { IPC_CTL_STATS_REPLY, run_stats_reply },
	{ IPC_CTL_REMOVE, run_remove },	    { IPC_CTL_REMOVED, run_removed },
	{ IPC_CTL_ERROR, run_error },	    { IPC_CTL_SHUTDOWN, run_shutdown },
};
#define N_RUNS (sizeof(runs) / sizeof(runs[0]))

/* The input as a datagram: parse, then the decoder of its type and of one other type. */
static void whole(const uint8_t *data, size_t size)
{
	struct ipc_ctl_msg m;
	size_t i;
	int r;

	emsg[0] = '\0';
	r = ipc_ctl_msg_parse(data, size, &m, emsg, sizeof(emsg));
	check_rc(r);
	if (r && r != -EPROTONOSUPPORT)
		return;
	if (m.body_len &&
	    (m.body != data + IPC_CTL_HDR_SIZE || m.body_len != size - IPC_CTL_HDR_SIZE))
		abort();
	for (i = 0; i < N_RUNS; i++)
		if (runs[i].type == m.type) {
			runs[i].run(&m);
			runs[(i + 1) % N_RUNS].run(&m); /* a type mismatch: an error */
		}
}

/* The input as the body of a message of every type. */
static void as_body(const uint8_t *data, size_t size)
{
	struct ipc_ctl_builder b;
	struct ipc_ctl_msg m;
	uint8_t *msg;
	size_t i, len;

	if (size > IPC_CTL_MAX_BODY)
		return;
	/* An exact-size heap copy: ASan then sees any read past the end. */
	msg = malloc(IPC_CTL_HDR_SIZE + size);
	if (!msg)
		return;
	for (i = 0; i < N_RUNS; i++) {
		ipc_ctl_builder_init(&b, msg, IPC_CTL_HDR_SIZE, runs[i].type, 7);
		if (ipc_ctl_builder_finish(&b, &len))
			abort();
		/* the header's body_len (little-endian), then the body */
		msg[16] = (uint8_t)size;
		msg[17] = (uint8_t)(size >> 8);
		msg[18] = (uint8_t)(size >> 16);
		msg[19] = (uint8_t)(size >> 24);
		memcpy(msg + IPC_CTL_HDR_SIZE, data, size);
		if (ipc_ctl_msg_parse(msg, IPC_CTL_HDR_SIZE + size, &m, emsg, sizeof(emsg)))
			abort();
		runs[i].run(&m);
	}
	free(msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *copy = malloc(size ? size : 1);

	if (!copy)
		return 0;
	memcpy(copy, data, size);
	whole(copy, size);
	as_body(copy, size);
	free(copy);
	return 0;
}
