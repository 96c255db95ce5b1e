/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for ipc/ctl_msg*.c on malformed input: headers, fields, rules, every truncation. */
#include "ipc/ctl.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ctl_fixture.h"

/* ---- helpers ---- */

/* A message of type with a hand-written body (for malformed bodies). */
static size_t raw_msg(uint8_t *out, uint16_t type, uint32_t req_id, const void *body, size_t n)
{
	put32(out, IPC_CTL_MAGIC);
	put16(out + 4, IPC_CTL_VERSION);
	put16(out + 6, type);
	put32(out + 8, 0);
	put32(out + 12, req_id);
	put32(out + 16, (uint32_t)n);
	if (n)
		memcpy(out + IPC_CTL_HDR_SIZE, body, n);
	return IPC_CTL_HDR_SIZE + n;
}

/* Append a field to a hand-written body. */
static size_t raw_field(uint8_t *body, size_t at, uint16_t tag, const void *v, uint32_t n)
{
	put16(body + at, tag);
	put32(body + at + 2, n);
	if (n)
		memcpy(body + at + 6, v, n);
	return at + 6 + n;
}

static size_t raw_u32(uint8_t *body, size_t at, uint16_t tag, uint32_t v)
{
	uint8_t b[4];

	put32(b, v);
	return raw_field(body, at, tag, b, 4);
}

/* ---- malformed input ---- */

static void test_bad_header(void **state)
{
	struct ipc_ctl_msg m;
	size_t len, i;

	(void)state;
	assert_int_equal(ipc_ctl_encode_stats(buf, sizeof(buf), 1,
					      &(struct ipc_ctl_stats){ .name = "a" }, &len),
			 0);
	for (i = 0; i < IPC_CTL_HDR_SIZE; i++)
		EXPECT_BAD(ipc_ctl_msg_parse(buf, i, &m, emsg, sizeof(emsg)), "shorter than the "
									      "20-byte header");
	EXPECT_BAD(ipc_ctl_msg_parse(NULL, 0, &m, emsg, sizeof(emsg)), "shorter");

	/* Length mismatch: the datagram is shorter or longer than the header says. */
	EXPECT_BAD(ipc_ctl_msg_parse(buf, len - 1, &m, emsg, sizeof(emsg)), "header says 7 body "
									    "bytes, the message "
									    "has 6");
	EXPECT_BAD(ipc_ctl_msg_parse(buf, len + 1, &m, emsg, sizeof(emsg)), "header says 7 body "
									    "bytes, the message "
									    "has 8");
	EXPECT_BAD(ipc_ctl_msg_parse(buf, IPC_CTL_MAX_MSG + 1, &m, emsg, sizeof(emsg)), "at most "
											"65536");

	/* Unknown flags: optional ones are ignored, required ones are not. */
	put32(buf + 8, 0x8000);
	assert_int_equal(ipc_ctl_msg_parse(buf, len, &m, emsg, sizeof(emsg)), 0);
	assert_int_equal(m.flags, 0x8000);
	put32(buf + 8, 0x10000);
	EXPECT_BAD(ipc_ctl_msg_parse(buf, len, &m, emsg, sizeof(emsg)), "unknown required flags");
	put32(buf + 8, 0);

	/* Bad magic, each byte. */
	for (i = 0; i < 4; i++) {
		buf[i] ^= 0x20;
		EXPECT_BAD(ipc_ctl_msg_parse(buf, len, &m, emsg, sizeof(emsg)), "bad magic");
		buf[i] ^= 0x20;
	}
	assert_int_equal(ipc_ctl_msg_parse(buf, len, &m, emsg, sizeof(emsg)), 0);

	/* A NULL message buffer is fine. */
	assert_int_equal(ipc_ctl_msg_parse(buf, 3, &m, NULL, 0), -EBADMSG);
}

