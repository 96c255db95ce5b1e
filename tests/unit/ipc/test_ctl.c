/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for ipc/ctl.c and ipc/ctl_msg.c: round trips, malformed input, fd passing, credentials. */
#include "ipc/ctl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cmocka.h>

static uint8_t buf[IPC_CTL_MAX_MSG];
static char emsg[512];

/* ---- helpers ---- */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)v);
	put16(p + 2, (uint16_t)(v >> 16));
}

/* Parse b as a message of the given type and request id, or fail the test. */
static struct ipc_ctl_msg parse_ok(const void *b, size_t len, uint16_t type, uint32_t req_id)
{
	struct ipc_ctl_msg m;

	emsg[0] = '\0';
	assert_int_equal(ipc_ctl_msg_parse(b, len, &m, emsg, sizeof(emsg)), 0);
	assert_int_equal(m.version, IPC_CTL_VERSION);
	assert_int_equal(m.type, type);
	assert_int_equal(m.req_id, req_id);
	assert_int_equal(m.body_len, len - IPC_CTL_HDR_SIZE);
	return m;
}

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

/* Expect -EBADMSG with a message containing want. */
#define EXPECT_BAD(call, want)                                                                \
	do {                                                                                  \
		emsg[0] = '\0';                                                               \
		assert_int_equal((call), -EBADMSG);                                           \
		if (!strstr(emsg, (want)))                                                    \
			fail_msg("message \"%s\" does not contain \"%s\"", emsg, (want));     \
	} while (0)

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

static void seqpacket_pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
}

static int make_memfd(const char *name, size_t size)
{
	int fd = memfd_create(name, MFD_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	return fd;
}

/* sendmsg with any number of fds, without ipc_ctl_send()'s checks (a misbehaving peer). */
static void send_raw(int sock, const void *m, size_t len, const int *fds, size_t n)
{
	char cbuf[CMSG_SPACE(sizeof(int) * 8)];
	struct iovec iov = { .iov_base = (void *)m, .iov_len = len };
	struct msghdr mh;
	struct cmsghdr *c;

	assert_true(n <= 8);
	memset(&mh, 0, sizeof(mh));
	memset(cbuf, 0, sizeof(cbuf));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	if (n) {
		mh.msg_control = cbuf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * n);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * n);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
	}
	assert_int_equal(sendmsg(sock, &mh, MSG_NOSIGNAL), (ssize_t)len);
}

static void same_file(int a, int b)
{
	struct stat sa, sb;

	assert_int_equal(fstat(a, &sa), 0);
	assert_int_equal(fstat(b, &sb), 0);
	assert_int_equal(sa.st_ino, sb.st_ino);
	assert_int_equal(sa.st_dev, sb.st_dev);
}

/* ---- round trips ---- */

