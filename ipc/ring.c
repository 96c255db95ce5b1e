/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon side of the batch ring: the sealed data memfd, slots and extents, publishing. */
#include "ring.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "batch.h"
#include "errmsg.h"
#include "futex.h"
#include "ring_internal.h"

/*
 * Everything the daemon decides with lives in private memory (struct ipc_ring): the shared
 * header and slots are written from it, never read back. What readers write (their control
 * blocks) is read once into locals and checked against the private state; an impossible value
 * marks the reader bad (ipc_ring_collect reports it) and nothing of it is used.
 *
 * Slots and space: a batch takes a free slot (a stack of them) and a free extent (best fit in
 * a sorted list of free ranges of committed memory, coalesced on free). Both go back only when
 * the space or a slot is needed and only from batches that no reader holds, oldest first, so
 * that batches everyone released stay readable for a reader that attaches late (it starts at
 * low: every seq in [low, head) is still in the ring). A batch held for long costs its own slot
 * and extent only.
 *
 * Memory by use: only a prefix of the data area is committed (fallocated); the rest of the
 * memfd is holes that nobody writes. Reusing freed committed space comes first, then
 * reclaiming released batches, and only then does the committed prefix grow (by fallocate, so
 * a full tmpfs or memory cgroup is an error returned then, never a SIGBUS). Best fit keeps the
 * extents low and few, so the pages they touch stay mapped, cleared and warm: a ring costs
 * what it holds, not its maximum.
 */

static bool is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

void ipc_ring_opts_init(struct ipc_ring_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->size = sizeof(*opts);
	opts->data_bytes = 64ull << 20;
	opts->commit_bytes = IPC_RING_COMMIT_DEFAULT;
	opts->commit_chunk = IPC_RING_CHUNK_DEFAULT;
	opts->n_slots = 64;
	opts->mode = IPC_RING_BROADCAST;
	opts->split_depth = 2;
}

struct ipc_ring_hdr *ipc_ring_hdr_(struct ipc_ring *ring)
{
	return ring->hdr;
}

struct ipc_ring_cb *ipc_ring_cb_(struct ipc_ring *ring, unsigned id)
{
	return id < IPC_RING_MAX_READERS && (ring->attached >> id & 1) ? ring->rd[id].cb : NULL;
}

/* A tensor entry as the client checks it too. */
static int check_tensor(const struct ipc_ring_tensor *t, uint32_t i, char *msg, size_t cap)
{
	if (!memchr(t->name, 0, sizeof(t->name)) || !t->name[0])
		return ipc_errmsg(-EINVAL, msg, cap, "schema[%u].name: expected 1 to %d bytes", i,
				  IPC_RING_NAME_MAX - 1);
	if (t->dtype >= IPC_DTYPE_COUNT_)
		return ipc_errmsg(-EINVAL, msg, cap, "schema[%u].dtype: %u is not an ipc_dtype", i,
				  t->dtype);
	if (t->rank < 1 || t->rank > IPC_BATCH_MAX_RANK)
		return ipc_errmsg(-EINVAL, msg, cap, "schema[%u].rank: %u not in 1..%d", i, t->rank,
				  IPC_BATCH_MAX_RANK);
	if (t->ragged > 1)
		return ipc_errmsg(-EINVAL, msg, cap, "schema[%u].ragged: expected 0 or 1", i);
	return 0;
}