static void test_bad_tlv(void **state)
{
	uint8_t body[256], big[300];
	struct ipc_ctl_stats st;
	struct ipc_ctl_hello h;
	struct ipc_ctl_msg m;
	size_t n, len;

	(void)state;
	/* Truncated field header: 1..5 bytes after the last field. */
	for (n = 1; n < 6; n++) {
		size_t at = raw_field(body, 0, 1, "ab", 2);

		memset(body + at, 1, n);
		len = raw_msg(buf, IPC_CTL_STATS, 1, body, at + n);
		m = parse_ok(buf, len, IPC_CTL_STATS, 1);
		EXPECT_BAD(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)), "truncated field "
									      "header at byte 8");
	}
	/* A length past the end (and a huge one that would wrap a pointer). */
	n = raw_field(body, 0, 1, "abc", 3);
	put32(body + 2, 4);
	len = raw_msg(buf, IPC_CTL_STATS, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_STATS, 1);
	EXPECT_BAD(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)), "field 1 at byte 0: length 4 "
								      "runs past the end (3 bytes "
								      "left)");
	put32(body + 2, 0xffffffffu);
	len = raw_msg(buf, IPC_CTL_STATS, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_STATS, 1);
	EXPECT_BAD(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)), "runs past the end");

	/* Duplicate tag. */
	n = raw_field(body, 0, 1, "abc", 3);
	n = raw_field(body, n, 1, "abd", 3);
	len = raw_msg(buf, IPC_CTL_STATS, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_STATS, 1);
	EXPECT_BAD(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)), "ctl STATS: field 1 at byte "
								      "9: duplicate tag");

	/* Tag 0. */
	n = raw_field(body, 0, 0, "abc", 3);
	len = raw_msg(buf, IPC_CTL_STATS, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_STATS, 1);
	EXPECT_BAD(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)), "tag 0 is reserved");

	/* Strings: an embedded NUL, one byte too long, empty where it must not be. */
	n = raw_field(body, 0, 1, "ab\0c", 4);
	len = raw_msg(buf, IPC_CTL_STATS, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_STATS, 1);
	EXPECT_BAD(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)), "ctl STATS: name (tag 1): "
								      "string holds a NUL at byte "
								      "2");
	memset(big, 'n', sizeof(big));
	n = raw_field(body, 0, 1, NULL, 0);
	len = raw_msg(buf, IPC_CTL_STATS, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_STATS, 1);
	EXPECT_BAD(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)), "name (tag 1): empty");
	{
		uint8_t b2[400];

		n = raw_field(b2, 0, 1, big, IPC_CTL_NAME_MAX + 1);
		len = raw_msg(buf, IPC_CTL_STATS, 1, b2, n);
		m = parse_ok(buf, len, IPC_CTL_STATS, 1);
		EXPECT_BAD(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)), "name (tag 1): 256 "
									      "bytes, at most 255");
		n = raw_field(b2, 0, 1, big, IPC_CTL_NAME_MAX);
		len = raw_msg(buf, IPC_CTL_STATS, 1, b2, n);
		m = parse_ok(buf, len, IPC_CTL_STATS, 1);
		assert_int_equal(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)), 0);
		assert_int_equal(strlen(st.name), IPC_CTL_NAME_MAX);
	}

	/* Numbers of the wrong width, a bool that is not 0/1, a missing required field. */
	n = raw_field(body, 0, 1, "\1\0\0\0\0\0\0\0", 8);
	n = raw_u32(body, n, 2, 1);
	len = raw_msg(buf, IPC_CTL_HELLO, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_HELLO, 1);
	EXPECT_BAD(ipc_ctl_decode_hello(&m, &h, emsg, sizeof(emsg)), "ctl HELLO: version (tag 1): "
								     "length 8, expected 4");
	n = raw_u32(body, 0, 1, 1);
	len = raw_msg(buf, IPC_CTL_HELLO, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_HELLO, 1);
	EXPECT_BAD(ipc_ctl_decode_hello(&m, &h, emsg, sizeof(emsg)), "ctl HELLO: missing field pid "
								     "(tag 2)");
	{
		struct ipc_ctl_registered r;
		uint8_t fp[IPC_CTL_FP_LEN] = { 0 };

		n = raw_field(body, 0, 1, "x", 1);
		n = raw_field(body, n, 2, fp, sizeof(fp));
		n = raw_u32(body, n, 3, 2);
		len = raw_msg(buf, IPC_CTL_REGISTERED, 1, body, n);
		m = parse_ok(buf, len, IPC_CTL_REGISTERED, 1);
		EXPECT_BAD(ipc_ctl_decode_registered(&m, &r, emsg, sizeof(emsg)), "created (tag "
										  "3): expected 0 "
										  "or 1, got 2");
		n = raw_field(body, 0, 1, "x", 1);
		n = raw_field(body, n, 2, fp, sizeof(fp) - 1);
		len = raw_msg(buf, IPC_CTL_REGISTERED, 1, body, n);
		m = parse_ok(buf, len, IPC_CTL_REGISTERED, 1);
		EXPECT_BAD(ipc_ctl_decode_registered(&m, &r, emsg, sizeof(emsg)), "fingerprint "
										  "(tag 2): length "
										  "15, expected "
										  "16");
	}

	/* Unknown tags are skipped, small and large, with values of any length. */
	n = raw_field(body, 0, 60, "whatever", 8);
	n = raw_u32(body, n, 1, 1);
	n = raw_field(body, n, 1000, NULL, 0);
	n = raw_u32(body, n, 2, 99);
	n = raw_field(body, n, 1000, "again", 5); /* tags >= 64 are not tracked */
	len = raw_msg(buf, IPC_CTL_HELLO, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_HELLO, 1);
	assert_int_equal(ipc_ctl_decode_hello(&m, &h, emsg, sizeof(emsg)), 0);
	assert_int_equal(h.pid, 99);
	/* ... but an unknown tag below 64 may not repeat either. */
	n = raw_field(body, n, 60, "x", 1);
	len = raw_msg(buf, IPC_CTL_HELLO, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_HELLO, 1);
	EXPECT_BAD(ipc_ctl_decode_hello(&m, &h, emsg, sizeof(emsg)), "field 60");

	/* The wrong decoder for the type. */
	EXPECT_BAD(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)), "ctl STATS: got a HELLO "
								      "message (type 0x0001)");
	/* LIST carries no fields, but its framing is still checked. */
	n = raw_field(body, 0, 7, "abc", 3);
	len = raw_msg(buf, IPC_CTL_LIST, 1, body, n - 1);
	m = parse_ok(buf, len, IPC_CTL_LIST, 1);
	EXPECT_BAD(ipc_ctl_decode_empty(&m, IPC_CTL_LIST, emsg, sizeof(emsg)), "ctl LIST: field 7");
}