static void test_hello(void **state)
{
	struct ipc_ctl_hello in = { .version = IPC_CTL_VERSION, .pid = 4242 }, out;
	struct ipc_ctl_hello_ok ok = { .version = IPC_CTL_VERSION, .server_pid = 7,
				       .max_msg = IPC_CTL_MAX_MSG, .max_readers = 64 }, ok2;
	struct ipc_ctl_msg m;
	size_t len;

	(void)state;
	snprintf(in.client, sizeof(in.client), "sluicectl");
	assert_int_equal(ipc_ctl_encode_hello(buf, sizeof(buf), 1, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_HELLO, 1);
	memset(&out, 0x5a, sizeof(out));
	assert_int_equal(ipc_ctl_decode_hello(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.version, IPC_CTL_VERSION);
	assert_int_equal(out.pid, 4242);
	assert_string_equal(out.client, "sluicectl");

	/* The optional client name is left out when empty and decodes as "". */
	in.client[0] = '\0';
	assert_int_equal(ipc_ctl_encode_hello(buf, sizeof(buf), 2, &in, &len), 0);
	assert_int_equal(len, IPC_CTL_HDR_SIZE + 2 * (6 + 4));
	m = parse_ok(buf, len, IPC_CTL_HELLO, 2);
	assert_int_equal(ipc_ctl_decode_hello(&m, &out, emsg, sizeof(emsg)), 0);
	assert_string_equal(out.client, "");

	assert_int_equal(ipc_ctl_encode_hello_ok(buf, sizeof(buf), 1, &ok, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_HELLO_OK, 1);
	assert_int_equal(ipc_ctl_decode_hello_ok(&m, &ok2, emsg, sizeof(emsg)), 0);
	assert_memory_equal(&ok, &ok2, sizeof(ok));
}

static void test_register(void **state)
{
	static const char spec[] = "{\"name\": \"x\", \"type\": \"independent\", \"args\": {}}";
	struct ipc_ctl_register in = { .spec = spec, .spec_len = sizeof(spec) - 1 }, out;
	struct ipc_ctl_registered r = { .created = true }, r2;
	struct ipc_ctl_msg m;
	size_t len;
	int i;

	(void)state;
	assert_int_equal(ipc_ctl_encode_register(buf, sizeof(buf), 9, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_REGISTER, 9);
	assert_int_equal(ipc_ctl_decode_register(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.spec_len, in.spec_len);
	assert_memory_equal(out.spec, spec, in.spec_len);
	assert_true((const uint8_t *)out.spec > buf && (const uint8_t *)out.spec < buf + len);

	snprintf(r.name, sizeof(r.name), "imagenet-train");
	for (i = 0; i < IPC_CTL_FP_LEN; i++)
		r.fingerprint[i] = (uint8_t)(0xf0 + i);
	assert_int_equal(ipc_ctl_encode_registered(buf, sizeof(buf), 9, &r, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_REGISTERED, 9);
	assert_int_equal(ipc_ctl_decode_registered(&m, &r2, emsg, sizeof(emsg)), 0);
	assert_string_equal(r2.name, "imagenet-train");
	assert_memory_equal(r2.fingerprint, r.fingerprint, IPC_CTL_FP_LEN);
	assert_true(r2.created);

	r.created = false;
	assert_int_equal(ipc_ctl_encode_registered(buf, sizeof(buf), 10, &r, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_REGISTERED, 10);
	assert_int_equal(ipc_ctl_decode_registered(&m, &r2, emsg, sizeof(emsg)), 0);
	assert_false(r2.created);
}

static void test_attach(void **state)
{
	static const uint8_t st[5] = { 1, 0, 2, 0, 0xff };
	struct ipc_ctl_attach in, out;
	struct ipc_ctl_msg m;
	size_t len;

	(void)state;
	/* By name, rank mode, with a saved state and a lag policy. */
	memset(&in, 0, sizeof(in));
	snprintf(in.name, sizeof(in.name), "imagenet-train");
	in.mode = IPC_CTL_MODE_RANK;
	in.rank_index = 3;
	in.rank_count = 8;
	in.state = st;
	in.state_len = sizeof(st);
	in.lag_policy = IPC_CTL_LAG_CATCH_UP;
	in.max_lag = 1ull << 40;
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 77, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_ATTACH, 77);
	assert_int_equal(ipc_ctl_decode_attach(&m, &out, emsg, sizeof(emsg)), 0);
	assert_string_equal(out.name, "imagenet-train");
	assert_null(out.spec);
	assert_int_equal(out.spec_len, 0);
	assert_int_equal(out.mode, IPC_CTL_MODE_RANK);
	assert_int_equal(out.rank_index, 3);
	assert_int_equal(out.rank_count, 8);
	assert_int_equal(out.state_len, sizeof(st));
	assert_memory_equal(out.state, st, sizeof(st));
	assert_int_equal(out.lag_policy, IPC_CTL_LAG_CATCH_UP);
	assert_true(out.max_lag == 1ull << 40);

	/* By spec, broadcast, defaults everywhere else. */
	memset(&in, 0, sizeof(in));
	in.spec = "{}";
	in.spec_len = 2;
	in.mode = IPC_CTL_MODE_BROADCAST;
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 78, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_ATTACH, 78);
	assert_int_equal(ipc_ctl_decode_attach(&m, &out, emsg, sizeof(emsg)), 0);
	assert_string_equal(out.name, "");
	assert_int_equal(out.spec_len, 2);
	assert_memory_equal(out.spec, "{}", 2);
	assert_int_equal(out.mode, IPC_CTL_MODE_BROADCAST);
	assert_null(out.state);
	assert_int_equal(out.state_len, 0);
	assert_int_equal(out.max_lag, 0);

	/* Split mode. */
	in.mode = IPC_CTL_MODE_SPLIT;
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 79, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_ATTACH, 79);
	assert_int_equal(ipc_ctl_decode_attach(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.mode, IPC_CTL_MODE_SPLIT);
}

static void fill_attached(struct ipc_ctl_attached *a, struct ipc_ctl_tensor_info *t)
{
	int i;

	memset(a, 0, sizeof(*a));
	memset(t, 0, 3 * sizeof(*t));
	a->reader_id = 0x1122334455667788ull;
	snprintf(a->name, sizeof(a->name), "ctr");
	for (i = 0; i < IPC_CTL_FP_LEN; i++)
		a->fingerprint[i] = (uint8_t)i;
	a->ring_version = 1;
	a->n_slots = 64;
	a->data_bytes = 64ull << 20;
	a->ctl_bytes = 4096;
	a->max_batch_bytes = 1 << 20;
	snprintf(t[0].name, sizeof(t[0].name), "image");
	t[0].dtype = IPC_DTYPE_STRING;
	t[0].rank = 1;
	t[0].shape[0] = -1;
	snprintf(t[1].name, sizeof(t[1].name), "label");
	t[1].dtype = IPC_DTYPE_INT64;
	t[1].rank = 2;
	t[1].shape[0] = -1;
	t[1].shape[1] = 1;
	snprintf(t[2].name, sizeof(t[2].name), "bbox");
	t[2].dtype = IPC_DTYPE_FLOAT32;
	t[2].rank = IPC_BATCH_MAX_RANK;
	for (i = 0; i < IPC_BATCH_MAX_RANK; i++)
		t[2].shape[i] = i == 1 ? -1 : i + 1;
	t[2].shape[0] = -1;
	t[2].ragged = true;
	a->tensors = t;
	a->n_tensors = 3;
}

static void test_attached(void **state)
{
	struct ipc_ctl_tensor_info t[3];
	struct ipc_ctl_attached in, out;
	struct ipc_ctl_msg m;
	size_t len;
	unsigned i;

	(void)state;
	fill_attached(&in, t);
	assert_int_equal(ipc_ctl_encode_attached(buf, sizeof(buf), 5, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_ATTACHED, 5);
	assert_int_equal(ipc_ctl_decode_attached(&m, &out, emsg, sizeof(emsg)), 0);
	assert_true(out.reader_id == in.reader_id);
	assert_string_equal(out.name, "ctr");
	assert_memory_equal(out.fingerprint, in.fingerprint, IPC_CTL_FP_LEN);
	assert_int_equal(out.ring_version, 1);
	assert_int_equal(out.n_slots, 64);
	assert_true(out.data_bytes == 64ull << 20);
	assert_int_equal(out.ctl_bytes, 4096);
	assert_int_equal(out.max_batch_bytes, 1 << 20);
	assert_int_equal(out.n_tensors, 3);
	assert_non_null(out.tensors);
	for (i = 0; i < 3; i++)
		assert_memory_equal(&out.tensors[i], &t[i], sizeof(t[i]));
	ipc_ctl_attached_fini(&out);
	assert_null(out.tensors);
	assert_int_equal(out.n_tensors, 0);
	ipc_ctl_attached_fini(&out); /* twice is fine, as is NULL */
	ipc_ctl_attached_fini(NULL);

	/* No tensors at all. */
	in.n_tensors = 0;
	in.tensors = NULL;
	assert_int_equal(ipc_ctl_encode_attached(buf, sizeof(buf), 6, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_ATTACHED, 6);
	assert_int_equal(ipc_ctl_decode_attached(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.n_tensors, 0);
	assert_null(out.tensors);
	ipc_ctl_attached_fini(&out);
}

static void test_reader_ref_state(void **state)
{
	static const uint16_t types[] = { IPC_CTL_DETACH, IPC_CTL_SAVE_STATE, IPC_CTL_DETACHED };
	static const uint8_t blob[64] = { 9, 8, 7 };
	struct ipc_ctl_reader_ref ref = { .reader_id = 12 }, ref2;
	struct ipc_ctl_state st = { .reader_id = 12, .state = blob, .state_len = sizeof(blob) };
	struct ipc_ctl_state st2;
	struct ipc_ctl_msg m;
	size_t len, i;

	(void)state;
	for (i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		assert_int_equal(ipc_ctl_encode_reader_ref(buf, sizeof(buf), types[i], 3, &ref,
							   &len), 0);
		m = parse_ok(buf, len, types[i], 3);
		assert_int_equal(ipc_ctl_decode_reader_ref(&m, types[i], &ref2, emsg,
							   sizeof(emsg)), 0);
		assert_int_equal(ref2.reader_id, 12);
		/* Decoding it as another of the three is a type error. */
		EXPECT_BAD(ipc_ctl_decode_reader_ref(&m, types[(i + 1) % 3], &ref2, emsg,
						     sizeof(emsg)), "got a");
	}
	assert_int_equal(ipc_ctl_encode_reader_ref(buf, sizeof(buf), IPC_CTL_LIST, 3, &ref, &len),
			 -EINVAL);

	assert_int_equal(ipc_ctl_encode_state(buf, sizeof(buf), 4, &st, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_STATE, 4);
	assert_int_equal(ipc_ctl_decode_state(&m, &st2, emsg, sizeof(emsg)), 0);
	assert_int_equal(st2.reader_id, 12);
	assert_int_equal(st2.state_len, sizeof(blob));
	assert_memory_equal(st2.state, blob, sizeof(blob));
}

static void test_list(void **state)
{
	struct ipc_ctl_pipeline_info p[3];
	struct ipc_ctl_list_reply in = { .pipelines = p, .n_pipelines = 3 }, out;
	struct ipc_ctl_msg m;
	size_t len;
	unsigned i;

	(void)state;
	assert_int_equal(ipc_ctl_encode_empty(buf, sizeof(buf), IPC_CTL_LIST, 8, &len), 0);
	assert_int_equal(len, IPC_CTL_HDR_SIZE);
	m = parse_ok(buf, len, IPC_CTL_LIST, 8);
	assert_int_equal(ipc_ctl_decode_empty(&m, IPC_CTL_LIST, emsg, sizeof(emsg)), 0);
	EXPECT_BAD(ipc_ctl_decode_empty(&m, IPC_CTL_STATS, emsg, sizeof(emsg)), "got a LIST");

	memset(p, 0, sizeof(p));
	for (i = 0; i < 3; i++) {
		snprintf(p[i].name, sizeof(p[i].name), "pipeline-%u", i);
		memset(p[i].fingerprint, (int)i + 1, IPC_CTL_FP_LEN);
		p[i].status = i;
		p[i].n_readers = i * 2;
		p[i].batches_published = 1000000007ull * i;
		p[i].slots_used = i;
		p[i].n_slots = 64;
	}
	assert_int_equal(ipc_ctl_encode_list_reply(buf, sizeof(buf), 8, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_LIST_REPLY, 8);
	assert_int_equal(ipc_ctl_decode_list_reply(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.n_pipelines, 3);
	for (i = 0; i < 3; i++)
		assert_memory_equal(&out.pipelines[i], &p[i], sizeof(p[i]));
	ipc_ctl_list_reply_fini(&out);

	/* An empty list. */
	in.n_pipelines = 0;
	in.pipelines = NULL;
	assert_int_equal(ipc_ctl_encode_list_reply(buf, sizeof(buf), 8, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_LIST_REPLY, 8);
	assert_int_equal(ipc_ctl_decode_list_reply(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.n_pipelines, 0);
	ipc_ctl_list_reply_fini(&out);
}

static void test_stats(void **state)
{
	static const char *const keys[] = { "batches_published", "batches_taken", "wait_ns",
					     "lag", "occupancy_permille" };
	struct ipc_ctl_stats s = { .name = "ctr" }, s2;
	struct ipc_ctl_stat st[5];
	struct ipc_ctl_stats_reply in = { .name = "ctr", .stats = st, .n_stats = 5 }, out;
	struct ipc_ctl_msg m;
	size_t len;
	unsigned i;

	(void)state;
	assert_int_equal(ipc_ctl_encode_stats(buf, sizeof(buf), 2, &s, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_STATS, 2);
	assert_int_equal(ipc_ctl_decode_stats(&m, &s2, emsg, sizeof(emsg)), 0);
	assert_string_equal(s2.name, "ctr");

	memset(st, 0, sizeof(st));
	for (i = 0; i < 5; i++) {
		snprintf(st[i].key, sizeof(st[i].key), "%s", keys[i]);
		st[i].value = i == 2 ? INT64_MIN : (int64_t)i * 1000 - 1;
	}
	assert_int_equal(ipc_ctl_encode_stats_reply(buf, sizeof(buf), 2, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_STATS_REPLY, 2);
	assert_int_equal(ipc_ctl_decode_stats_reply(&m, &out, emsg, sizeof(emsg)), 0);
	assert_string_equal(out.name, "ctr");
	assert_int_equal(out.n_stats, 5);
	for (i = 0; i < 5; i++) {
		assert_string_equal(out.stats[i].key, keys[i]);
		assert_true(out.stats[i].value == st[i].value);
	}
	ipc_ctl_stats_reply_fini(&out);
}

static void test_error_shutdown(void **state)
{
	struct ipc_ctl_error e = { .code = -EACCES }, e2;
	struct ipc_ctl_shutdown s = { .flags = IPC_CTL_SHUTDOWN_RESTART }, s2;
	struct ipc_ctl_msg m;
	size_t len;

	(void)state;
	snprintf(e.text, sizeof(e.text), "permission denied");
	assert_int_equal(ipc_ctl_encode_error(buf, sizeof(buf), 31, &e, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_ERROR, 31);
	assert_int_equal(ipc_ctl_decode_error(&m, &e2, emsg, sizeof(emsg)), 0);
	assert_int_equal(e2.code, -EACCES);
	assert_string_equal(e2.text, "permission denied");

	/* The longest text fits. */
	memset(e.text, 'x', IPC_CTL_TEXT_MAX);
	e.text[IPC_CTL_TEXT_MAX] = '\0';
	assert_int_equal(ipc_ctl_encode_error(buf, sizeof(buf), 31, &e, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_ERROR, 31);
	assert_int_equal(ipc_ctl_decode_error(&m, &e2, emsg, sizeof(emsg)), 0);
	assert_int_equal(strlen(e2.text), IPC_CTL_TEXT_MAX);

	snprintf(s.reason, sizeof(s.reason), "SIGTERM");
	assert_int_equal(ipc_ctl_encode_shutdown(buf, sizeof(buf), &s, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_SHUTDOWN, 0);
	assert_int_equal(ipc_ctl_decode_shutdown(&m, &s2, emsg, sizeof(emsg)), 0);
	assert_int_equal(s2.flags, IPC_CTL_SHUTDOWN_RESTART);
	assert_string_equal(s2.reason, "SIGTERM");
}

static void test_type_names(void **state)
{
	(void)state;
	assert_string_equal(ipc_ctl_type_name(IPC_CTL_ATTACHED), "ATTACHED");
	assert_string_equal(ipc_ctl_type_name(IPC_CTL_SHUTDOWN), "SHUTDOWN");
	assert_string_equal(ipc_ctl_type_name(0x1234), "?");
	assert_int_equal(ipc_ctl_type_fds(IPC_CTL_ATTACHED), 2);
	assert_int_equal(ipc_ctl_type_fds(IPC_CTL_ATTACH), 0);
	assert_int_equal(ipc_ctl_type_fds(0x1234), 0);
}

/* ---- versions ---- */

static void test_version_mismatch(void **state)
{
	struct ipc_ctl_hello h = { .version = 2, .pid = 1 }, h2;
	struct ipc_ctl_error e = { .code = -EPROTONOSUPPORT }, e2;
	struct ipc_ctl_msg m;
	struct ipc_ctl_stats st;
	size_t len;

	(void)state;
	/* A client of version 2 says HELLO: the server sees -EPROTONOSUPPORT and both versions,
	 * still reads the request id and (HELLO is frozen) the body. */
	assert_int_equal(ipc_ctl_encode_hello(buf, sizeof(buf), 55, &h, &len), 0);
	put16(buf + 4, 2);
	emsg[0] = '\0';
	assert_int_equal(ipc_ctl_msg_parse(buf, len, &m, emsg, sizeof(emsg)), -EPROTONOSUPPORT);
	assert_non_null(strstr(emsg, "peer speaks protocol version 2, this side speaks 1"));
	assert_int_equal(m.version, 2);
	assert_int_equal(m.type, IPC_CTL_HELLO);
	assert_int_equal(m.req_id, 55);
	assert_int_equal(ipc_ctl_decode_hello(&m, &h2, emsg, sizeof(emsg)), 0);
	assert_int_equal(h2.version, 2);

	/* The server answers with ERROR; a version-2 client reads it although the header says 1. */
	snprintf(e.text, sizeof(e.text), "client speaks protocol 2, sluiced speaks 1");
	assert_int_equal(ipc_ctl_encode_error(buf, sizeof(buf), m.req_id, &e, &len), 0);
	put16(buf + 4, 7); /* as if from a server of version 7 */
	assert_int_equal(ipc_ctl_msg_parse(buf, len, &m, emsg, sizeof(emsg)), -EPROTONOSUPPORT);
	assert_int_equal(m.type, IPC_CTL_ERROR);
	assert_int_equal(m.req_id, 55);
	assert_int_equal(ipc_ctl_decode_error(&m, &e2, emsg, sizeof(emsg)), 0);
	assert_int_equal(e2.code, -EPROTONOSUPPORT);
	assert_string_equal(e2.text, e.text);

	/* Types that are not frozen are not decoded across versions. */
	assert_int_equal(ipc_ctl_encode_stats(buf, sizeof(buf), 1,
					      &(struct ipc_ctl_stats){ .name = "a" }, &len), 0);
	put16(buf + 4, 2);
	assert_int_equal(ipc_ctl_msg_parse(buf, len, &m, emsg, sizeof(emsg)), -EPROTONOSUPPORT);
	assert_int_equal(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)), -EPROTONOSUPPORT);

	/* A mismatched version with an inconsistent length: header only, no body. */
	put32(buf + 16, 9999);
	put16(buf + 6, IPC_CTL_ERROR);
	assert_int_equal(ipc_ctl_msg_parse(buf, len, &m, emsg, sizeof(emsg)), -EPROTONOSUPPORT);
	assert_null(m.body);
	assert_int_equal(m.body_len, 0);
	EXPECT_BAD(ipc_ctl_decode_error(&m, &e2, emsg, sizeof(emsg)), "missing field code");
}

/* ---- malformed input ---- */

static void test_bad_header(void **state)
{
	struct ipc_ctl_msg m;
	size_t len, i;

	(void)state;
	assert_int_equal(ipc_ctl_encode_stats(buf, sizeof(buf), 1,
					      &(struct ipc_ctl_stats){ .name = "a" }, &len), 0);
	for (i = 0; i < IPC_CTL_HDR_SIZE; i++)
		EXPECT_BAD(ipc_ctl_msg_parse(buf, i, &m, emsg, sizeof(emsg)),
			   "shorter than the 20-byte header");
	EXPECT_BAD(ipc_ctl_msg_parse(NULL, 0, &m, emsg, sizeof(emsg)), "shorter");

	/* Length mismatch: the datagram is shorter or longer than the header says. */
	EXPECT_BAD(ipc_ctl_msg_parse(buf, len - 1, &m, emsg, sizeof(emsg)),
		   "header says 7 body bytes, the message has 6");
	EXPECT_BAD(ipc_ctl_msg_parse(buf, len + 1, &m, emsg, sizeof(emsg)),
		   "header says 7 body bytes, the message has 8");
	EXPECT_BAD(ipc_ctl_msg_parse(buf, IPC_CTL_MAX_MSG + 1, &m, emsg, sizeof(emsg)),
		   "at most 65536");

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
		EXPECT_BAD(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)),
			   "truncated field header at byte 8");
	}
	/* A length past the end (and a huge one that would wrap a pointer). */
	n = raw_field(body, 0, 1, "abc", 3);
	put32(body + 2, 4);
	len = raw_msg(buf, IPC_CTL_STATS, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_STATS, 1);
	EXPECT_BAD(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)),
		   "field 1 at byte 0: length 4 runs past the end (3 bytes left)");
	put32(body + 2, 0xffffffffu);
	len = raw_msg(buf, IPC_CTL_STATS, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_STATS, 1);
	EXPECT_BAD(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)), "runs past the end");

	/* Duplicate tag. */
	n = raw_field(body, 0, 1, "abc", 3);
	n = raw_field(body, n, 1, "abd", 3);
	len = raw_msg(buf, IPC_CTL_STATS, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_STATS, 1);
	EXPECT_BAD(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)),
		   "ctl STATS: field 1 at byte 9: duplicate tag");

	/* Tag 0. */
	n = raw_field(body, 0, 0, "abc", 3);
	len = raw_msg(buf, IPC_CTL_STATS, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_STATS, 1);
	EXPECT_BAD(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)), "tag 0 is reserved");

	/* Strings: an embedded NUL, one byte too long, empty where it must not be. */
	n = raw_field(body, 0, 1, "ab\0c", 4);
	len = raw_msg(buf, IPC_CTL_STATS, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_STATS, 1);
	EXPECT_BAD(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)),
		   "ctl STATS: name (tag 1): string holds a NUL at byte 2");
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
		EXPECT_BAD(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)),
			   "name (tag 1): 256 bytes, at most 255");
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
	EXPECT_BAD(ipc_ctl_decode_hello(&m, &h, emsg, sizeof(emsg)),
		   "ctl HELLO: version (tag 1): length 8, expected 4");
	n = raw_u32(body, 0, 1, 1);
	len = raw_msg(buf, IPC_CTL_HELLO, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_HELLO, 1);
	EXPECT_BAD(ipc_ctl_decode_hello(&m, &h, emsg, sizeof(emsg)),
		   "ctl HELLO: missing field pid (tag 2)");
	{
		struct ipc_ctl_registered r;
		uint8_t fp[IPC_CTL_FP_LEN] = { 0 };

		n = raw_field(body, 0, 1, "x", 1);
		n = raw_field(body, n, 2, fp, sizeof(fp));
		n = raw_u32(body, n, 3, 2);
		len = raw_msg(buf, IPC_CTL_REGISTERED, 1, body, n);
		m = parse_ok(buf, len, IPC_CTL_REGISTERED, 1);
		EXPECT_BAD(ipc_ctl_decode_registered(&m, &r, emsg, sizeof(emsg)),
			   "created (tag 3): expected 0 or 1, got 2");
		n = raw_field(body, 0, 1, "x", 1);
		n = raw_field(body, n, 2, fp, sizeof(fp) - 1);
		len = raw_msg(buf, IPC_CTL_REGISTERED, 1, body, n);
		m = parse_ok(buf, len, IPC_CTL_REGISTERED, 1);
		EXPECT_BAD(ipc_ctl_decode_registered(&m, &r, emsg, sizeof(emsg)),
			   "fingerprint (tag 2): length 15, expected 16");
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
	EXPECT_BAD(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)),
		   "ctl STATS: got a HELLO message (type 0x0001)");
	/* LIST carries no fields, but its framing is still checked. */
	n = raw_field(body, 0, 7, "abc", 3);
	len = raw_msg(buf, IPC_CTL_LIST, 1, body, n - 1);
	m = parse_ok(buf, len, IPC_CTL_LIST, 1);
	EXPECT_BAD(ipc_ctl_decode_empty(&m, IPC_CTL_LIST, emsg, sizeof(emsg)),
		   "ctl LIST: field 7");
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
	EXPECT_BAD(ipc_ctl_decode_attach(&m, &a, emsg, sizeof(emsg)),
		   "expected exactly one of name and spec, got neither");
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
	EXPECT_BAD(ipc_ctl_decode_attach(&m, &a, emsg, sizeof(emsg)),
		   "rank_index 4, rank_count 4: expected index < count");
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
		EXPECT_BAD(ipc_ctl_decode_attach(&m, &a, emsg, sizeof(emsg)),
			   "state (tag 6): 4097 bytes, at most 4096");
	}

	/* ERROR with a code that is not a negative errno. */
	n = raw_u32(body, 0, 1, 5);
	len = raw_msg(buf, IPC_CTL_ERROR, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_ERROR, 1);
	EXPECT_BAD(ipc_ctl_decode_error(&m, &e, emsg, sizeof(emsg)),
		   "code: expected a negative errno, got 5");

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
	EXPECT_BAD(ipc_ctl_decode_attached(&m, &at, emsg, sizeof(emsg)),
		   "ctl ATTACHED: tensors[2]: dtype: expected 0..12, got 99");

	/* A nested entry with a truncated field and one with a shape of 9 dimensions. */
	k = raw_field(sub, 0, 1, "a", 1);
	k = raw_field(sub, k, 2, "12345678", 8); /* a fingerprint is 16 bytes */
	n = raw_field(body, 0, 1, sub, (uint32_t)k);
	len = raw_msg(buf, IPC_CTL_LIST_REPLY, 1, body, n);
	m = parse_ok(buf, len, IPC_CTL_LIST_REPLY, 1);
	EXPECT_BAD(ipc_ctl_decode_list_reply(&m, &lr, emsg, sizeof(emsg)),
		   "ctl LIST_REPLY: pipelines[0]: fingerprint (tag 2): length 8, expected 16");
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
	EXPECT_BAD(ipc_ctl_decode_attached(&m, &at, emsg, sizeof(emsg)),
		   "ctl ATTACHED: tensors[0]: shape (tag 3): length 72, expected a multiple of 8 "
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
			/* a cut between whole fields: fewer tensors */
			assert_true(out.n_tensors < 3);
			ipc_ctl_attached_fini(&out);
		} else {
			assert_int_equal(r, -EBADMSG);
			assert_true(emsg[0] != '\0');
		}
		free(copy);
	}
}

