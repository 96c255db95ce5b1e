/* SPDX-License-Identifier: Apache-2.0 */
/* Control protocol: the typed messages, encoded and decoded from one table per type. */
#include "ctl.h"

#include <endian.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"

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
#define NUM(tag, kind, flags, st, m)                              \
	{                                                         \
		tag, kind, flags, #m, offsetof(st, m), 0, 0, NULL \
	}
#define STR(tag, flags, st, m)                                                      \
	{                                                                           \
		tag, K_STR, flags, #m, offsetof(st, m), 0, MEMBER_SIZE(st, m), NULL \
	}
#define VIEW(tag, kind, flags, st, m, len, max)                                     \
	{                                                                           \
		tag, kind, flags, #m, offsetof(st, m), offsetof(st, len), max, NULL \
	}
#define SHAPE(tag, flags, st, m, cnt)                                        \
	{                                                                    \
		tag, K_SHAPE, flags, #m, offsetof(st, m), offsetof(st, cnt), \
			MEMBER_SIZE(st, m) / sizeof(int64_t), NULL           \
	}
#define SEQ(tag, st, m, cnt, sub)                                             \
	{                                                                     \
		tag, K_SEQ, 0, #m, offsetof(st, m), offsetof(st, cnt), 0, sub \
	}
#define MDESC(whatname, typ, froz, st, fields, chk)                                              \
	{                                                                                        \
		whatname, typ, froz, sizeof(st), fields, sizeof(fields) / sizeof(fields[0]), chk \
	}

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

/* An optional spec_dir is an absolute path. */
static int check_spec_dir(const char *dir, uint32_t len, const char *what, char *emsg, size_t cap)
{
	if (len && dir[0] != '/')
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: spec_dir: expected an absolute path, got \"%.*s\"", what,
				  (int)(len > 64 ? 64 : len), dir);
	return 0;
}

static int check_register(const void *v, const char *what, char *emsg, size_t cap)
{
	const struct ipc_ctl_register *m = v;
	return check_spec_dir(m->spec_dir, m->spec_dir_len, what, emsg, cap);
}

static int check_attach(const void *v, const char *what, char *emsg, size_t cap)
{
	const struct ipc_ctl_attach *m = v;
	bool has_name = m->name[0] != '\0', has_spec = m->spec_len > 0;

	if (has_name == has_spec)
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: expected exactly one of name and spec, got %s", what,
				  has_name ? "both" : "neither");
	if (m->mode >= IPC_CTL_MODE_COUNT_)
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: mode: expected 0 (broadcast), 1 (split) or 2 (rank), got %u",
				  what, m->mode);
	if (m->mode == IPC_CTL_MODE_RANK) {
		if (m->rank_count == 0 || m->rank_index >= m->rank_count)
			return ipc_errmsg(-EBADMSG, emsg, cap,
					  "%s: rank_index %u, rank_count %u: expected index < "
					  "count",
					  what, m->rank_index, m->rank_count);
	} else if (m->rank_index || m->rank_count) {
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: rank_index/rank_count given for mode %u: expected them only "
				  "with "
				  "mode 2 (rank)",
				  what, m->mode);
	}
	if (m->lag_policy >= IPC_CTL_LAG_COUNT_)
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: lag_policy: expected 0 (hold) or 1 (catch up), got %u", what,
				  m->lag_policy);
	if (m->spec_dir_len && !has_spec)
		return ipc_errmsg(-EBADMSG, emsg, cap, "%s: spec_dir given without a spec", what);
	return check_spec_dir(m->spec_dir, m->spec_dir_len, what, emsg, cap);
}

static int check_tensor(const void *v, const char *what, char *emsg, size_t cap)
{
	const struct ipc_ctl_tensor_info *m = v;
	uint32_t i;

	if (m->dtype >= IPC_DTYPE_COUNT_)
		return ipc_errmsg(-EBADMSG, emsg, cap, "%s: dtype: expected 0..%d, got %u", what,
				  IPC_DTYPE_COUNT_ - 1, m->dtype);
	if (m->rank < 1 || m->rank > IPC_BATCH_MAX_RANK)
		return ipc_errmsg(-EBADMSG, emsg, cap, "%s: shape: rank %u, expected 1..%d", what,
				  m->rank, IPC_BATCH_MAX_RANK);
	for (i = 0; i < m->rank; i++)
		if (m->shape[i] < -1)
			return ipc_errmsg(-EBADMSG, emsg, cap,
					  "%s: shape[%u]: %lld, expected -1 (varies) or a size",
					  what, i, (long long)m->shape[i]);
	return 0;
}

