/* SPDX-License-Identifier: Apache-2.0 */
/* Control protocol: the codec, one encoder and one decoder that walk a message type's table. */
#include "ctl_msg_internal.h"

#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"

/*
 * The tables are in ctl_msg_conn.c (HELLO, HELLO_OK, ERROR, SHUTDOWN), ctl_msg_reader.c
 * (REGISTER, ATTACH, DETACH, SAVE_STATE and their replies) and ctl_msg_admin.c (LIST, STATS,
 * REMOVE and their replies); ctl_msg_internal.h says how a table is written.
 */

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
void ipc_ctl_msg_free_seqs_(const struct mdesc *d, void *m)
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
			if (x32 != (uint32_t)f->dflt || !opt)
				ipc_ctl_put_u32(b, f->tag, x32);
			break;
		case K_U64:
		case K_I64:
			memcpy(&x64, v, 8);
			if (x64 != f->dflt || !opt)
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

int ipc_ctl_msg_encode_(const struct mdesc *d, uint16_t type, void *buf, size_t cap,
			uint32_t req_id, const void *m, size_t *ret_len)
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

/* What an absent optional number reads as (NUM_OR; the others are zeroed). */
static void set_default(const struct fdesc *f, void *m)
{
	uint32_t x32 = (uint32_t)f->dflt;

	if (f->kind == K_U32 || f->kind == K_I32)
		memcpy((uint8_t *)m + f->off, &x32, 4);
	else if (f->kind == K_U64 || f->kind == K_I64)
		memcpy((uint8_t *)m + f->off, &f->dflt, 8);
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
		} else if (d->f[i].dflt) {
			set_default(&d->f[i], m);
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
			ipc_ctl_msg_free_seqs_(d, m);
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
				ipc_ctl_msg_free_seqs_(d, m);
				return r;
			}
			k++;
		}
	}
	if (d->check) {
		r = d->check(m, what, emsg, cap);
		if (r < 0) {
			ipc_ctl_msg_free_seqs_(d, m);
			return r;
		}
	}
	return 0;
}

int ipc_ctl_msg_decode_(const struct mdesc *d, const struct ipc_ctl_msg *msg, void *ret, char *emsg,
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

/* ---- messages without fields ---- */

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