/* The required fields of an ATTACHED, by hand; returns the body's length. */
static size_t attached_required(uint8_t *body)
{
	static const uint8_t u64[8] = { 1 }, fp[IPC_CTL_FP_LEN] = { 0 };
	size_t n;

	n = raw_field(body, 0, 1, u64, 8);
	n = raw_field(body, n, 2, "r", 1);
	n = raw_field(body, n, 3, fp, sizeof(fp));
	n = raw_u32(body, n, 4, 1);
	n = raw_u32(body, n, 5, 4);
	n = raw_field(body, n, 6, u64, 8);
	return raw_field(body, n, 7, u64, 8);
}

static void test_bad_rules(void **state)
{
	struct ipc_ctl_attach a;
	struct ipc_ctl_error e;
	struct ipc_ctl_attached at;
	struct ipc_ctl_tensor_info t[3];
	struct ipc_ctl_list_reply lr;
	struct ipc_ctl_msg m;
	uint8_t body[512], sub[128];
	size_t n, k, len;

	(void)state;
	/* ATTACH with neither name nor spec, with both, a bad mode, a bad rank. */
	n = raw_u32(body, 0, 3, 0);
	len = raw_msg(buf, IPC_CTL_ATTACH, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_ATTACH, 1);
	EXPECT_BAD(ipc_ctl_decode_attach(&m, &a, emsg, sizeof(emsg)), "expected exactly one of "
								      "name and spec, got neither");
	n = raw_field(body, 0, 1, "p", 1);
	n = raw_field(body, n, 2, "{}", 2);
	n = raw_u32(body, n, 3, 0);
	len = raw_msg(buf, IPC_CTL_ATTACH, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_ATTACH, 1);
	EXPECT_BAD(ipc_ctl_decode_attach(&m, &a, emsg, sizeof(emsg)), "got both");
	n = raw_field(body, 0, 1, "p", 1);
	n = raw_u32(body, n, 3, 3);
	len = raw_msg(buf, IPC_CTL_ATTACH, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_ATTACH, 1);
	EXPECT_BAD(ipc_ctl_decode_attach(&m, &a, emsg, sizeof(emsg)), "mode: expected 0");
	n = raw_field(body, 0, 1, "p", 1);
	n = raw_u32(body, n, 3, IPC_CTL_MODE_RANK);
	n = raw_u32(body, n, 4, 4);
	n = raw_u32(body, n, 5, 4);
	len = raw_msg(buf, IPC_CTL_ATTACH, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_ATTACH, 1);
	EXPECT_BAD(ipc_ctl_decode_attach(&m, &a, emsg, sizeof(emsg)), "rank_index 4, rank_count 4: "
								      "expected index < count");
	n = raw_field(body, 0, 1, "p", 1);
	n = raw_u32(body, n, 3, IPC_CTL_MODE_SPLIT);
	n = raw_u32(body, n, 5, 4);
	len = raw_msg(buf, IPC_CTL_ATTACH, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_ATTACH, 1);
	EXPECT_BAD(ipc_ctl_decode_attach(&m, &a, emsg, sizeof(emsg)), "only with mode 2");
	{
		static uint8_t st[IPC_CTL_STATE_MAX + 1];
		static uint8_t b2[IPC_CTL_STATE_MAX + 64];

		n = raw_field(b2, 0, 1, "p", 1);
		n = raw_u32(b2, n, 3, 0);
		n = raw_field(b2, n, 6, st, sizeof(st));
		len = raw_msg(buf, IPC_CTL_ATTACH, 1, b2, n);
		m = parse_ok(buf, len, IPC_CTL_ATTACH, 1);
		EXPECT_BAD(ipc_ctl_decode_attach(&m, &a, emsg, sizeof(emsg)), "state (tag 6): 4097 "
									      "bytes, at most "
									      "4096");
	}

	/* ERROR with a code that is not a negative errno. */
	n = raw_u32(body, 0, 1, 5);
	len = raw_msg(buf, IPC_CTL_ERROR, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_ERROR, 1);
	EXPECT_BAD(ipc_ctl_decode_error(&m, &e, emsg, sizeof(emsg)), "code: expected a negative "
								     "errno, got 5");

	/* A bad entry inside a repeated field is named by its index; nothing leaks. */
	fill_attached(&at, t);
	t[2].dtype = IPC_DTYPE_COUNT_; /* the encoder refuses it ... */
	assert_int_equal(ipc_ctl_encode_attached(buf, sizeof(buf), 1, &at, &len), -EINVAL);
	t[2].dtype = IPC_DTYPE_FLOAT32;
	assert_int_equal(ipc_ctl_encode_attached(buf, sizeof(buf), 1, &at, &len), 0);
	/* ... so corrupt the third tensor's dtype on the wire: find its tag 2 field. */
	m = parse_ok(buf, len, IPC_CTL_ATTACHED, 1);
	{
		uint8_t *p = buf + len - 1;
		const uint8_t want[] = { 2, 0, 4, 0, 0, 0, IPC_DTYPE_FLOAT32, 0, 0, 0 };

		while (p > buf && memcmp(p, want, sizeof(want)))
			p--;
		assert_true(p > buf);
		p[6] = 99;
	}
	EXPECT_BAD(ipc_ctl_decode_attached(&m, &at, emsg, sizeof(emsg)), "ctl ATTACHED: "
									 "tensors[2]: dtype: "
									 "expected 0..13, got 99");

	/* A nested entry with a truncated field and one with a shape of 9 dimensions. */
	k = raw_field(sub, 0, 1, "a", 1);
	k = raw_field(sub, k, 2, "12345678", 8); /* a fingerprint is 16 bytes */
	n = raw_field(body, 0, 1, sub, (uint32_t)k);
	len = raw_msg(buf, IPC_CTL_LIST_REPLY, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_LIST_REPLY, 1);
	EXPECT_BAD(ipc_ctl_decode_list_reply(&m, &lr, emsg, sizeof(emsg)), "ctl LIST_REPLY: "
									   "pipelines[0]: "
									   "fingerprint (tag 2): "
									   "length 8, expected 16");
	k = raw_field(sub, 0, 1, "a", 1);
	k = raw_u32(sub, k, 2, 0);
	{
		uint8_t shape[9 * 8] = { 0 };

		k = raw_field(sub, k, 3, shape, sizeof(shape));
	}
	n = attached_required(body);
	n = raw_field(body, n, 9, sub, (uint32_t)k);
	len = raw_msg(buf, IPC_CTL_ATTACHED, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_ATTACHED, 1);
	EXPECT_BAD(ipc_ctl_decode_attached(&m, &at, emsg, sizeof(emsg)), "ctl ATTACHED: "
									 "tensors[0]: shape (tag "
									 "3): length 72, expected "
									 "a multiple of 8 "
									 "up to 64");
	/* The nested entry's length runs past the message (the outer reader catches it). */
	n = attached_required(body);
	n = raw_field(body, n, 9, sub, (uint32_t)k);
	put32(body + n - k - 4, (uint32_t)k + 1);
	len = raw_msg(buf, IPC_CTL_ATTACHED, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_ATTACHED, 1);
	EXPECT_BAD(ipc_ctl_decode_attached(&m, &at, emsg, sizeof(emsg)), "runs past the end");
}

