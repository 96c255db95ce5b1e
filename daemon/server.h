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
	int group; /* its index in pl->groups[], -1: broadcast */
	struct dmn_reader *next;
};

struct dmn_conn {
	int fd;
	uid_t uid;
	gid_t gid;
	pid_t pid;
	bool hello;
	struct dmn_reader *readers;
	struct dmn_conn *next;
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
};

int dmn_conn_accept(struct dmn *d);
/* Handle what arrived on c; returns < 0 when the connection must be closed. */
int dmn_conn_input(struct dmn *d, struct dmn_conn *c);
void dmn_conn_close(struct dmn *d, struct dmn_conn *c);
/* Every pipeline's releases taken in; readers whose control block is corrupt evicted. */
void dmn_server_collect(struct dmn *d);

#endif
