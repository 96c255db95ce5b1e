/* SPDX-License-Identifier: Apache-2.0 */
/* The client side of the batch ring: attach (checked), next without syscalls, release, wait. */
#include "ring.h"

#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "batch.h"
#include "errmsg.h"
#include "futex.h"
#include "ring_internal.h"

/*
 * The daemon may be buggy: every value taken from the data memfd or from the control block is
 * read once into a local and checked before use, and a bad one is -EBADMSG, never a pointer
 * outside the mappings. The data mapping is read-only (the memfd is sealed against writable
 * mappings); the control block is ours to write.
 */

struct ipc_ring_client {
	const uint8_t *map;
	uint64_t map_len;
	const struct ipc_ring_hdr *hdr;
	const struct ipc_ring_slot *slots;
	const _Atomic uint32_t *order;
	const uint8_t *data;
	uint64_t data_size;
	uint32_t n_slots, mask;
	enum ipc_ring_mode mode;
	unsigned id;
	struct ipc_ring_cb *cb;
	uint64_t cb_len;
	struct ipc_ring_ent *rel;	/* we write */
	const struct ipc_ring_ent *asg; /* the daemon writes */
	uint64_t cursor;		/* our copy of cb->cursor */
	uint64_t rel_head;		/* our copy of cb->rel_head */
	uint64_t *held;			/* [slot]: seq + 1 while we hold that batch, else 0 */
	bool catch_up;			/* broadcast: the daemon may move us off (lag policy) */
	struct ipc_ring_tensor *schema;
	uint32_t n_schema;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* The fd's seals and size; -EPERM when a required seal is missing. */
static int check_fd(int fd, int need, const char *what, uint64_t *ret_size, char *msg, size_t cap)
{
	struct stat st;
	int seals;

	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0) {
		int err = errno;

		return ipc_errmsg(err == EINVAL ? -EPERM : -err, msg, cap,
				  "%s fd %d: no seals (%s): not a sealed memfd", what, fd,
				  strerror(err));
	}
	if (need & F_SEAL_FUTURE_WRITE)
		seals |= (seals & F_SEAL_WRITE) ? F_SEAL_FUTURE_WRITE : 0;
	if ((seals & need) != need)
		return ipc_errmsg(-EPERM, msg, cap, "%s fd %d: seals 0x%x, expected 0x%x", what, fd,
				  seals, need);
	if (fstat(fd, &st) < 0)
		return ipc_errmsg(-errno, msg, cap, "%s fd %d: fstat: %s", what, fd,
				  strerror(errno));
	if (!S_ISREG(st.st_mode) || st.st_size <= 0 || st.st_size % IPC_RING_PAGE)
		return ipc_errmsg(-EBADMSG, msg, cap, "%s fd %d: size %lld, expected pages", what,
				  fd, (long long)st.st_size);
	*ret_size = (uint64_t)st.st_size;
	return 0;
}