static int check_pipeline(const void *v, const char *what, char *emsg, size_t cap)
{
	const struct ipc_ctl_pipeline_info *m = v;

	if (m->status >= IPC_CTL_PL_COUNT_)
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: status: expected 0 (running), 1 (finished) or 2 (failed), "
				  "got %u",
				  what, m->status);
	if (m->slots_used > m->n_slots)
		return ipc_errmsg(-EBADMSG, emsg, cap, "%s: slots_used %u is more than n_slots %u",
				  what, m->slots_used, m->n_slots);
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
static const struct fdesc register_f[] = {
	VIEW(1, K_TEXT, F_REQ | F_NONEMPTY, struct ipc_ctl_register, spec, spec_len,
	     IPC_CTL_MAX_BODY),
	VIEW(2, K_TEXT, 0, struct ipc_ctl_register, spec_dir, spec_dir_len, IPC_CTL_DIR_MAX),
};
static const struct fdesc registered_f[] = {
	STR(1, F_REQ | F_NONEMPTY, struct ipc_ctl_registered, name),
	NUM(2, K_FP, F_REQ, struct ipc_ctl_registered, fingerprint),
	NUM(3, K_BOOL, 0, struct ipc_ctl_registered, created),
};
static const struct fdesc attach_f[] = {
	STR(1, 0, struct ipc_ctl_attach, name),
	VIEW(2, K_TEXT, 0, struct ipc_ctl_attach, spec, spec_len, IPC_CTL_MAX_BODY),
	NUM(3, K_U32, F_REQ, struct ipc_ctl_attach, mode),
	NUM(4, K_U32, 0, struct ipc_ctl_attach, rank_index),
	NUM(5, K_U32, 0, struct ipc_ctl_attach, rank_count),
	VIEW(6, K_BYTES, 0, struct ipc_ctl_attach, state, state_len, IPC_CTL_STATE_MAX),
	NUM(7, K_U32, 0, struct ipc_ctl_attach, lag_policy),
	NUM(8, K_U64, 0, struct ipc_ctl_attach, max_lag),
	VIEW(9, K_TEXT, 0, struct ipc_ctl_attach, spec_dir, spec_dir_len, IPC_CTL_DIR_MAX),
	STR(10, 0, struct ipc_ctl_attach, group),
	VIEW(11, K_BYTES, 0, struct ipc_ctl_attach, resume, resume_len, IPC_CTL_TOKEN_MAX),
	NUM(12, K_U64, 0, struct ipc_ctl_attach, resume_seq),
};
static const struct fdesc tensor_f[] = {
	STR(1, F_REQ | F_NONEMPTY, struct ipc_ctl_tensor_info, name),
	NUM(2, K_U32, F_REQ, struct ipc_ctl_tensor_info, dtype),
	SHAPE(3, F_REQ, struct ipc_ctl_tensor_info, shape, rank),
	NUM(4, K_BOOL, 0, struct ipc_ctl_tensor_info, ragged),
};
static const struct mdesc tensor_d =
	MDESC("tensor", 0, false, struct ipc_ctl_tensor_info, tensor_f, check_tensor);
