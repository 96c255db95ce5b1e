/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced's registry: the pipelines it serves, one engine and one ring per distinct spec. */
#ifndef SLUICE_DAEMON_REGISTRY_H
#define SLUICE_DAEMON_REGISTRY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <sys/types.h>

#include "daemon/pipeline/mem.h"
#include "daemon/pipeline/pipeline.h"
#include "daemon/pipeline/tune.h"
#include "ipc/ctl.h"
#include "keep.h"
#include "ipc/ring.h"

struct sched_pool;

#define DMN_HIST IPC_RING_MAX_SLOTS /* a reader is never further behind than the ring holds */

/* CLOCK_MONOTONIC in ns: the allocator's waits, when a group or pipeline was left idle. */
static inline uint64_t dmn_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t dmn_now_ms(void)
{
	return dmn_now_ns() / 1000000;
}

/*
 * The default of --lag-timeout (DESIGN.md §5): a broadcast reader that has held the others back
 * this long, taking and releasing nothing, is moved off the shared stream. Longer than a
 * checkpoint's save, which a training loop does without reading.
 */
#define DMN_LAG_TIMEOUT_S 300u

/* Daemon-wide settings (command line). */
struct dmn_config {
	const char *socket_path;
	const char *config_dir; /* pipeline specs loaded at start, or NULL */
	const char *state_dir;	/* where positions are kept across restarts, or NULL */
	unsigned workers;	/* the shared parse pool; 0: one per core of cpus, rounded up */
	double cpus_limit;	/* --cpus; 0: none */
	/* the cores sluiced may use (affinity, cgroup cpu.max, --cpus): the model's budget */
	double cpus;
	uint64_t pipeline_bytes;    /* a pipeline's ring data area: its maximum */
	uint64_t total_bytes;	    /* all rings' maximums together (docs/DECISIONS.md) */
	uint64_t ring_commit;	    /* a ring's memory committed at its start (UINT64_MAX: all) */
	uint64_t ring_commit_limit; /* tests: a ring's growth past this fails (0: none) */
	unsigned max_pipelines;
	unsigned max_readers; /* per pipeline (<= IPC_RING_MAX_READERS) */
	unsigned ring_slots;
	bool direct_io;		 /* every pipeline reads with O_DIRECT (no page cache) */
	bool autotune;		 /* tune.c moves "auto" knobs and the pool's weights */
	uint64_t cache_bytes;	 /* the shared record cache's budget (0: none; UINT64_MAX: auto) */
	bool cache_uncompressed; /* ... for uncompressed files too */
	uint64_t lease_ns;	 /* split/rank: a batch held longer goes to the group (0: never) */
	/* broadcast: one that holds the others back longer is moved off (0: never by time) */
	uint64_t lag_timeout_ns;
	uint64_t linger_ns; /* an ended pipeline without readers is dropped after this */
	/* what one uid other than root may hold (0: no cap): pipelines, and their rings' bytes */
	unsigned user_pipelines;
	uint64_t user_bytes;
	/* connections (server.c): one without readers that sends nothing for this long is
	   closed (0: never); a uid other than root may hold at most this many (0: no cap) */
	unsigned idle_timeout_s;
	unsigned user_connections;
};

/* Why a pipeline stopped producing. */
enum dmn_status {
	DMN_RUNNING = IPC_CTL_PL_RUNNING,
	DMN_FINISHED = IPC_CTL_PL_FINISHED,
	DMN_FAILED = IPC_CTL_PL_FAILED,
};

/*
 * One served pipeline: the engine and the ring its batches are published into. `lock` guards
 * the ring (ipc_ring is driven by one thread at a time): on the engine's driver thread its
 * allocator reserves extents and its deliver callback publishes them; the server thread adds,
 * removes and collects readers.
 */