static int check_opts(const struct ipc_ring_opts *o, char *msg, size_t cap)
{
	if (o->size < sizeof(*o))
		return ipc_errmsg(-EINVAL, msg, cap, "ipc_ring_opts.size: %zu, expected %zu",
				  o->size, sizeof(*o));
	if (o->data_bytes == 0 || o->data_bytes > IPC_RING_MAX_DATA)
		return ipc_errmsg(-EINVAL, msg, cap, "data_bytes: %llu not in 1..%llu",
				  (unsigned long long)o->data_bytes, IPC_RING_MAX_DATA);
	if (o->commit_chunk == 0 || o->commit_chunk > IPC_RING_MAX_DATA)
		return ipc_errmsg(-EINVAL, msg, cap, "commit_chunk: %llu not in 1..%llu",
				  (unsigned long long)o->commit_chunk, IPC_RING_MAX_DATA);
	if (!is_pow2(o->n_slots) || o->n_slots < IPC_RING_MIN_SLOTS ||
	    o->n_slots > IPC_RING_MAX_SLOTS)
		return ipc_errmsg(-EINVAL, msg, cap,
				  "n_slots: %u, expected a power of two in %u..%u", o->n_slots,
				  IPC_RING_MIN_SLOTS, IPC_RING_MAX_SLOTS);
	if ((unsigned)o->mode > IPC_RING_RANK)
		return ipc_errmsg(-EINVAL, msg, cap, "mode: %d is not an ipc_ring_mode",
				  (int)o->mode);
	if (o->mode == IPC_RING_RANK && (o->rank_n < 1 || o->rank_n > IPC_RING_MAX_READERS))
		return ipc_errmsg(-EINVAL, msg, cap, "rank_n: %u not in 1..%d", o->rank_n,
				  IPC_RING_MAX_READERS);
	if (o->mode == IPC_RING_SPLIT && (o->split_depth < 1 || o->split_depth > o->n_slots))
		return ipc_errmsg(-EINVAL, msg, cap, "split_depth: %u not in 1..n_slots (%u)",
				  o->split_depth, o->n_slots);
	if (o->n_schema > IPC_RING_MAX_SCHEMA || (o->n_schema && !o->schema))
		return ipc_errmsg(-EINVAL, msg, cap,
				  "n_schema: %u, expected at most %u with a table", o->n_schema,
				  IPC_RING_MAX_SCHEMA);
	for (uint32_t i = 0; i < o->n_schema; i++) {
		int rc = check_tensor(&o->schema[i], i, msg, cap);

		if (rc)
			return rc;
	}
	return 0;
}

/* fallocate that goes on after a signal (shmem gives up with EINTR when one is pending). */
static int reserve_range(int fd, uint64_t off, uint64_t len)
{
	int rc;

	do
		rc = fallocate(fd, FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) < 0 ? -errno : 0;
	while (rc == -EINTR);
	return rc;
}

/*
 * A memfd of len bytes whose first `reserve` bytes are allocated, mapped read-write. The rest
 * are holes: only what was reserved (or later committed) may be written (no SIGBUS on a full
 * tmpfs later).
 */
int ipc_ring_memfd_make_(const char *name, uint64_t len, uint64_t reserve, int *ret_fd,
			 void **ret_map)
{
	int fd, rc;
	void *map;

	fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)len) < 0) {
		rc = -errno;
		goto fail_fd;
	}
	rc = reserve ? reserve_range(fd, 0, reserve) : 0;
	if (rc)
		goto fail_fd;
	map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		rc = -errno;
		goto fail_fd;
	}
	*ret_fd = fd;
	*ret_map = map;
	return 0;
fail_fd:
	close(fd);
	return rc;
}

/*
 * A read-only descriptor of the same memfd, so that a client cannot even ftruncate or write(2)
 * through what it was handed. The seals are what really protects the data (a client could
 * reopen /proc/PID/fd/N read-write); this is a second fence. -errno when /proc is missing.
 */
static int reopen_ro(int fd)
{
	char path[64];
	int ro;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ro = open(path, O_RDONLY | O_CLOEXEC);
	return ro < 0 ? -errno : ro;
}

/*
 * Where a committed prefix of at least want bytes of the data area ends: on a chunk boundary of
 * the memfd (a huge page's, where shmem_enabled is "always" or "within_size" and fallocate
 * allocates those), or at the data area's end.
 */
static uint64_t commit_end(uint64_t data_off, uint64_t data_size, uint64_t chunk, uint64_t want)
{
	uint64_t end = ipc_ring_align(data_off + want, chunk) - data_off;

	return end > data_size ? data_size : end;
}