static const struct fdesc attached_f[] = {
	NUM(1, K_U64, F_REQ, struct ipc_ctl_attached, reader_id),
	STR(2, F_REQ | F_NONEMPTY, struct ipc_ctl_attached, name),
	NUM(3, K_FP, F_REQ, struct ipc_ctl_attached, fingerprint),
	NUM(4, K_U32, F_REQ, struct ipc_ctl_attached, ring_version),
	NUM(5, K_U32, F_REQ, struct ipc_ctl_attached, n_slots),
	NUM(6, K_U64, F_REQ, struct ipc_ctl_attached, data_bytes),
	NUM(7, K_U64, F_REQ, struct ipc_ctl_attached, ctl_bytes),
	NUM(8, K_U64, 0, struct ipc_ctl_attached, max_batch_bytes),
	SEQ(9, struct ipc_ctl_attached, tensors, n_tensors, &tensor_d),
	NUM(10, K_U64, 0, struct ipc_ctl_attached, first_epoch),
	VIEW(11, K_BYTES, 0, struct ipc_ctl_attached, token, token_len, IPC_CTL_TOKEN_MAX),
	NUM(12, K_U64, 0, struct ipc_ctl_attached, skip_below),
	NUM(13, K_U64, 0, struct ipc_ctl_attached, redelivered_below),
	NUM(14, K_U64, 0, struct ipc_ctl_attached, redelivered_epochs),
};
static const struct fdesc reader_ref_f[] = {
	NUM(1, K_U64, F_REQ, struct ipc_ctl_reader_ref, reader_id),
};
static const struct fdesc state_f[] = {
	NUM(1, K_U64, F_REQ, struct ipc_ctl_state, reader_id),
	VIEW(2, K_BYTES, F_REQ | F_NONEMPTY, struct ipc_ctl_state, state, state_len,
	     IPC_CTL_STATE_MAX),
};
static const struct fdesc pipeline_f[] = {
	STR(1, F_REQ | F_NONEMPTY, struct ipc_ctl_pipeline_info, name),
	NUM(2, K_FP, F_REQ, struct ipc_ctl_pipeline_info, fingerprint),
	NUM(3, K_U32, 0, struct ipc_ctl_pipeline_info, status),
	NUM(4, K_U32, 0, struct ipc_ctl_pipeline_info, n_readers),
	NUM(5, K_U64, 0, struct ipc_ctl_pipeline_info, batches_published),
	NUM(6, K_U32, 0, struct ipc_ctl_pipeline_info, slots_used),
	NUM(7, K_U32, 0, struct ipc_ctl_pipeline_info, n_slots),
};
static const struct mdesc pipeline_d =
	MDESC("pipeline", 0, false, struct ipc_ctl_pipeline_info, pipeline_f, check_pipeline);