struct dmn_pipeline {
	char name[IPC_CTL_NAME_MAX + 1];
	uint8_t fp[16];
	uid_t owner; /* who registered it; (uid_t)-1: the host's config dir (anyone) */
	/* whose rights read its dataset (owned; the requester's, or its private origin's);
	   NULL: the daemon's (the config dir's pipelines) */
	struct io_creds *creds;
	/* who else may read it (the spec's "readers"): uids, and gids any of the caller's is in */
	uint32_t *reader_uids, *reader_gids;
	size_t n_reader_uids, n_reader_gids;
	uint64_t started_ns; /* dmn_now_ns() when it was made (stats: rates since) */
	bool from_config;
	char *config_path; /* from_config: the file it came from (owned) */
	/* removed (sluicectl rm, or its file left the config dir): hidden like a private one and
	   dropped when its last reader goes; the end its readers get is not published yet */
	bool removed, end_pending;
	int end_code;
	bool private_; /* started at a reader's saved state: not shared by fingerprint, not
			  found by name, stopped when its last reader goes */
	char *spec_json;
	char *spec_dir;	      /* the request's, or NULL */
	uint8_t *start_state; /* the state it was started at (NULL: the beginning) */
	size_t start_state_len;
	/*
	 * private_, started for a broadcast reader the lag policy moved off the shared stream
	 * (ATTACH move): the server moves that reader back once the shared pipeline of its
	 * fingerprint holds its next batch, within rejoin_max_lag (its max_lag, 0: the default)
	 * of the others (dmn_server_rejoin). Server thread.
	 */
	bool rejoin;
	uint64_t rejoin_max_lag;
	uint64_t rejoins; /* readers that joined its ring at a saved position (under lock) */

	struct pl_pipeline *pl;
	struct ipc_ring *ring;
	uint32_t shard_index, shard_count; /* the spec's shard, 0 of 1 when it has none */
	enum ipc_ring_mode mode; /* the ring's group 0: the mode the pipeline was started for */
	uint32_t rank_n;
	uint64_t data_bytes;
	/*
	 * Its memory account (budget.c): under its owner's (root's and the config dir's: under
	 * --memory's), holding its ring and what its engine's stages allocate; reserved at
	 * register for what it is known to need (mem_floor). Outlives the engine.
	 */
	struct pl_mem mem;
	bool mem_open;
	uint64_t mem_need; /* its engine's part of the floor (pl_pipeline_mem_need) */

	pthread_mutex_t lock;
	pthread_cond_t attach_cond; /* a reader attached, or stop: an idle producer goes on */
	atomic_bool stop;

	/* reservations the engine holds (mem -> extent), under lock */
	struct dmn_resv {
		void *mem;
		struct ipc_ring_extent ext;
	} * resv;
	size_t n_resv, cap_resv;

	/* under lock */
	enum dmn_status status;
	char error[IPC_CTL_TEXT_MAX + 1];
	uint64_t published;
	uint64_t reserve_waits; /* times the engine waited for readers to release */
	bool grow_failed;	/* the ring's last growth failed (logged) */
	uint64_t wait_ns;	/* time it waited */
	unsigned n_readers;
	/* server thread: since when it has ended (finished or failed) with no reader, or 0; when
	   it was made or a reader last attached or left (which one --memory drops first) */
	uint64_t idle_since, last_used;
	/*
	 * Consumer groups (DESIGN.md §5): split and rank groups by name ("" is the default one),
	 * each a group of the ring; broadcast readers share one broadcast ring group (bcast_gid).
	 */
	struct dmn_group {
		char name[IPC_CTL_NAME_MAX + 1];
		unsigned gid; /* the ring's */
		enum ipc_ring_mode mode;
		uint32_t rank_n;
		unsigned members;
		uint64_t empty_since; /* CLOCK_MONOTONIC ns when its last member left, or 0 */
		/* rank: since when a rank with batches waiting has had no reader (0: none) */
		uint64_t vacant_since;
		uint64_t first_epoch; /* the first epoch its members get (a late group) */
		/* its first member came too late for a whole epoch here: the group reads a
		   private pipeline (used, no ring group; cleared when that one is dropped) */
		struct dmn_pipeline *moved_to;
		bool used;
		/* its members resumed after a restart (positions.c), from the batch of seq
		   resumed_seq on: the group's other members resuming join it here; batches
		   below resumed_bound may have been delivered before */
		bool resumed;
		uint64_t resumed_seq, resumed_bound;
	} groups[IPC_RING_MAX_GROUPS];
	int64_t epochs; /* the spec's, -1: without end */
	/* the last batch of the latest two epochs (by epoch % 2), to restart at an epoch's start */
	struct pl_batch_pos epoch_end[2];
	bool epoch_end_set[2];
	int bcast_gid; /* -1 until a broadcast reader needs one (group 0 is not broadcast) */
	/* where each published batch sits in the stream, by ring seq (for SAVE_STATE) */
	struct dmn_hist {
		uint64_t ring_seq;
		struct pl_batch_pos pos;
	} hist[DMN_HIST];
	/* readers moved off by the lag policy: their position, taken when they were moved */
	uint64_t moved_seen;
	struct dmn_moved {
		uint8_t *state;
		int len; /* or -errno */
	} moved[IPC_RING_MAX_READERS];