static int check_hdr(const struct ipc_ring_hdr *h, uint64_t size, char *msg, size_t cap)
{
	uint64_t schema_end, slots_end, order_end;

	if (h->magic != IPC_RING_MAGIC || h->version != IPC_RING_VERSION ||
	    h->hdr_size != sizeof(struct ipc_ring_hdr))
		return ipc_errmsg(-EBADMSG, msg, cap,
				  "ring header: magic 0x%08x version %u size %u, "
				  "expected 0x%08x %d %zu",
				  h->magic, h->version, h->hdr_size, IPC_RING_MAGIC,
				  IPC_RING_VERSION, sizeof(struct ipc_ring_hdr));
	if (h->total_size != size)
		return ipc_errmsg(-EBADMSG, msg, cap,
				  "ring header: total_size %llu, the memfd has %llu",
				  (unsigned long long)h->total_size, (unsigned long long)size);
	if (h->mode > IPC_RING_RANK ||
	    (h->mode == IPC_RING_RANK ? h->rank_n < 1 || h->rank_n > IPC_RING_MAX_READERS
				      : h->rank_n != 0))
		return ipc_errmsg(-EBADMSG, msg, cap, "ring header: mode %u rank_n %u", h->mode,
				  h->rank_n);
	if (h->n_slots < IPC_RING_MIN_SLOTS || h->n_slots > IPC_RING_MAX_SLOTS ||
	    (h->n_slots & (h->n_slots - 1)))
		return ipc_errmsg(-EBADMSG, msg, cap,
				  "ring header: n_slots %u, expected a power of two in %u..%u",
				  h->n_slots, IPC_RING_MIN_SLOTS, IPC_RING_MAX_SLOTS);
	if (h->n_schema > IPC_RING_MAX_SCHEMA)
		return ipc_errmsg(-EBADMSG, msg, cap, "ring header: n_schema %u > %u", h->n_schema,
				  IPC_RING_MAX_SCHEMA);
	/* Every quantity is bounded above, so none of these sums overflows. */
	schema_end = h->schema_off + (uint64_t)h->n_schema * sizeof(struct ipc_ring_tensor);
	slots_end = h->slots_off + (uint64_t)h->n_slots * sizeof(struct ipc_ring_slot);
	order_end = h->order_off + 4ull * h->n_slots;
	if (h->schema_off < sizeof(struct ipc_ring_hdr) || h->schema_off % IPC_RING_LINE ||
	    h->schema_off > size || schema_end > h->slots_off || h->slots_off % IPC_RING_LINE ||
	    h->slots_off > size || slots_end > h->order_off || h->order_off % IPC_RING_LINE ||
	    h->order_off > size || order_end > h->data_off || h->data_off % IPC_RING_PAGE ||
	    h->data_off > size || h->data_size == 0 || h->data_size % IPC_RING_PAGE ||
	    h->data_size > size - h->data_off)
		return ipc_errmsg(-EBADMSG, msg, cap,
				  "ring header: schema_off %llu slots_off %llu order_off %llu "
				  "data_off "
				  "%llu data_size %llu do not fit in order in %llu bytes",
				  (unsigned long long)h->schema_off,
				  (unsigned long long)h->slots_off,
				  (unsigned long long)h->order_off, (unsigned long long)h->data_off,
				  (unsigned long long)h->data_size, (unsigned long long)size);
	return 0;
}

static int check_schema(const struct ipc_ring_tensor *t, uint32_t i, char *msg, size_t cap)
{
	if (!memchr(t->name, 0, sizeof(t->name)) || !t->name[0] || t->dtype >= IPC_DTYPE_COUNT_ ||
	    t->rank < 1 || t->rank > IPC_BATCH_MAX_RANK || t->ragged > 1)
		return ipc_errmsg(-EBADMSG, msg, cap,
				  "ring schema[%u]: name, dtype %u, rank %u or ragged %u out of "
				  "range",
				  i, t->dtype, t->rank, t->ragged);
	return 0;
}

static int check_cb(const struct ipc_ring_cb *cb, const struct ipc_ring_hdr *h, uint64_t size,
		    char *msg, size_t cap)
{
	if (cb->magic != IPC_RING_CB_MAGIC || cb->version != IPC_RING_VERSION ||
	    cb->cb_hdr_size != sizeof(struct ipc_ring_cb))
		return ipc_errmsg(-EBADMSG, msg, cap,
				  "control block: magic 0x%08x version %u size %u, "
				  "expected 0x%08x %d %zu",
				  cb->magic, cb->version, cb->cb_hdr_size, IPC_RING_CB_MAGIC,
				  IPC_RING_VERSION, sizeof(struct ipc_ring_cb));
	/* the reader's own mode: its consumer group's, which may differ from the header's */
	if (cb->mode > IPC_RING_RANK || cb->n != h->n_slots ||
	    cb->reader_id >= IPC_RING_MAX_READERS ||
	    (cb->mode == IPC_RING_RANK ? cb->rank_n < 1 || cb->rank_n > IPC_RING_MAX_READERS ||
						 cb->rank_index >= cb->rank_n
				       : cb->rank_n != 0))
		return ipc_errmsg(-EBADMSG, msg, cap,
				  "control block: mode %u n %u reader %u rank %u of %u do not "
				  "match "
				  "the ring",
				  cb->mode, cb->n, cb->reader_id, cb->rank_index, cb->rank_n);
	if (cb->size != size || size != ipc_ring_cb_size(h->n_slots) ||
	    cb->rel_off != sizeof(struct ipc_ring_cb) ||
	    cb->asg_off != cb->rel_off + sizeof(struct ipc_ring_ent) * cb->n)
		return ipc_errmsg(-EBADMSG, msg, cap,
				  "control block: size %llu (memfd %llu) rel_off %llu asg_off %llu",
				  (unsigned long long)cb->size, (unsigned long long)size,
				  (unsigned long long)cb->rel_off, (unsigned long long)cb->asg_off);
	return 0;
}

