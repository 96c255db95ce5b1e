/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced's control server: client connections, their readers, the requests they send. */
#ifndef SLUICE_DAEMON_SERVER_H
#define SLUICE_DAEMON_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "registry.h"

struct dmn_reader {
	uint64_t id; /* in the protocol: unique in the daemon */
	struct dmn_pipeline *pl;
	unsigned ring_id;
	enum ipc_ring_mode mode;
	int group;	      /* its index in pl->groups[], -1: broadcast */
	uint64_t attached_ns; /* dmn_now_ns() at its attach */
	bool rejoined;	      /* broadcast: it joined a shared ring at its saved position */
	uint64_t tune_taken, tune_wait_ns; /* its counters at the tuner's last window */
	struct dmn_reader *next;
};

struct dmn_conn {
	int fd;
	uid_t uid;
	gid_t gid;
	gid_t *groups; /* its supplementary groups (SO_PEERGROUPS), n_groups of them */
	size_t n_groups;
	pid_t pid;
	bool hello;
	uint64_t last_ms; /* CLOCK_MONOTONIC ms of its accept or of the last input it sent */
	struct dmn_reader *readers;
	struct dmn_conn *next;
};

/* An event the log says at most once a minute, with how often it came in between. */
struct dmn_notice {
	uint64_t last_ms;
	uint64_t more;	/* since it was last said */
	uint64_t times; /* since sluiced started */
	bool said;
};

/* The daemon: its registry, and the connections the server thread serves. */
struct dmn {
	struct dmn_registry reg;
	struct dmn_conn *conns;
	uint64_t next_reader_id;
	int listen_fd;
	int epoll_fd;
	int signal_fd;
	bool stopping;
	/*
	 * At the file-descriptor limit (EMFILE, ENFILE) a connection is taken with this spare
	 * descriptor and closed at once, unless one that sends nothing can make room; when even
	 * that fails, accepting pauses (accept_resume_ms, CLOCK_MONOTONIC ms; 0: it does not)
	 * for a backoff that doubles while it goes on.
	 */
	int spare_fd;
	uint64_t accept_resume_ms;
	unsigned accept_backoff_ms;
	uint64_t next_sweep_ms; /* the next look for idle connections */
	/* connections per uid (--user-connections); root's are not counted */
	struct dmn_uid_conns {
		uid_t uid;
		unsigned n;
	} * uids;
	size_t n_uids, cap_uids;
	struct dmn_notice fd_limit, accept_error, over_cap, idle;
	uint64_t tune_at_ns; /* the tuner's last window (tune.c) */
};

/* conns.c: admitting connections. The server's own descriptors (the spare one); call once
   before serving. */
void dmn_server_init(struct dmn *d);
void dmn_server_fini(struct dmn *d);
/*
 * Accept one connection. 1: one was taken from the listening socket (accepted, or refused and
 * closed): call again; 0: none is waiting, or accepting is paused; the loop goes on either way.
 */
int dmn_conn_accept(struct dmn *d);
/* Tell the client why its connection is closed (a SHUTDOWN notice: libsluice reports it). */
void dmn_conn_say_bye(int fd, const char *why);
/* c goes: it no longer counts against its uid's --user-connections. */
void dmn_conn_uncount(struct dmn *d, const struct dmn_conn *c);
/* The clock's work (every tick): idle connections closed, paused accepting resumed. */
void dmn_server_tick(struct dmn *d, uint64_t now_ms);

/* server.c: requests and readers. */
/* Handle what arrived on c; returns < 0 when the connection must be closed. */
int dmn_conn_input(struct dmn *d, struct dmn_conn *c);
void dmn_conn_close(struct dmn *d, struct dmn_conn *c);
/* Every pipeline's releases taken in; readers whose control block is corrupt evicted. */
void dmn_server_collect(struct dmn *d);

#endif
