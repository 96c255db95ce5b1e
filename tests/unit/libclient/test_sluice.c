/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for libsluice against a fake sluiced in a thread: a real socket, a real ring, real fds. */
#include "sluice/sluice.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "ipc/batch.h"
#include "ipc/ctl.h"
#include "ipc/ring.h"
#include "libclient/client_internal.h"

/* ---- the fake daemon ---- */

#define MAX_CONNS 4
#define MAX_RDRS 16

static const struct ipc_ring_tensor test_schema[2] = {
	{.name = "x", .dtype = IPC_DTYPE_FLOAT32, .rank = 2, .shape = {-1, 3}},
	{.name = "tok", .dtype = IPC_DTYPE_INT64, .rank = 2, .ragged = 1, .shape = {-1, -1}},
};

enum hello_mode {
	HELLO_NORMAL = 0,
	HELLO_ERROR_V2 = 1, /* an ERROR of protocol version 2 */
	HELLO_OK_V2 = 2,    /* a HELLO_OK of protocol version 2 */
};

struct srv {
	char dir[64];
	char path[108];
	int lfd;
	int stop[2]; /* a pipe: a byte stops the thread */
	pthread_t th;
	pthread_mutex_t lock; /* everything below, and the ring */
	struct ipc_ring *ring;
	int conns[MAX_CONNS];
	unsigned rdr_id[MAX_RDRS];
	int rdr_conn[MAX_RDRS]; /* index in conns, -1: free */
	/* behaviour */
	enum hello_mode hello_mode;
	int attach_err;
	char attach_text[128];
	bool schema_lie;
	bool send_shutdown;   /* on stop: a SHUTDOWN notice first */
	bool remove_on_close; /* a closed connection's readers are removed (a live daemon) */
	/* what it saw */
	int n_hello, n_attach, n_detach, n_save;
	char last_name[256];
	uint8_t last_state[64];
	size_t last_state_len;
};

static void srv_send(int fd, const void *buf, size_t len, const int *fds, size_t nfds)
{
	int rc = ipc_ctl_send(fd, buf, len, fds, nfds);

	if (rc < 0 && rc != -EPIPE && rc != -ECONNRESET)
		fail_msg("fake server: send: %s", strerror(-rc));
}

static void srv_error(int fd, uint32_t req, int code, const char *text)
{
	struct ipc_ctl_error e = {.code = code};
	uint8_t buf[2048];
	size_t len;

	snprintf(e.text, sizeof(e.text), "%s", text);
	assert_int_equal(ipc_ctl_encode_error(buf, sizeof(buf), req, &e, &len), 0);
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

	assert_int_equal(ipc_ctl_decode_attach(m, &a, emsg, sizeof(emsg)), 0);
	s->n_attach++;
	snprintf(s->last_name, sizeof(s->last_name), "%s", a.name[0] ? a.name : "(spec)");
	s->last_state_len = a.state_len < sizeof(s->last_state) ? a.state_len : 0;
	if (s->last_state_len)
		memcpy(s->last_state, a.state, s->last_state_len);
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
	assert_true(k < MAX_RDRS);
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
	assert_int_equal(fstat(ipc_ring_data_fd(s->ring), &st), 0);
	out.data_bytes = (uint64_t)st.st_size;
	assert_int_equal(fstat(cb_fd, &st), 0);
	out.ctl_bytes = (uint64_t)st.st_size;
	out.tensors = ti;
	out.n_tensors = 2;
	assert_int_equal(ipc_ctl_encode_attached(buf, sizeof(buf), m->req_id, &out, &len), 0);
	fds[0] = ipc_ring_data_fd(s->ring);
	fds[1] = cb_fd;
	srv_send(fd, buf, len, fds, 2);
}

