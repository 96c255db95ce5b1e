/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the libsluice tests: a fake sluiced in a thread, its batches, client checks. */
#ifndef SLUICE_TESTS_UNIT_LIBCLIENT_CLIENT_FIXTURE_H
#define SLUICE_TESTS_UNIT_LIBCLIENT_CLIENT_FIXTURE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice/sluice.h"
#include "ipc/ring.h"

/* ---- the fake daemon ---- */

#define MAX_CONNS 4
#define MAX_RDRS  16

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
	const char *token;    /* ATTACHED's resume token (a daemon with --state-dir), or NULL */
	/* what it saw */
	int n_hello, n_attach, n_detach, n_save;
	char last_name[256];
	uint8_t last_state[64];
	size_t last_state_len;
	char last_resume[64]; /* the last ATTACH's resume token ("" none) and resume_seq */
	uint64_t last_resume_seq;
};

/* Start a server at dir/sock_name (dir made when empty); it owns a fresh ring. */
void srv_start_at(struct srv *s, const char *dir, const char *sock_name);
/* Start the server thread of a server set up by srv_start_at(). */
void srv_run(struct srv *s);
/* srv_start_at() in a fresh directory, then srv_run(). */
void srv_start(struct srv *s);
/* Stop the thread and close the sockets; keep the ring (and the directory) when asked. */
void srv_stop(struct srv *s, bool keep_ring);
/* After srv_stop(): destroy the ring (if kept), the lock and the directory. */
void srv_free(struct srv *s);
/* Remove the reader with this id (of connection ci, or any when ci < 0); s->lock is held. */
bool srv_remove(struct srv *s, int ci, uint64_t id);
/* Publish the next batch (the ring lock is the server's). -EAGAIN when the ring is full. */
int srv_publish(struct srv *s, bool error);
/* Publish n batches; fails the test when the ring is full. */
void srv_publish_n(struct srv *s, int n);
/* Collect the readers' releases under the lock; returns how many slots came back. */
int srv_collect(struct srv *s);
/* Read one of the server's counters under its lock. */
int srv_get(struct srv *s, const int *field);
/* How many readers the server's ring has. */
unsigned srv_readers(struct srv *s);

/* ---- batches in the §3.5 layout ---- */

#define ROWS 4

/* The message of the error batch srv_publish(s, true) writes. */
extern const char err_text[];

/* Write batch seq into mem (cap bytes); returns total_bytes. */
uint64_t build_batch(void *mem, uint64_t cap, uint64_t seq, uint32_t flags);

/* ---- client-side checks ---- */

/* Check every tensor and field of batch seq as the client library presents it. */
void check_batch(struct sluice_batch *b, uint64_t seq);
/* sluice_connect() to the server, or fail the test. */
struct sluice_client *connect_ok(struct srv *s);
/* sluice_attach() to the pipeline called name, or fail the test. */
struct sluice_reader *attach_ok(struct sluice_client *c, const char *name);
/* sluice_next() within 5 s, which must be batch seq (checked); the caller releases it. */
struct sluice_batch *next_ok(struct sluice_reader *r, uint64_t seq);

#endif /* SLUICE_TESTS_UNIT_LIBCLIENT_CLIENT_FIXTURE_H */