int ipc_ring_client_attach(int data_fd, int cb_fd, struct ipc_ring_client **ret_client, char *msg,
			   size_t msg_cap)
{
	struct ipc_ring_client *c;
	struct ipc_ring_hdr h;
	struct ipc_ring_cb cbh;
	uint64_t size, cb_size, head;
	void *map;
	int rc;

	rc = check_fd(data_fd, IPC_RING_DATA_SEALS, "ring data", &size, msg, msg_cap);
	if (rc)
		return rc;
	if (size < sizeof(struct ipc_ring_hdr) + IPC_RING_PAGE ||
	    size > IPC_RING_MAX_DATA + (64ull << 20))
		return ipc_errmsg(-EBADMSG, msg, msg_cap, "ring data fd %d: size %llu out of range",
				  data_fd, (unsigned long long)size);
	rc = check_fd(cb_fd, IPC_RING_CB_SEALS, "control block", &cb_size, msg, msg_cap);
	if (rc)
		return rc;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	map = mmap(NULL, size, PROT_READ, MAP_SHARED, data_fd, 0);
	if (map == MAP_FAILED) {
		rc = ipc_errmsg(-errno, msg, msg_cap, "ring data fd %d: mmap: %s", data_fd,
				strerror(errno));
		goto fail;
	}
	c->map = map;
	c->map_len = size;
	memcpy(&h, map, offsetof(struct ipc_ring_hdr, head)); /* line 0, once */
	rc = check_hdr(&h, size, msg, msg_cap);
	if (rc)
		goto fail;
	c->hdr = map;
	c->slots = (const struct ipc_ring_slot *)(c->map + h.slots_off);
	c->order = (const _Atomic uint32_t *)(c->map + h.order_off);
	c->data = c->map + h.data_off;
	c->data_size = h.data_size;
	c->n_slots = h.n_slots;
	c->mask = h.n_slots - 1;
	c->n_schema = h.n_schema;
	c->schema = calloc(h.n_schema ? h.n_schema : 1, sizeof(*c->schema));
	c->held = calloc(h.n_slots, sizeof(*c->held));
	if (!c->schema || !c->held) {
		rc = -ENOMEM;
		goto fail;
	}
	if (h.n_schema)
		memcpy(c->schema, c->map + h.schema_off, h.n_schema * sizeof(*c->schema));
	for (uint32_t i = 0; i < h.n_schema; i++) {
		rc = check_schema(&c->schema[i], i, msg, msg_cap);
		if (rc)
			goto fail;
	}

	map = mmap(NULL, cb_size, PROT_READ | PROT_WRITE, MAP_SHARED, cb_fd, 0);
	if (map == MAP_FAILED) {
		rc = ipc_errmsg(-errno, msg, msg_cap, "control block fd %d: mmap: %s", cb_fd,
				strerror(errno));
		goto fail;
	}
	c->cb = map;
	c->cb_len = cb_size;
	memcpy(&cbh, map, offsetof(struct ipc_ring_cb, cursor)); /* line 0, once */
	rc = check_cb(&cbh, &h, cb_size, msg, msg_cap);
	if (rc)
		goto fail;
	c->id = cbh.reader_id;
	c->mode = (enum ipc_ring_mode)cbh.mode;
	c->catch_up = c->mode == IPC_RING_BROADCAST && cbh.catch_up;
	c->rel = (struct ipc_ring_ent *)((uint8_t *)map + cbh.rel_off);
	c->asg = (const struct ipc_ring_ent *)((uint8_t *)map + cbh.asg_off);
	/* Pairs with publish's release store of head (the start is a published seq or head). */
	head = atomic_load_explicit(&c->hdr->head, memory_order_acquire);
	c->cursor = atomic_load_explicit(&c->cb->cursor, memory_order_relaxed);
	c->rel_head = atomic_load_explicit(&c->cb->rel_head, memory_order_relaxed);
	if (c->mode == IPC_RING_BROADCAST && (c->cursor < cbh.start || c->cursor > head)) {
		rc = ipc_errmsg(-EBADMSG, msg, msg_cap,
				"control block: cursor %llu outside [start %llu, head %llu]",
				(unsigned long long)c->cursor, (unsigned long long)cbh.start,
				(unsigned long long)head);
		goto fail;
	}
	*ret_client = c;
	return 0;
fail:
	ipc_ring_client_detach(c);
	return rc;
}