/* ---- encoders and the builder ---- */

static void test_encode_limits(void **state)
{
	struct ipc_ctl_stats s = { .name = "abc" };
	struct ipc_ctl_stat st[1] = { { .key = "k", .value = 1 } };
	struct ipc_ctl_stats_reply sr = { .name = "abc", .stats = st, .n_stats = 1 };
	struct ipc_ctl_attach a;
	struct ipc_ctl_builder b;
	static char spec[IPC_CTL_MAX_MSG];
	size_t len, mark;

	(void)state;
	/* Too small a buffer: -EMSGSIZE for every size short of the message. */
	assert_int_equal(ipc_ctl_encode_stats(buf, sizeof(buf), 1, &s, &len), 0);
	for (size_t cap = 0; cap < len; cap++)
		assert_int_equal(ipc_ctl_encode_stats(buf, cap, 1, &s, &len), -EMSGSIZE);
	assert_int_equal(ipc_ctl_encode_stats_reply(buf, 40, 1, &sr, &len), -EMSGSIZE);

	/* Structs that break the rules are refused, not sent. */
	s.name[0] = '\0';
	assert_int_equal(ipc_ctl_encode_stats(buf, sizeof(buf), 1, &s, &len), -EINVAL);
	memset(s.name, 'x', sizeof(s.name)); /* no NUL */
	assert_int_equal(ipc_ctl_encode_stats(buf, sizeof(buf), 1, &s, &len), -EINVAL);
	memset(&a, 0, sizeof(a));
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 1, &a, &len), -EINVAL);
	a.spec = "{\0}";
	a.spec_len = 3;
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 1, &a, &len), -EINVAL);
	sr.stats = NULL;
	assert_int_equal(ipc_ctl_encode_stats_reply(buf, sizeof(buf), 1, &sr, &len), -EINVAL);
	assert_int_equal(ipc_ctl_encode_error(buf, sizeof(buf), 1,
					      &(struct ipc_ctl_error){ .code = 0 }, &len), -EINVAL);

	/* A spec that fills the message exactly; one byte more does not fit. */
	memset(spec, ' ', sizeof(spec));
	memset(&a, 0, sizeof(a));
	a.spec = spec;
	a.spec_len = IPC_CTL_MAX_BODY - 6 - 10;
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 1, &a, &len), 0);
	assert_int_equal(len, IPC_CTL_MAX_MSG);
	parse_ok(buf, len, IPC_CTL_ATTACH, 1);
	a.spec_len++;
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 1, &a, &len), -EMSGSIZE);

	/* The builder's error is sticky; nesting marks are checked. */
	ipc_ctl_builder_init(&b, buf, 40, 0x7000, 1);
	assert_int_equal(ipc_ctl_put_u64(&b, 1, 1), 0);
	assert_int_equal(ipc_ctl_put_u64(&b, 2, 2), -EMSGSIZE);
	assert_int_equal(ipc_ctl_put_u32(&b, 3, 3), -EMSGSIZE);
	assert_int_equal(ipc_ctl_builder_finish(&b, &len), -EMSGSIZE);
	ipc_ctl_builder_init(&b, buf, sizeof(buf), 0x7000, 1);
	assert_int_equal(ipc_ctl_put_str(&b, 1, "a\0b", 3), -EINVAL);
	ipc_ctl_builder_init(&b, buf, sizeof(buf), 0x7000, 1);
	assert_int_equal(ipc_ctl_put_u32(&b, 0, 1), -EINVAL);
	ipc_ctl_builder_init(&b, buf, sizeof(buf), 0x7000, 1);
	assert_int_equal(ipc_ctl_put_end(&b, 3), -EINVAL);
	ipc_ctl_builder_init(&b, buf, sizeof(buf), 0x7000, 1);
	mark = ipc_ctl_put_begin(&b, 5);
	assert_int_equal(ipc_ctl_put_i64(&b, 1, -2), 0);
	assert_int_equal(ipc_ctl_put_i32(&b, 2, -3), 0);
	assert_int_equal(ipc_ctl_put_end(&b, mark), 0);
	assert_int_equal(ipc_ctl_put_bytes(&b, 6, "xyz", 3), 0);
	assert_int_equal(ipc_ctl_builder_finish(&b, &len), 0);
	assert_int_equal(len, IPC_CTL_HDR_SIZE + 6 + (6 + 8) + (6 + 4) + 6 + 3);
}