static const struct fdesc list_reply_f[] = {
	SEQ(1, struct ipc_ctl_list_reply, pipelines, n_pipelines, &pipeline_d),
};
static const struct fdesc stats_f[] = {
	STR(1, F_REQ | F_NONEMPTY, struct ipc_ctl_stats, name),
};
static const struct fdesc remove_f[] = {
	STR(1, F_REQ | F_NONEMPTY, struct ipc_ctl_remove, name),
};
static const struct fdesc stat_f[] = {
	STR(1, F_REQ | F_NONEMPTY, struct ipc_ctl_stat, key),
	NUM(2, K_I64, F_REQ, struct ipc_ctl_stat, value),
};
static const struct mdesc stat_d = MDESC("stat", 0, false, struct ipc_ctl_stat, stat_f, NULL);
static const struct fdesc stats_reply_f[] = {
	STR(1, F_REQ | F_NONEMPTY, struct ipc_ctl_stats_reply, name),
	SEQ(2, struct ipc_ctl_stats_reply, stats, n_stats, &stat_d),
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
static const struct mdesc register_d = MDESC("ctl REGISTER", IPC_CTL_REGISTER, false,
					     struct ipc_ctl_register, register_f, check_register);
static const struct mdesc registered_d = MDESC("ctl REGISTERED", IPC_CTL_REGISTERED, false,
					       struct ipc_ctl_registered, registered_f, NULL);
static const struct mdesc attach_d =
	MDESC("ctl ATTACH", IPC_CTL_ATTACH, false, struct ipc_ctl_attach, attach_f, check_attach);
static const struct mdesc attached_d =
	MDESC("ctl ATTACHED", IPC_CTL_ATTACHED, false, struct ipc_ctl_attached, attached_f, NULL);
static const struct mdesc detach_d =
	MDESC("ctl DETACH", IPC_CTL_DETACH, false, struct ipc_ctl_reader_ref, reader_ref_f, NULL);
static const struct mdesc save_state_d = MDESC("ctl SAVE_STATE", IPC_CTL_SAVE_STATE, false,
					       struct ipc_ctl_reader_ref, reader_ref_f, NULL);
static const struct mdesc detached_d = MDESC("ctl DETACHED", IPC_CTL_DETACHED, false,
					     struct ipc_ctl_reader_ref, reader_ref_f, NULL);
static const struct mdesc state_d =
	MDESC("ctl STATE", IPC_CTL_STATE, false, struct ipc_ctl_state, state_f, NULL);
static const struct mdesc list_reply_d = MDESC("ctl LIST_REPLY", IPC_CTL_LIST_REPLY, false,
					       struct ipc_ctl_list_reply, list_reply_f, NULL);
static const struct mdesc stats_d =
	MDESC("ctl STATS", IPC_CTL_STATS, false, struct ipc_ctl_stats, stats_f, NULL);
static const struct mdesc stats_reply_d = MDESC("ctl STATS_REPLY", IPC_CTL_STATS_REPLY, false,
						struct ipc_ctl_stats_reply, stats_reply_f, NULL);
static const struct mdesc remove_d =
	MDESC("ctl REMOVE", IPC_CTL_REMOVE, false, struct ipc_ctl_remove, remove_f, NULL);
static const struct mdesc removed_d =
	MDESC("ctl REMOVED", IPC_CTL_REMOVED, false, struct ipc_ctl_remove, remove_f, NULL);
static const struct mdesc error_d =
	MDESC("ctl ERROR", IPC_CTL_ERROR, true, struct ipc_ctl_error, error_f, check_error);
static const struct mdesc shutdown_d =
	MDESC("ctl SHUTDOWN", IPC_CTL_SHUTDOWN, false, struct ipc_ctl_shutdown, shutdown_f, NULL);

/* The largest decoded struct: decoders fill one of these and copy it out on success. */
union any_msg {
	struct ipc_ctl_hello hello;
	struct ipc_ctl_hello_ok hello_ok;
	struct ipc_ctl_register reg;
	struct ipc_ctl_registered registered;
	struct ipc_ctl_attach attach;
	struct ipc_ctl_attached attached;
	struct ipc_ctl_reader_ref ref;
	struct ipc_ctl_state state;
	struct ipc_ctl_list_reply list_reply;
	struct ipc_ctl_stats stats;
	struct ipc_ctl_stats_reply stats_reply;
	struct ipc_ctl_remove remove;
	struct ipc_ctl_error error;
	struct ipc_ctl_shutdown shutdown;
};

/* ---- struct access ---- */

static uint32_t get_u32(const void *m, size_t off)
{
	uint32_t v;

	memcpy(&v, (const uint8_t *)m + off, sizeof(v));
	return v;
}

static const void *get_ptr(const void *m, size_t off)
{
	const void *p;

	memcpy(&p, (const uint8_t *)m + off, sizeof(p));
	return p;
}

static void set_ptr(void *m, size_t off, const void *p)
{
	memcpy((uint8_t *)m + off, &p, sizeof(p));
}

static bool is_zero(const void *p, size_t n)
{
	const uint8_t *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

/* Free the arrays a decoder allocated in m (K_SEQ) and zero their pointers and counts. */
static void free_seqs(const struct mdesc *d, void *m)
{
	unsigned i;

	for (i = 0; i < d->n; i++) {
		if (d->f[i].kind != K_SEQ)
			continue;
		free((void *)get_ptr(m, d->f[i].off));
		set_ptr(m, d->f[i].off, NULL);
		memset((uint8_t *)m + d->f[i].off_n, 0, sizeof(uint32_t));
	}
}

/* ---- encoding ---- */

/* The rules (lengths, non-empty, the check function) for one struct, as the decoder has them. */
static int check_struct(const struct mdesc *d, const void *m)
{
	unsigned i;
	uint32_t k;

	for (i = 0; i < d->n; i++) {
		const struct fdesc *f = &d->f[i];
		const uint8_t *v = (const uint8_t *)m + f->off;
		size_t len = 0;

		switch (f->kind) {
		case K_STR:
			len = strnlen((const char *)v, f->max);
			if (len == f->max)
				return -EINVAL;
			break;
		case K_TEXT:
		case K_BYTES:
			len = get_u32(m, f->off_n);
			if (len > f->max || (len && !get_ptr(m, f->off)))
				return -EINVAL;
			if (f->kind == K_TEXT && len && memchr(get_ptr(m, f->off), '\0', len))
				return -EINVAL;
			break;
		case K_SHAPE:
			if (get_u32(m, f->off_n) > f->max)
				return -EINVAL;
			break;
		case K_SEQ:
			k = get_u32(m, f->off_n);
			if (k && !get_ptr(m, f->off))
				return -EINVAL;
			for (len = 0; len < k; len++)
				if (check_struct(f->sub, (const uint8_t *)get_ptr(m, f->off) +
								 len * f->sub->size) < 0)
					return -EINVAL;
			len = 1;
			break;
		default:
			len = 1;
			break;
		}
		if ((f->flags & F_NONEMPTY) && len == 0)
			return -EINVAL;
	}
	if (d->check && d->check(m, d->what, NULL, 0) < 0)
		return -EINVAL;
	return 0;
}

static void put_fields(struct ipc_ctl_builder *b, const struct mdesc *d, const void *m)
{
	unsigned i;
	uint32_t k, n;

	for (i = 0; i < d->n && !b->err; i++) {
		const struct fdesc *f = &d->f[i];
		const uint8_t *v = (const uint8_t *)m + f->off;
		bool opt = !(f->flags & F_REQ);
		uint8_t shape[IPC_BATCH_MAX_RANK * 8];
		uint64_t x64;
		uint32_t x32;
		bool xb;
		size_t mark;

		switch (f->kind) {
		case K_U32:
		case K_I32:
			memcpy(&x32, v, 4);
			if (x32 || !opt)
				ipc_ctl_put_u32(b, f->tag, x32);
			break;
		case K_U64:
		case K_I64:
			memcpy(&x64, v, 8);
			if (x64 || !opt)
				ipc_ctl_put_u64(b, f->tag, x64);
			break;
		case K_BOOL:
			memcpy(&xb, v, sizeof(xb));
			if (xb || !opt)
				ipc_ctl_put_u32(b, f->tag, xb ? 1 : 0);
			break;
		case K_STR:
			n = (uint32_t)strnlen((const char *)v, f->max);
			if (n || !opt)
				ipc_ctl_put_str(b, f->tag, (const char *)v, n);
			break;
		case K_TEXT:
		case K_BYTES:
			n = get_u32(m, f->off_n);
			if (n || !opt)
				ipc_ctl_put_bytes(b, f->tag, get_ptr(m, f->off), n);
			break;
		case K_FP:
			if (!opt || !is_zero(v, IPC_CTL_FP_LEN))
				ipc_ctl_put_bytes(b, f->tag, v, IPC_CTL_FP_LEN);
			break;
		case K_SHAPE:
			n = get_u32(m, f->off_n);
			for (k = 0; k < n; k++) {
				memcpy(&x64, v + k * 8, 8);
				x64 = htole64(x64);
				memcpy(shape + k * 8, &x64, 8);
			}
			if (n || !opt)
				ipc_ctl_put_bytes(b, f->tag, shape, (size_t)n * 8);
			break;
		case K_SEQ:
			n = get_u32(m, f->off_n);
			for (k = 0; k < n && !b->err; k++) {
				mark = ipc_ctl_put_begin(b, f->tag);
				put_fields(b, f->sub,
					   (const uint8_t *)get_ptr(m, f->off) + k * f->sub->size);
				ipc_ctl_put_end(b, mark);
			}
			break;
		}
	}
}

static int encode(const struct mdesc *d, uint16_t type, void *buf, size_t cap, uint32_t req_id,
		  const void *m, size_t *ret_len)
{
	struct ipc_ctl_builder b;

	if (!m || !ret_len || check_struct(d, m) < 0)
		return -EINVAL;
	ipc_ctl_builder_init(&b, buf, cap, type, req_id);
	put_fields(&b, d, m);
	return ipc_ctl_builder_finish(&b, ret_len);
}

/* ---- decoding ---- */

static const struct fdesc *find_field(const struct mdesc *d, uint16_t tag)
{
	unsigned i;

	for (i = 0; i < d->n; i++)
		if (d->f[i].tag == tag)
			return &d->f[i];
	return NULL;
}

static int want_len(const struct fdesc *f, const struct ipc_ctl_field *fld, uint32_t want,
		    const char *what, char *emsg, size_t cap)
{
	if (fld->len != want)
		return ipc_errmsg(-EBADMSG, emsg, cap, "%s: %s (tag %u): length %u, expected %u",
				  what, f->name, f->tag, fld->len, want);
	return 0;
}

/* Store one field's value in m (every kind but K_SEQ). */
static int get_value(const struct fdesc *f, const struct ipc_ctl_field *fld, void *m,
		     const char *what, char *emsg, size_t cap)
{
	uint8_t *v = (uint8_t *)m + f->off;
	const void *nul;
	uint64_t x64;
	uint32_t x32, k;
	bool xb;
	int r;

	switch (f->kind) {
	case K_U32:
	case K_I32:
	case K_BOOL:
		r = want_len(f, fld, 4, what, emsg, cap);
		if (r < 0)
			return r;
		memcpy(&x32, fld->val, 4);
		x32 = le32toh(x32);
		if (f->kind != K_BOOL) {
			memcpy(v, &x32, 4);
			return 0;
		}
		if (x32 > 1)
			return ipc_errmsg(-EBADMSG, emsg, cap,
					  "%s: %s (tag %u): expected 0 or 1, got %u", what, f->name,
					  f->tag, x32);
		xb = x32 == 1;
		memcpy(v, &xb, sizeof(xb));
		return 0;
	case K_U64:
	case K_I64:
		r = want_len(f, fld, 8, what, emsg, cap);
		if (r < 0)
			return r;
		memcpy(&x64, fld->val, 8);
		x64 = le64toh(x64);
		memcpy(v, &x64, 8);
		return 0;
	case K_FP:
		r = want_len(f, fld, IPC_CTL_FP_LEN, what, emsg, cap);
		if (r == 0)
			memcpy(v, fld->val, IPC_CTL_FP_LEN);
		return r;
	case K_SHAPE:
		if (fld->len % 8 || fld->len / 8 > f->max)
			return ipc_errmsg(-EBADMSG, emsg, cap,
					  "%s: %s (tag %u): length %u, expected a multiple of 8 up "
					  "to %zu",
					  what, f->name, f->tag, fld->len, f->max * 8);
		for (k = 0; k < fld->len / 8; k++) {
			memcpy(&x64, fld->val + k * 8, 8);
			x64 = le64toh(x64);
			memcpy(v + k * 8, &x64, 8);
		}
		x32 = fld->len / 8;
		memcpy((uint8_t *)m + f->off_n, &x32, 4);
		return 0;
	case K_STR:
	case K_TEXT:
	case K_BYTES:
		break;
	default:
		return -EINVAL;
	}

	/* Strings and bytes. */
	k = f->kind == K_STR ? (uint32_t)(f->max - 1) : (uint32_t)f->max;
	if (fld->len > k)
		return ipc_errmsg(-EBADMSG, emsg, cap, "%s: %s (tag %u): %u bytes, at most %u",
				  what, f->name, f->tag, fld->len, k);
	if ((f->flags & F_NONEMPTY) && fld->len == 0)
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: %s (tag %u): empty, expected at least 1 byte", what, f->name,
				  f->tag);
	nul = f->kind == K_BYTES ? NULL : memchr(fld->val, '\0', fld->len);
	if (nul)
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: %s (tag %u): string holds a NUL at byte %zu", what, f->name,
				  f->tag, (size_t)((const uint8_t *)nul - fld->val));
	if (f->kind == K_STR) {
		memcpy(v, fld->val, fld->len);
		v[fld->len] = '\0';
	} else {
		set_ptr(m, f->off, fld->val);
		memcpy((uint8_t *)m + f->off_n, &fld->len, 4);
	}
	return 0;
}