int ipc_ring_create(const struct ipc_ring_opts *opts, struct ipc_ring **ret_ring, char *msg,
		    size_t msg_cap)
{
	struct ipc_ring *r;
	uint64_t data_size, schema_off, slots_off, order_off, data_off, total, commit, chunk;
	void *map;
	int rc, ro;

	rc = check_opts(opts, msg, msg_cap);
	if (rc)
		return rc;
	data_size = ipc_ring_align(opts->data_bytes, IPC_RING_PAGE);
	schema_off = sizeof(struct ipc_ring_hdr);
	slots_off = ipc_ring_align(schema_off + (uint64_t)opts->n_schema *
							sizeof(struct ipc_ring_tensor),
				   IPC_RING_LINE);
	order_off = ipc_ring_align(
		slots_off + (uint64_t)opts->n_slots * sizeof(struct ipc_ring_slot), IPC_RING_LINE);
	data_off = ipc_ring_align(order_off + 4ull * opts->n_slots, IPC_RING_PAGE);
	total = data_off + data_size;
	chunk = ipc_ring_align(opts->commit_chunk, IPC_RING_PAGE);
	/* The memfd's first commit_bytes, tables included, up to a chunk boundary. */
	commit = opts->commit_bytes >= total
			 ? data_size
			 : commit_end(data_off, data_size, chunk,
				      opts->commit_bytes > data_off ? opts->commit_bytes - data_off
								    : IPC_RING_PAGE);

	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->memfd = r->ro_fd = -1;
	r->sp = calloc(opts->n_slots, sizeof(*r->sp));
	r->free_slots = calloc(opts->n_slots, sizeof(*r->free_slots));
	r->free_rng = calloc(opts->n_slots + 2, sizeof(*r->free_rng));
	if (!r->sp || !r->free_slots || !r->free_rng) {
		rc = -ENOMEM;
		goto fail;
	}
	r->n_slots = opts->n_slots;
	rc = ipc_ring_group_init_(r, 0, opts->mode, opts->rank_n, opts->split_depth);
	if (rc)
		goto fail;
	for (uint32_t i = 0; i < opts->n_slots; i++)
		r->free_slots[i] = opts->n_slots - 1 - i; /* slot 0 is taken first */
	r->n_free = opts->n_slots;

	rc = ipc_ring_memfd_make_(opts->name ? opts->name : "sluice-ring", total, data_off + commit,
				  &r->memfd, &map);
	if (rc) {
		ipc_errmsg(rc, msg, msg_cap, "ring memfd of %llu bytes, %llu of them reserved: %s",
			   (unsigned long long)total, (unsigned long long)(data_off + commit),
			   strerror(-rc));
		goto fail;
	}
	r->map = map;
	r->total_size = total;
	r->data_off = data_off;
	r->committed = commit;
	r->commit_chunk = chunk;
	r->commit_limit = opts->commit_limit;
	r->hdr = map;
	r->slots = (struct ipc_ring_slot *)(r->map + slots_off);
	r->order = (_Atomic uint32_t *)(r->map + order_off);
	r->data = r->map + data_off;
	r->data_size = data_size;
	r->free_rng[0].off = 0;
	r->free_rng[0].len = commit;
	r->n_rng = commit ? 1 : 0;
	r->n_slots = opts->n_slots;
	r->mask = opts->n_slots - 1;

	/* The memory is fresh (zero); only the non-zero words are written. */
	r->hdr->magic = IPC_RING_MAGIC;
	r->hdr->version = IPC_RING_VERSION;
	r->hdr->hdr_size = sizeof(struct ipc_ring_hdr);
	/* group 0's, informative: each reader's own mode is in its control block */
	r->hdr->mode = (uint32_t)r->grp[0].mode;
	r->hdr->rank_n = r->grp[0].rank_n;
	r->hdr->total_size = total;
	r->hdr->schema_off = schema_off;
	r->hdr->n_schema = opts->n_schema;
	r->hdr->n_slots = opts->n_slots;
	r->hdr->slots_off = slots_off;
	r->hdr->order_off = order_off;
	r->hdr->data_off = data_off;
	r->hdr->data_size = data_size;
	if (opts->n_schema)
		memcpy(r->map + schema_off, opts->schema,
		       (size_t)opts->n_schema * sizeof(struct ipc_ring_tensor));
	for (uint32_t i = 0; i < opts->n_slots; i++)
		atomic_store_explicit(&r->slots[i].seq, IPC_RING_SEQ_NONE, memory_order_relaxed);

	/*
	 * Our mapping stays writable; every mapping made from now on can only be read-only. The
	 * read-write fd is kept: fallocate inside the size is allowed under these seals (only
	 * F_SEAL_GROW past the size, and punching holes under F_SEAL_FUTURE_WRITE, are refused).
	 */
	if (fcntl(r->memfd, F_ADD_SEALS, IPC_RING_DATA_SEALS) < 0) {
		rc = -errno;
		ipc_errmsg(rc, msg, msg_cap, "sealing the ring memfd: %s", strerror(-rc));
		goto fail;
	}
	ro = reopen_ro(r->memfd);
	r->ro_fd = ro >= 0 ? ro : r->memfd;
	*ret_ring = r;
	return 0;
fail:
	ipc_ring_destroy(r);
	return rc;
}