/* Remove the reader with this id (of connection ci, or any when ci < 0). */
static bool srv_remove(struct srv *s, int ci, uint64_t id)
{
	for (int k = 0; k < MAX_RDRS; k++) {
		if (s->rdr_conn[k] >= 0 && (ci < 0 || s->rdr_conn[k] == ci) && s->rdr_id[k] == id) {
			assert_int_equal(ipc_ring_remove_reader(s->ring, s->rdr_id[k]), 0);
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
	assert_int_equal(nfds, 0);
	assert_int_equal(ipc_ctl_msg_parse(in, (size_t)n, &m, emsg, sizeof(emsg)), 0);
	switch (m.type) {
	case IPC_CTL_HELLO: {
		struct ipc_ctl_hello h;
		struct ipc_ctl_hello_ok ok = {.version = IPC_CTL_VERSION, .server_pid = 1,
					      .max_msg = IPC_CTL_MAX_MSG};

		assert_int_equal(ipc_ctl_decode_hello(&m, &h, emsg, sizeof(emsg)), 0);
		assert_int_equal(h.version, IPC_CTL_VERSION);
		assert_string_equal(h.client, "libsluice");
		s->n_hello++;
		if (s->hello_mode == HELLO_ERROR_V2) {
			struct ipc_ctl_error e = {.code = -EPROTONOSUPPORT};

			snprintf(e.text, sizeof(e.text), "client speaks protocol 1, sluiced "
				 "speaks 2");
			assert_int_equal(ipc_ctl_encode_error(out, sizeof(out), m.req_id, &e, &len),
					 0);
			set_version(out, 2);
			srv_send(fd, out, len, NULL, 0);
			return false;
		}
		assert_int_equal(ipc_ctl_encode_hello_ok(out, sizeof(out), m.req_id, &ok, &len), 0);
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

		assert_int_equal(ipc_ctl_decode_reader_ref(&m, m.type, &ref, emsg, sizeof(emsg)),
				 0);
		if (m.type == IPC_CTL_DETACH) {
			s->n_detach++;
			if (!srv_remove(s, ci, ref.reader_id)) {
				srv_error(fd, m.req_id, -ENOENT, "no such reader");
				return true;
			}
			assert_int_equal(ipc_ctl_encode_reader_ref(out, sizeof(out),
								   IPC_CTL_DETACHED, m.req_id,
								   &ref, &len), 0);
		} else {
			char st[32];
			struct ipc_ctl_state state = {.reader_id = ref.reader_id, .state = st};

			s->n_save++;
			state.state_len = (uint32_t)snprintf(st, sizeof(st), "pos:%llu:%d",
							     (unsigned long long)ref.reader_id,
							     s->n_save);
			assert_int_equal(ipc_ctl_encode_state(out, sizeof(out), m.req_id, &state,
							      &len), 0);
		}
		srv_send(fd, out, len, NULL, 0);
		return true;
	}
	case IPC_CTL_REGISTER: {
		struct ipc_ctl_register reg;
		struct ipc_ctl_registered r = {.created = true};

		assert_int_equal(ipc_ctl_decode_register(&m, &reg, emsg, sizeof(emsg)), 0);
		if (reg.spec_len < 2 || reg.spec[0] != '{') {
			srv_error(fd, m.req_id, -EINVAL, "spec: $: expected an object");
			return true;
		}
		snprintf(r.name, sizeof(r.name), "a-rather-long-pipeline-name");
		for (int k = 0; k < 16; k++)
			r.fingerprint[k] = (uint8_t)(k * 17);
		assert_int_equal(ipc_ctl_encode_registered(out, sizeof(out), m.req_id, &r, &len),
				 0);
		srv_send(fd, out, len, NULL, 0);
		return true;
	}
	case IPC_CTL_LIST: {
		struct ipc_ctl_pipeline_info pi = {.name = "train", .status = 0, .n_readers = 2,
						   .batches_published = 7, .slots_used = 3,
						   .n_slots = 8};
		struct ipc_ctl_list_reply lr = {.pipelines = &pi, .n_pipelines = 1};

		assert_int_equal(ipc_ctl_encode_list_reply(out, sizeof(out), m.req_id, &lr, &len),
				 0);
		srv_send(fd, out, len, NULL, 0);
		return true;
	}
	case IPC_CTL_STATS: {
		struct ipc_ctl_stats st;
		struct ipc_ctl_stat kv[2] = {{"batches_published", 7}, {"wait_ns", -1}};
		struct ipc_ctl_stats_reply sr = {.stats = kv, .n_stats = 2};

		assert_int_equal(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)), 0);
		if (strcmp(st.name, "train")) {
			srv_error(fd, m.req_id, -ENOENT, "no such pipeline");
			return true;
		}
		snprintf(sr.name, sizeof(sr.name), "%s", st.name);
		assert_int_equal(ipc_ctl_encode_stats_reply(out, sizeof(out), m.req_id, &sr, &len),
				 0);
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

		p[n++] = (struct pollfd){.fd = s->stop[0], .events = POLLIN};
		p[n++] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
		pthread_mutex_lock(&s->lock);
		for (ci = 0; ci < MAX_CONNS; ci++)
			p[n++] = (struct pollfd){.fd = s->conns[ci], .events = POLLIN};
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
			struct ipc_ctl_shutdown sd = {.flags = IPC_CTL_SHUTDOWN_RESTART};
			uint8_t buf[256];
			size_t len;

			snprintf(sd.reason, sizeof(sd.reason), "sluiced is restarting");
			assert_int_equal(ipc_ctl_encode_shutdown(buf, sizeof(buf), &sd, &len), 0);
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
static void srv_start_at(struct srv *s, const char *dir, const char *sock_name)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

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

static void srv_run(struct srv *s)
{
	assert_int_equal(pthread_create(&s->th, NULL, srv_main, s), 0);
}

static void srv_start(struct srv *s)
{
	srv_start_at(s, NULL, "sluice.sock");
	srv_run(s);
}

/* Stop the thread and close the sockets; keep the ring (and the directory) when asked. */
static void srv_stop(struct srv *s, bool keep_ring)
{
	assert_int_equal(write(s->stop[1], "x", 1), 1);
	assert_int_equal(pthread_join(s->th, NULL), 0);
	close(s->stop[0]);
	close(s->stop[1]);
	close(s->lfd);
	unlink(s->path);
	if (!keep_ring) {
		ipc_ring_destroy(s->ring);
		s->ring = NULL;
	}
}

static void srv_free(struct srv *s)
{
	ipc_ring_destroy(s->ring);
	s->ring = NULL;
	pthread_mutex_destroy(&s->lock);
	rmdir(s->dir);
}

/* ---- batches in the §3.5 layout ---- */

#define ROWS 4

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
static uint64_t build_batch(void *mem, uint64_t cap, uint64_t seq, uint32_t flags)
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

static const char err_text[] = "data-00003.tfrecord: record 7 (offset 4096): data CRC mismatch";

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
static int srv_publish(struct srv *s, bool error)
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

static void srv_publish_n(struct srv *s, int n)
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

static void check_batch(struct sluice_batch *b, uint64_t seq)
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

static struct sluice_client *connect_ok(struct srv *s)
{
	struct sluice_client *c = NULL;
	struct sluice_error err = {0, ""};

	if (sluice_connect(s->path, &c, &err))
		fail_msg("sluice_connect: %s", err.msg);
	return c;
}

static struct sluice_reader *attach_ok(struct sluice_client *c, const char *name)
{
	struct sluice_attach_opts o;
	struct sluice_reader *r = NULL;
	struct sluice_error err = {0, ""};

	sluice_attach_opts_init(&o);
	o.name = name;
	if (sluice_attach(c, &o, &r, &err))
		fail_msg("sluice_attach: %s", err.msg);
	return r;
}

static struct sluice_batch *next_ok(struct sluice_reader *r, uint64_t seq)
{
	struct sluice_batch *b = NULL;
	struct sluice_error err = {0, ""};
	int rc = sluice_next(r, 5000, &b, &err);

	if (rc != 1)
		fail_msg("sluice_next: %d: %s (expected seq %llu)", rc, err.msg,
			 (unsigned long long)seq);
	check_batch(b, seq);
	return b;
}

static int srv_collect(struct srv *s)
{
	uint64_t bad = 0;
	int n;

	pthread_mutex_lock(&s->lock);
	n = ipc_ring_collect(s->ring, &bad);
	pthread_mutex_unlock(&s->lock);
	assert_int_equal(bad, 0);
	return n;
}

static int srv_get(struct srv *s, const int *field)
{
	int v;

	pthread_mutex_lock(&s->lock);
	v = *field;
	pthread_mutex_unlock(&s->lock);
	return v;
}

static unsigned srv_readers(struct srv *s)
{
	struct ipc_ring_info info;

	pthread_mutex_lock(&s->lock);
	ipc_ring_get_info(s->ring, &info);
	pthread_mutex_unlock(&s->lock);
	return info.n_readers;
}

/* ---- tests ---- */

static void test_strerror(void **state)
{
	assert_string_equal(sluice_strerror(-ENOENT), "no such pipeline");
	assert_string_equal(sluice_strerror(-ENODATA), "end of the stream");
	assert_non_null(strstr(sluice_strerror(-EPROTONOSUPPORT), "protocol"));
	assert_non_null(strstr(sluice_strerror(-EUSERS), "readers"));
	assert_non_null(strstr(sluice_strerror(-EBUSY), "rank"));
	assert_string_equal(sluice_strerror(-EISDIR), strerror(EISDIR));
}

static void test_socket_path(void **state)
{
	char buf[108], long_path[300];
	struct sluice_error err = {0, ""};

	unsetenv("SLUICE_SOCKET");
	unsetenv("RUNTIME_DIRECTORY");
	assert_int_equal(lc_socket_path("/x/y.sock", buf, sizeof(buf), NULL), 0);
	assert_string_equal(buf, "/x/y.sock");
	setenv("SLUICE_SOCKET", "/env/s.sock", 1);
	setenv("RUNTIME_DIRECTORY", "/run/a:/run/b", 1);
	assert_int_equal(lc_socket_path(NULL, buf, sizeof(buf), NULL), 0);
	assert_string_equal(buf, "/env/s.sock");
	unsetenv("SLUICE_SOCKET");
	assert_int_equal(lc_socket_path(NULL, buf, sizeof(buf), NULL), 0);
	assert_string_equal(buf, "/run/a/sluice.sock");
	unsetenv("RUNTIME_DIRECTORY");
	setenv("XDG_RUNTIME_DIR", "/run/user/1234", 1);
	assert_int_equal(lc_socket_path(NULL, buf, sizeof(buf), NULL), 0);
	if (access("/run/sluice/sluice.sock", F_OK) == 0)
		assert_string_equal(buf, "/run/sluice/sluice.sock");
	else
		assert_string_equal(buf, "/run/user/1234/sluice/sluice.sock");
	unsetenv("XDG_RUNTIME_DIR");
	assert_int_equal(lc_socket_path(NULL, buf, sizeof(buf), NULL), 0);
	assert_string_equal(buf, "/run/sluice/sluice.sock");

	memset(long_path, 'a', sizeof(long_path) - 1);
	long_path[0] = '/';
	long_path[sizeof(long_path) - 1] = '\0';
	assert_int_equal(lc_socket_path(long_path, buf, sizeof(buf), &err), -ENAMETOOLONG);
	assert_int_equal(err.code, -ENAMETOOLONG);
	assert_non_null(strstr(err.msg, "socket path"));
}

static void test_connect_errors(void **state)
{
	struct sluice_client *c = NULL;
	struct sluice_error err = {0, ""};
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char dir[] = "/tmp/sluice-lc-XXXXXX", path[108];
	int fd;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/sluice.sock", dir);
	assert_int_equal(sluice_connect(path, &c, &err), -ENOENT);
	assert_int_equal(err.code, -ENOENT);
	assert_non_null(strstr(err.msg, path));
	assert_non_null(strstr(err.msg, "is sluiced running"));
	assert_null(c);

	/* A socket file nobody listens on (a daemon that died). */
	fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	assert_int_equal(sluice_connect(path, &c, &err), -ECONNREFUSED);
	assert_int_equal(err.code, -ECONNREFUSED);
	assert_null(c);
	unlink(path);

	/* Through $SLUICE_SOCKET. */
	setenv("SLUICE_SOCKET", path, 1);
	assert_int_equal(sluice_connect(NULL, &c, &err), -ENOENT);
	unsetenv("SLUICE_SOCKET");
	rmdir(dir);
}

static void test_connect_env(void **state)
{
	struct srv s;
	struct sluice_client *c = NULL;
	struct sluice_error err = {0, ""};
	char dir[] = "/tmp/sluice-lc-XXXXXX", sub[80];

	srv_start(&s);
	setenv("SLUICE_SOCKET", s.path, 1);
	setenv("RUNTIME_DIRECTORY", "/nonexistent", 1);
	assert_int_equal(sluice_connect(NULL, &c, &err), 0);
	assert_int_equal(srv_get(&s, &s.n_hello), 1);
	sluice_disconnect(c);
	unsetenv("SLUICE_SOCKET");
	setenv("RUNTIME_DIRECTORY", s.dir, 1);
	assert_int_equal(sluice_connect(NULL, &c, &err), 0);
	sluice_disconnect(c);
	unsetenv("RUNTIME_DIRECTORY");
	srv_stop(&s, false);
	srv_free(&s);

	/* $XDG_RUNTIME_DIR/sluice/sluice.sock when there is no system socket. */
	if (access("/run/sluice/sluice.sock", F_OK) == 0)
		return;
	assert_non_null(mkdtemp(dir));
	snprintf(sub, sizeof(sub), "%s/sluice", dir);
	assert_int_equal(mkdir(sub, 0700), 0);
	srv_start_at(&s, sub, "sluice.sock");
	srv_run(&s);
	setenv("XDG_RUNTIME_DIR", dir, 1);
	assert_int_equal(sluice_connect(NULL, &c, &err), 0);
	sluice_disconnect(c);
	unsetenv("XDG_RUNTIME_DIR");
	srv_stop(&s, false);
	srv_free(&s);
	rmdir(dir);
}

static void test_version_mismatch(void **state)
{
	struct srv s;
	struct sluice_client *c = NULL;
	struct sluice_error err = {0, ""};

	srv_start_at(&s, NULL, "sluice.sock");
	s.hello_mode = HELLO_ERROR_V2;
	srv_run(&s);
	assert_int_equal(sluice_connect(s.path, &c, &err), -EPROTONOSUPPORT);
	assert_int_equal(err.code, -EPROTONOSUPPORT);
	assert_non_null(strstr(err.msg, "client speaks protocol 1, sluiced speaks 2"));
	assert_null(c);

	pthread_mutex_lock(&s.lock);
	s.hello_mode = HELLO_OK_V2;
	pthread_mutex_unlock(&s.lock);
	memset(&err, 0, sizeof(err));
	assert_int_equal(sluice_connect(s.path, &c, &err), -EPROTONOSUPPORT);
	assert_non_null(strstr(err.msg, "protocol version 2"));
	assert_null(c);
	srv_stop(&s, false);
	srv_free(&s);
}

static void test_attach_read_release(void **state)
{
	struct srv s;
	struct sluice_client *c;
	struct sluice_reader *r;
	struct sluice_batch *held[6], *b = NULL;
	struct sluice_error err = {0, ""};

	srv_start(&s);
	c = connect_ok(&s);
	r = attach_ok(c, "train");
	assert_string_equal(s.last_name, "train");
	assert_int_equal(srv_readers(&s), 1);

	/* Nothing yet: a timeout (immediate, then after a wait). */
	assert_int_equal(sluice_next(r, 0, &b, &err), -ETIMEDOUT);
	assert_int_equal(err.code, -ETIMEDOUT);
	assert_int_equal(sluice_next(r, 30, &b, &err), -ETIMEDOUT);
	assert_null(b);

	srv_publish_n(&s, 6);
	for (int i = 0; i < 6; i++)
		held[i] = next_ok(r, (uint64_t)i);
	assert_int_equal(srv_collect(&s), 0);
	/* Out of order; the server takes the releases in at its next collect. */
	sluice_batch_release(held[3]);
	sluice_batch_release(held[0]);
	assert_int_equal(srv_collect(&s), 2);
	for (int i = 1; i < 6; i++)
		if (i != 3)
			sluice_batch_release(held[i]);
	assert_int_equal(srv_collect(&s), 4);
	sluice_batch_release(NULL);

	/* The ring reuses its slots: many more batches than 8 slots. */
	for (uint64_t seq = 6; seq < 40; seq++) {
		srv_publish_n(&s, 1);
		b = next_ok(r, seq);
		sluice_batch_release(b);
	}
	sluice_detach(r);
	assert_int_equal(srv_get(&s, &s.n_detach), 1);
	assert_int_equal(srv_readers(&s), 0);
	sluice_disconnect(c);
	srv_stop(&s, false);
	srv_free(&s);
}

static void test_end_of_stream(void **state)
{
	struct srv s;
	struct sluice_client *c;
	struct sluice_reader *r;
	struct sluice_batch *b = NULL;
	struct sluice_error err = {0, ""};

	srv_start(&s);
	c = connect_ok(&s);
	r = attach_ok(c, "train");
	srv_publish_n(&s, 3);
	pthread_mutex_lock(&s.lock);
	assert_int_equal(ipc_ring_set_eos(s.ring), 0);
	pthread_mutex_unlock(&s.lock);
	for (int i = 0; i < 3; i++)
		sluice_batch_release(next_ok(r, (uint64_t)i));
	assert_int_equal(sluice_next(r, 1000, &b, &err), 0);
	assert_int_equal(sluice_next(r, -1, &b, &err), 0);
	assert_null(b);
	sluice_detach(r);
	sluice_disconnect(c);
	srv_stop(&s, false);
	srv_free(&s);
}

static void test_error_batch(void **state)
{
	struct srv s;
	struct sluice_client *c;
	struct sluice_reader *r;
	struct sluice_batch *b = NULL;
	struct sluice_error err = {0, ""};

	srv_start(&s);
	c = connect_ok(&s);
	r = attach_ok(c, "train");
	srv_publish_n(&s, 2);
	assert_int_equal(srv_publish(&s, true), 0);
	pthread_mutex_lock(&s.lock);
	assert_int_equal(ipc_ring_set_eos(s.ring), 0);
	pthread_mutex_unlock(&s.lock);
	sluice_batch_release(next_ok(r, 0));
	sluice_batch_release(next_ok(r, 1));
	assert_int_equal(sluice_next(r, 1000, &b, &err), -EBADMSG);
	assert_int_equal(err.code, -EBADMSG);
	assert_non_null(strstr(err.msg, err_text));
	assert_non_null(strstr(err.msg, "\"train\""));
	assert_null(b);
	/* It sticks. */
	memset(&err, 0, sizeof(err));
	assert_int_equal(sluice_next(r, 0, &b, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, err_text));
	/* The error batch was released. */
	assert_int_equal(srv_collect(&s), 3);
	sluice_detach(r);
	sluice_disconnect(c);
	srv_stop(&s, false);
	srv_free(&s);
}

static void test_attach_errors(void **state)
{
	struct srv s;
	struct sluice_client *c;
	struct sluice_reader *r = NULL;
	struct sluice_attach_opts o;
	struct sluice_error err = {0, ""};

	srv_start(&s);
	c = connect_ok(&s);

	sluice_attach_opts_init(&o);
	o.name = "imagenet";
	assert_int_equal(sluice_attach(c, &o, &r, &err), -ENOENT);
	assert_int_equal(err.code, -ENOENT);
	assert_string_equal(err.msg, "attach \"imagenet\": no such pipeline");
	assert_null(r);

	pthread_mutex_lock(&s.lock);
	s.attach_err = -EBUSY;
	snprintf(s.attach_text, sizeof(s.attach_text), "rank 1 of \"train\" is taken by pid 77");
	pthread_mutex_unlock(&s.lock);
	o.name = "train";
	o.mode = SLUICE_MODE_RANK;
	o.rank_index = 1;
	o.rank_count = 2;
	assert_int_equal(sluice_attach(c, &o, &r, &err), -EBUSY);
	assert_non_null(strstr(err.msg, "is taken by pid 77"));
	assert_null(r);
	pthread_mutex_lock(&s.lock);
	s.attach_err = 0;
	pthread_mutex_unlock(&s.lock);

	/* Refused before anything is sent. */
	o.rank_index = 2;
	assert_int_equal(sluice_attach(c, &o, &r, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "rank_index"));
	o.mode = SLUICE_MODE_BROADCAST;
	o.spec_json = "{}";
	assert_int_equal(sluice_attach(c, &o, &r, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "both"));
	o.name = NULL;
	o.spec_json = NULL;
	assert_int_equal(sluice_attach(c, &o, &r, &err), -EINVAL);
	o.size = 0;
	assert_int_equal(sluice_attach(c, &o, &r, &err), -EINVAL);

	/* ATTACHED that disagrees with the ring: -EBADMSG, and the reader is given back. */
	pthread_mutex_lock(&s.lock);
	s.schema_lie = true;
	pthread_mutex_unlock(&s.lock);
	sluice_attach_opts_init(&o);
	o.name = "train";
	assert_int_equal(sluice_attach(c, &o, &r, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "tok"));
	assert_null(r);
	assert_int_equal(srv_get(&s, &s.n_detach), 1);
	assert_int_equal(srv_readers(&s), 0);

	/* The connection still works. */
	pthread_mutex_lock(&s.lock);
	s.schema_lie = false;
	pthread_mutex_unlock(&s.lock);
	r = attach_ok(c, "train");
	sluice_detach(r);
	sluice_disconnect(c);
	srv_stop(&s, false);
	srv_free(&s);
}

static void test_save_detach_disconnect(void **state)
{
	struct srv s;
	struct sluice_client *c;
	struct sluice_reader *r1, *r2, *r3;
	struct sluice_error err = {0, ""};
	uint8_t buf[SLUICE_STATE_MAX];
	char want[32];
	size_t len = 0;

	srv_start(&s);
	c = connect_ok(&s);
	r1 = attach_ok(c, "train");
	r2 = attach_ok(c, "train");
	r3 = attach_ok(c, "train");
	assert_int_equal(srv_readers(&s), 3);

	assert_int_equal(sluice_reader_save(r1, buf, sizeof(buf), &len, &err), 0);
	snprintf(want, sizeof(want), "pos:%u:1", ipc_ring_client_id(r1->ring->rc));
	assert_int_equal(len, strlen(want));
	assert_memory_equal(buf, want, len);
	assert_int_equal(sluice_reader_save(r1, buf, 2, &len, &err), -ENOBUFS);
	assert_non_null(strstr(err.msg, "buffer"));

	sluice_detach(r2);
	assert_int_equal(srv_get(&s, &s.n_detach), 1);
	assert_int_equal(srv_readers(&s), 2);
	/* With readers still attached: every one is detached. */
	sluice_disconnect(c);
	assert_int_equal(srv_get(&s, &s.n_detach), 3);
	assert_int_equal(srv_readers(&s), 0);
	(void)r3;
	sluice_disconnect(NULL);
	sluice_detach(NULL);
	srv_stop(&s, false);
	srv_free(&s);
}

static void test_register_list_stats(void **state)
{
	struct srv s;
	struct sluice_client *c;
	struct sluice_error err = {0, ""};
	struct ipc_ctl_list_reply lr;
	struct ipc_ctl_stats_reply sr;
	uint8_t fp[16];
	char name[129];

	srv_start(&s);
	c = connect_ok(&s);
	assert_int_equal(sluice_register(c, "{\"name\": 1}", name, sizeof(name), fp, &err), 0);
	assert_string_equal(name, "a-rather-long-pipeline-name");
	assert_int_equal(fp[15], 15 * 17);
	assert_int_equal(sluice_register(c, "{}", name, 5, fp, &err), -ENOBUFS);
	assert_int_equal(sluice_register(c, "[]", name, sizeof(name), fp, &err), -EINVAL);
	assert_string_equal(err.msg, "register: spec: $: expected an object");

	memset(&lr, 0, sizeof(lr));
	assert_int_equal(lc_list(c, &lr, &err), 0);
	assert_int_equal(lr.n_pipelines, 1);
	assert_string_equal(lr.pipelines[0].name, "train");
	assert_int_equal(lr.pipelines[0].batches_published, 7);
	ipc_ctl_list_reply_fini(&lr);
	memset(&sr, 0, sizeof(sr));
	assert_int_equal(lc_stats(c, "train", &sr, &err), 0);
	assert_int_equal(sr.n_stats, 2);
	assert_string_equal(sr.stats[0].key, "batches_published");
	ipc_ctl_stats_reply_fini(&sr);
	assert_int_equal(lc_stats(c, "nope", &sr, &err), -ENOENT);
	sluice_disconnect(c);
	srv_stop(&s, false);
	srv_free(&s);
}

/*
 * The daemon restarts: it sends SHUTDOWN, its rings go (readers see -ECONNABORTED), the socket
 * closes; a new one comes up at the same path a little later. sluice_next re-attaches from the
 * saved state; a batch held from the old ring stays readable until released.
 */
static void restart(bool graceful)
{
	struct srv s, s2;
	struct sluice_client *c;
	struct sluice_reader *r;
	struct sluice_batch *held, *b;
	struct sluice_error err = {0, ""};
	uint8_t st[64];
	char saved[64];
	size_t len;

	srv_start(&s);
	c = connect_ok(&s);
	r = attach_ok(c, "train");
	srv_publish_n(&s, 2);
	sluice_batch_release(next_ok(r, 0));
	assert_int_equal(sluice_reader_save(r, st, sizeof(st), &len, &err), 0);
	memcpy(saved, st, len);
	held = next_ok(r, 1);

	pthread_mutex_lock(&s.lock);
	s.send_shutdown = graceful;
	s.remove_on_close = false;
	pthread_mutex_unlock(&s.lock);
	srv_stop(&s, !graceful); /* graceful: the ring is destroyed (readers evicted) */
	check_batch(held, 1);

	srv_start_at(&s2, s.dir, "sluice.sock");
	srv_publish_n(&s2, 3); /* a new stream: seqs from 0 again */
	usleep(250 * 1000);    /* a few of the client's tries fail: nothing listens yet */
	srv_run(&s2);

	b = next_ok(r, 0);
	check_batch(held, 1);
	assert_int_equal(srv_get(&s2, &s2.n_attach), 1);
	pthread_mutex_lock(&s2.lock);
	assert_int_equal(s2.last_state_len, len);
	assert_memory_equal(s2.last_state, saved, len);
	pthread_mutex_unlock(&s2.lock);
	sluice_batch_release(held); /* into the old ring's mapping, which goes now */
	sluice_batch_release(b);
	sluice_batch_release(next_ok(r, 1));
	assert_int_equal(srv_collect(&s2), 2);
	/* Save on the new connection. */
	assert_int_equal(sluice_reader_save(r, st, sizeof(st), &len, &err), 0);

	sluice_detach(r);
	assert_int_equal(srv_get(&s2, &s2.n_detach), 1);
	sluice_disconnect(c);
	srv_stop(&s2, false);
	srv_free(&s2);
	srv_free(&s);
}

static void test_reconnect_after_shutdown(void **state)
{
	restart(true);
}

static void test_reconnect_after_crash(void **state)
{
	restart(false);
}

static void test_reconnect_gives_up(void **state)
{
	struct srv s;
	struct sluice_client *c;
	struct sluice_reader *r;
	struct sluice_attach_opts o;
	struct sluice_batch *b = NULL;
	struct sluice_error err = {0, ""};
	uint8_t tmp[8];
	size_t len = 0;

	srv_start(&s);
	c = connect_ok(&s);
	sluice_attach_opts_init(&o);
	o.name = "train";
	o.reconnect_tries = 3;
	assert_int_equal(sluice_attach(c, &o, &r, &err), 0);
	pthread_mutex_lock(&s.lock);
	s.send_shutdown = true;
	pthread_mutex_unlock(&s.lock);
	srv_stop(&s, false);
	assert_int_equal(sluice_next(r, -1, &b, &err), -ECONNRESET);
	assert_int_equal(err.code, -ECONNRESET);
	assert_non_null(strstr(err.msg, "3 attempts"));
	assert_non_null(strstr(err.msg, "is sluiced running"));
	assert_int_equal(sluice_reader_save(r, tmp, sizeof(tmp), &len, &err), -ECONNRESET);
	sluice_detach(r);
	sluice_disconnect(c);
	srv_free(&s);
}

/* The daemon removes the reader while it stays up: -ECONNABORTED, no reconnect. */
static void test_reader_removed(void **state)
{
	struct srv s;
	struct sluice_client *c;
	struct sluice_reader *r;
	struct sluice_batch *b = NULL;
	struct sluice_error err = {0, ""};

	srv_start(&s);
	c = connect_ok(&s);
	r = attach_ok(c, "train");
	pthread_mutex_lock(&s.lock);
	assert_true(srv_remove(&s, -1, ipc_ring_client_id(r->ring->rc)));
	pthread_mutex_unlock(&s.lock);
	assert_int_equal(sluice_next(r, 1000, &b, &err), -ECONNABORTED);
	assert_non_null(strstr(err.msg, "removed this reader"));
	assert_int_equal(srv_get(&s, &s.n_hello), 1);
	sluice_detach(r);
	sluice_disconnect(c);
	srv_stop(&s, false);
	srv_free(&s);
}

/* ---- threads: next in one thread, release in another, publishing in a third ---- */

#define STRESS_BATCHES 3000
#define QCAP 8

struct stress {
	struct srv *s;
	struct sluice_reader *r;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct sluice_batch *q[QCAP];
	unsigned qh, qt;
	bool done;
	_Atomic bool stop_pub;
};

static void *stress_reader(void *arg)
{
	struct stress *st = arg;

	for (uint64_t seq = 0; seq < STRESS_BATCHES; seq++) {
		struct sluice_batch *b = NULL;
		struct sluice_error err = {0, ""};
		int rc = sluice_next(st->r, -1, &b, &err);

		if (rc != 1)
			fail_msg("next: %d %s", rc, err.msg);
		check_batch(b, seq);
		pthread_mutex_lock(&st->lock);
		while (st->qh - st->qt == QCAP)
			pthread_cond_wait(&st->cond, &st->lock);
		st->q[st->qh++ % QCAP] = b;
		pthread_cond_broadcast(&st->cond);
		pthread_mutex_unlock(&st->lock);
	}
	pthread_mutex_lock(&st->lock);
	st->done = true;
	pthread_cond_broadcast(&st->cond);
	pthread_mutex_unlock(&st->lock);
	return NULL;
}

static void *stress_releaser(void *arg)
{
	struct stress *st = arg;
	unsigned n = 0;

	for (;;) {
		struct sluice_batch *b;

		pthread_mutex_lock(&st->lock);
		while (st->qh == st->qt && !st->done)
			pthread_cond_wait(&st->cond, &st->lock);
		if (st->qh == st->qt) {
			pthread_mutex_unlock(&st->lock);
			break;
		}
		/* Hold a few (the reader blocks on a full ring while we do). */
		if (st->qh - st->qt < 3 && !st->done && (n++ % 4)) {
			pthread_mutex_unlock(&st->lock);
			usleep(50);
			continue;
		}
		b = st->q[st->qt++ % QCAP];
		pthread_cond_broadcast(&st->cond);
		pthread_mutex_unlock(&st->lock);
		sluice_batch_release(b);
	}
	return NULL;
}

static void *stress_publisher(void *arg)
{
	struct stress *st = arg;
	int n = 0;

	while (n < STRESS_BATCHES && !atomic_load(&st->stop_pub)) {
		if (srv_publish(st->s, false) == 0)
			n++;
		else
			usleep(20);
	}
	return NULL;
}

static void test_threads_next_release(void **state)
{
	struct srv s;
	struct sluice_client *c;
	struct stress st;
	pthread_t th[3];

	srv_start(&s);
	c = connect_ok(&s);
	memset(&st, 0, sizeof(st));
	st.s = &s;
	st.r = attach_ok(c, "train");
	pthread_mutex_init(&st.lock, NULL);
	pthread_cond_init(&st.cond, NULL);
	assert_int_equal(pthread_create(&th[0], NULL, stress_publisher, &st), 0);
	assert_int_equal(pthread_create(&th[1], NULL, stress_reader, &st), 0);
	assert_int_equal(pthread_create(&th[2], NULL, stress_releaser, &st), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);
	srv_collect(&s);
	sluice_detach(st.r);
	sluice_disconnect(c);
	pthread_cond_destroy(&st.cond);
	pthread_mutex_destroy(&st.lock);
	srv_stop(&s, false);
	srv_free(&s);
}

/* Two readers of one client in two threads while the daemon restarts under them. */
struct two {
	struct sluice_reader *r;
	int got;
};

static void *two_reader(void *arg)
{
	struct two *t = arg;

	for (;;) {
		struct sluice_batch *b = NULL;
		struct sluice_error err = {0, ""};
		int rc = sluice_next(t->r, 10000, &b, &err);

		if (rc == 0)
			break;
		if (rc != 1)
			fail_msg("next: %d %s", rc, err.msg);
		t->got++;
		sluice_batch_release(b);
	}
	return NULL;
}

static void test_threads_two_readers_restart(void **state)
{
	struct srv s, s2;
	struct sluice_client *c;
	struct two t[2];
	pthread_t th[2];

	srv_start(&s);
	c = connect_ok(&s);
	for (int i = 0; i < 2; i++) {
		t[i].r = attach_ok(c, "train");
		t[i].got = 0;
	}
	srv_publish_n(&s, 2);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, two_reader, &t[i]), 0);
	usleep(100 * 1000);
	pthread_mutex_lock(&s.lock);
	s.send_shutdown = true;
	s.remove_on_close = false;
	pthread_mutex_unlock(&s.lock);
	srv_stop(&s, false);
	srv_start_at(&s2, s.dir, "sluice.sock");
	srv_publish_n(&s2, 5);
	pthread_mutex_lock(&s2.lock);
	assert_int_equal(ipc_ring_set_eos(s2.ring), 0);
	pthread_mutex_unlock(&s2.lock);
	srv_run(&s2);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(t[i].got, 2 + 5);
	}
	/* One connection for both: one HELLO on the new daemon. */
	assert_int_equal(srv_get(&s2, &s2.n_hello), 1);
	assert_int_equal(srv_get(&s2, &s2.n_attach), 2);
	sluice_disconnect(c);
	assert_int_equal(srv_get(&s2, &s2.n_detach), 2);
	srv_stop(&s2, false);
	srv_free(&s2);
	srv_free(&s);
}