#define MAX_SEQ 4 /* K_SEQ fields in one table */

/*
 * Decode the fields [body, body + len) into m (d->size bytes, zeroed here). On failure the
 * arrays allocated so far are freed. what names the message (or the entry) in errors.
 */
static int get_fields(const struct mdesc *d, const uint8_t *body, size_t len, void *m,
		      const char *what, char *emsg, size_t cap)
{
	uint32_t seq_n[MAX_SEQ] = { 0 };
	const struct fdesc *seq_f[MAX_SEQ];
	unsigned n_seq = 0, i;
	struct ipc_ctl_reader rd;
	struct ipc_ctl_field fld;
	uint64_t repeated = 0;
	const struct fdesc *f;
	int r;

	memset(m, 0, d->size);
	for (i = 0; i < d->n; i++)
		if (d->f[i].kind == K_SEQ && n_seq < MAX_SEQ) {
			repeated |= UINT64_C(1) << d->f[i].tag;
			seq_f[n_seq++] = &d->f[i];
		}

	ipc_ctl_reader_init(&rd, body, len, repeated, what);
	while ((r = ipc_ctl_reader_next(&rd, &fld, emsg, cap)) == 1) {
		f = find_field(d, fld.tag);
		if (!f)
			continue; /* unknown: a newer peer's field */
		if (f->kind == K_SEQ) {
			for (i = 0; i < n_seq; i++)
				if (seq_f[i] == f)
					seq_n[i]++;
			continue;
		}
		r = get_value(f, &fld, m, what, emsg, cap);
		if (r < 0)
			return r;
	}
	if (r < 0)
		return r;
	for (i = 0; i < d->n; i++)
		if ((d->f[i].flags & F_REQ) && !(rd.seen & (UINT64_C(1) << d->f[i].tag)))
			return ipc_errmsg(-EBADMSG, emsg, cap, "%s: missing field %s (tag %u)",
					  what, d->f[i].name, d->f[i].tag);

	/* Second pass: the entries of each repeated field, now that their number is known. */
	for (i = 0; i < n_seq; i++) {
		const struct mdesc *sub = seq_f[i]->sub;
		uint8_t *arr;
		uint32_t k = 0;

		if (!seq_n[i])
			continue;
		arr = calloc(seq_n[i], sub->size);
		if (!arr) {
			free_seqs(d, m);
			return -ENOMEM;
		}
		set_ptr(m, seq_f[i]->off, arr);
		memcpy((uint8_t *)m + seq_f[i]->off_n, &seq_n[i], 4);
		ipc_ctl_reader_init(&rd, body, len, repeated, what);
		while (ipc_ctl_reader_next(&rd, &fld, NULL, 0) == 1) {
			char sub_what[96];

			if (fld.tag != seq_f[i]->tag || k >= seq_n[i])
				continue;
			snprintf(sub_what, sizeof(sub_what), "%s: %s[%u]", what, seq_f[i]->name, k);
			r = get_fields(sub, fld.val, fld.len, arr + (size_t)k * sub->size, sub_what,
				       emsg, cap);
			if (r < 0) {
				free_seqs(d, m);
				return r;
			}
			k++;
		}
	}
	if (d->check) {
		r = d->check(m, what, emsg, cap);
		if (r < 0) {
			free_seqs(d, m);
			return r;
		}
	}
	return 0;
}