void ipc_ring_destroy(struct ipc_ring *r)
{
	if (!r)
		return;
	for (unsigned i = 0; i < IPC_RING_MAX_READERS; i++) {
		struct reader *rd = &r->rd[i];

		if (!(r->attached >> i & 1))
			continue;
		/* Pairs with the client's acquire load of flags in try_next. */
		atomic_fetch_or_explicit(&rd->cb->flags, IPC_RING_CB_EVICTED, memory_order_release);
		ipc_ring_kick_(r, i);
		munmap(rd->cb, rd->cb_size);
		close(rd->fd);
		free(rd->asg_slot);
	}
	if (r->map)
		munmap(r->map, r->total_size);
	if (r->memfd >= 0)
		close(r->memfd);
	if (r->ro_fd >= 0 && r->ro_fd != r->memfd)
		close(r->ro_fd);
	for (unsigned g = 0; g < IPC_RING_MAX_GROUPS; g++)
		ipc_ring_group_fini_(&r->grp[g]);
	free(r->free_rng);
	free(r->free_slots);
	free(r->sp);
	free(r);
}

int ipc_ring_data_fd(const struct ipc_ring *r)
{
	return r->ro_fd;
}

/* ---- readers: waking ---- */

/* Tell reader id there is news (state change): bump its wake word and wake it, unconditionally. */
void ipc_ring_kick_(struct ipc_ring *r, unsigned id)
{
	struct ipc_ring_cb *cb = r->rd[id].cb;

	/* Pairs with the client's acquire load of wake before it sleeps (ipc_ring_client_next). */
	atomic_fetch_add_explicit(&cb->wake, 1, memory_order_release);
	ipc_futex_wake(&cb->wake, INT_MAX);
}

/*
 * Wake the readers of mask that registered as waiting. Their news (head, asg_head) was stored
 * before this call. The seq_cst fence pairs with the client's fence between its store of
 * waiting and its re-check of head/asg_head (ipc_ring_client_next): either it sees our store
 * and does not sleep, or we see its waiting flag and wake it. Its wake value was read before
 * that, so a bump between its check and its FUTEX_WAIT makes the wait return at once.
 */
void ipc_ring_wake_waiting_(struct ipc_ring *r, uint64_t mask)
{
	if (!mask)
		return;
	ipc_ring_fence(memory_order_seq_cst);
	for (unsigned i = 0; i < IPC_RING_MAX_READERS; i++) {
		if (!(mask >> i & 1) || !(r->attached >> i & 1))
			continue;
		if (atomic_load_explicit(&r->rd[i].cb->waiting, memory_order_relaxed))
			ipc_ring_kick_(r, i);
	}
}

/* ---- space ---- */

/*
 * Best fit: the start of the smallest free range of at least cap bytes, the lowest of equals
 * (an exact fit is taken at once). Freed extents of the usual size are reused first, and the
 * extents stay packed low: the pages they touch stay few and warm. Returns the offset or
 * UINT64_MAX.
 */
static uint64_t space_take(struct ipc_ring *r, uint64_t cap)
{
	uint32_t best = UINT32_MAX;
	struct range *g;
	uint64_t off;

	for (uint32_t i = 0; i < r->n_rng; i++) {
		uint64_t len = r->free_rng[i].len;

		if (len < cap || (best != UINT32_MAX && len >= r->free_rng[best].len))
			continue;
		best = i;
		if (len == cap)
			break;
	}
	if (best == UINT32_MAX)
		return UINT64_MAX;
	g = &r->free_rng[best];
	off = g->off;
	g->off += cap;
	g->len -= cap;
	if (!g->len) {
		memmove(g, g + 1, (r->n_rng - best - 1) * sizeof(*g));
		r->n_rng--;
	}
	r->data_used += cap;
	return off;
}

