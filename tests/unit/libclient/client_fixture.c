/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the libsluice tests: a fake sluiced in a thread, its batches, client checks. */
#include "client_fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "ipc/batch.h"
#include "ipc/ctl.h"
#include "ipc/ring.h"

/* ---- the fake daemon ---- */

static const struct ipc_ring_tensor test_schema[2] = {
	{ .name = "x", .dtype = IPC_DTYPE_FLOAT32, .rank = 2, .shape = { -1, 3 } },
	{ .name = "tok", .dtype = IPC_DTYPE_INT64, .rank = 2, .ragged = 1, .shape = { -1, -1 } },
};

/*
 * The fake server's checks run on its own thread, and cmocka is not thread-safe: a failed check
 * there notes its line (the first one) and srv_stop fails the test from the main thread.
 */
static _Atomic int thread_fail_line;

static void thread_fail(int line)
{
	int none = 0;
	atomic_compare_exchange_strong(&thread_fail_line, &none, line);
}

#define T_EQ(a, b)                                    \
	do {                                          \
		if ((long long)(a) != (long long)(b)) \
			thread_fail(__LINE__);        \
	} while (0)
#define T_TRUE(c)                              \
	do {                                   \
		if (!(c))                      \
			thread_fail(__LINE__); \
	} while (0)
#define T_STREQ(a, b)                          \
	do {                                   \
		if (strcmp((a), (b)) != 0)     \
			thread_fail(__LINE__); \
	} while (0)

static void srv_send(int fd, const void *buf, size_t len, const int *fds, size_t nfds)
{
	int rc = ipc_ctl_send(fd, buf, len, fds, nfds);

	if (rc < 0 && rc != -EPIPE && rc != -ECONNRESET)
		fail_msg("fake server: send: %s", strerror(-rc));
}

static void srv_error(int fd, uint32_t req, int code, const char *text)
{
	struct ipc_ctl_error e = { .code = code };
	uint8_t buf[2048];
	size_t len;

	snprintf(e.text, sizeof(e.text), "%s", text);
	T_EQ(ipc_ctl_encode_error(buf, sizeof(buf), req, &e, &len), 0);
	srv_send(fd, buf, len, NULL, 0);
}

/* Patch the version of an encoded message (the header layout is the same in every version). */
static void set_version(uint8_t *buf, uint16_t v)
{
	memcpy(buf + 4, &v, 2);
}