static int decode(const struct mdesc *d, const struct ipc_ctl_msg *msg, void *ret, char *emsg,
		  size_t cap)
{
	union any_msg tmp;
	int r;

	if (!msg || !ret || (!msg->body && msg->body_len))
		return -EINVAL;
	if (msg->type != d->type)
		return ipc_errmsg(-EBADMSG, emsg, cap, "%s: got a %s message (type 0x%04x)",
				  d->what, ipc_ctl_type_name(msg->type), msg->type);
	if (!d->frozen && msg->version != IPC_CTL_VERSION)
		return ipc_errmsg(-EPROTONOSUPPORT, emsg, cap,
				  "%s: peer speaks protocol version %u, this side speaks %d",
				  d->what, msg->version, IPC_CTL_VERSION);
	r = get_fields(d, msg->body, msg->body_len, &tmp, d->what, emsg, cap);
	if (r == 0)
		memcpy(ret, &tmp, d->size);
	return r;
}

/* ---- the typed API ---- */

#define CODEC(name, desc, st)                                                          \
	int ipc_ctl_encode_##name(void *buf, size_t cap, uint32_t req_id, const st *m, \
				  size_t *ret_len)                                     \
	{                                                                              \
		return encode(&desc, desc.type, buf, cap, req_id, m, ret_len);         \
	}                                                                              \
	int ipc_ctl_decode_##name(const struct ipc_ctl_msg *msg, st *ret, char *emsg,  \
				  size_t emsg_cap)                                     \
	{                                                                              \
		return decode(&desc, msg, ret, emsg, emsg_cap);                        \
	}

