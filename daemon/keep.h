/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced's state directory: each pipeline's position, kept across restarts (DECISIONS.md). */
#ifndef SLUICE_DAEMON_KEEP_H
#define SLUICE_DAEMON_KEEP_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/pipeline/pipeline.h"
#include "ipc/ctl.h"

/*
 * Publishing a batch whose seq reaches the record's bound (or whose epoch reaches its epoch
 * bound) writes the record first, with a bound DMN_KEEP_EVERY batches further: so every batch
 * a pipeline ever published lies below the bounds its file says, and a restart knows which
 * batches it may have delivered (they are marked when delivered again).
 */
#define DMN_KEEP_EVERY 32
/* ... and the server thread writes it when the ring\'s oldest batch moved, at most this often */
#define DMN_KEEP_TICK_NS   1000000000ull
#define DMN_KEEP_RANKS	   4		  /* rank groups (counts) kept per pipeline */
#define DMN_KEEP_GROUPS	   16		  /* split and rank groups named per pipeline */
#define DMN_KEEP_MAX_AGE_S (7 * 86400ull) /* files of earlier runs older than this go */
#define DMN_KEEP_PER_NAME  8 /* ... and beyond the newest 8 of one pipeline (a crash loop) */

/* A pipeline's position, as its file says it (one per pipeline, shared or private). */
struct dmn_kept {
	uint64_t run; /* the daemon run that served it (random, per start) */
	uint8_t fp[16];
	char name[IPC_CTL_NAME_MAX + 1];
	uid_t owner;	 /* (uid_t)-1: the config dir's */
	char *spec_json; /* owned */
	char *spec_dir;	 /* owned, or NULL */
	bool sloppy;	 /* its order is not a function of the spec */
	/* the state at the oldest batch its ring held (every reader is at or past it) */
	uint8_t low[PL_STATE_MAX];
	int low_len; /* 0: none */
	uint64_t low_seq;
	/* sloppy: the state at the start of that batch's epoch */
	uint8_t epoch_start[PL_STATE_MAX];
	int epoch_start_len;
	/* every batch published: seq < bound and epoch < bound_epochs */
	uint64_t bound, bound_epochs;
	/* rank groups: the state at or before low where the ranks fall as they fell */
	struct dmn_kept_rank {
		uint32_t n;
		uint8_t state[PL_STATE_MAX];
		int len;
		uint64_t seq;
	} rank[DMN_KEEP_RANKS];
	unsigned n_rank;
	/*
	 * its split and rank groups (dmn_keep_group_hash of their names) and what each may have
	 * been delivered: every batch below group_bound, in this run or an earlier one (a group
	 * that resumed carries its earlier runs' bound on, as their files may go)
	 */
	uint64_t group[DMN_KEEP_GROUPS], group_bound[DMN_KEEP_GROUPS];
	unsigned n_group;
	int64_t mtime_ns; /* loaded: its file's (which earlier runs' to keep) */
	/*
	 * In memory only: when its pipeline (this run's) was dropped while a reader of it may
	 * come back with its token (its connection closed without a detach); 0: it was not.
	 */
	uint64_t orphan_ns;
	struct dmn_kept *next;
};

/* The state directory and what it holds; every function takes lock itself. */
struct dmn_keep {
	char *dir; /* NULL: off */
	uint64_t run;
	/* STATE/key (0600, sluiced's): every record file carries an HMAC-SHA256 under it */
	uint8_t key[32];
	pthread_mutex_t lock;
	struct dmn_kept *list; /* this run's pipelines and earlier runs' files */
};

/*
 * Open the state directory dir (NULL or "": off), load the records earlier runs left (a file
 * that cannot be read is logged and removed; files older than DMN_KEEP_MAX_AGE_S are removed).
 * Never fails: a directory that cannot be used turns the feature off, with a log line. What a
 * record grants (its owner's rights) must not come from anyone else (issue 37 item 3): the
 * directory and each of its parents must be sluiced's user's or root's and writable by nobody
 * else (sticky parents excepted), as sshd asks of a key's directory, else the directory is not
 * used; a record file that is not sluiced's user's, or that others may write, is ignored; and
 * each record carries an HMAC-SHA256 under STATE/key (32 random bytes, 0600, made on first
 * use), so that a record planted or edited, or copied from another state directory, is
 * ignored. (A reader's state blob is not a record: it grants nothing and stays portable.)
 */
void dmn_keep_init(struct dmn_keep *k, const char *dir);
void dmn_keep_fini(struct dmn_keep *k);
/*
 * Save rec (a copy is kept; the caller keeps rec) and write its file atomically (a temporary
 * file, then rename; no fsync: it outlives a crash of sluiced, not of the host). 0 or -errno.
 */
int dmn_keep_save(struct dmn_keep *k, const struct dmn_kept *rec);
/* Forget this run's record of the pipeline called name, and remove its file. */
void dmn_keep_forget(struct dmn_keep *k, const uint8_t fp[16], const char *name);
/*
 * This run's record of a pipeline dropped while its reader may still come back (its
 * connection closed without a detach): kept, as of now_ns, until dmn_keep_expire forgets it.
 */
void dmn_keep_orphan(struct dmn_keep *k, const uint8_t fp[16], const char *name, uint64_t now_ns);
/* Forget the records orphaned at least linger_ns before now_ns (their files removed). */
void dmn_keep_expire(struct dmn_keep *k, uint64_t now_ns, uint64_t linger_ns);
/* A copy of the record (run, fp, name) into *ret (its strings are the caller's: fini), or -ENOENT. */
int dmn_keep_find(struct dmn_keep *k, uint64_t run, const uint8_t fp[16], const char *name,
		  struct dmn_kept *ret);
/* A group's name as records keep it. */
uint64_t dmn_keep_group_hash(const char *group);
/*
 * The highest group bound that the records of computation fp (every run's, every pipeline's)
 * give for the group called group, or 0: what that group may have been delivered in any run.
 */
uint64_t dmn_keep_max_bound(struct dmn_keep *k, const uint8_t fp[16], const char *group);
void dmn_kept_fini(struct dmn_kept *rec);

/* A reader's resume token: (run, fp, name), encoded. Returns its length. */
size_t dmn_token_make(uint64_t run, const uint8_t fp[16], const char *name, uint8_t *buf,
		      size_t cap);
/* Decode a token: 0, or -EINVAL (not one of ours). */
int dmn_token_parse(const void *tok, size_t len, uint64_t *ret_run, uint8_t ret_fp[16],
		    char ret_name[IPC_CTL_NAME_MAX + 1]);

#endif