/* The generic field reader and accessors, on a body built with the builder. */
static void test_reader(void **state)
{
	struct ipc_ctl_builder b;
	struct ipc_ctl_reader rd, sub;
	struct ipc_ctl_field f, g;
	struct ipc_ctl_msg m;
	const char *s;
	uint64_t u64;
	int64_t i64;
	uint32_t u32;
	int32_t i32;
	size_t len, mark;

	(void)state;
	ipc_ctl_builder_init(&b, buf, sizeof(buf), 0x7001, 3);
	ipc_ctl_put_u32(&b, 1, 0xdeadbeef);
	ipc_ctl_put_i64(&b, 2, -5);
	mark = ipc_ctl_put_begin(&b, 3);
	ipc_ctl_put_i32(&b, 1, -7);
	ipc_ctl_put_u64(&b, 2, UINT64_MAX);
	ipc_ctl_put_end(&b, mark);
	mark = ipc_ctl_put_begin(&b, 3);
	ipc_ctl_put_end(&b, mark);
	ipc_ctl_put_str(&b, 4, "hello", 5);
	assert_int_equal(ipc_ctl_builder_finish(&b, &len), 0);
	m = parse_ok(buf, len, 0x7001, 3);

	ipc_ctl_reader_init(&rd, m.body, m.body_len, UINT64_C(1) << 3, "t");
	assert_int_equal(ipc_ctl_reader_next(&rd, &f, emsg, sizeof(emsg)), 1);
	assert_int_equal(ipc_ctl_field_u32(&f, &u32, emsg, sizeof(emsg)), 0);
	assert_int_equal(u32, 0xdeadbeef);
	EXPECT_BAD(ipc_ctl_field_u64(&f, &u64, emsg, sizeof(emsg)), "length 4, expected 8");
	assert_int_equal(ipc_ctl_reader_next(&rd, &f, emsg, sizeof(emsg)), 1);
	assert_int_equal(ipc_ctl_field_i64(&f, &i64, emsg, sizeof(emsg)), 0);
	assert_int_equal(i64, -5);
	assert_int_equal(ipc_ctl_reader_next(&rd, &f, emsg, sizeof(emsg)), 1);
	assert_int_equal(f.tag, 3);
	ipc_ctl_reader_init(&sub, f.val, f.len, 0, "t.3");
	assert_int_equal(ipc_ctl_reader_next(&sub, &g, emsg, sizeof(emsg)), 1);
	assert_int_equal(ipc_ctl_field_i32(&g, &i32, emsg, sizeof(emsg)), 0);
	assert_int_equal(i32, -7);
	assert_int_equal(ipc_ctl_reader_next(&sub, &g, emsg, sizeof(emsg)), 1);
	assert_int_equal(ipc_ctl_field_u64(&g, &u64, emsg, sizeof(emsg)), 0);
	assert_true(u64 == UINT64_MAX);
	assert_int_equal(ipc_ctl_reader_next(&sub, &g, emsg, sizeof(emsg)), 0);
	assert_int_equal(ipc_ctl_reader_next(&rd, &f, emsg, sizeof(emsg)), 1); /* repeated 3 */
	assert_int_equal(f.tag, 3);
	assert_int_equal(f.len, 0);
	assert_int_equal(ipc_ctl_reader_next(&rd, &f, emsg, sizeof(emsg)), 1);
	assert_int_equal(ipc_ctl_field_str(&f, 5, &s, emsg, sizeof(emsg)), 0);
	assert_memory_equal(s, "hello", 5);
	EXPECT_BAD(ipc_ctl_field_str(&f, 4, &s, emsg, sizeof(emsg)), "5 bytes, at most 4");
	assert_int_equal(ipc_ctl_reader_next(&rd, &f, emsg, sizeof(emsg)), 0);
	assert_int_equal(ipc_ctl_reader_next(&rd, &f, emsg, sizeof(emsg)), 0);

	/* Without the repeated bit, the second 3 is a duplicate. */
	ipc_ctl_reader_init(&rd, m.body, m.body_len, 0, "t");
	while ((u32 = (uint32_t)ipc_ctl_reader_next(&rd, &f, emsg, sizeof(emsg))) == 1)
		;
	assert_int_equal((int)u32, -EBADMSG);
	assert_non_null(strstr(emsg, "t: field 3 at byte"));
}