CODEC(hello, hello_d, struct ipc_ctl_hello)
CODEC(hello_ok, hello_ok_d, struct ipc_ctl_hello_ok)
CODEC(register, register_d, struct ipc_ctl_register)
CODEC(registered, registered_d, struct ipc_ctl_registered)
CODEC(attach, attach_d, struct ipc_ctl_attach)
CODEC(attached, attached_d, struct ipc_ctl_attached)
CODEC(state, state_d, struct ipc_ctl_state)
CODEC(list_reply, list_reply_d, struct ipc_ctl_list_reply)
CODEC(stats, stats_d, struct ipc_ctl_stats)
CODEC(stats_reply, stats_reply_d, struct ipc_ctl_stats_reply)
CODEC(error, error_d, struct ipc_ctl_error)

int ipc_ctl_encode_remove(void *buf, size_t cap, unsigned type, uint32_t req_id,
			  const struct ipc_ctl_remove *m, size_t *ret_len)
{
	if (type != IPC_CTL_REMOVE && type != IPC_CTL_REMOVED)
		return -EINVAL;
	const struct mdesc *d = type == IPC_CTL_REMOVE ? &remove_d : &removed_d;
	return encode(d, d->type, buf, cap, req_id, m, ret_len);
}

int ipc_ctl_decode_remove(const struct ipc_ctl_msg *msg, unsigned type, struct ipc_ctl_remove *ret,
			  char *emsg, size_t emsg_cap)
{
	if (type != IPC_CTL_REMOVE && type != IPC_CTL_REMOVED)
		return -EINVAL;
	return decode(type == IPC_CTL_REMOVE ? &remove_d : &removed_d, msg, ret, emsg, emsg_cap);
}