void ipc_ring_client_detach(struct ipc_ring_client *c)
{
	if (!c)
		return;
	if (c->cb)
		munmap(c->cb, c->cb_len);
	if (c->map)
		munmap((void *)c->map, c->map_len);
	free(c->held);
	free(c->schema);
	free(c);
}

/* Read slot (which must hold seq) once, as a seqlock reader, and check it. */
static int read_slot(struct ipc_ring_client *c, uint64_t slot, uint64_t seq,
		     struct ipc_ring_batch *ret)
{
	const struct ipc_ring_slot *s;
	uint64_t s1, s2, off, len, epoch;
	uint32_t flags;

	if (slot >= c->n_slots)
		return -EBADMSG;
	s = &c->slots[slot];

	/* Pairs with publish's release store of slot->seq: the fields below are its batch's. */
	s1 = atomic_load_explicit(&s->seq, memory_order_acquire);
	off = atomic_load_explicit(&s->off, memory_order_relaxed);
	len = atomic_load_explicit(&s->len, memory_order_relaxed);
	epoch = atomic_load_explicit(&s->epoch, memory_order_relaxed);
	flags = atomic_load_explicit(&s->flags, memory_order_relaxed);
	/* Pairs with publish's release fence after it stored SEQ_NONE: a rewrite shows in s2. */
	ipc_ring_fence(memory_order_acquire);
	s2 = atomic_load_explicit(&s->seq, memory_order_relaxed);
	if (s1 != seq || s2 != seq)
		return -EBADMSG;
	if (off % IPC_RING_PAGE || len == 0 || off >= c->data_size || len > c->data_size - off)
		return -EBADMSG;
	ret->mem = c->data + off;
	ret->len = len;
	ret->seq = seq;
	ret->epoch = epoch;
	ret->flags = flags;
	ret->slot_ = (uint32_t)slot;
	return 0;
}

/* We took b: advance the cursor, remember that we hold it. */
static void took(struct ipc_ring_client *c, const struct ipc_ring_batch *b)
{
	c->cursor++;
	/*
	 * Pairs with the daemon's acquire load of cursor (sync_cursor): our reads of the asg[]
	 * entry and the slot are done before it may reuse the entry.
	 */
	atomic_store_explicit(&c->cb->cursor, c->cursor, memory_order_release);
	c->held[b->slot_] = b->seq + 1;
}

/*
 * We are being moved off the shared stream (ipc_ring_move_reader): wait (briefly: the daemon
 * does it in one go) until it says where our stream here ends; that end, or -EBADMSG.
 */