static void srv_attach(struct srv *s, int ci, const struct ipc_ctl_msg *m)
{
	int fd = s->conns[ci];
	struct ipc_ctl_attach a;
	struct ipc_ctl_attached out;
	struct ipc_ctl_tensor_info ti[2];
	struct ipc_ring_info info;
	struct stat st;
	uint8_t buf[4096];
	unsigned id;
	int cb_fd, fds[2], k;
	size_t len;
	char emsg[256];

	T_EQ(ipc_ctl_decode_attach(m, &a, emsg, sizeof(emsg)), 0);
	s->n_attach++;
	snprintf(s->last_name, sizeof(s->last_name), "%s", a.name[0] ? a.name : "(spec)");
	s->last_state_len = a.state_len < sizeof(s->last_state) ? a.state_len : 0;
	if (s->last_state_len)
		memcpy(s->last_state, a.state, s->last_state_len);
	snprintf(s->last_resume, sizeof(s->last_resume), "%.*s",
		 a.resume_len < sizeof(s->last_resume) ? (int)a.resume_len : 0,
		 (const char *)a.resume);
	s->last_resume_seq = a.resume_seq;
	if (s->attach_err) {
		srv_error(fd, m->req_id, s->attach_err, s->attach_text);
		return;
	}
	if (a.name[0] && strcmp(a.name, "train")) {
		srv_error(fd, m->req_id, -ENOENT, "no such pipeline");
		return;
	}
	if (ipc_ring_add_reader(s->ring, 0, &id, &cb_fd) < 0) {
		srv_error(fd, m->req_id, -EUSERS, "too many readers");
		return;
	}
	for (k = 0; k < MAX_RDRS && s->rdr_conn[k] >= 0; k++)
		;
	T_TRUE(k < MAX_RDRS);
	s->rdr_conn[k] = ci;
	s->rdr_id[k] = id;
	memset(&out, 0, sizeof(out));
	memset(ti, 0, sizeof(ti));
	for (k = 0; k < 2; k++) {
		snprintf(ti[k].name, sizeof(ti[k].name), "%s", test_schema[k].name);
		ti[k].dtype = test_schema[k].dtype;
		ti[k].rank = test_schema[k].rank;
		memcpy(ti[k].shape, test_schema[k].shape, sizeof(ti[k].shape));
		ti[k].ragged = test_schema[k].ragged;
	}
	if (s->schema_lie)
		ti[1].dtype = IPC_DTYPE_INT32;
	ipc_ring_get_info(s->ring, &info);
	out.reader_id = id;
	snprintf(out.name, sizeof(out.name), "train");
	out.fingerprint[0] = 0xab;
	out.ring_version = 1;
	out.n_slots = info.n_slots;
	T_EQ(fstat(ipc_ring_data_fd(s->ring), &st), 0);
	out.data_bytes = (uint64_t)st.st_size;
	T_EQ(fstat(cb_fd, &st), 0);
	out.ctl_bytes = (uint64_t)st.st_size;
	out.tensors = ti;
	out.n_tensors = 2;
	out.token = s->token;
	out.token_len = s->token ? (uint32_t)strlen(s->token) : 0;
	T_EQ(ipc_ctl_encode_attached(buf, sizeof(buf), m->req_id, &out, &len), 0);
	fds[0] = ipc_ring_data_fd(s->ring);
	fds[1] = cb_fd;
	srv_send(fd, buf, len, fds, 2);
}

/* Remove the reader with this id (of connection ci, or any when ci < 0). */
bool srv_remove(struct srv *s, int ci, uint64_t id)
{
	for (int k = 0; k < MAX_RDRS; k++) {
		if (s->rdr_conn[k] >= 0 && (ci < 0 || s->rdr_conn[k] == ci) && s->rdr_id[k] == id) {
			T_EQ(ipc_ring_remove_reader(s->ring, s->rdr_id[k]), 0);
			s->rdr_conn[k] = -1;
			return true;
		}
	}
	return false;
}