int ipc_ctl_encode_shutdown(void *buf, size_t cap, const struct ipc_ctl_shutdown *m,
			    size_t *ret_len)
{
	return encode(&shutdown_d, IPC_CTL_SHUTDOWN, buf, cap, 0, m, ret_len);
}

int ipc_ctl_decode_shutdown(const struct ipc_ctl_msg *msg, struct ipc_ctl_shutdown *ret, char *emsg,
			    size_t emsg_cap)
{
	return decode(&shutdown_d, msg, ret, emsg, emsg_cap);
}

static const struct mdesc *ref_desc(uint16_t type)
{
	switch (type) {
	case IPC_CTL_DETACH:
		return &detach_d;
	case IPC_CTL_SAVE_STATE:
		return &save_state_d;
	case IPC_CTL_DETACHED:
		return &detached_d;
	default:
		return NULL;
	}
}

int ipc_ctl_encode_reader_ref(void *buf, size_t cap, uint16_t type, uint32_t req_id,
			      const struct ipc_ctl_reader_ref *m, size_t *ret_len)
{
	const struct mdesc *d = ref_desc(type);

	return d ? encode(d, type, buf, cap, req_id, m, ret_len) : -EINVAL;
}

int ipc_ctl_decode_reader_ref(const struct ipc_ctl_msg *msg, uint16_t type,
			      struct ipc_ctl_reader_ref *ret, char *emsg, size_t emsg_cap)
{
	const struct mdesc *d = ref_desc(type);

	return d ? decode(d, msg, ret, emsg, emsg_cap) : -EINVAL;
}

int ipc_ctl_encode_empty(void *buf, size_t cap, uint16_t type, uint32_t req_id, size_t *ret_len)
{
	struct ipc_ctl_builder b;

	if (!ret_len)
		return -EINVAL;
	ipc_ctl_builder_init(&b, buf, cap, type, req_id);
	return ipc_ctl_builder_finish(&b, ret_len);
}

int ipc_ctl_decode_empty(const struct ipc_ctl_msg *msg, uint16_t type, char *emsg, size_t emsg_cap)
{
	struct ipc_ctl_reader rd;
	struct ipc_ctl_field fld;
	const char *name = ipc_ctl_type_name(type);
	char what[32];
	int r;

	if (!msg || (!msg->body && msg->body_len))
		return -EINVAL;
	if (msg->type != type)
		return ipc_errmsg(-EBADMSG, emsg, emsg_cap,
				  "ctl %s: got a %s message (type 0x%04x)", name,
				  ipc_ctl_type_name(msg->type), msg->type);
	if (msg->version != IPC_CTL_VERSION)
		return ipc_errmsg(-EPROTONOSUPPORT, emsg, emsg_cap,
				  "ctl %s: peer speaks protocol version %u, this side speaks %d",
				  name, msg->version, IPC_CTL_VERSION);
	snprintf(what, sizeof(what), "ctl %s", name);
	ipc_ctl_reader_init(&rd, msg->body, msg->body_len, 0, what);
	while ((r = ipc_ctl_reader_next(&rd, &fld, emsg, emsg_cap)) == 1)
		;
	return r;
}

void ipc_ctl_attached_fini(struct ipc_ctl_attached *m)
{
	if (m)
		free_seqs(&attached_d, m);
}

void ipc_ctl_list_reply_fini(struct ipc_ctl_list_reply *m)
{
	if (m)
		free_seqs(&list_reply_d, m);
}

void ipc_ctl_stats_reply_fini(struct ipc_ctl_stats_reply *m)
{
	if (m)
		free_seqs(&stats_reply_d, m);
}