static int moved_end(struct ipc_ring_client *c, uint64_t *ret_end)
{
	for (int i = 0; i < 1000000; i++) {
		/* Pairs with the daemon's release fetch_or of MOVED_END: end is visible. */
		uint32_t fl = atomic_load_explicit(&c->cb->flags, memory_order_acquire);

		if (fl & IPC_RING_CB_MOVED_END) {
			*ret_end = atomic_load_explicit(&c->cb->end, memory_order_relaxed);
			return 0;
		}
		if (fl & IPC_RING_CB_EVICTED)
			return -ECONNABORTED;
		if (i > 1000)
			sched_yield();
		else
			cpu_relax();
	}
	return -EBADMSG;
}

/* Moved off: what next() says from then on, once the daemon is done moving us (-EXDEV). */
static int moved_off(struct ipc_ring_client *c)
{
	uint64_t end;
	int rc = moved_end(c, &end);

	return rc < 0 ? rc : -EXDEV;
}

/*
 * A catch-up reader's take of seq: the other half of the daemon's handshake in
 * ipc_ring_move_reader. 0: the take stands; -EXDEV: we were moved off before it (the daemon
 * may reuse that batch: it is given up, not released).
 */
static int take_stands(struct ipc_ring_client *c, const struct ipc_ring_batch *b)
{
	uint64_t end;
	int rc;

	ipc_ring_fence(memory_order_seq_cst); /* our cursor store, then the flags load */
	if (!(atomic_load_explicit(&c->cb->flags, memory_order_relaxed) & IPC_RING_CB_MOVED))
		return 0;
	rc = moved_end(c, &end);
	if (rc == 0 && b->seq < end)
		return 0;
	c->held[b->slot_] = 0;
	return rc < 0 ? rc : -EXDEV;
}

static int take_broadcast(struct ipc_ring_client *c, struct ipc_ring_batch *ret)
{
	uint64_t h, slot;
	int rc;

	/* Pairs with publish's release store of head: order entry, slot and extent are visible. */
	h = atomic_load_explicit(&c->hdr->head, memory_order_acquire);
	if (h == c->cursor)
		return -EAGAIN;
	if (h < c->cursor)
		return -EBADMSG;
	slot = atomic_load_explicit(&c->order[c->cursor & c->mask], memory_order_relaxed);
	rc = read_slot(c, slot, c->cursor, ret);
	if (rc && c->catch_up &&
	    (atomic_load_explicit(&c->cb->flags, memory_order_acquire) & IPC_RING_CB_MOVED)) {
		/* moved off meanwhile: the batch at our cursor may be gone, rightly */
		return moved_off(c);
	}
	if (rc)
		return rc;
	took(c, ret);
	return c->catch_up ? take_stands(c, ret) : 0;
}

static int take_assigned(struct ipc_ring_client *c, struct ipc_ring_batch *ret)
{
	const struct ipc_ring_ent *e;
	uint64_t ah, seq, slot;
	int rc;

	/* Pairs with assign()'s release store of asg_head: entry, slot and extent are visible. */
	ah = atomic_load_explicit(&c->cb->asg_head, memory_order_acquire);
	if (ah == c->cursor)
		return -EAGAIN;
	if (ah - c->cursor > c->n_slots)
		return -EBADMSG;
	e = &c->asg[c->cursor & c->mask];
	seq = atomic_load_explicit(&e->seq, memory_order_relaxed);
	slot = atomic_load_explicit(&e->slot, memory_order_relaxed);
	rc = read_slot(c, slot & ~IPC_RING_ENT_REDELIVERED, seq, ret);
	if (rc)
		return rc;
	if (slot & IPC_RING_ENT_REDELIVERED)
		ret->flags |= IPC_RING_BATCH_REDELIVERED;
	took(c, ret);
	return 0;
}

