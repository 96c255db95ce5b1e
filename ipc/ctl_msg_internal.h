/* SPDX-License-Identifier: Apache-2.0 */
/* The typed messages' tables: what ctl_msg.c (the codec) and the ctl_msg_*.c files share. */
#ifndef SLUICE_IPC_CTL_MSG_INTERNAL_H
#define SLUICE_IPC_CTL_MSG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctl.h"

/*
 * Each message type is a table of fields: tag, kind, whether it is required, and where it lives
 * in the type's struct. One encoder and one decoder walk the tables, so that every type gets the
 * same checks: fixed lengths for numbers, length limits and no NUL for strings, required fields
 * present, unknown tags skipped, nested entries (K_SEQ) decoded into an allocated array. What a
 * table cannot say (one of name and spec, a rank below its count) is the type's check function,
 * which the encoder runs too, so that we never send what a peer would reject.
 */

enum kind {
	K_U32,	 /* uint32_t; 4 bytes */
	K_I32,	 /* int32_t; 4 bytes */
	K_U64,	 /* uint64_t; 8 bytes */
	K_I64,	 /* int64_t; 8 bytes */
	K_BOOL,	 /* bool; a u32 that is 0 or 1 */
	K_STR,	 /* char[max]: at most max - 1 bytes, copied and NUL-terminated */
	K_TEXT,	 /* const char * + uint32_t length at off_n: at most max bytes, a view */
	K_BYTES, /* const void * + uint32_t length at off_n: at most max bytes, a view */
	K_FP,	 /* uint8_t[IPC_CTL_FP_LEN]: exactly that many bytes */
	K_SHAPE, /* int64_t[max] + uint32_t count at off_n: count * 8 bytes, little-endian */
	K_SEQ,	 /* T * + uint32_t count at off_n: a repeated field, each a nested body of sub */
};

enum {
	F_REQ = 1,	/* must be present */
	F_NONEMPTY = 2, /* K_STR, K_TEXT, K_BYTES: at least one byte */
};

struct mdesc;

struct fdesc {
	uint16_t tag;
	uint8_t kind;
	uint8_t flags;
	const char *name;
	size_t off;
	size_t off_n;
	size_t max;
	const struct mdesc *sub;
	/* K_U32, K_I32, K_U64, K_I64 that are optional: the value an absent field reads as, which
	   the encoder leaves out (0 but for fields where 0 means something: NUM_OR) */
	uint64_t dflt;
};

struct mdesc {
	const char *what; /* "ctl ATTACH": the prefix of messages */
	uint16_t type;
	bool frozen; /* the same in every protocol version (HELLO, ERROR) */
	size_t size;
	const struct fdesc *f;
	unsigned n;
	int (*check)(const void *m, const char *what, char *emsg, size_t emsg_cap);
};

#define MEMBER_SIZE(st, m) sizeof(((st *)0)->m)
#define NUM(tag, kind, flags, st, m)                                 \
	{                                                            \
		tag, kind, flags, #m, offsetof(st, m), 0, 0, NULL, 0 \
	}
/* An optional number whose absence is not 0: it reads as dflt (a peer before the field). */
#define NUM_OR(tag, kind, st, m, dflt)                              \
	{                                                           \
		tag, kind, 0, #m, offsetof(st, m), 0, 0, NULL, dflt \
	}
#define STR(tag, flags, st, m)                                                         \
	{                                                                              \
		tag, K_STR, flags, #m, offsetof(st, m), 0, MEMBER_SIZE(st, m), NULL, 0 \
	}
#define VIEW(tag, kind, flags, st, m, len, max)                                        \
	{                                                                              \
		tag, kind, flags, #m, offsetof(st, m), offsetof(st, len), max, NULL, 0 \
	}
#define SHAPE(tag, flags, st, m, cnt)                                        \
	{                                                                    \
		tag, K_SHAPE, flags, #m, offsetof(st, m), offsetof(st, cnt), \
			MEMBER_SIZE(st, m) / sizeof(int64_t), NULL, 0        \
	}
#define SEQ(tag, st, m, cnt, sub)                                                \
	{                                                                        \
		tag, K_SEQ, 0, #m, offsetof(st, m), offsetof(st, cnt), 0, sub, 0 \
	}
#define MDESC(whatname, typ, froz, st, fields, chk)                                              \
	{                                                                                        \
		whatname, typ, froz, sizeof(st), fields, sizeof(fields) / sizeof(fields[0]), chk \
	}

/*
 * The codec (ctl_msg.c). Encode m (a struct that d describes) as a message of that type: d's
 * rules are checked first (-EINVAL), then the header and the fields go into buf (-EMSGSIZE).
 */
int ipc_ctl_msg_encode_(const struct mdesc *d, uint16_t type, void *buf, size_t cap,
			uint32_t req_id, const void *m, size_t *ret_len);
/*
 * Decode msg (of type d->type, and of protocol version IPC_CTL_VERSION unless d is frozen) into
 * ret (d->size bytes, written only on success; its K_SEQ arrays are allocated: _free_seqs_).
 */
int ipc_ctl_msg_decode_(const struct mdesc *d, const struct ipc_ctl_msg *msg, void *ret, char *emsg,
			size_t cap);
/* Free the arrays a decoder allocated in m (K_SEQ) and zero their pointers and counts. */
void ipc_ctl_msg_free_seqs_(const struct mdesc *d, void *m);

/* ctl.h's ipc_ctl_encode_<name>() and ipc_ctl_decode_<name>() for the type desc describes. */
#define CODEC(name, desc, st)                                                               \
	int ipc_ctl_encode_##name(void *buf, size_t cap, uint32_t req_id, const st *m,      \
				  size_t *ret_len)                                          \
	{                                                                                   \
		return ipc_ctl_msg_encode_(&desc, desc.type, buf, cap, req_id, m, ret_len); \
	}                                                                                   \
	int ipc_ctl_decode_##name(const struct ipc_ctl_msg *msg, st *ret, char *emsg,       \
				  size_t emsg_cap)                                          \
	{                                                                                   \
		return ipc_ctl_msg_decode_(&desc, msg, ret, emsg, emsg_cap);                \
	}

#endif
