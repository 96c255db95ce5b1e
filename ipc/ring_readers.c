/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon side of the batch ring: readers' control blocks, handing out batches, waiting. */
#include "ring.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "futex.h"
#include "ring_internal.h"

/*
 * A reader's control block is untrusted: every value read there is read once into a local and
 * checked against the daemon's private state; an impossible one marks the reader bad
 * (ipc_ring_collect reports it, ipc_ring_reader_problem says why) and nothing of it is used.
 */

static void mark_bad(struct ipc_ring *r, unsigned id, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Mark reader id bad (the caller removes it), why: a prefix, then fmt. */
static void vmark(struct ipc_ring *r, unsigned id, const char *prefix, const char *fmt, va_list ap)
{
	struct reader *rd = &r->rd[id];
	int n;

	if (rd->bad)
		return;
	rd->bad = true;
	r->bad_mask |= 1ull << id;
	n = snprintf(rd->problem, sizeof(rd->problem), "reader %u %s", id, prefix);
	if (n < 0 || (size_t)n >= sizeof(rd->problem))
		return;
	vsnprintf(rd->problem + n, sizeof(rd->problem) - (size_t)n, fmt, ap);
}

static void mark_bad(struct ipc_ring *r, unsigned id, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmark(r, id, "control block: ", fmt, ap);
	va_end(ap);
}

static void mark_late(struct ipc_ring *r, unsigned id, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void mark_late(struct ipc_ring *r, unsigned id, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmark(r, id, "", fmt, ap);
	va_end(ap);
}

/* Readers that are attached and not marked bad. */
static uint64_t good_readers(const struct ipc_ring *r)
{
	return r->attached & ~r->bad_mask;
}

/* Read reader id's cursor once and check it: monotonic, never past what it could have taken. */
static void sync_cursor(struct ipc_ring *r, unsigned id)
{
	struct reader *rd = &r->rd[id];
	uint64_t c, limit;

	if (rd->bad)
		return;
	/*
	 * Pairs with the client's release store of cursor (take_*): its reads of asg[] entry
	 * cursor - 1 and of that slot happened before, so the entry may now be rewritten.
	 */
	c = atomic_load_explicit(&rd->cb->cursor, memory_order_acquire);
	limit = rd->mode == IPC_RING_BROADCAST ? r->head : rd->asg_head;
	if (c < rd->cursor || c > limit) {
		mark_bad(r, id, "cursor %llu outside [%llu, %llu]", (unsigned long long)c,
			 (unsigned long long)rd->cursor, (unsigned long long)limit);
		return;
	}
	rd->cursor = c;
}

/* ---- groups ---- */

int ipc_ring_group_init_(struct ipc_ring *r, unsigned gid, enum ipc_ring_mode mode, uint32_t rank_n,
			 uint32_t split_depth)
{
	struct group *g = &r->grp[gid];

	memset(g, 0, sizeof(*g));
	g->mode = mode;
	g->rank_n = mode == IPC_RING_RANK ? rank_n : 0;
	g->split_depth = split_depth;
	for (unsigned i = 0; i < IPC_RING_MAX_READERS; i++)
		g->by_rank[i] = -1;
	if (mode != IPC_RING_BROADCAST) {
		g->pending = calloc(r->n_slots, sizeof(*g->pending));
		g->redo = calloc(r->n_slots, sizeof(*g->redo));
		if (mode == IPC_RING_RANK)
			g->pending_by_rank = calloc(rank_n, sizeof(*g->pending_by_rank));
		if (!g->pending || !g->redo || (mode == IPC_RING_RANK && !g->pending_by_rank)) {
			ipc_ring_group_fini_(g);
			return -ENOMEM;
		}
		r->split_groups |= 1ull << gid;
	}
	g->open = true;
	return 0;
}

void ipc_ring_group_fini_(struct group *g)
{
	free(g->pending);
	free(g->redo);
	free(g->pending_by_rank);
	memset(g, 0, sizeof(*g));
}

int ipc_ring_group_open(struct ipc_ring *r, enum ipc_ring_mode mode, uint32_t rank_n,
			uint32_t split_depth, uint64_t from, unsigned *ret_gid)
{
	unsigned gid;
	int rc;

	if ((unsigned)mode > IPC_RING_RANK ||
	    (mode == IPC_RING_RANK && (rank_n < 1 || rank_n > IPC_RING_MAX_READERS)) ||
	    (mode == IPC_RING_SPLIT && (split_depth < 1 || split_depth > r->n_slots)))
		return -EINVAL;
	for (gid = 1; gid < IPC_RING_MAX_GROUPS && r->grp[gid].open; gid++)
		;
	if (gid == IPC_RING_MAX_GROUPS)
		return -ENOSPC;
	rc = ipc_ring_group_init_(r, gid, mode, rank_n, split_depth);
	if (rc)
		return rc;
	/* It starts with the batches from `from` (or low) on that the ring still holds. */
	r->grp[gid].from = from < r->low ? r->low : from > r->head ? r->head : from;
	if (mode != IPC_RING_BROADCAST)
		for (uint32_t i = 0; i < r->n_slots; i++)
			if (r->sp[i].state == SL_LIVE && r->sp[i].seq >= r->grp[gid].from)
				ipc_ring_pending_push_(r, gid, i);
	*ret_gid = gid;
	return 0;
}

int ipc_ring_group_close(struct ipc_ring *r, unsigned gid)
{
	struct group *g;
	uint64_t bit;

	if (gid >= IPC_RING_MAX_GROUPS || !r->grp[gid].open)
		return -ENOENT;
	g = &r->grp[gid];
	bit = 1ull << gid;
	if (g->members)
		return -EBUSY;
	/* its pending batches are given up: no member will take them */
	for (uint32_t i = 0; i < r->n_slots; i++)
		r->sp[i].pend &= ~bit;
	r->split_groups &= ~bit;
	ipc_ring_group_fini_(g);
	return 0;
}

int ipc_ring_group_mode(const struct ipc_ring *r, unsigned gid)
{
	if (gid >= IPC_RING_MAX_GROUPS || !r->grp[gid].open)
		return -ENOENT;
	return (int)r->grp[gid].mode;
}

int ipc_ring_group_vacant(const struct ipc_ring *r, unsigned gid, uint32_t *ret_rank,
			  uint32_t *ret_pending)
{
	if (gid >= IPC_RING_MAX_GROUPS || !r->grp[gid].open)
		return -ENOENT;
	const struct group *g = &r->grp[gid];
	if (g->mode != IPC_RING_RANK)
		return -EINVAL;
	for (uint32_t k = 0; k < g->rank_n && k < IPC_RING_MAX_READERS; k++) {
		if (g->by_rank[k] < 0 && g->pending_by_rank[k] > 0) {
			*ret_rank = k;
			*ret_pending = g->pending_by_rank[k];
			return 0;
		}
	}
	return -ENOENT;
}

int ipc_ring_mark_orphan(struct ipc_ring *r, unsigned id, const char *why)
{
	struct reader *rd;
	uint64_t off;

	if (id >= IPC_RING_MAX_READERS || !(r->attached >> id & 1))
		return -ENOENT;
	rd = &r->rd[id];
	rd->orphan = true;
	off = ipc_ring_cb_msg_off(r->n_slots);
	if (why && off + IPC_RING_CB_MSG_MAX <= rd->cb_size) {
		/* plain bytes: ordered for the client by the removal's release of ORPHAN */
		snprintf((char *)rd->cb + off, IPC_RING_CB_MSG_MAX, "%s", why);
	}
	return 0;
}

/* ---- split/rank: handing out pending batches ---- */

/* Queue slot (published, handed to no member of group gid yet) in seq order. */
void ipc_ring_pending_push_(struct ipc_ring *r, unsigned gid, uint32_t slot)
{
	struct group *g = &r->grp[gid];
	uint64_t seq = r->sp[slot].seq;
	uint32_t i = g->n_pending;

	/* Almost always at the end; a batch taken back from a removed reader goes in its place. */
	while (i > 0 && r->sp[g->pending[i - 1]].seq > seq) {
		g->pending[i] = g->pending[i - 1];
		i--;
	}
	g->pending[i] = slot;
	g->n_pending++;
	r->sp[slot].pend |= 1ull << gid;
	if (g->mode == IPC_RING_RANK)
		g->pending_by_rank[seq % g->rank_n]++;
}

static void assign(struct ipc_ring *r, struct group *g, unsigned gid, unsigned id, uint32_t slot)
{
	struct reader *rd = &r->rd[id];
	struct slot_priv *sp = &r->sp[slot];
	struct ipc_ring_ent *e = &rd->asg[rd->asg_head & r->mask];

	atomic_store_explicit(&e->seq, sp->seq, memory_order_relaxed);
	atomic_store_explicit(&e->slot, slot | (g->redo[slot] ? IPC_RING_ENT_REDELIVERED : 0),
			      memory_order_relaxed);
	g->redo[slot] = 0;
	rd->asg_slot[rd->asg_head & r->mask] = slot;
	rd->asg_head++;
	/* Pairs with the client's acquire load of asg_head (take_assigned): entry and slot. */
	atomic_store_explicit(&rd->cb->asg_head, rd->asg_head, memory_order_release);
	sp->holders |= 1ull << id;
	sp->pend &= ~(1ull << gid);
	if (g->mode == IPC_RING_RANK)
		g->pending_by_rank[sp->seq % g->rank_n]--;
}

/* The member of a split group with room and the fewest batches handed to it not yet taken. */
static int split_target(struct ipc_ring *r, const struct group *g)
{
	uint64_t good = g->members & ~r->bad_mask, best = UINT64_MAX;
	int target = -1;

	for (uint64_t m = good; m; m &= m - 1) {
		unsigned i = (unsigned)__builtin_ctzll(m);
		uint64_t out = r->rd[i].asg_head - r->rd[i].cursor;

		if (out < g->split_depth && out < best) {
			best = out;
			target = (int)i;
		}
	}
	return target;
}

/* Hand group gid's pending batches out, in seq order. Returns the readers that got one. */
static uint64_t assign_group(struct ipc_ring *r, unsigned gid)
{
	struct group *g = &r->grp[gid];
	uint64_t woken = 0, good = g->members & ~r->bad_mask;
	uint32_t kept = 0, j;

	for (j = 0; j < g->n_pending; j++) {
		uint32_t slot = g->pending[j];
		int t = -1;

		if (g->mode == IPC_RING_RANK) {
			int i = g->by_rank[r->sp[slot].seq % g->rank_n];

			if (i >= 0 && (good >> i & 1) &&
			    r->rd[i].asg_head - r->rd[i].cursor < r->n_slots)
				t = i;
		} else {
			t = split_target(r, g);
		}
		if (t < 0) {
			if (g->mode == IPC_RING_SPLIT)
				break; /* in order: nobody has room */
			g->pending[kept++] = slot;
			continue;
		}
		assign(r, g, gid, (unsigned)t, slot);
		woken |= 1ull << t;
	}
	while (j < g->n_pending)
		g->pending[kept++] = g->pending[j++];
	g->n_pending = kept;
	return woken;
}

/* Hand pending batches out, every group in seq order. Returns the readers that got one. */
uint64_t ipc_ring_assign_pass_(struct ipc_ring *r)
{
	uint64_t woken = 0, groups = 0;

	for (uint64_t m = r->split_groups; m; m &= m - 1)
		if (r->grp[__builtin_ctzll(m)].n_pending)
			groups |= 1ull << __builtin_ctzll(m);
	if (!groups)
		return 0;
	for (unsigned i = 0; i < IPC_RING_MAX_READERS; i++)
		if ((r->attached >> i & 1) && r->rd[i].mode != IPC_RING_BROADCAST &&
		    (groups >> r->rd[i].group & 1))
			sync_cursor(r, i);
	for (uint64_t m = groups; m; m &= m - 1)
		woken |= assign_group(r, (unsigned)__builtin_ctzll(m));
	return woken;
}

/* After end of stream: tell each reader where its stream ends once nothing more can reach it. */
/*
 * Split and rank: whether reader id should wait before its end of stream, because a batch it
 * could still be handed is held by another reader that is busy with it (not asleep in next):
 * if that reader dies, the batch comes back, and nothing may be lost. A reader asleep in next
 * while it holds its previous batch (double buffering) holds nobody back, so readers that all
 * hold a batch and wait cannot wait for each other. The daemon's tick re-runs this pass, so a
 * reader that falls asleep lets the others end within a tick.
 */
static bool held_elsewhere(const struct ipc_ring *r, unsigned id)
{
	const struct reader *me = &r->rd[id];
	const struct group *g = &r->grp[me->group];
	uint64_t busy = 0;

	for (uint64_t m = g->members & ~r->bad_mask & ~(1ull << id); m; m &= m - 1) {
		unsigned k = (unsigned)__builtin_ctzll(m);

		if (g->mode == IPC_RING_RANK && r->rd[k].rank_index != me->rank_index)
			continue;
		if (atomic_load_explicit(&r->rd[k].cb->waiting, memory_order_relaxed) == 0)
			busy |= 1ull << k;
	}
	if (!busy)
		return false;
	for (uint32_t i = 0; i < r->n_slots; i++) {
		const struct slot_priv *sp = &r->sp[i];

		if (sp->state == SL_LIVE && (sp->holders & busy))
			return true;
	}
	return false;
}

void ipc_ring_eos_pass_(struct ipc_ring *r)
{
	uint64_t good = good_readers(r);

	if (r->state != IPC_RING_S_EOS)
		return;
	for (unsigned i = 0; i < IPC_RING_MAX_READERS; i++) {
		struct reader *rd = &r->rd[i];
		const struct group *g = &r->grp[rd->group];
		uint64_t end;

		if (!(good >> i & 1) || rd->eos_sent || (r->moved >> i & 1))
			continue;
		if (rd->mode == IPC_RING_BROADCAST) {
			end = r->head;
		} else {
			if (rd->mode == IPC_RING_SPLIT ? g->n_pending > 0
						       : g->pending_by_rank[rd->rank_index] > 0)
				continue;
			/* not while another member holds a batch it may give back */
			if (held_elsewhere(r, i))
				continue;
			end = rd->asg_head;
		}
		atomic_store_explicit(&rd->cb->end, end, memory_order_relaxed);
		/* Pairs with the client's acquire load of flags (try_next): end is visible. */
		atomic_fetch_or_explicit(&rd->cb->flags, IPC_RING_CB_EOS, memory_order_release);
		rd->eos_sent = true;
		ipc_ring_kick_(r, i);
	}
}

/* ---- readers: adding, removing, collecting ---- */

int ipc_ring_add_reader(struct ipc_ring *r, uint32_t rank_index, unsigned *ret_id, int *ret_cb_fd)
{
	return ipc_ring_add_reader_to(r, 0, rank_index, ret_id, ret_cb_fd);
}

static int add_reader(struct ipc_ring *r, unsigned gid, uint32_t rank_index, const uint64_t *at,
		      unsigned *ret_id, int *ret_cb_fd);

int ipc_ring_add_reader_to(struct ipc_ring *r, unsigned gid, uint32_t rank_index, unsigned *ret_id,
			   int *ret_cb_fd)
{
	return add_reader(r, gid, rank_index, NULL, ret_id, ret_cb_fd);
}

int ipc_ring_add_reader_at(struct ipc_ring *r, unsigned gid, uint64_t seq, unsigned *ret_id,
			   int *ret_cb_fd)
{
	return add_reader(r, gid, 0, &seq, ret_id, ret_cb_fd);
}

/*
 * Add a reader to group gid; a broadcast member starts at *at when given (checked: every batch
 * from there on must still be in the ring), else where its group does, or at low.
 */
static int add_reader(struct ipc_ring *r, unsigned gid, uint32_t rank_index, const uint64_t *at,
		      unsigned *ret_id, int *ret_cb_fd)
{
	struct reader *rd;
	struct ipc_ring_cb *cb;
	struct group *g;
	uint64_t size = ipc_ring_cb_size(r->n_slots), start;
	uint32_t *asg_slot;
	void *map;
	unsigned id;
	int fd, rc;

	if (gid >= IPC_RING_MAX_GROUPS || !r->grp[gid].open)
		return -ENOENT;
	g = &r->grp[gid];
	/* a start of its own: only where every batch from there on is in the ring ([low, head)),
	   or at head (the next one published); the group's own start is a floor too */
	if (at && g->mode != IPC_RING_BROADCAST)
		return -EINVAL;
	if (at && (*at < r->low || *at < g->from || *at > r->head))
		return -ERANGE;
	if (r->attached == UINT64_MAX)
		return -EUSERS;
	id = (unsigned)__builtin_ctzll(~r->attached);
	if (g->mode == IPC_RING_RANK) {
		if (rank_index >= g->rank_n)
			return -EINVAL;
		if (g->by_rank[rank_index] >= 0)
			return -EBUSY;
	} else {
		rank_index = 0;
	}
	asg_slot = calloc(r->n_slots, sizeof(*asg_slot));
	if (!asg_slot)
		return -ENOMEM;
	rc = ipc_ring_memfd_make_("sluice-ring-reader", size, size, &fd, &map);
	if (rc) {
		free(asg_slot);
		return rc;
	}
	cb = map;
	cb->magic = IPC_RING_CB_MAGIC;
	cb->version = IPC_RING_VERSION;
	cb->cb_hdr_size = sizeof(struct ipc_ring_cb);
	cb->reader_id = id;
	cb->mode = (uint32_t)g->mode;
	cb->n = r->n_slots;
	cb->rank_index = rank_index;
	cb->rank_n = g->rank_n;
	cb->size = size;
	cb->rel_off = sizeof(struct ipc_ring_cb);
	cb->asg_off = cb->rel_off + sizeof(struct ipc_ring_ent) * r->n_slots;
	/* a broadcast member starts where its group does, or at low when that is gone */
	start = at ? *at : g->from > r->low ? g->from : r->low;
	cb->start = g->mode == IPC_RING_BROADCAST ? start : 0;
	atomic_store_explicit(&cb->cursor, cb->start, memory_order_relaxed);
	/* The reader may write it, but it must not shrink it under us (SIGBUS). */
	if (fcntl(fd, F_ADD_SEALS, IPC_RING_CB_SEALS) < 0) {
		rc = -errno;
		munmap(map, size);
		close(fd);
		free(asg_slot);
		return rc;
	}

	rd = &r->rd[id];
	memset(rd, 0, sizeof(*rd));
	rd->asg_slot = asg_slot;
	rd->cb = cb;
	rd->rel = (struct ipc_ring_ent *)((uint8_t *)map + cb->rel_off);
	rd->asg = (struct ipc_ring_ent *)((uint8_t *)map + cb->asg_off);
	rd->cb_size = size;
	rd->fd = fd;
	rd->rank_index = rank_index;
	rd->group = gid;
	rd->mode = g->mode;
	rd->cursor = cb->start;
	r->attached |= 1ull << id;
	g->members |= 1ull << id;
	if (g->mode == IPC_RING_RANK)
		g->by_rank[rank_index] = (int)id;
	if (g->mode == IPC_RING_BROADCAST) {
		r->broadcast |= 1ull << id;
		/* A late reader holds every batch from its start on: all of them are in the ring. */
		for (uint32_t i = 0; i < r->n_slots; i++)
			if (r->sp[i].state == SL_LIVE && r->sp[i].seq >= cb->start)
				r->sp[i].holders |= 1ull << id;
	}
	ipc_ring_wake_waiting_(r, ipc_ring_assign_pass_(r));
	ipc_ring_eos_pass_(r);
	*ret_id = id;
	*ret_cb_fd = fd;
	return 0;
}

static int collect_one(struct ipc_ring *r, unsigned id);

int ipc_ring_remove_reader(struct ipc_ring *r, unsigned id)
{
	struct reader *rd;
	uint64_t bit;

	if (id >= IPC_RING_MAX_READERS || !(r->attached >> id & 1))
		return -ENOENT;
	rd = &r->rd[id];
	bit = 1ull << id;
	sync_cursor(r, id);
	/*
	 * Take in what it released before it went (a reader that detaches cleanly released
	 * everything): those batches must not be handed to anyone again.
	 */
	if (!rd->bad)
		collect_one(r, id);
	if (rd->mode != IPC_RING_BROADCAST) {
		/* what it took and never released is re-delivered, marked as such */
		struct group *g = &r->grp[rd->group];

		for (uint32_t i = 0; i < r->n_slots; i++)
			if (r->sp[i].state == SL_LIVE && (r->sp[i].holders & bit))
				g->redo[i] = 1;
		for (uint64_t k = rd->cursor; k != rd->asg_head; k++)
			g->redo[rd->asg_slot[k & r->mask]] = 0; /* handed to it, never taken */
	}
	for (uint32_t i = 0; i < r->n_slots; i++) {
		struct slot_priv *sp = &r->sp[i];

		if (sp->state != SL_LIVE || !(sp->holders & bit))
			continue;
		sp->holders &= ~bit;
		/*
		 * Split and rank: a batch handed to it, taken or not, that it never released goes
		 * to another member of its group (split) or the next member of its rank: nothing is
		 * lost when a reader dies holding batches (at least once, as a Kafka consumer group
		 * re-delivers what was not committed).
		 */
		if (rd->mode != IPC_RING_BROADCAST)
			ipc_ring_pending_push_(r, rd->group, i);
	}
	free(rd->asg_slot);
	/* Pairs with the client's acquire load of flags in try_next. */
	atomic_fetch_or_explicit(&rd->cb->flags,
				 IPC_RING_CB_EVICTED | (rd->late ? IPC_RING_CB_LEASE : 0) |
					 (rd->orphan ? IPC_RING_CB_ORPHAN : 0),
				 memory_order_release);
	ipc_ring_kick_(r, id);
	munmap(rd->cb, rd->cb_size);
	close(rd->fd);
	if (rd->mode == IPC_RING_RANK)
		r->grp[rd->group].by_rank[rd->rank_index] = -1;
	r->grp[rd->group].members &= ~bit;
	r->broadcast &= ~bit;
	memset(rd, 0, sizeof(*rd));
	rd->fd = -1;
	r->attached &= ~bit;
	r->bad_mask &= ~bit;
	r->moved &= ~bit;
	r->holding &= ~bit;
	ipc_ring_wake_waiting_(r, ipc_ring_assign_pass_(r));
	ipc_ring_eos_pass_(r);
	return 0;
}

/* Take in reader id's releases. Returns how many; marks it bad on an impossible entry. */
static int collect_one(struct ipc_ring *r, unsigned id)
{
	struct reader *rd = &r->rd[id];
	uint64_t h, k, bit = 1ull << id;
	int n = 0;

	/* Pairs with the client's release store of rel_head (release): the entries are visible. */
	h = atomic_load_explicit(&rd->cb->rel_head, memory_order_acquire);
	if (h - rd->rel_tail > r->n_slots) {
		mark_bad(r, id, "rel_head %llu outside [%llu, %llu]", (unsigned long long)h,
			 (unsigned long long)rd->rel_tail,
			 (unsigned long long)(rd->rel_tail + r->n_slots));
		return 0;
	}
	for (k = rd->rel_tail; k != h; k++) {
		const struct ipc_ring_ent *e = &rd->rel[k & r->mask];
		uint64_t seq = atomic_load_explicit(&e->seq, memory_order_relaxed);
		uint64_t slot = atomic_load_explicit(&e->slot, memory_order_relaxed);
		struct slot_priv *sp = slot < r->n_slots ? &r->sp[slot] : NULL;

		if (!sp || sp->state != SL_LIVE || sp->seq != seq || !(sp->holders & bit)) {
			mark_bad(r, id,
				 "rel[%llu] releases seq %llu in slot %llu, which it does "
				 "not hold",
				 (unsigned long long)k, (unsigned long long)seq,
				 (unsigned long long)slot);
			break;
		}
		sp->holders &= ~bit;
		n++;
	}
	rd->rel_tail = k;
	/* Pairs with the client's acquire load of rel_tail (release): entries before k are free. */
	atomic_store_explicit(&rd->cb->rel_tail, k, memory_order_release);
	return n;
}

int ipc_ring_collect(struct ipc_ring *r, uint64_t *ret_bad)
{
	int n = 0;

	for (unsigned i = 0; i < IPC_RING_MAX_READERS; i++) {
		if (!(good_readers(r) >> i & 1))
			continue;
		n += collect_one(r, i);
		sync_cursor(r, i);
	}
	ipc_ring_wake_waiting_(r, ipc_ring_assign_pass_(r));
	ipc_ring_eos_pass_(r);
	if (ret_bad)
		*ret_bad = r->bad_mask;
	return n;
}

int ipc_ring_lease_check(struct ipc_ring *r, uint64_t now_ns, uint64_t lease_ns, uint64_t *ret_bad)
{
	int n = 0;

	for (unsigned id = 0; lease_ns && id < IPC_RING_MAX_READERS; id++) {
		struct reader *rd = &r->rd[id];
		uint64_t bit = 1ull << id, oldest = UINT64_MAX;

		if (!(good_readers(r) & bit) || rd->mode == IPC_RING_BROADCAST)
			continue;
		for (uint32_t i = 0; i < r->n_slots; i++)
			if (r->sp[i].state == SL_LIVE && (r->sp[i].holders & bit) &&
			    r->sp[i].seq < oldest)
				oldest = r->sp[i].seq;
		if (oldest == UINT64_MAX) {
			rd->lease_seq1 = 0; /* holds nothing */
		} else if (rd->lease_seq1 != oldest + 1) {
			rd->lease_seq1 = oldest + 1; /* the lease of this batch starts now */
			rd->lease_since_ns = now_ns;
		} else if (now_ns - rd->lease_since_ns > lease_ns) {
			rd->late = !rd->bad;
			mark_late(r, id,
				  "held batch %llu for %llu s, longer than the lease of %llu s: "
				  "its batches go to its group",
				  (unsigned long long)oldest,
				  (unsigned long long)((now_ns - rd->lease_since_ns) / 1000000000),
				  (unsigned long long)(lease_ns / 1000000000));
			n++;
		}
	}
	if (ret_bad)
		*ret_bad = r->bad_mask;
	return n;
}

const char *ipc_ring_reader_problem(const struct ipc_ring *r, unsigned id)
{
	if (id >= IPC_RING_MAX_READERS || !(r->attached >> id & 1))
		return NULL;
	return r->rd[id].bad ? r->rd[id].problem : "";
}

int ipc_ring_oldest(const struct ipc_ring *r, uint64_t *ret_seq, uint64_t *ret_holders)
{
	uint64_t best = UINT64_MAX, holders = 0;

	for (uint32_t i = 0; i < r->n_slots; i++) {
		const struct slot_priv *sp = &r->sp[i];

		if (sp->state == SL_LIVE && (sp->holders || sp->pend) && sp->seq < best) {
			best = sp->seq;
			holders = sp->holders;
		}
	}
	if (best == UINT64_MAX)
		return -ENOENT;
	*ret_seq = best;
	*ret_holders = holders;
	return 0;
}

int ipc_ring_lead_cursor(const struct ipc_ring *r, unsigned except, uint64_t *ret_cursor)
{
	uint64_t on = r->broadcast & good_readers(r) & ~r->moved, top = 0;
	bool any = false;

	if (except < IPC_RING_MAX_READERS)
		on &= ~(1ull << except);
	for (; on; on &= on - 1) {
		const struct reader *rd = &r->rd[__builtin_ctzll(on)];

		if (!any || rd->cursor > top)
			top = rd->cursor;
		any = true;
	}
	if (!any)
		return -ENOENT;
	*ret_cursor = top;
	return 0;
}

int ipc_ring_reader_lag(const struct ipc_ring *r, unsigned id, uint64_t *ret_lag)
{
	const struct reader *rd;

	if (id >= IPC_RING_MAX_READERS || !(r->attached >> id & 1))
		return -ENOENT;
	rd = &r->rd[id];
	if (r->moved >> id & 1)
		*ret_lag = r->head - rd->moved_end;
	else if (rd->mode == IPC_RING_BROADCAST)
		*ret_lag = r->head - rd->cursor;
	else
		*ret_lag = rd->asg_head - rd->cursor +
			   (rd->mode == IPC_RING_RANK
				    ? r->grp[rd->group].pending_by_rank[rd->rank_index]
				    : 0);
	return 0;
}

/*
 * Of want releases of the ring's batches, how many reader rd makes: all of them in broadcast,
 * its share in a split or rank group (each member releases the batches it was handed).
 */
static uint32_t want_of(const struct ipc_ring *r, const struct reader *rd, uint32_t want)
{
	unsigned m = (unsigned)__builtin_popcountll(r->grp[rd->group].members);

	if (rd->mode == IPC_RING_BROADCAST || m <= 1)
		return want;
	return want / m > 1 ? want / m : 1;
}

/*
 * Whether a collect would find something worth waking for: its share of want releases by one
 * reader (or any release by a reader asleep for a batch), or a batch it could hand out.
 */
static bool progress_possible(struct ipc_ring *r, uint32_t want)
{
	uint64_t good = good_readers(r);

	for (unsigned i = 0; i < IPC_RING_MAX_READERS; i++) {
		struct reader *rd = &r->rd[i];
		uint64_t c, rel;

		if (!(good >> i & 1))
			continue;
		rel = atomic_load_explicit(&rd->cb->rel_head, memory_order_relaxed) - rd->rel_tail;
		if (rel >= want_of(r, rd, want) ||
		    (rel && atomic_load_explicit(&rd->cb->waiting, memory_order_relaxed)))
			return true;
		if (rd->mode == IPC_RING_BROADCAST || !r->grp[rd->group].n_pending)
			continue;
		if (rd->mode == IPC_RING_RANK && !r->grp[rd->group].pending_by_rank[rd->rank_index])
			continue;
		c = atomic_load_explicit(&rd->cb->cursor, memory_order_relaxed);
		if (c != rd->cursor)
			return true;
	}
	return false;
}

int ipc_ring_wait(struct ipc_ring *r, int64_t timeout_ns)
{
	return ipc_ring_wait_releases(r, timeout_ns, 1);
}

int ipc_ring_wait_releases(struct ipc_ring *r, int64_t timeout_ns, uint32_t want)
{
	return ipc_ring_wait_releases_unlocking(r, timeout_ns, want, NULL);
}

int ipc_ring_wait_releases_unlocking(struct ipc_ring *r, int64_t timeout_ns, uint32_t want,
				     pthread_mutex_t *lock)
{
	struct futex_waitv w[IPC_RING_MAX_READERS];
	struct ipc_ring_cb *cbs[IPC_RING_MAX_READERS];
	struct timespec deadline = { 0, 0 };
	uint64_t good = good_readers(r);
	unsigned n = 0;
	int rc;

	if (want == 0)
		want = 1;
	if (timeout_ns >= 0)
		deadline = ipc_futex_deadline(timeout_ns);
	if (!good) {
		/* Nothing can change until the caller adds a reader. */
		if (timeout_ns < 0)
			return -EDEADLK;
		if (lock)
			pthread_mutex_unlock(lock);
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, NULL);
		if (lock)
			pthread_mutex_lock(lock);
		return -ETIMEDOUT;
	}
	for (unsigned i = 0; i < IPC_RING_MAX_READERS; i++) {
		struct ipc_ring_cb *cb = r->rd[i].cb;

		if (!(good >> i & 1))
			continue;
		cbs[i] = cb;
		memset(&w[n], 0, sizeof(w[n]));
		w[n].uaddr = (uintptr_t)&cb->doorbell;
		w[n].val = atomic_load_explicit(&cb->doorbell, memory_order_relaxed);
		w[n].flags = FUTEX_32;
		n++;
		/* before daemon_waiting (a client that sees it reads this; an older value only
		   makes it ring early) */
		uint32_t share = want_of(r, &r->rd[i], want);
		atomic_store_explicit(&cb->wake_rel, share > 1 ? r->rd[i].rel_tail + share : 0,
				      memory_order_relaxed);
		atomic_store_explicit(&cb->daemon_waiting, 1, memory_order_release);
	}
	/*
	 * Pairs with the client's fence between its store of rel_head (release) or waiting
	 * (ipc_ring_client_next) and its load of daemon_waiting: either we see its news now, or
	 * it sees our flag and rings the doorbell (after we read it above: the wait returns).
	 */
	ipc_ring_fence(memory_order_seq_cst);
	if (progress_possible(r, want)) {
		rc = 0;
	} else {
		/*
		 * The caller's lock is not held while asleep: whoever needs it meanwhile (the
		 * server answering a reader's SAVE_STATE, a stats call, an attach) would otherwise
		 * wait for this sleep, and a reader that asks before it releases would hold the
		 * very release waited for. A reader removed meanwhile rings its doorbell before its
		 * control block is unmapped (ipc_ring_remove_reader): the wait returns.
		 */
		if (lock)
			pthread_mutex_unlock(lock);
		rc = ipc_futex_waitv(w, n, timeout_ns < 0 ? NULL : &deadline);
		if (rc == -EAGAIN || rc == -EFAULT) /* EFAULT: a block unmapped meanwhile */
			rc = 0;
		if (rc == -ENOSYS) {
			/* Before Linux 5.16: poll every millisecond. */
			struct timespec ms = { 0, 1000000 };

			nanosleep(&ms, NULL);
			rc = 0;
		}
		if (lock)
			pthread_mutex_lock(lock);
	}
	/* only the readers still there with the block they had (the others are gone) */
	for (unsigned i = 0; i < IPC_RING_MAX_READERS; i++)
		if ((good >> i & 1) && (r->attached >> i & 1) && r->rd[i].cb == cbs[i])
			atomic_store_explicit(&r->rd[i].cb->daemon_waiting, 0,
					      memory_order_relaxed);
	return rc;
}

int ipc_ring_reader_counters(const struct ipc_ring *r, unsigned id, uint64_t *ret_taken,
			     uint64_t *ret_wait_ns)
{
	if (id >= IPC_RING_MAX_READERS || !(r->attached >> id & 1))
		return -ENOENT;
	*ret_taken = atomic_load_explicit(&r->rd[id].cb->taken, memory_order_relaxed);
	*ret_wait_ns = atomic_load_explicit(&r->rd[id].cb->wait_ns, memory_order_relaxed);
	return 0;
}

/* ---- broadcast lag policy ---- */

static uint64_t lag_clock_ns(const struct ipc_ring *r)
{
	struct timespec ts;

	if (r->clock_ns_)
		return r->clock_ns_();
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int ipc_ring_set_lag(struct ipc_ring *r, unsigned id, const struct ipc_ring_lag *lag)
{
	struct reader *rd;

	if (id >= IPC_RING_MAX_READERS || !(r->attached >> id & 1))
		return -ENOENT;
	rd = &r->rd[id];
	if (rd->mode != IPC_RING_BROADCAST || !lag)
		return -EINVAL;
	rd->max_lag = lag->max_lag;
	rd->lag_behind_others = lag->behind_others;
	rd->lag_timeout_ns = lag->timeout_ns;
	rd->cb->catch_up = lag->max_lag != 0 || lag->timeout_ns != 0;
	return 0;
}

int ipc_ring_set_max_lag(struct ipc_ring *r, unsigned id, uint64_t max_lag)
{
	return ipc_ring_set_lag(r, id, &(struct ipc_ring_lag){ .max_lag = max_lag });
}

int ipc_ring_reader_holding(const struct ipc_ring *r, unsigned id, uint64_t *ret_ns)
{
	const struct reader *rd;
	uint64_t now;

	if (id >= IPC_RING_MAX_READERS || !(r->attached >> id & 1))
		return -ENOENT;
	rd = &r->rd[id];
	now = lag_clock_ns(r);
	*ret_ns = (r->holding >> id & 1) && now > rd->hold_since_ns ? now - rd->hold_since_ns : 0;
	return 0;
}

int ipc_ring_reader_moved_why(const struct ipc_ring *r, unsigned id)
{
	if (id >= IPC_RING_MAX_READERS || !(r->attached >> id & 1))
		return -ENOENT;
	return (r->moved >> id & 1) ? r->rd[id].moved_why : 0;
}

static int move_reader(struct ipc_ring *r, unsigned id, uint8_t why, uint64_t *ret_end)
{
	struct reader *rd;
	uint64_t bit, end;

	if (id >= IPC_RING_MAX_READERS || !(r->attached >> id & 1))
		return -ENOENT;
	if (r->rd[id].mode != IPC_RING_BROADCAST)
		return -EINVAL;
	rd = &r->rd[id];
	bit = 1ull << id;
	if (r->moved & bit) {
		*ret_end = rd->moved_end;
		return 0;
	}
	/*
	 * A Dekker handshake with the client's take (took(): store cursor; seq_cst fence; load
	 * flags): we store MOVED, fence, then load its cursor. Either we see a take of seq c (and
	 * keep holding c for it), or it sees MOVED after its take, waits for MOVED_END and drops
	 * the batch it took when c >= end: it never uses a batch we stopped holding for it.
	 */
	atomic_fetch_or_explicit(&rd->cb->flags, IPC_RING_CB_MOVED, memory_order_relaxed);
	ipc_ring_fence(memory_order_seq_cst);
	sync_cursor(r, id);
	if (rd->bad)
		return -EBADMSG;
	end = rd->cursor;
	/* It no longer holds what it has not taken; what it took it releases as before. */
	for (uint32_t i = 0; i < r->n_slots; i++) {
		struct slot_priv *sp = &r->sp[i];

		if (sp->state == SL_LIVE && (sp->holders & bit) && sp->seq >= end)
			sp->holders &= ~bit;
	}
	r->moved |= bit;
	r->holding &= ~bit;
	rd->moved_end = end;
	rd->moved_why = why;
	atomic_store_explicit(&rd->cb->end, end, memory_order_relaxed);
	/* Pairs with the client's acquire load of flags (moved_end): end is visible. */
	atomic_fetch_or_explicit(&rd->cb->flags, IPC_RING_CB_MOVED_END, memory_order_release);
	ipc_ring_kick_(r, id);
	*ret_end = end;
	return 0;
}

int ipc_ring_move_reader(struct ipc_ring *r, unsigned id, uint64_t *ret_end)
{
	return move_reader(r, id, IPC_RING_MOVED_CALL, ret_end);
}

int ipc_ring_reader_moved(const struct ipc_ring *r, unsigned id)
{
	if (id >= IPC_RING_MAX_READERS || !(r->attached >> id & 1))
		return -ENOENT;
	return (int)(r->moved >> id & 1);
}

void ipc_ring_lag_clear_(struct ipc_ring *r)
{
	for (uint64_t h = r->holding; h; h &= h - 1)
		r->rd[__builtin_ctzll(h)].hold_since_ns = 0;
	r->holding = 0;
}

/*
 * Whether reader id holds the others back: it holds the oldest batch that something holds, and
 * another reader still on the stream does not (it released it, or was never given it). The
 * holders of that batch: *oldest (UINT64_MAX: not looked up yet; 0: none).
 */
static bool holds_others(struct ipc_ring *r, unsigned id, uint64_t on_stream, uint64_t *oldest)
{
	if (*oldest == UINT64_MAX) {
		uint64_t seq;

		if (ipc_ring_oldest(r, &seq, oldest) < 0)
			*oldest = 0;
	}
	return (*oldest >> id & 1) && (on_stream & ~*oldest & ~(1ull << id));
}

/*
 * Reader i's time bound, at a reserve that found no room: start or restart its clock when it
 * begins to hold the others back or made progress; whether it has held them past its bound.
 */
static bool held_too_long(struct ipc_ring *r, unsigned i, uint64_t now, uint64_t on_stream,
			  uint64_t *oldest)
{
	struct reader *rd = &r->rd[i];
	uint64_t bit = 1ull << i;

	if (!holds_others(r, i, on_stream, oldest)) {
		r->holding &= ~bit;
		rd->hold_since_ns = 0;
		return false;
	}
	if (!(r->holding & bit) || rd->cursor != rd->hold_cursor || rd->rel_tail != rd->hold_rel) {
		r->holding |= bit;
		rd->hold_since_ns = now;
		rd->hold_cursor = rd->cursor;
		rd->hold_rel = rd->rel_tail;
		return false;
	}
	return rd->lag_timeout_ns && now - rd->hold_since_ns >= rd->lag_timeout_ns;
}

/*
 * After a publish (full false), and when a reserve finds no room (full): move off every reader
 * with a lag policy that is past one of its bounds (ipc_ring_set_lag), and keep the clocks of
 * the time bounds. Whether one was moved.
 */
bool ipc_ring_lag_pass_(struct ipc_ring *r, bool full)
{
	uint64_t on = r->broadcast & good_readers(r) & ~r->moved, with_policy = 0;
	uint64_t top = 0, second = 0, oldest = UINT64_MAX, now = 0, end;
	unsigned top_id = IPC_RING_MAX_READERS, n = 0;
	bool moved = false;

	/* the cursors, and the two leading ones (the leader of the first is the second) */
	for (uint64_t m = on; m; m &= m - 1) {
		unsigned i = (unsigned)__builtin_ctzll(m);
		struct reader *rd = &r->rd[i];

		sync_cursor(r, i);
		if (rd->bad)
			continue;
		if (rd->max_lag || rd->lag_timeout_ns)
			with_policy |= 1ull << i;
		if (n == 0 || rd->cursor > top) {
			second = top;
			top = rd->cursor;
			top_id = i;
		} else if (n == 1 || rd->cursor > second) {
			second = rd->cursor;
		}
		n++;
	}
	if (!full && !with_policy)
		return false;
	if (full)
		now = lag_clock_ns(r);
	on &= good_readers(r); /* without those sync_cursor found bad */
	for (uint64_t m = full ? on : with_policy; m; m &= m - 1) {
		unsigned i = (unsigned)__builtin_ctzll(m);
		struct reader *rd = &r->rd[i];
		uint8_t why = 0;

		if (full && held_too_long(r, i, now, good_readers(r) & ~r->moved, &oldest))
			why = IPC_RING_MOVED_TIME;
		if (rd->max_lag && !why) {
			uint64_t from = r->head;

			if (rd->lag_behind_others) /* alone: nobody it could hold back */
				from = n < 2 ? rd->cursor : i == top_id ? second : top;
			if (from > rd->cursor && from - rd->cursor > rd->max_lag)
				why = IPC_RING_MOVED_LAG;
		}
		if (why && move_reader(r, i, why, &end) == 0)
			moved = true;
	}
	return moved;
}