/* ---- sluicectl list, stats, register, drain against the fake daemon ---- */

/* Run a shell command; its stdout into out (NUL-terminated); returns its exit status. */
static int run_cmd(const char *cmd, char *out, size_t cap)
{
	FILE *p = popen(cmd, "r");
	size_t n;
	int st;

	assert_non_null(p);
	n = fread(out, 1, cap - 1, p);
	out[n] = '\0';
	st = pclose(p);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* The digest drain prints for batch seq: crc32 over x's data, tok's splits and data. */
static uint32_t expected_digest(uint64_t seq)
{
	static _Alignas(64) uint8_t mem[8192];
	const struct ipc_batch_tensor *t = (const void *)(mem + sizeof(struct ipc_batch_hdr));
	uLong crc = crc32(0, Z_NULL, 0);

	build_batch(mem, sizeof(mem), seq, 0);
	crc = crc32(crc, mem + t[0].data_off, (uInt)t[0].data_len);
	crc = crc32(crc, mem + t[1].splits_off, (ROWS + 1) * 8);
	crc = crc32(crc, mem + t[1].data_off, (uInt)t[1].data_len);
	return (uint32_t)crc;
}

static void test_sluicectl(void **state)
{
	const char *ctl = getenv("SLUICECTL");
	char cmd[1024], out[8192], want[512], spec[128];
	struct srv s;
	FILE *f;

	if (!ctl || access(ctl, X_OK)) {
		print_message("SLUICECTL is not set: sluicectl not tested\n");
		return;
	}
	srv_start(&s);
	srv_publish_n(&s, 3);
	pthread_mutex_lock(&s.lock);
	assert_int_equal(ipc_ring_set_eos(s.ring), 0);
	pthread_mutex_unlock(&s.lock);

	snprintf(cmd, sizeof(cmd), "%s --socket %s list", ctl, s.path);
	assert_int_equal(run_cmd(cmd, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "train"));
	assert_non_null(strstr(out, "running"));
	assert_non_null(strstr(out, "3/8"));

	snprintf(cmd, sizeof(cmd), "SLUICE_SOCKET=%s %s stats train --json", s.path, ctl);
	assert_int_equal(run_cmd(cmd, out, sizeof(out)), 0);
	assert_string_equal(out, "{\"batches_published\": 7, \"wait_ns\": -1}\n");
	snprintf(cmd, sizeof(cmd), "%s --socket %s stats train", ctl, s.path);
	assert_int_equal(run_cmd(cmd, out, sizeof(out)), 0);
	assert_string_equal(out, "batches_published 7\nwait_ns -1\n");
	snprintf(cmd, sizeof(cmd), "%s --socket %s stats nope 2>&1", ctl, s.path);
	assert_int_equal(run_cmd(cmd, out, sizeof(out)), 1);
	assert_string_equal(out, "sluicectl: stats: stats \"nope\": no such pipeline\n");

	snprintf(spec, sizeof(spec), "%s/spec.json", s.dir);
	f = fopen(spec, "w");
	assert_non_null(f);
	fputs("{\"name\": \"x\"}\n", f);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "%s --socket %s register %s", ctl, s.path, spec);
	assert_int_equal(run_cmd(cmd, out, sizeof(out)), 0);
	assert_string_equal(out, "a-rather-long-pipeline-name 00112233445566778899aabbccddeeff\n");
	unlink(spec);

	snprintf(cmd, sizeof(cmd), "%s --socket %s drain train --json --values x", ctl, s.path);
	assert_int_equal(run_cmd(cmd, out, sizeof(out)), 0);
	snprintf(want, sizeof(want), "{\"seq\": 0, \"epoch\": 0, \"rows\": 4, \"digest\": "
		 "\"%08x\", \"values\": {\"x\": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]}}\n",
		 expected_digest(0));
	assert_memory_equal(out, want, strlen(want));
	snprintf(want, sizeof(want), "{\"seq\": 2, \"epoch\": 0, \"rows\": 4, \"digest\": "
		 "\"%08x\", \"values\": {\"x\": [200, ", expected_digest(2));
	assert_non_null(strstr(out, want));
	snprintf(cmd, sizeof(cmd), "%s --socket %s drain train --batches 2", ctl, s.path);
	assert_int_equal(run_cmd(cmd, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "total: batches=2 rows=8 "));
	snprintf(cmd, sizeof(cmd), "%s --socket %s drain train --json --values nope 2>&1", ctl,
		 s.path);
	assert_int_equal(run_cmd(cmd, out, sizeof(out)), 1);
	assert_non_null(strstr(out, "no tensor named 'nope'"));
	snprintf(cmd, sizeof(cmd), "%s --socket %s drain train --index 1 2>/dev/null", ctl,
		 s.path);
	assert_int_equal(run_cmd(cmd, out, sizeof(out)), 2);
	assert_int_equal(srv_readers(&s), 0); /* every drain's reader went with its socket */

	srv_stop(&s, false);
	snprintf(cmd, sizeof(cmd), "%s --socket %s list 2>&1", ctl, s.path);
	assert_int_equal(run_cmd(cmd, out, sizeof(out)), 1);
	assert_non_null(strstr(out, "sluicectl: list: connect "));
	assert_non_null(strstr(out, "is sluiced running?"));
	srv_free(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_strerror),
		cmocka_unit_test(test_socket_path),
		cmocka_unit_test(test_connect_errors),
		cmocka_unit_test(test_connect_env),
		cmocka_unit_test(test_version_mismatch),
		cmocka_unit_test(test_attach_read_release),
		cmocka_unit_test(test_end_of_stream),
		cmocka_unit_test(test_error_batch),
		cmocka_unit_test(test_attach_errors),
		cmocka_unit_test(test_save_detach_disconnect),
		cmocka_unit_test(test_register_list_stats),
		cmocka_unit_test(test_reconnect_after_shutdown),
		cmocka_unit_test(test_reconnect_after_crash),
		cmocka_unit_test(test_reconnect_gives_up),
		cmocka_unit_test(test_reader_removed),
		cmocka_unit_test(test_threads_next_release),
		cmocka_unit_test(test_threads_two_readers_restart),
		cmocka_unit_test(test_sluicectl),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
