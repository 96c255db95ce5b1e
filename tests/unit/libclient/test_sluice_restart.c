/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for libsluice when sluiced restarts or removes a reader: reconnects, saved state. */
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
#include <unistd.h>

#include <cmocka.h>

#include "ipc/ring.h"
#include "libclient/client_internal.h"
#include "client_fixture.h"

/* ---- restarts ---- */

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
	struct sluice_error err = { 0, "" };
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
	/* the workload: a daemon that comes back late (a few of the client's tries fail) */
	usleep(250 * 1000);
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
	struct sluice_error err = { 0, "" };
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

/*
 * The re-attach window: 60 s of attempts 100 ms apart by default; $SLUICE_REATTACH_S sets it
 * in seconds (decimals rounded up to an attempt, 0: none); a value that is not one is ignored.
 */
static void test_reattach_window(void **state)
{
	static const struct {
		const char *env;
		unsigned tries;
	} cases[] = { { NULL, 600 }, { "2.5", 25 },    { "0", 0 },    { "0.01", 1 }, { "abc", 600 },
		      { "-1", 600 }, { "90000", 600 }, { "10", 100 }, { "", 600 } };
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct sluice_attach_opts o;
		if (cases[i].env)
			setenv("SLUICE_REATTACH_S", cases[i].env, 1);
		else
			unsetenv("SLUICE_REATTACH_S");
		sluice_attach_opts_init(&o);
		if (o.reconnect_tries != cases[i].tries)
			fail_msg("SLUICE_REATTACH_S %s: %u tries, want %u",
				 cases[i].env ? cases[i].env : "(unset)", o.reconnect_tries,
				 cases[i].tries);
	}
	unsetenv("SLUICE_REATTACH_S");
}

/*
 * A daemon that keeps no positions (no --state-dir: no token) crashes under a reader that read
 * something and saved no state: the reader fails with ESTALE, and keeps failing, rather than
 * re-attaching from the beginning (issue 19: "readers silently read everything again").
 */
static void test_no_kept_position_is_an_error(void **state)
{
	struct srv s, s2;
	struct sluice_client *c;
	struct sluice_reader *r;
	struct sluice_batch *b = NULL;
	struct sluice_error err = { 0, "" };

	srv_start(&s);
	c = connect_ok(&s);
	r = attach_ok(c, "train");
	srv_publish_n(&s, 1);
	sluice_batch_release(next_ok(r, 0));
	pthread_mutex_lock(&s.lock);
	s.remove_on_close = false;
	pthread_mutex_unlock(&s.lock);
	srv_stop(&s, true);
	srv_start_at(&s2, s.dir, "sluice.sock");
	srv_publish_n(&s2, 3);
	srv_run(&s2);
	assert_int_equal(sluice_next(r, 1000, &b, &err), -ESTALE);
	assert_non_null(strstr(err.msg, "keeps no position"));
	assert_int_equal(sluice_next(r, 1000, &b, &err), -ESTALE);
	assert_int_equal(srv_get(&s2, &s2.n_attach), 0); /* it did not start over */
	sluice_detach(r);
	sluice_disconnect(c);
	srv_stop(&s2, false);
	srv_free(&s2);
	srv_free(&s);
}

/* The daemon removes the reader while it stays up: -ECONNABORTED, no reconnect. */
static void test_reader_removed(void **state)
{
	struct srv s;
	struct sluice_client *c;
	struct sluice_reader *r;
	struct sluice_batch *b = NULL;
	struct sluice_error err = { 0, "" };

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

/*
 * Two readers of one client in two threads while the daemon restarts under them. The threads
 * report (cmocka is not thread-safe: the main thread asserts): got, and the first error.
 */
struct two {
	struct sluice_reader *r;
	_Atomic int got;
	_Atomic int rc; /* written after msg */
	char msg[sizeof(((struct sluice_error *)0)->msg)];
};

static void *two_reader(void *arg)
{
	struct two *t = arg;

	for (;;) {
		struct sluice_batch *b = NULL;
		struct sluice_error err = { 0, "" };
		int rc = sluice_next(t->r, 10000, &b, &err);

		if (rc == 0)
			break;
		if (rc != 1) {
			snprintf(t->msg, sizeof(t->msg), "%s", err.msg);
			atomic_store(&t->rc, rc);
			break;
		}
		atomic_fetch_add(&t->got, 1);
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
	pthread_mutex_lock(&s.lock);
	s.token = "tok1"; /* a daemon that keeps positions */
	pthread_mutex_unlock(&s.lock);
	c = connect_ok(&s);
	for (int i = 0; i < 2; i++) {
		t[i].r = attach_ok(c, "train");
		atomic_init(&t[i].got, 0);
		atomic_init(&t[i].rc, 0);
	}
	srv_publish_n(&s, 2);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, two_reader, &t[i]), 0);
	/* the condition itself: both took the old daemon's two batches */
	for (int i = 0; i < 2; i++)
		while (atomic_load(&t[i].got) < 2 && !atomic_load(&t[i].rc))
			usleep(1000); /* polls the condition itself */
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
		if (atomic_load(&t[i].rc))
			fail_msg("reader %d: next: %d %s", i, atomic_load(&t[i].rc), t[i].msg);
		assert_int_equal(atomic_load(&t[i].got), 2 + 5);
	}
	/* One connection for both: one HELLO on the new daemon. */
	assert_int_equal(srv_get(&s2, &s2.n_hello), 1);
	assert_int_equal(srv_get(&s2, &s2.n_attach), 2);
	/* Each came back with its token and where it was: 1 + seq 1, the last it took. */
	pthread_mutex_lock(&s2.lock);
	assert_string_equal(s2.last_resume, "tok1");
	assert_int_equal(s2.last_resume_seq, 2);
	assert_int_equal(s2.last_state_len, 0);
	pthread_mutex_unlock(&s2.lock);
	sluice_disconnect(c);
	assert_int_equal(srv_get(&s2, &s2.n_detach), 2);
	srv_stop(&s2, false);
	srv_free(&s2);
	srv_free(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reconnect_after_shutdown),
		cmocka_unit_test(test_reconnect_after_crash),
		cmocka_unit_test(test_reconnect_gives_up),
		cmocka_unit_test(test_reattach_window),
		cmocka_unit_test(test_reader_removed),
		cmocka_unit_test(test_no_kept_position_is_an_error),
		cmocka_unit_test(test_threads_two_readers_restart),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