/* Add [off, off + len) to the free ranges, merging it with its neighbours. */
static void range_insert(struct ipc_ring *r, uint64_t off, uint64_t len)
{
	uint32_t i = 0;
	bool prev, next;

	if (!len)
		return;
	while (i < r->n_rng && r->free_rng[i].off < off)
		i++;
	prev = i > 0 && r->free_rng[i - 1].off + r->free_rng[i - 1].len == off;
	next = i < r->n_rng && off + len == r->free_rng[i].off;
	if (prev && next) {
		r->free_rng[i - 1].len += len + r->free_rng[i].len;
		memmove(&r->free_rng[i], &r->free_rng[i + 1],
			(r->n_rng - i - 1) * sizeof(struct range));
		r->n_rng--;
	} else if (prev) {
		r->free_rng[i - 1].len += len;
	} else if (next) {
		r->free_rng[i].off = off;
		r->free_rng[i].len += len;
	} else {
		/* At most one range per extent plus one: the array never overflows. */
		memmove(&r->free_rng[i + 1], &r->free_rng[i],
			(r->n_rng - i) * sizeof(struct range));
		r->free_rng[i].off = off;
		r->free_rng[i].len = len;
		r->n_rng++;
	}
}

/* Give an extent's [off, off + len) back. */
static void space_give(struct ipc_ring *r, uint64_t off, uint64_t len)
{
	r->data_used -= len;
	range_insert(r, off, len);
}

/*
 * Commit [committed, end) of the data area. -ENOSPC past commit_limit (as a full tmpfs would
 * say), fallocate's -errno: shmem gives back what the failed call allocated, so committed
 * stays what it was.
 */
static int commit_to(struct ipc_ring *r, uint64_t end)
{
	if (r->commit_limit && end > r->commit_limit)
		return -ENOSPC;
	return reserve_range(r->memfd, r->data_off + r->committed, end - r->committed);
}

/*
 * Grow the committed prefix so that a free range of cap bytes ends it: by commit_chunk steps
 * (aligned to them), or exactly what cap needs when that is refused. 0, 1 (cap cannot fit at
 * the end even with the whole data area committed), -errno (fallocate's).
 */
static int commit_grow(struct ipc_ring *r, uint64_t cap)
{
	const struct range *last = r->n_rng ? &r->free_rng[r->n_rng - 1] : NULL;
	uint64_t tail = last && last->off + last->len == r->committed ? last->off : r->committed;
	uint64_t need = tail + cap, end;
	int rc;

	if (need > r->data_size)
		return 1;
	end = commit_end(r->data_off, r->data_size, r->commit_chunk,
			 need > r->committed + r->commit_chunk ? need
							       : r->committed + r->commit_chunk);
	rc = commit_to(r, end);
	if (rc && end > need) {
		end = need; /* a page multiple: cap and tail are */
		rc = commit_to(r, end);
	}
	if (rc) {
		r->commit_fails++;
		r->commit_error = rc;
		return rc;
	}
	range_insert(r, r->committed, end - r->committed);
	r->committed = end;
	r->commit_grows++;
	r->commit_error = 0;
	return 0;
}

static void slot_free(struct ipc_ring *r, uint32_t slot)
{
	struct slot_priv *sp = &r->sp[slot];

	space_give(r, sp->off, sp->cap);
	sp->state = SL_FREE;
	sp->holders = 0;
	sp->pend = 0;
	sp->gen++;
	r->free_slots[r->n_free++] = slot;
}

/* Free the oldest published batch that nobody holds. */
static bool reclaim_oldest(struct ipc_ring *r)
{
	uint64_t best = UINT64_MAX;
	uint32_t slot = 0;

	for (uint32_t i = 0; i < r->n_slots; i++) {
		const struct slot_priv *sp = &r->sp[i];

		if (sp->state == SL_LIVE && !sp->holders && !sp->pend && sp->seq < best) {
			best = sp->seq;
			slot = i;
		}
	}
	if (best == UINT64_MAX)
		return false;
	slot_free(r, slot);
	if (best >= r->low) {
		r->low = best + 1;
		/* Informative for clients (a late reader's start is in its control block). */
		atomic_store_explicit(&r->hdr->low, r->low, memory_order_relaxed);
	}
	return true;
}