/* One request; false when the connection is to be closed. */
static bool srv_handle(struct srv *s, int ci)
{
	int fd = s->conns[ci];
	uint8_t in[IPC_CTL_MAX_MSG], out[4096];
	struct ipc_ctl_msg m;
	int fds[IPC_CTL_MAX_FDS];
	size_t nfds = 0, len;
	char emsg[256];
	int n = ipc_ctl_recv(fd, in, sizeof(in), fds, IPC_CTL_MAX_FDS, &nfds);

	if (n <= 0)
		return false;
	T_EQ(nfds, 0);
	T_EQ(ipc_ctl_msg_parse(in, (size_t)n, &m, emsg, sizeof(emsg)), 0);
	switch (m.type) {
	case IPC_CTL_HELLO: {
		struct ipc_ctl_hello h;
		struct ipc_ctl_hello_ok ok = { .version = IPC_CTL_VERSION,
					       .server_pid = 1,
					       .max_msg = IPC_CTL_MAX_MSG };

		T_EQ(ipc_ctl_decode_hello(&m, &h, emsg, sizeof(emsg)), 0);
		T_EQ(h.version, IPC_CTL_VERSION);
		T_STREQ(h.client, "libsluice");
		s->n_hello++;
		if (s->hello_mode == HELLO_ERROR_V2) {
			struct ipc_ctl_error e = { .code = -EPROTONOSUPPORT };

			snprintf(e.text, sizeof(e.text),
				 "client speaks protocol 1, sluiced "
				 "speaks 2");
			T_EQ(ipc_ctl_encode_error(out, sizeof(out), m.req_id, &e, &len), 0);
			set_version(out, 2);
			srv_send(fd, out, len, NULL, 0);
			return false;
		}
		T_EQ(ipc_ctl_encode_hello_ok(out, sizeof(out), m.req_id, &ok, &len), 0);
		if (s->hello_mode == HELLO_OK_V2)
			set_version(out, 2);
		srv_send(fd, out, len, NULL, 0);
		return true;
	}
	case IPC_CTL_ATTACH:
		srv_attach(s, ci, &m);
		return true;
	case IPC_CTL_DETACH:
	case IPC_CTL_SAVE_STATE: {
		struct ipc_ctl_reader_ref ref;

		T_EQ(ipc_ctl_decode_reader_ref(&m, m.type, &ref, emsg, sizeof(emsg)), 0);
		if (m.type == IPC_CTL_DETACH) {
			s->n_detach++;
			if (!srv_remove(s, ci, ref.reader_id)) {
				srv_error(fd, m.req_id, -ENOENT, "no such reader");
				return true;
			}
			T_EQ(ipc_ctl_encode_reader_ref(out, sizeof(out), IPC_CTL_DETACHED, m.req_id,
						       &ref, &len),
			     0);
		} else {
			char st[32];
			struct ipc_ctl_state state = { .reader_id = ref.reader_id, .state = st };

			s->n_save++;
			state.state_len =
				(uint32_t)snprintf(st, sizeof(st), "pos:%llu:%d",
						   (unsigned long long)ref.reader_id, s->n_save);
			T_EQ(ipc_ctl_encode_state(out, sizeof(out), m.req_id, &state, &len), 0);
		}
		srv_send(fd, out, len, NULL, 0);
		return true;
	}
	case IPC_CTL_REGISTER: {
		struct ipc_ctl_register reg;
		struct ipc_ctl_registered r = { .created = true };

		T_EQ(ipc_ctl_decode_register(&m, &reg, emsg, sizeof(emsg)), 0);
		if (reg.spec_len < 2 || reg.spec[0] != '{') {
			srv_error(fd, m.req_id, -EINVAL, "spec: $: expected an object");
			return true;
		}
		snprintf(r.name, sizeof(r.name), "a-rather-long-pipeline-name");
		for (int k = 0; k < 16; k++)
			r.fingerprint[k] = (uint8_t)(k * 17);
		T_EQ(ipc_ctl_encode_registered(out, sizeof(out), m.req_id, &r, &len), 0);
		srv_send(fd, out, len, NULL, 0);
		return true;
	}
	case IPC_CTL_LIST: {
		struct ipc_ctl_pipeline_info pi = { .name = "train",
						    .status = 0,
						    .n_readers = 2,
						    .batches_published = 7,
						    .slots_used = 3,
						    .n_slots = 8,
						    .owner_uid = 1000 };
		struct ipc_ctl_list_reply lr = { .pipelines = &pi, .n_pipelines = 1 };

		T_EQ(ipc_ctl_encode_list_reply(out, sizeof(out), m.req_id, &lr, &len), 0);
		srv_send(fd, out, len, NULL, 0);
		return true;
	}
	case IPC_CTL_STATS: {
		struct ipc_ctl_stats st;
		struct ipc_ctl_stat kv[2] = { { "batches_published", 7 }, { "wait_ns", -1 } };
		struct ipc_ctl_stats_reply sr = { .stats = kv, .n_stats = 2 };

		T_EQ(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)), 0);
		if (strcmp(st.name, "train")) {
			srv_error(fd, m.req_id, -ENOENT, "no such pipeline");
			return true;
		}
		snprintf(sr.name, sizeof(sr.name), "%s", st.name);
		T_EQ(ipc_ctl_encode_stats_reply(out, sizeof(out), m.req_id, &sr, &len), 0);
		srv_send(fd, out, len, NULL, 0);
		return true;
	}
	default:
		srv_error(fd, m.req_id, -EOPNOTSUPP, "unknown request");
		return true;
	}
}

static void srv_close_conn(struct srv *s, int ci)
{
	for (int k = 0; k < MAX_RDRS; k++) {
		if (s->rdr_conn[k] == ci) {
			if (s->remove_on_close)
				ipc_ring_remove_reader(s->ring, s->rdr_id[k]);
			s->rdr_conn[k] = -1;
		}
	}
	close(s->conns[ci]);
	s->conns[ci] = -1;
}