static int try_next(struct ipc_ring_client *c, struct ipc_ring_batch *ret)
{
	int32_t err;
	uint32_t fl;
	int rc;

	/*
	 * Pairs with ipc_ring_set_error's release store of error. Read before the take: a batch
	 * published before the error (the daemon's error batch, with its message) is then seen
	 * by the take and handed out first; the error only when nothing is left to take.
	 */
	err = atomic_load_explicit(&c->hdr->error, memory_order_acquire);
	/*
	 * Pairs with the daemon's release fetch_or of flags (eos_pass, remove): end is visible,
	 * and everything published before EOS is seen by the take below.
	 */
	fl = atomic_load_explicit(&c->cb->flags, memory_order_acquire);
	if (fl & IPC_RING_CB_EVICTED)
		return fl & IPC_RING_CB_LEASE	 ? -ETIME
		       : fl & IPC_RING_CB_ORPHAN ? -ENOLINK
						 : -ECONNABORTED;
	if (fl & IPC_RING_CB_MOVED)
		return moved_off(c);
	rc = c->mode == IPC_RING_BROADCAST ? take_broadcast(c, ret) : take_assigned(c, ret);
	if (rc != -EAGAIN)
		return rc;
	if (err)
		return err < 0 && err >= -4095 ? err : -EIO;
	if ((fl & IPC_RING_CB_EOS) &&
	    c->cursor >= atomic_load_explicit(&c->cb->end, memory_order_relaxed))
		return -ENODATA;
	return -EAGAIN;
}

/* Tell a daemon sleeping in ipc_ring_wait that we have news. */
static void ring_doorbell(struct ipc_ring_client *c)
{
	atomic_fetch_add_explicit(&c->cb->doorbell, 1, memory_order_relaxed);
	ipc_futex_wake(&c->cb->doorbell, 1);
}

static int wait_next(struct ipc_ring_client *c, int64_t timeout_ns,
		     struct ipc_ring_batch *ret_batch);

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Statistics in the control block, for the daemon's stats (it does not rely on them). */
static void count(struct ipc_ring_client *c, int rc, uint64_t t0)
{
	if (rc == 0)
		atomic_store_explicit(&c->cb->taken,
				      atomic_load_explicit(&c->cb->taken, memory_order_relaxed) + 1,
				      memory_order_relaxed);
	if (t0)
		atomic_store_explicit(&c->cb->wait_ns,
				      atomic_load_explicit(&c->cb->wait_ns, memory_order_relaxed) +
					      (mono_ns() - t0),
				      memory_order_relaxed);
}

int ipc_ring_client_next(struct ipc_ring_client *c, int64_t timeout_ns,
			 struct ipc_ring_batch *ret_batch)
{
	int rc = try_next(c, ret_batch);
	if (rc != -EAGAIN || timeout_ns == 0) { /* no clock read on the fast path */
		count(c, rc, 0);
		return rc;
	}
	uint64_t t0 = mono_ns();
	rc = wait_next(c, timeout_ns, ret_batch);
	count(c, rc, t0);
	return rc;
}

/* next() when no batch was ready: spin a little, then sleep on the wake word. */
static int wait_next(struct ipc_ring_client *c, int64_t timeout_ns,
		     struct ipc_ring_batch *ret_batch)
{
	struct timespec deadline = { 0, 0 };
	int rc = -EAGAIN;