/*
 * Room for cap bytes could come without growing: by releases of batches held now (everything
 * committed but free ranges is in extents that go back some day), so the caller may wait.
 */
static bool room_by_releases(const struct ipc_ring *r, uint64_t cap)
{
	return cap <= r->committed && r->data_used > 0;
}

int ipc_ring_reserve_flags(struct ipc_ring *r, uint64_t len, unsigned flags,
			   struct ipc_ring_extent *ret_ext)
{
	uint64_t cap, off;
	uint32_t slot;
	int rc;

	if (len == 0 ||
	    (flags & ~(unsigned)(IPC_RING_RESERVE_NO_RECLAIM | IPC_RING_RESERVE_NO_GROW)))
		return -EINVAL;
	if (len > r->data_size)
		return -E2BIG;
	cap = ipc_ring_align(len, IPC_RING_PAGE);
	if (r->state != IPC_RING_S_RUNNING)
		return -EPIPE;
	/* Reuse committed space; then reclaim released batches, oldest first; then grow. */
	for (;;) {
		if (r->n_free && (off = space_take(r, cap)) != UINT64_MAX)
			break;
		if (!(flags & IPC_RING_RESERVE_NO_RECLAIM) && reclaim_oldest(r))
			continue;
		/*
		 * Full, and a catch-up reader may be what holds it: one that attached late, or
		 * past its limit when the last publish found none (the pass runs after each), would
		 * otherwise hold every reader back with no publish to move it off; and the writer
		 * waits now, which is what the time bounds count.
		 */
		if (r->broadcast && !(flags & IPC_RING_RESERVE_NO_RECLAIM) &&
		    ipc_ring_lag_pass_(r, true))
			continue;
		if (!r->n_free || (flags & IPC_RING_RESERVE_NO_GROW) ||
		    r->committed == r->data_size)
			return -EAGAIN;
		rc = commit_grow(r, cap);
		if (rc == 1)
			return -EAGAIN;
		if (rc < 0)
			return room_by_releases(r, cap) ? -EAGAIN : rc;
	}
	ipc_ring_lag_room_(r);
	slot = r->free_slots[--r->n_free];
	r->sp[slot].state = SL_RESERVED;
	r->sp[slot].off = off;
	r->sp[slot].cap = cap;
	ret_ext->mem = r->data + off;
	ret_ext->off = off;
	ret_ext->cap = cap;
	ret_ext->id_ = (uint64_t)r->sp[slot].gen << 32 | slot;
	return 0;
}

int ipc_ring_reserve(struct ipc_ring *r, uint64_t len, struct ipc_ring_extent *ret_ext)
{
	return ipc_ring_reserve_flags(r, len, 0, ret_ext);
}

/* The reserved slot ext names, or -1. */
static int ext_slot(const struct ipc_ring *r, const struct ipc_ring_extent *ext)
{
	uint32_t slot = (uint32_t)ext->id_;

	if (slot >= r->n_slots || r->sp[slot].state != SL_RESERVED ||
	    r->sp[slot].gen != (uint32_t)(ext->id_ >> 32) || r->sp[slot].off != ext->off)
		return -1;
	return (int)slot;
}

int ipc_ring_cancel(struct ipc_ring *r, const struct ipc_ring_extent *ext)
{
	int slot = ext_slot(r, ext);

	if (slot < 0)
		return -EINVAL;
	slot_free(r, (uint32_t)slot);
	return 0;
}