static void *srv_main(void *arg)
{
	struct srv *s = arg;

	for (;;) {
		struct pollfd p[2 + MAX_CONNS];
		int n = 0, ci;

		p[n++] = (struct pollfd){ .fd = s->stop[0], .events = POLLIN };
		p[n++] = (struct pollfd){ .fd = s->lfd, .events = POLLIN };
		pthread_mutex_lock(&s->lock);
		for (ci = 0; ci < MAX_CONNS; ci++)
			p[n++] = (struct pollfd){ .fd = s->conns[ci], .events = POLLIN };
		pthread_mutex_unlock(&s->lock);
		if (poll(p, (nfds_t)n, -1) < 0) {
			if (errno == EINTR)
				continue;
			fail_msg("fake server: poll: %s", strerror(errno));
		}
		if (p[0].revents)
			break;
		pthread_mutex_lock(&s->lock);
		if (p[1].revents & POLLIN) {
			int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);

			for (ci = 0; fd >= 0 && ci < MAX_CONNS && s->conns[ci] >= 0; ci++)
				;
			if (fd >= 0 && ci < MAX_CONNS)
				s->conns[ci] = fd;
			else if (fd >= 0)
				close(fd);
		}
		for (ci = 0; ci < MAX_CONNS; ci++) {
			if (p[2 + ci].fd < 0 || !p[2 + ci].revents || s->conns[ci] != p[2 + ci].fd)
				continue;
			if (!srv_handle(s, ci))
				srv_close_conn(s, ci);
		}
		pthread_mutex_unlock(&s->lock);
	}
	pthread_mutex_lock(&s->lock);
	for (int ci = 0; ci < MAX_CONNS; ci++) {
		if (s->conns[ci] < 0)
			continue;
		if (s->send_shutdown) {
			struct ipc_ctl_shutdown sd = { .flags = IPC_CTL_SHUTDOWN_RESTART };
			uint8_t buf[256];
			size_t len;

			snprintf(sd.reason, sizeof(sd.reason), "sluiced is restarting");
			T_EQ(ipc_ctl_encode_shutdown(buf, sizeof(buf), &sd, &len), 0);
			srv_send(s->conns[ci], buf, len, NULL, 0);
		}
		close(s->conns[ci]);
		s->conns[ci] = -1;
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

static struct ipc_ring *make_ring(uint32_t slots, uint64_t data)
{
	struct ipc_ring_opts o;
	struct ipc_ring *r = NULL;
	char msg[256] = "";

	ipc_ring_opts_init(&o);
	o.n_slots = slots;
	o.data_bytes = data;
	o.schema = test_schema;
	o.n_schema = 2;
	o.name = "test-libclient";
	if (ipc_ring_create(&o, &r, msg, sizeof(msg)))
		fail_msg("ipc_ring_create: %s", msg);
	return r;
}

/* Start a server at dir/sock_name (dir made when empty); it owns a fresh ring. */
void srv_start_at(struct srv *s, const char *dir, const char *sock_name)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	memset(s, 0, sizeof(*s));
	if (dir) {
		snprintf(s->dir, sizeof(s->dir), "%s", dir);
	} else {
		snprintf(s->dir, sizeof(s->dir), "/tmp/sluice-lc-XXXXXX");
		assert_non_null(mkdtemp(s->dir));
	}
	snprintf(s->path, sizeof(s->path), "%s/%s", s->dir, sock_name);
	for (int k = 0; k < MAX_CONNS; k++)
		s->conns[k] = -1;
	for (int k = 0; k < MAX_RDRS; k++)
		s->rdr_conn[k] = -1;
	s->remove_on_close = true;
	s->ring = make_ring(8, 1 << 20);
	assert_int_equal(pthread_mutex_init(&s->lock, NULL), 0);
	assert_int_equal(pipe2(s->stop, O_CLOEXEC), 0);
	s->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_true(s->lfd >= 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", s->path);
	assert_int_equal(bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(s->lfd, 8), 0);
}

void srv_run(struct srv *s)
{
	assert_int_equal(pthread_create(&s->th, NULL, srv_main, s), 0);
}

void srv_start(struct srv *s)
{
	srv_start_at(s, NULL, "sluice.sock");
	srv_run(s);
}

/* Stop the thread and close the sockets; keep the ring (and the directory) when asked. */
void srv_stop(struct srv *s, bool keep_ring)
{
	assert_int_equal(write(s->stop[1], "x", 1), 1);
	assert_int_equal(pthread_join(s->th, NULL), 0);
	int line = atomic_exchange(&thread_fail_line, 0);
	if (line)
		fail_msg("the fake server thread's check at client_fixture.c:%d failed", line);
	close(s->stop[0]);
	close(s->stop[1]);
	close(s->lfd);
	unlink(s->path);
	if (!keep_ring) {
		ipc_ring_destroy(s->ring);
		s->ring = NULL;
	}
}

void srv_free(struct srv *s)
{
	ipc_ring_destroy(s->ring);
	s->ring = NULL;
	pthread_mutex_destroy(&s->lock);
	rmdir(s->dir);
}

/* ---- batches in the §3.5 layout ---- */

static uint64_t align64(uint64_t x)
{
	return (x + 63) & ~63ull;
}

static float x_val(uint64_t seq, uint64_t i)
{
	return (float)(seq * 100 + i);
}

static int64_t tok_len(uint64_t seq, uint64_t row)
{
	return (int64_t)((seq + row) % 3);
}

static int64_t tok_val(uint64_t seq, uint64_t k)
{
	return (int64_t)(seq * 10 + k);
}

/* Write batch seq into mem (cap bytes); returns total_bytes. */
uint64_t build_batch(void *mem, uint64_t cap, uint64_t seq, uint32_t flags)
{
	uint8_t *p = mem;
	struct ipc_batch_hdr *h = mem;
	struct ipc_batch_tensor *t = (struct ipc_batch_tensor *)(p + sizeof(*h));
	uint64_t off = sizeof(*h) + 2 * sizeof(*t), n = 0;
	int64_t *splits, *vals;
	float *x;

	memset(p, 0, off);
	h->magic = IPC_BATCH_MAGIC;
	h->version = IPC_BATCH_VERSION;
	h->n_tensors = 2;
	h->seq = seq;
	h->epoch = seq / 5;
	h->rows = ROWS;
	h->flags = flags | (seq % 5 == 4 ? IPC_BATCH_F_END_EPOCH : 0);
	h->index_in_epoch = seq % 5;

	t[0].schema_index = 0;
	t[0].dtype = IPC_DTYPE_FLOAT32;
	t[0].rank = 2;
	t[0].kind = IPC_TENSOR_DENSE;
	t[0].shape[0] = ROWS;
	t[0].shape[1] = 3;
	off = align64(off);
	t[0].data_off = off;
	t[0].data_len = ROWS * 3 * sizeof(float);
	x = (float *)(p + off);
	for (uint64_t i = 0; i < ROWS * 3; i++)
		x[i] = x_val(seq, i);
	off = align64(off + t[0].data_len);

	t[1].schema_index = 1;
	t[1].dtype = IPC_DTYPE_INT64;
	t[1].rank = 2;
	t[1].kind = IPC_TENSOR_RAGGED;
	t[1].shape[0] = ROWS;
	t[1].shape[1] = -1;
	t[1].splits_off = off;
	splits = (int64_t *)(p + off);
	splits[0] = 0;
	for (uint64_t r = 0; r < ROWS; r++) {
		n += (uint64_t)tok_len(seq, r);
		splits[r + 1] = (int64_t)n;
	}
	off = align64(off + (ROWS + 1) * 8);
	t[1].data_off = off;
	t[1].data_len = n * 8;
	vals = (int64_t *)(p + off);
	for (uint64_t k = 0; k < n; k++)
		vals[k] = tok_val(seq, k);
	off = align64(off + n * 8);
	assert_true(off <= cap);
	h->total_bytes = off;
	return off;
}

const char err_text[] = "data-00003.tfrecord: record 7 (offset 4096): data CRC mismatch";

static uint64_t build_error(void *mem, uint64_t seq)
{
	uint8_t *p = mem;
	struct ipc_batch_hdr *h = mem;

	memset(h, 0, sizeof(*h));
	h->magic = IPC_BATCH_MAGIC;
	h->version = IPC_BATCH_VERSION;
	h->seq = seq;
	h->flags = IPC_BATCH_F_ERROR | IPC_BATCH_F_END_STREAM;
	h->error = -EBADMSG;
	h->msg_off = sizeof(*h);
	h->msg_len = sizeof(err_text) - 1;
	memcpy(p + sizeof(*h), err_text, sizeof(err_text) - 1);
	h->total_bytes = align64(sizeof(*h) + sizeof(err_text) - 1);
	return h->total_bytes;
}

/* Publish the next batch (the ring lock is the server's). -EAGAIN when the ring is full. */
int srv_publish(struct srv *s, bool error)
{
	struct ipc_ring_extent e;
	struct ipc_ring_info info;
	uint64_t len, bad = 0;
	int rc;

	pthread_mutex_lock(&s->lock);
	ipc_ring_collect(s->ring, &bad);
	ipc_ring_get_info(s->ring, &info);
	rc = ipc_ring_reserve(s->ring, 8192, &e);
	if (rc == 0) {
		len = error ? build_error(e.mem, info.head)
			    : build_batch(e.mem, e.cap, info.head, 0);
		rc = ipc_ring_publish(s->ring, &e, len, info.head / 5, 0, NULL);
		assert_int_equal(rc, 0);
	}
	pthread_mutex_unlock(&s->lock);
	assert_true(rc == 0 || rc == -EAGAIN);
	return rc;
}

void srv_publish_n(struct srv *s, int n)
{
	for (int i = 0; i < n; i++)
		assert_int_equal(srv_publish(s, false), 0);
}

/* ---- client-side checks ---- */

/* sluice_batch_describe says what the one-at-a-time calls say, in one call. */
static void check_describe(struct sluice_batch *b)
{
	struct sluice_tensor all[3], one;
	struct sluice_batch_info info;
	const uint8_t *lo, *hi;
	size_t i;

	memset(all, 0xa5, sizeof(all));
	assert_int_equal(sluice_batch_describe(b, &info, all, 3), 2);
	assert_int_equal(info.seq, sluice_batch_seq(b));
	assert_int_equal(info.epoch, sluice_batch_epoch(b));
	assert_int_equal(info.rows, sluice_batch_rows(b));
	assert_int_equal(info.end_of_epoch, sluice_batch_end_of_epoch(b));
	assert_int_equal(info.n_tensors, 2);
	lo = info.extent;
	hi = lo + info.extent_len;
	for (i = 0; i < 2; i++) {
		assert_int_equal(sluice_batch_tensor_at(b, i, &one), 0);
		assert_memory_equal(&all[i], &one, sizeof(one));
		/* everything of the tensor lies inside the extent */
		assert_true((const uint8_t *)one.data >= lo &&
			    (const uint8_t *)one.data + one.nbytes <= hi);
		if (one.row_splits)
			assert_true((const uint8_t *)one.row_splits >= lo &&
				    (const uint8_t *)(one.row_splits + info.rows + 1) <= hi);
	}
	assert_int_equal(all[2].rank, 0xa5a5a5a5u); /* nothing past what it wrote */
	/* a short array gets what fits; info still counts them all */
	assert_int_equal(sluice_batch_describe(b, &info, all, 1), 1);
	assert_int_equal(info.n_tensors, 2);
	assert_int_equal(sluice_batch_describe(b, &info, NULL, 0), 0);
	assert_int_equal(sluice_batch_describe(b, &info, NULL, 1), -EINVAL);
	assert_int_equal(sluice_batch_describe(b, NULL, all, 3), -EINVAL);
}

void check_batch(struct sluice_batch *b, uint64_t seq)
{
	struct sluice_tensor t, t2;
	uint64_t n = 0;

	assert_int_equal(sluice_batch_seq(b), seq);
	assert_int_equal(sluice_batch_epoch(b), seq / 5);
	assert_int_equal(sluice_batch_rows(b), ROWS);
	assert_int_equal(sluice_batch_end_of_epoch(b), seq % 5 == 4);
	assert_int_equal(sluice_batch_num_tensors(b), 2);

	assert_int_equal(sluice_batch_tensor(b, "x", &t), 0);
	assert_string_equal(t.name, "x");
	assert_int_equal(t.dtype, SLUICE_FLOAT32);
	assert_int_equal(t.rank, 2);
	assert_int_equal(t.shape[0], ROWS);
	assert_int_equal(t.shape[1], 3);
	assert_int_equal(t.nbytes, ROWS * 3 * 4);
	assert_int_equal(t.n_elems, ROWS * 3);
	assert_null(t.row_splits);
	assert_null(t.offsets);
	for (uint64_t i = 0; i < ROWS * 3; i++)
		assert_true(((const float *)t.data)[i] == x_val(seq, i));
	assert_int_equal(sluice_batch_tensor_at(b, 0, &t2), 0);
	assert_ptr_equal(t2.data, t.data);
	assert_ptr_equal(t2.name, t.name);

	assert_int_equal(sluice_batch_tensor_at(b, 1, &t), 0);
	assert_string_equal(t.name, "tok");
	assert_int_equal(t.dtype, SLUICE_INT64);
	assert_int_equal(t.shape[1], -1);
	assert_non_null(t.row_splits);
	for (uint64_t r = 0; r < ROWS; r++) {
		n += (uint64_t)tok_len(seq, r);
		assert_int_equal(t.row_splits[r + 1], n);
	}
	assert_int_equal(t.n_elems, n);
	for (uint64_t k = 0; k < n; k++)
		assert_int_equal(((const int64_t *)t.data)[k], tok_val(seq, k));
	assert_int_equal(sluice_batch_tensor(b, "tok", &t2), 0);
	assert_ptr_equal(t2.row_splits, t.row_splits);

	assert_int_equal(sluice_batch_tensor(b, "nope", &t), -ENOENT);
	assert_int_equal(sluice_batch_tensor_at(b, 2, &t), -ENOENT);
	check_describe(b);
}

struct sluice_client *connect_ok(struct srv *s)
{
	struct sluice_client *c = NULL;
	struct sluice_error err = { 0, "" };

	if (sluice_connect(s->path, &c, &err))
		fail_msg("sluice_connect: %s", err.msg);
	return c;
}

struct sluice_reader *attach_ok(struct sluice_client *c, const char *name)
{
	struct sluice_attach_opts o;
	struct sluice_reader *r = NULL;
	struct sluice_error err = { 0, "" };

	sluice_attach_opts_init(&o);
	o.name = name;
	if (sluice_attach(c, &o, &r, &err))
		fail_msg("sluice_attach: %s", err.msg);
	return r;
}

struct sluice_batch *next_ok(struct sluice_reader *r, uint64_t seq)
{
	struct sluice_batch *b = NULL;
	struct sluice_error err = { 0, "" };
	int rc = sluice_next(r, 5000, &b, &err);

	if (rc != 1)
		fail_msg("sluice_next: %d: %s (expected seq %llu)", rc, err.msg,
			 (unsigned long long)seq);
	check_batch(b, seq);
	return b;
}

int srv_collect(struct srv *s)
{
	uint64_t bad = 0;
	int n;

	pthread_mutex_lock(&s->lock);
	n = ipc_ring_collect(s->ring, &bad);
	pthread_mutex_unlock(&s->lock);
	assert_int_equal(bad, 0);
	return n;
}

int srv_get(struct srv *s, const int *field)
{
	int v;

	pthread_mutex_lock(&s->lock);
	v = *field;
	pthread_mutex_unlock(&s->lock);
	return v;
}

unsigned srv_readers(struct srv *s)
{
	struct ipc_ring_info info;

	pthread_mutex_lock(&s->lock);
	ipc_ring_get_info(s->ring, &info);
	pthread_mutex_unlock(&s->lock);
	return info.n_readers;
}