	for (int i = 0; i < IPC_RING_SPIN; i++) {
		cpu_relax();
		rc = try_next(c, ret_batch);
		if (rc != -EAGAIN)
			return rc;
	}
	if (timeout_ns > 0)
		deadline = ipc_futex_deadline(timeout_ns);
	for (;;) {
		/* Pairs with the daemon's release fetch_add of wake; read before the check. */
		uint32_t w = atomic_load_explicit(&c->cb->wake, memory_order_acquire);
		int frc;

		atomic_store_explicit(&c->cb->waiting, 1, memory_order_relaxed);
		/*
		 * Pairs with the fence in wake_waiting (after publish stored head or assign stored
		 * asg_head) and with the one in ipc_ring_wait (after it set daemon_waiting):
		 * either the daemon sees waiting and wakes us, or we see its news below.
		 */
		ipc_ring_fence(memory_order_seq_cst);
		/*
		 * We are hungry: it may hand us a batch (split, rank), or it waits for more
		 * releases than we make before we get one (wake_rel).
		 */
		if (atomic_load_explicit(&c->cb->daemon_waiting, memory_order_acquire) &&
		    (c->mode != IPC_RING_BROADCAST ||
		     atomic_load_explicit(&c->cb->wake_rel, memory_order_relaxed)))
			ring_doorbell(c);
		rc = try_next(c, ret_batch);
		if (rc != -EAGAIN)
			break;
		frc = ipc_futex_wait(&c->cb->wake, w, timeout_ns < 0 ? NULL : &deadline);
		if (frc == -ETIMEDOUT) {
			rc = try_next(c, ret_batch);
			if (rc == -EAGAIN)
				rc = -ETIMEDOUT;
			break;
		}
	}
	atomic_store_explicit(&c->cb->waiting, 0, memory_order_relaxed);
	return rc;
}

int ipc_ring_client_release(struct ipc_ring_client *c, const struct ipc_ring_batch *b)
{
	struct ipc_ring_ent *e;
	uint64_t t;

	if (b->seq == UINT64_MAX || b->slot_ >= c->n_slots || c->held[b->slot_] != b->seq + 1)
		return -EINVAL;
	/* Pairs with collect_one's release store of rel_tail: entries before it were read. */
	t = atomic_load_explicit(&c->cb->rel_tail, memory_order_acquire);
	if (c->rel_head - t >= c->n_slots)
		return -ENOBUFS;
	e = &c->rel[c->rel_head & c->mask];
	atomic_store_explicit(&e->seq, b->seq, memory_order_relaxed);
	atomic_store_explicit(&e->slot, b->slot_, memory_order_relaxed);
	c->rel_head++;
	/* Pairs with collect_one's acquire load of rel_head: the entry is visible. */
	atomic_store_explicit(&c->cb->rel_head, c->rel_head, memory_order_release);
	c->held[b->slot_] = 0;
	/*
	 * Pairs with the fence in ipc_ring_wait: it sees rel_head, or we see daemon_waiting (and,
	 * by its release store, the wake_rel it set before).
	 */
	ipc_ring_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&c->cb->daemon_waiting, memory_order_acquire) &&
	    (int64_t)(c->rel_head - atomic_load_explicit(&c->cb->wake_rel, memory_order_relaxed)) >=
		    0)
		ring_doorbell(c);
	return 0;
}

const struct ipc_ring_tensor *ipc_ring_client_schema(const struct ipc_ring_client *c, size_t *ret_n)
{
	*ret_n = c->n_schema;
	return c->schema;
}

const void *ipc_ring_client_data(const struct ipc_ring_client *c, uint64_t *ret_len)
{
	*ret_len = c->data_size;
	return c->data;
}

size_t ipc_ring_client_why(const struct ipc_ring_client *c, char *buf, size_t cap)
{
	uint64_t off = ipc_ring_cb_msg_off(c->n_slots);
	const char *msg = (const char *)c->cb + off;
	size_t n = 0;

	if (!cap)
		return 0;
	/* Pairs with the release fetch_or of ORPHAN in the daemon's removal: the text is written. */
	if ((atomic_load_explicit(&c->cb->flags, memory_order_acquire) & IPC_RING_CB_ORPHAN) &&
	    off + IPC_RING_CB_MSG_MAX <= c->cb_len) {
		/* ours to write too: bounded, whatever it holds */
		while (n + 1 < cap && n + 1 < IPC_RING_CB_MSG_MAX && msg[n])
			n++;
		memcpy(buf, msg, n);
	}
	buf[n] = '\0';
	return n;
}

enum ipc_ring_mode ipc_ring_client_mode(const struct ipc_ring_client *c)
{
	return c->mode;
}

unsigned ipc_ring_client_id(const struct ipc_ring_client *c)
{
	return c->id;
}