	/*
	 * Restarts (positions.c, keep.c): the state directory (NULL: off), whether its order is
	 * not a function of the spec, and the bounds its kept record last said (under lock).
	 */
	struct dmn_keep *keep;
	bool sloppy;
	bool keep_failed; /* a write failed (logged once) */
	uint64_t keep_bound, keep_epochs;
	uint64_t keep_low, keep_ns; /* the ring's low at the last write, and when */

	/* the tuner's (tune.c, server thread): the reading its next window starts from */
	struct dmn_tune_win {
		struct pl_stats prev;
		uint64_t at_ns, wait_ns, commit_fails;
		bool have;
		uint64_t moves;	       /* knob moves so far */
		uint64_t windows;      /* windows fitted so far */
		uint64_t limited;      /* of them, the pipeline the limit (pl_tune_step's) */
		uint64_t run, run_max; /* such windows in a row, no knob moved: now, the most */
		struct pl_tune_probe probe; /* a trial of more jobs in flight */
		double demand, cost; /* the last window's: batches/s asked, pool s per batch */
		double drv_cost;     /* its driver's CPU seconds per batch */
		double seq_cap;	     /* the most batches/s its driver can do (the model's) */
		double alloc_per_s;  /* the batch rate the allocation gave it */
	} tune;

	struct dmn_pipeline *next;
};

/*
 * The registry (registry.c, create.c, budget.c, publish.c; daemon/README.md): every pipeline of
 * the daemon, the memory budget they share. It knows nothing of connections: the server
 * (server.c) adds and removes readers, and acts on what the registry returns
 * (dmn_pipeline_collect's readers to evict).
 */
struct dmn_registry {
	struct dmn_config cfg;
	struct sched_pool *pool;
	struct pl_cache *cache; /* the shared record cache, or NULL */
	struct dmn_pipeline *pipelines;
	unsigned n_pipelines;
	/*
	 * The memory accounts (budget.c, daemon/pipeline/mem.h): --memory at the root, one per uid
	 * other than root that registered a pipeline (--user-memory, kept until the end)
	 */
	struct pl_mem mem;
	struct pl_mem cache_mem; /* the record cache's, under mem: no user's (dmn_budget_cache) */
	struct dmn_umem {
		uid_t uid;
		struct pl_mem m;
		struct dmn_umem *next;
	} * umems;
	uint64_t next_private_id;
	struct dmn_keep keep; /* the state directory (keep.h) */
	bool stopping;	      /* sluiced stops: kept records stay for its restart */
};

/* What dmn_pipeline_get is asked for. */
struct dmn_get_req {
	const char *spec; /* JSON text, spec_len bytes */
	size_t spec_len;
	const char *origin;   /* names the text in messages */
	const char *spec_dir; /* relative dataset paths are relative to it; NULL: as written */
	uid_t owner;	      /* who asks; (uid_t)-1: the host's config dir */
	/* whose rights read the dataset (copied): the asker's, or NULL: the daemon's (the
	   config dir). Also who must be allowed to read a running pipeline to share it. */
	const struct io_creds *creds;
	enum ipc_ring_mode mode;
	uint32_t rank_n;
	const char *group; /* split/rank: the group the ring's group 0 is ("" or NULL: default) */
	bool fresh;	   /* never share a running pipeline: a private one when one runs */
	const void *state; /* a reader's saved position, or NULL */
	size_t state_len;
	/*
	 * A broadcast reader with a state may share a running shared pipeline whose ring still
	 * holds its position (dmn_pipeline_at_state), at most max_lag behind (0: the pipeline's
	 * default, half its ring) the leading reader (from_head: behind head): the caller then
	 * joins it there (dmn_join.at_state).
	 */
	bool at_position;
	uint64_t max_lag;
	bool from_head;
};