int ipc_ring_publish(struct ipc_ring *r, const struct ipc_ring_extent *ext, uint64_t len,
		     uint64_t epoch, uint32_t flags, uint64_t *ret_seq)
{
	struct ipc_ring_slot *s;
	struct slot_priv *sp;
	uint64_t seq, used, woken;
	int slot;

	if (r->state != IPC_RING_S_RUNNING)
		return -EPIPE;
	slot = ext_slot(r, ext);
	if (slot < 0)
		return -EINVAL;
	sp = &r->sp[slot];
	if (len == 0 || len > sp->cap)
		return -EINVAL;
	/* Give back what the batch did not use. */
	used = ipc_ring_align(len, IPC_RING_PAGE);
	space_give(r, sp->off + used, sp->cap - used);
	sp->cap = used;
	seq = r->head;

	s = &r->slots[slot];
	atomic_store_explicit(&s->seq, IPC_RING_SEQ_NONE, memory_order_relaxed);
	/* Pairs with the client's acquire fence in read_slot (seqlock: it sees NONE or all new). */
	ipc_ring_fence(memory_order_release);
	atomic_store_explicit(&s->off, sp->off, memory_order_relaxed);
	atomic_store_explicit(&s->len, len, memory_order_relaxed);
	atomic_store_explicit(&s->epoch, epoch, memory_order_relaxed);
	atomic_store_explicit(&s->flags, flags, memory_order_relaxed);
	/* Pairs with the client's acquire load of slot->seq in read_slot. */
	atomic_store_explicit(&s->seq, seq, memory_order_release);
	/*
	 * No broadcast reader still needs order[seq % n_slots] for seq - n_slots: one that has not
	 * taken it holds it and everything after it, n_slots batches, and there would be no free
	 * slot for this one.
	 */
	atomic_store_explicit(&r->order[seq & r->mask], (uint32_t)slot, memory_order_relaxed);

	sp->seq = seq;
	sp->state = SL_LIVE;
	sp->holders = r->broadcast & ~r->moved;
	sp->pend = 0;
	for (uint64_t g = r->split_groups; g; g &= g - 1)
		ipc_ring_pending_push_(r, (unsigned)__builtin_ctzll(g), (uint32_t)slot);
	r->head = seq + 1;
	/*
	 * Pairs with the client's acquire load of head (take_broadcast): the batch's bytes, its
	 * slot and its order entry are visible to whoever sees the new head.
	 */
	atomic_store_explicit(&r->hdr->head, r->head, memory_order_release);
	woken = (r->broadcast & ~r->moved) | ipc_ring_assign_pass_(r);
	ipc_ring_wake_waiting_(r, woken);
	if (r->broadcast)
		ipc_ring_lag_pass_(r, false);
	if (ret_seq)
		*ret_seq = seq;
	return 0;
}

int ipc_ring_set_eos(struct ipc_ring *r)
{
	if (r->state != IPC_RING_S_RUNNING)
		return -EPIPE;
	r->state = IPC_RING_S_EOS;
	atomic_store_explicit(&r->hdr->state, IPC_RING_S_EOS, memory_order_relaxed);
	ipc_ring_eos_pass_(r);
	return 0;
}

int ipc_ring_set_error(struct ipc_ring *r, int err)
{
	if (err >= 0 || err < -4095)
		return -EINVAL;
	r->state = IPC_RING_S_ERROR;
	atomic_store_explicit(&r->hdr->state, IPC_RING_S_ERROR, memory_order_relaxed);
	/* Pairs with the client's acquire load of error in try_next. */
	atomic_store_explicit(&r->hdr->error, err, memory_order_release);
	for (unsigned i = 0; i < IPC_RING_MAX_READERS; i++)
		if (r->attached >> i & 1)
			ipc_ring_kick_(r, i);
	return 0;
}

void ipc_ring_get_info(const struct ipc_ring *r, struct ipc_ring_info *ret_info)
{
	memset(ret_info, 0, sizeof(*ret_info));
	ret_info->head = r->head;
	ret_info->low = r->low;
	ret_info->data_used = r->data_used;
	ret_info->data_size = r->data_size;
	ret_info->committed = r->committed;
	ret_info->commit_grows = r->commit_grows;
	ret_info->commit_fails = r->commit_fails;
	ret_info->commit_error = r->commit_error;
	ret_info->n_slots = r->n_slots;
	ret_info->n_readers = (uint32_t)__builtin_popcountll(r->attached);
	ret_info->n_free_slots = r->n_free;
	ret_info->readers = r->attached;
	ret_info->moved = r->moved;
}