/* ---- the socket ---- */

static void test_fd_passing(void **state)
{
	struct ipc_ctl_tensor_info t[3];
	struct ipc_ctl_attached a, out;
	struct ipc_ctl_msg m;
	int sv[2], memfds[2], got[IPC_CTL_MAX_FDS], before, flags;
	size_t len, nfds, i;
	int n;

	(void)state;
	before = count_fds();
	seqpacket_pair(sv);
	memfds[0] = make_memfd("ring-data", 1 << 16);
	memfds[1] = make_memfd("reader-ctl", 4096);
	fill_attached(&a, t);
	assert_int_equal(ipc_ctl_encode_attached(buf, sizeof(buf), 42, &a, &len), 0);
	assert_int_equal(ipc_ctl_send(sv[0], buf, len, memfds, 2), 0);

	memset(buf, 0, sizeof(buf));
	n = ipc_ctl_recv(sv[1], buf, sizeof(buf), got, IPC_CTL_MAX_FDS, &nfds);
	assert_int_equal(n, (int)len);
	assert_int_equal(nfds, 2);
	for (i = 0; i < 2; i++) {
		same_file(got[i], memfds[i]);
		assert_int_not_equal(got[i], memfds[i]);
		flags = fcntl(got[i], F_GETFD);
		assert_true(flags >= 0 && (flags & FD_CLOEXEC));
	}
	m = parse_ok(buf, (size_t)n, IPC_CTL_ATTACHED, 42);
	assert_int_equal(ipc_ctl_decode_attached(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.n_tensors, 3);
	ipc_ctl_attached_fini(&out);

	/* send refuses fds on a type that carries none, and more than ATTACHED carries. */
	assert_int_equal(ipc_ctl_encode_stats(buf, sizeof(buf), 1,
					      &(struct ipc_ctl_stats){ .name = "a" }, &len), 0);
	assert_int_equal(ipc_ctl_send(sv[0], buf, len, memfds, 1), -EINVAL);
	assert_int_equal(ipc_ctl_send(sv[0], buf, IPC_CTL_HDR_SIZE - 1, NULL, 0), -EINVAL);
	assert_int_equal(ipc_ctl_send(sv[0], buf, IPC_CTL_MAX_MSG + 1, NULL, 0), -EMSGSIZE);

	/* A message without fds, then the peer closes: 0. */
	assert_int_equal(ipc_ctl_send(sv[0], buf, len, NULL, 0), 0);
	n = ipc_ctl_recv(sv[1], buf, sizeof(buf), got, IPC_CTL_MAX_FDS, &nfds);
	assert_int_equal(n, (int)len);
	assert_int_equal(nfds, 0);
	close(sv[0]);
	assert_int_equal(ipc_ctl_recv(sv[1], buf, sizeof(buf), got, IPC_CTL_MAX_FDS, &nfds), 0);
	/* Sending to a closed peer: -EPIPE, no SIGPIPE. */
	assert_int_equal(ipc_ctl_send(sv[1], buf, len, NULL, 0), -EPIPE);

	close(sv[1]);
	close(got[0]);
	close(got[1]);
	close(memfds[0]);
	close(memfds[1]);
	assert_int_equal(count_fds(), before);
}

static void test_ctrunc(void **state)
{
	int sv[2], fds[3], got[IPC_CTL_MAX_FDS], before, during, i;
	struct ipc_ctl_tensor_info t[3];
	struct ipc_ctl_attached a;
	size_t len, nfds = 99;
	int n;

	(void)state;
	before = count_fds();
	seqpacket_pair(sv);
	for (i = 0; i < 3; i++)
		fds[i] = make_memfd("x", 4096);
	fill_attached(&a, t);
	assert_int_equal(ipc_ctl_encode_attached(buf, sizeof(buf), 1, &a, &len), 0);
	during = count_fds();

	/* Three fds, room for one: MSG_CTRUNC, an error, and whatever arrived is closed. */
	send_raw(sv[0], buf, len, fds, 3);
	got[0] = -1;
	n = ipc_ctl_recv(sv[1], buf, sizeof(buf), got, 1, &nfds);
	assert_int_equal(n, -EBADMSG);
	assert_int_equal(nfds, 99);
	assert_int_equal(got[0], -1);
	assert_int_equal(count_fds(), during);

	/* Three fds, room for none at all. */
	send_raw(sv[0], buf, len, fds, 3);
	assert_int_equal(ipc_ctl_recv(sv[1], buf, sizeof(buf), NULL, 0, NULL), -EBADMSG);
	assert_int_equal(count_fds(), during);

	/* Two fds, room for one: the control buffer's rounding may let both in without
	 * MSG_CTRUNC; then the one past max_fds is closed here. Either way nothing leaks. */
	send_raw(sv[0], buf, len, fds, 2);
	n = ipc_ctl_recv(sv[1], buf, sizeof(buf), got, 1, &nfds);
	if (n > 0) {
		assert_int_equal(nfds, 1);
		same_file(got[0], fds[0]);
		close(got[0]);
	} else {
		assert_int_equal(n, -EBADMSG);
	}
	assert_int_equal(count_fds(), during);

	/* Three fds on an ATTACHED (which carries two), with room for IPC_CTL_MAX_FDS: the
	 * third is closed here. */
	send_raw(sv[0], buf, len, fds, 3);
	n = ipc_ctl_recv(sv[1], buf, sizeof(buf), got, IPC_CTL_MAX_FDS, &nfds);
	assert_int_equal(n, (int)len);
	assert_int_equal(nfds, 2);
	same_file(got[0], fds[0]);
	same_file(got[1], fds[1]);
	close(got[0]);
	close(got[1]);
	assert_int_equal(count_fds(), during);

	for (i = 0; i < 3; i++)
		close(fds[i]);
	close(sv[0]);
	close(sv[1]);
	assert_int_equal(count_fds(), before);
}

static void test_mtrunc(void **state)
{
	static char big[1000];
	struct ipc_ctl_register r = { .spec = big, .spec_len = 1 };
	int sv[2], fds[2], got[IPC_CTL_MAX_FDS], during;
	char small[100];
	size_t len, nfds;
	int n;

	(void)state;
	seqpacket_pair(sv);
	fds[0] = make_memfd("a", 4096);
	fds[1] = make_memfd("b", 4096);
	during = count_fds();
	memset(big, 'x', sizeof(big));
	r.spec_len = sizeof(big);
	assert_int_equal(ipc_ctl_encode_register(buf, sizeof(buf), 1, &r, &len), 0);
	assert_true(len > sizeof(small));

	/* Larger than the buffer: -EMSGSIZE (the tail is gone: the caller drops the connection). */
	assert_int_equal(ipc_ctl_send(sv[0], buf, len, NULL, 0), 0);
	assert_int_equal(ipc_ctl_recv(sv[1], small, sizeof(small), got, 2, &nfds), -EMSGSIZE);
	/* ... with fds: they are closed. */
	send_raw(sv[0], buf, len, fds, 2);
	assert_int_equal(ipc_ctl_recv(sv[1], small, sizeof(small), got, 2, &nfds), -EMSGSIZE);
	assert_int_equal(count_fds(), during);

	/* The datagram was consumed: the next one arrives whole. */
	r.spec_len = 10;
	assert_int_equal(ipc_ctl_encode_register(buf, sizeof(buf), 2, &r, &len), 0);
	assert_int_equal(ipc_ctl_send(sv[0], buf, len, NULL, 0), 0);
	n = ipc_ctl_recv(sv[1], small, sizeof(small), got, 2, &nfds);
	assert_int_equal(n, (int)len);
	parse_ok(small, (size_t)n, IPC_CTL_REGISTER, 2);

	close(fds[0]);
	close(fds[1]);
	close(sv[0]);
	close(sv[1]);
}

static void test_unexpected_fds(void **state)
{
	struct ipc_ctl_error e = { .code = -ENOENT };
	int sv[2], fds[2], got[IPC_CTL_MAX_FDS], during;
	uint8_t junk[64];
	size_t len, nfds;
	int n;

	(void)state;
	seqpacket_pair(sv);
	fds[0] = make_memfd("a", 4096);
	fds[1] = make_memfd("b", 4096);
	during = count_fds();

	/* An ERROR carries no fds: the two that came with it are closed. */
	assert_int_equal(ipc_ctl_encode_error(buf, sizeof(buf), 1, &e, &len), 0);
	send_raw(sv[0], buf, len, fds, 2);
	got[0] = got[1] = -1;
	n = ipc_ctl_recv(sv[1], buf, sizeof(buf), got, IPC_CTL_MAX_FDS, &nfds);
	assert_int_equal(n, (int)len);
	assert_int_equal(nfds, 0);
	assert_int_equal(count_fds(), during);

	/* Not even a header (junk, a short datagram): any fds are closed. */
	memset(junk, 0xab, sizeof(junk));
	send_raw(sv[0], junk, sizeof(junk), fds, 2);
	n = ipc_ctl_recv(sv[1], buf, sizeof(buf), got, IPC_CTL_MAX_FDS, &nfds);
	assert_int_equal(n, (int)sizeof(junk));
	assert_int_equal(nfds, 0);
	send_raw(sv[0], junk, 3, fds, 1);
	n = ipc_ctl_recv(sv[1], buf, sizeof(buf), got, IPC_CTL_MAX_FDS, &nfds);
	assert_int_equal(n, 3);
	assert_int_equal(nfds, 0);
	assert_int_equal(count_fds(), during);

	/* An ATTACHED of another protocol version: its fds are not taken either. */
	{
		struct ipc_ctl_tensor_info t[3];
		struct ipc_ctl_attached a;

		fill_attached(&a, t);
		assert_int_equal(ipc_ctl_encode_attached(buf, sizeof(buf), 1, &a, &len), 0);
		put16(buf + 4, 2);
		send_raw(sv[0], buf, len, fds, 2);
		n = ipc_ctl_recv(sv[1], buf, sizeof(buf), got, IPC_CTL_MAX_FDS, &nfds);
		assert_int_equal(n, (int)len);
		assert_int_equal(nfds, 0);
		assert_int_equal(count_fds(), during);
	}

	/* Bad arguments. */
	assert_int_equal(ipc_ctl_recv(sv[1], NULL, 10, got, 2, &nfds), -EINVAL);
	assert_int_equal(ipc_ctl_recv(sv[1], buf, sizeof(buf), NULL, 2, &nfds), -EINVAL);
	/* Non-blocking with nothing there: -EAGAIN. */
	assert_int_equal(fcntl(sv[1], F_SETFL, O_NONBLOCK), 0);
	assert_int_equal(ipc_ctl_recv(sv[1], buf, sizeof(buf), got, 2, &nfds), -EAGAIN);

	close(fds[0]);
	close(fds[1]);
	close(sv[0]);
	close(sv[1]);
}

static void test_peer_cred(void **state)
{
	uid_t uid;
	gid_t gid;
	pid_t pid;
	int sv[2];

	(void)state;
	seqpacket_pair(sv);
	assert_int_equal(ipc_ctl_peer_cred(sv[1], &uid, &gid, &pid), 0);
	assert_int_equal(uid, getuid());
	assert_int_equal(gid, getgid());
	assert_int_equal(pid, getpid());
	assert_int_equal(ipc_ctl_peer_cred(sv[0], NULL, NULL, &pid), 0);
	assert_int_equal(pid, getpid());
	close(sv[0]);
	close(sv[1]);
	assert_int_equal(ipc_ctl_peer_cred(-1, &uid, &gid, &pid), -EBADF);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hello),
		cmocka_unit_test(test_register),
		cmocka_unit_test(test_attach),
		cmocka_unit_test(test_attached),
		cmocka_unit_test(test_reader_ref_state),
		cmocka_unit_test(test_list),
		cmocka_unit_test(test_stats),
		cmocka_unit_test(test_error_shutdown),
		cmocka_unit_test(test_type_names),
		cmocka_unit_test(test_version_mismatch),
		cmocka_unit_test(test_bad_header),
		cmocka_unit_test(test_bad_tlv),
		cmocka_unit_test(test_bad_rules),
		cmocka_unit_test(test_truncations),
		cmocka_unit_test(test_encode_limits),
		cmocka_unit_test(test_reader),
		cmocka_unit_test(test_fd_passing),
		cmocka_unit_test(test_ctrunc),
		cmocka_unit_test(test_mtrunc),
		cmocka_unit_test(test_unexpected_fds),
		cmocka_unit_test(test_peer_cred),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