/*
 * Find a pipeline with the same fingerprint, or create and start one from spec JSON text.
 * origin names the text in messages. With a saved state (a reader resuming), a pipeline of the
 * same fingerprint is shared only if it started at that very state and still holds its first
 * batch, or (req->at_position) its ring still holds that position; otherwise, when one of that
 * fingerprint runs, a private pipeline is started at the state for this reader
 * (docs/DECISIONS.md, "Resuming"). Errors: -EINVAL (the spec or the
 * state; msg says why), -EEXIST (the name is taken by another spec), -ENOSPC (memory budget),
 * -EUSERS (too many pipelines), -errno.
 */
int dmn_pipeline_get(struct dmn_registry *d, const struct dmn_get_req *req,
		     struct dmn_pipeline **ret_pl, bool *ret_created, char *msg, size_t msg_cap);
/*
 * May who (NULL: the config dir, the administrator) read pl? Its owner, root, anyone for the
 * config dir's, and the uids and groups (primary or supplementary) its spec's "readers" names.
 */
bool dmn_may_read(const struct dmn_pipeline *pl, const struct io_creds *who);
/*
 * The shared (not private) pipeline called name, as who sees names (docs/DECISIONS.md, "Names
 * belong to their owners"): its own (root's and the config dir's are one namespace, the host's);
 * else the host's, if who may read it; else (any_owner, or who is not root) another user's that who
 * may read. NULL when none; *ret_hidden (may be NULL) is then true when one of that name exists
 * that who may not read.
 */
struct dmn_pipeline *dmn_pipeline_find(struct dmn_registry *d, const char *name,
				       const struct io_creds *who, bool any_owner,
				       bool *ret_hidden);
void dmn_pipeline_destroy(struct dmn_registry *d, struct dmn_pipeline *pl);
/*
 * Unlink a private pipeline that lost its last reader and destroy it. resumable: the reader
 * went without a detach (its connection closed) and may come back with its token: the
 * pipeline's record in the state directory stays for the config's linger_ns. Server thread.
 */
void dmn_pipeline_drop_private(struct dmn_registry *d, struct dmn_pipeline *pl, bool resumable);
/*
 * Drop the pipelines that ended (finished or failed) and have had no reader for the config's
 * linger_ns (logged; the config dir's stay: the administrator's). Server thread, each tick.
 */
void dmn_pipelines_expire(struct dmn_registry *d);
/* Log the pipelines dropped more than DMN_REAP_REPORT_MS ago that have not stopped (once). */
void dmn_reap_report(void);
/*
 * A broadcast reader's position as a pipeline state (what pl_pipeline_save() writes): right after
 * the last batch it took (the caller checks that it reads in broadcast mode: a split or rank
 * reader sees part of the stream). Returns its length, -ENOENT, -ENOSPC. Server thread.
 */
int dmn_pipeline_reader_state(struct dmn_pipeline *pl, unsigned ring_id, void *buf, size_t cap);
/* The state of position (epoch, index in it, stream seq there) of pl: its length, or -errno. */
int dmn_pipeline_state_of(struct dmn_pipeline *pl, uint64_t epoch, uint64_t index, uint64_t seq,
			  void *buf, size_t cap);
/*
 * Where a broadcast reader resuming at state (len bytes) would join pl's ring: the ring seq of
 * its next batch (*ret_seq), if the ring holds it (in [low, head]) and it is at most max_lag
 * (0: the default, half the ring; at most the ring's slots - 1) behind the leading reader on
 * the stream (from_head: behind head), so that the lag policy would not move it off at once; a
 * sloppy pipeline's positions say nothing of its batches: never. 0, -ENOENT (not held), -ERANGE
 * (held, too far behind). Under pl->lock.
 */
int dmn_pipeline_at_state(struct dmn_pipeline *pl, const void *state, size_t len, uint64_t max_lag,
			  bool from_head, uint64_t *ret_seq);
/*
 * Move broadcast reader ring_id of pl off its ring now (ipc_ring_move_reader; its position kept
 * as the lag policy's moves keep it, for its SAVE_STATE). Under pl->lock. 0 or -errno.
 */
int dmn_pipeline_move_reader(struct dmn_pipeline *pl, unsigned ring_id);
/* Forget what was kept for ring reader id (it is being removed). Under pl->lock. */
void dmn_pipeline_forget_reader(struct dmn_pipeline *pl, unsigned ring_id);

