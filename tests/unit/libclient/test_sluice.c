/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for libsluice against a fake sluiced in a thread: connect, attach, next, release. */
#include "sluice/sluice.h"

#include <errno.h>
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
#include <unistd.h>

#include <cmocka.h>

#include "ipc/ctl.h"
#include "ipc/ring.h"
#include "libclient/client_internal.h"
#include "client_fixture.h"

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
	struct sluice_error err = { 0, "" };

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
	setenv("RUNTIME_DIRECTORY", ":/run/b", 1); /* an empty first entry: as if unset */
	assert_int_equal(lc_socket_path(NULL, buf, sizeof(buf), NULL), 0);
	assert_string_not_equal(buf, "/sluice.sock");
	assert_string_not_equal(buf, "/run/b/sluice.sock");
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
	struct sluice_error err = { 0, "" };
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
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
	struct sluice_error err = { 0, "" };
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
	struct sluice_error err = { 0, "" };

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
	struct sluice_error err = { 0, "" };

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
	struct sluice_error err = { 0, "" };

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
	struct sluice_error err = { 0, "" };

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
	struct sluice_error err = { 0, "" };

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
	struct sluice_error err = { 0, "" };
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
	struct sluice_error err = { 0, "" };
	struct sluice_pipeline_info *list = NULL;
	struct sluice_stats *st = NULL;
	size_t n = 0;
	int64_t v = 0;
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

	/* the public listing and statistics (sluicectl list and stats use nothing else) */
	assert_int_equal(sluice_list(c, &list, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_string_equal(list[0].name, "train");
	assert_int_equal(list[0].status, SLUICE_PIPELINE_RUNNING);
	assert_int_equal(list[0].batches_published, 7);
	assert_int_equal(list[0].ring_slots_used, 3);
	assert_int_equal(list[0].ring_slots, 8);
	assert_int_equal(list[0].owner_uid, 1000);
	sluice_list_free(list);
	assert_int_equal(sluice_stats(c, "train", &st, &err), 0);
	assert_string_equal(sluice_stats_name(st), "train");
	assert_int_equal(sluice_stats_count(st), 2);
	assert_string_equal(sluice_stats_at(st, 0, &v), "batches_published");
	assert_int_equal(v, 7);
	assert_string_equal(sluice_stats_at(st, 1, &v), "wait_ns");
	assert_int_equal(v, -1);
	assert_null(sluice_stats_at(st, 2, &v));
	assert_int_equal(sluice_stats_get(st, "wait_ns", &v), 0);
	assert_int_equal(v, -1);
	assert_int_equal(sluice_stats_get(st, "nope", &v), -ENOENT);
	sluice_stats_free(st);
	sluice_stats_free(NULL);
	st = NULL;
	assert_int_equal(sluice_stats(c, "nope", &st, &err), -ENOENT);
	assert_null(st);
	assert_int_equal(sluice_stats(c, "", &st, &err), -EINVAL);
	sluice_disconnect(c);
	srv_stop(&s, false);
	srv_free(&s);
}

/* ---- threads: next in one thread, release in another, publishing in a third ---- */

#define STRESS_BATCHES 3000
#define QCAP	       8

struct stress {
	struct srv *s;
	struct sluice_reader *r;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct sluice_batch *q[QCAP];
	unsigned qh, qt;
	bool done;
	_Atomic bool stop_pub;
	/* the reader thread's failure (cmocka is not thread-safe: the main thread asserts) */
	char failed[600];
};

static void *stress_reader(void *arg)
{
	struct stress *st = arg;

	for (uint64_t seq = 0; seq < STRESS_BATCHES; seq++) {
		struct sluice_batch *b = NULL;
		struct sluice_error err = { 0, "" };
		int rc = sluice_next(st->r, -1, &b, &err);

		if (rc != 1 || sluice_batch_seq(b) != seq) {
			snprintf(st->failed, sizeof(st->failed), "next %llu: rc %d, seq %llu: %s",
				 (unsigned long long)seq, rc,
				 rc == 1 ? (unsigned long long)sluice_batch_seq(b) : 0ull, err.msg);
			if (rc == 1)
				sluice_batch_release(b);
			atomic_store(&st->stop_pub, true);
			break;
		}
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
			usleep(50); /* the workload: a reader that holds batches */
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
			usleep(20); /* the workload: a publisher that retries a full ring */
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
	if (st.failed[0])
		fail_msg("the reader thread: %s", st.failed);
	srv_collect(&s);
	sluice_detach(st.r);
	sluice_disconnect(c);
	pthread_cond_destroy(&st.cond);
	pthread_mutex_destroy(&st.lock);
	srv_stop(&s, false);
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
		cmocka_unit_test(test_threads_next_release),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