/* Every truncation of a valid message, with the header patched to match: errors, never a
 * crash or a read past the end (ASan), and the arrays freed. */
static void test_truncations(void **state)
{
	struct ipc_ctl_tensor_info t[3];
	struct ipc_ctl_attached in, out;
	struct ipc_ctl_msg m;
	uint8_t *copy;
	size_t len, cut;
	int r;

	(void)state;
	fill_attached(&in, t);
	assert_int_equal(ipc_ctl_encode_attached(buf, sizeof(buf), 1, &in, &len), 0);
	for (cut = IPC_CTL_HDR_SIZE; cut < len; cut++) {
		copy = malloc(cut);
		assert_non_null(copy);
		memcpy(copy, buf, cut);
		put32(copy + 16, (uint32_t)(cut - IPC_CTL_HDR_SIZE));
		m = parse_ok(copy, cut, IPC_CTL_ATTACHED, 1);
		emsg[0] = '\0';
		r = ipc_ctl_decode_attached(&m, &out, emsg, sizeof(emsg));
		if (r == 0) {
			/* a cut between whole fields: fewer tensors, or no first_epoch (the last,
			   optional field) */
			assert_true(out.n_tensors < 3 ||
				    (out.n_tensors == 3 && out.first_epoch == 0));
			ipc_ctl_attached_fini(&out);
		} else {
			assert_int_equal(r, -EBADMSG);
			assert_true(emsg[0] != '\0');
		}
		free(copy);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_header),
		cmocka_unit_test(test_bad_tlv),
		cmocka_unit_test(test_bad_rules),
		cmocka_unit_test(test_truncations),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