/* Where a reader joins a pipeline's ring. */
struct dmn_join {
	enum ipc_ring_mode mode;
	const char *group; /* split/rank: the group's name ("" or NULL: the default group) */
	uint32_t rank_index, rank_n;
	uint64_t first_epoch; /* for a group it opens: the first epoch its members get */
	/*
	 * Broadcast: start at this saved position, where the ring holds it within max_lag
	 * (dmn_pipeline_at_state), or at low when the pipeline was started at it; -ERANGE else.
	 */
	const void *at_state;
	size_t at_state_len;
	uint64_t max_lag;
	bool from_head;
};

/*
 * Where a new group (or broadcast reader) of pl starts so that it gets whole epochs (DESIGN.md
 * §5): at the start of the epoch the ring holds from low when it holds that start; else, when
 * the stream goes on after that epoch, at the next one (the batches before it are given back
 * unread by the client: first_epoch); else (that is the last epoch, or the stream has ended)
 * it needs a private pipeline from that epoch's start: *ret_private, with the state to start
 * it at in state (*ret_state_len 0: the pipeline's own start). -ENOENT when the start of that
 * epoch is no longer known. Under pl->lock.
 */
struct dmn_join_point {
	uint64_t first_epoch;
	bool private_;
	uint8_t state[PL_STATE_MAX];
	int state_len;
};
int dmn_pipeline_join_point(struct dmn_pipeline *pl, struct dmn_join_point *ret);
/* The split/rank group of pl called name (pl->groups index), or -1. Under pl->lock. */
int dmn_pipeline_group_find(const struct dmn_pipeline *pl, const char *name);
/*
 * Add a reader to the ring, in its group (opened on the first member: it starts with the
 * batches the ring still holds). *ret_group: the index in pl->groups[] (-1: broadcast).
 * -EBUSY (the group reads in another mode or rank count, msg says which; a rank taken),
 * -EINVAL (a group for a broadcast reader), -EUSERS, -ENOSPC (too many groups), -errno.
 * Under pl->lock.
 */
int dmn_pipeline_join(struct dmn_pipeline *pl, const struct dmn_join *j, unsigned *ret_ring_id,
		      int *ret_group, int *ret_cb_fd, char *msg, size_t msg_cap);
/*
 * Remove ring reader ring_id of pl->groups[group] (-1: broadcast). A group without members
 * keeps its place in the stream (DataLoader workers that come and go between epochs) until it
 * holds the other readers back for DMN_GROUP_GRACE_NS: then the producer closes it.
 */
void dmn_pipeline_leave(struct dmn_pipeline *pl, unsigned ring_id, int group);
#define DMN_GROUP_GRACE_NS 2000000000ull
/*
 * Take in releases, and check split/rank readers' leases (lease_ns, 0: none;
 * ipc_ring_lease_check). Returns the ring ids (a bit each) of readers whose control block is
 * corrupt or who held a batch past the lease: the caller evicts them. Server thread.
 */
uint64_t dmn_pipeline_collect(struct dmn_pipeline *pl, uint64_t lease_ns);
int dmn_load_config_dir(struct dmn_registry *d, char *msg, size_t msg_cap);

/* admin.c: what administrators do to the registry. Server thread. */
/*
 * Remove pl (sluicectl rm by uid by): its engine stops, its readers get -EIDRM "pipeline NAME
 * was removed by uid BY" after the batches before it; it is dropped when its last reader goes
 * (at once without readers). drain: end its stream instead (its file left the config dir): the
 * readers read what was published, then the end.
 */
void dmn_pipeline_remove(struct dmn_registry *d, struct dmn_pipeline *pl, uid_t by, bool drain);
/* Publish the ends that found no room in a ring (each tick). */
void dmn_pipelines_retry_ends(struct dmn_registry *d);
/*
 * "; did you mean \"a\" or \"b\"?" (at most 3 names, close to name by dmn_name_close, among
 * the shared pipelines who may read; NULL: the config dir's view) into buf, or "" when none.
 */
void dmn_name_suggest(struct dmn_registry *d, const char *name, const struct io_creds *who,
		      char *buf, size_t cap);
/*
 * SIGHUP: read the config dir again. New specs start, pipelines whose file went are removed
 * (drained), a changed file is refused (the running pipeline stays) with a log line; one line
 * sums it up.
 */
void dmn_reload_config_dir(struct dmn_registry *d);

#endif
