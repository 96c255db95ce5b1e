/* SPDX-License-Identifier: Apache-2.0 */
/* The shared record cache: a list of entries under one mutex, LRU eviction under a budget. */
#include "cache.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mem.h"

/*
 * An entry's bytes are segments of mapped pages of its own: the budget counts exactly the pages
 * an entry holds, and an evicted entry's memory goes back to the system at once. A segment never
 * moves once made, nor does a record's index entry (blocks that double): readers of a file still
 * being cached read what was published of it while the filler appends.
 */
#define PAGE 4096u
#define FIRST_CAP                                                              \
	(1u << 20) /* a fill starts here (projected records are often far less \
		      than the file); each new segment doubles what the entry holds */
#define MAX_SEGS  64u
#define SMALL_SEG (64u << 10) /* past a record: a segment near the budget's end */
#define IX_FIRST  64u	      /* records in the index's first block; block b holds IX_FIRST << b */
#define IX_BLOCKS 40u
#define IX_AHEAD  16u /* index entries read ahead (pl_cache_entry_record) */
/*
 * A waiting reader is woken once this many more records are there, or this many more bytes:
 * each wake-up is a futex call on both sides (a follower of a whole CTR file woken every 64
 * records made 6,000 of them).
 */
#define WAKE_EVERY 1024u
#define WAKE_BYTES (1u << 20)

static uint64_t page_up(uint64_t n)
{
	return (n + PAGE - 1) / PAGE * PAGE;
}

struct seg {
	uint8_t *base;
	uint64_t cap, used;
};

enum fill_state { FILLING, READY, GIVEN_UP };

struct pl_cache_entry {
	struct pl_cache *c;
	struct pl_cache_key key;
	/* the filler's, appended to without the lock (made and charged under it) */
	struct seg seg[MAX_SEGS];
	unsigned n_seg;
	struct pl_cache_ix *ixb[IX_BLOCKS];
	uint64_t n_ix;
	uint64_t n_flat; /* records with PL_CACHE_REC_FLAT or _VALUES */
	uint8_t *heads;	 /* what the _VALUES records share (pl_cache_fill_heads) */
	uint32_t heads_len;
	uint64_t bytes; /* of its records (data and footers) */
	/* readers': records [0, published) may be read; state FILLING, READY or GIVEN_UP */
	_Atomic uint64_t published;
	_Atomic int state;
	_Atomic uint64_t wake_at; /* a reader waits for this many records: wake it then */
	uint64_t wake_bytes;	  /* the filler's: or once bytes reaches this */
	pthread_cond_t cv;	  /* with c->lock: published moved on, or the fill ended */
	/* under c->lock */
	struct pl_cache_user *filler; /* while filling */
	uint64_t charged;	      /* bytes counted against the budget (segments and index) */
	uint64_t last_use;
	unsigned users; /* readers (pl_cache_get) */
	bool linked;
	bool no_evict; /* its fill takes free room only (PL_CACHE_FILL_NO_EVICT) */
	struct pl_cache_entry *next;
};

struct pl_cache {
	pthread_mutex_t lock;
	struct pl_cache_entry *head; /* every linked entry: ready or being filled */
	uint64_t tick;
	struct pl_cache_stats st;
	struct pl_mem *acct; /* charged with st.bytes too (pl_cache_set_account), or NULL */
};

int pl_cache_create(uint64_t budget, struct pl_cache **ret)
{
	struct pl_cache *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	c->st.budget = budget;
	*ret = c;
	return 0;
}

static void entry_free(struct pl_cache_entry *e)
{
	for (unsigned i = 0; i < e->n_seg; i++)
		if (e->seg[i].cap)
			munmap(e->seg[i].base, e->seg[i].cap);
	for (unsigned b = 0; b < IX_BLOCKS; b++)
		free(e->ixb[b]);
	pthread_cond_destroy(&e->cv);
	free(e->heads);
	free(e);
}

void pl_cache_set_account(struct pl_cache *c, struct pl_mem *acct)
{
	c->acct = acct;
}

void pl_cache_destroy(struct pl_cache *c)
{
	if (!c)
		return;
	while (c->head) {
		struct pl_cache_entry *e = c->head;
		c->head = e->next;
		entry_free(e);
	}
	pl_mem_uncharge(c->acct, c->st.bytes);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

int pl_cache_key_of(const struct io_creds *creds, const char *path,
		    enum tfr_compression compression, struct pl_cache_key *ret)
{
	struct stat st;
	int fd = io_creds_open(creds, path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return fd;
	int r = fstat(fd, &st) < 0 ? -errno : 0;
	close(fd);
	if (r < 0)
		return r;
	memset(ret, 0, sizeof(*ret));
	ret->dev = (uint64_t)st.st_dev;
	ret->ino = (uint64_t)st.st_ino;
	ret->size = (uint64_t)st.st_size;
	ret->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	ret->compression = (uint32_t)compression;
	return 0;
}

static bool same_file(const struct pl_cache_key *a, const struct pl_cache_key *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->compression == b->compression &&
	       a->proj == b->proj;
}

static bool same_key(const struct pl_cache_key *a, const struct pl_cache_key *b)
{
	return same_file(a, b) && a->size == b->size && a->mtime_ns == b->mtime_ns;
}

static int state_of(const struct pl_cache_entry *e)
{
	return atomic_load_explicit(&e->state, memory_order_acquire);
}

/* Take e off the list; it is freed now, or by its last reader or its filler. Under lock. */
static void unlink_entry(struct pl_cache *c, struct pl_cache_entry *e)
{
	for (struct pl_cache_entry **pp = &c->head; *pp; pp = &(*pp)->next) {
		if (*pp == e) {
			*pp = e->next;
			break;
		}
	}
	e->linked = false;
	c->st.bytes -= e->charged;
	pl_mem_uncharge(c->acct, e->charged);
	e->charged = 0;
	if (state_of(e) == READY)
		c->st.entries--;
	if (!e->users && state_of(e) != FILLING)
		entry_free(e);
}

/* Evict the least recently used entry nobody reads: the bytes it held, 0 when there is none. */
static uint64_t evict_one(struct pl_cache *c)
{
	struct pl_cache_entry *lru = NULL;
	for (struct pl_cache_entry *e = c->head; e; e = e->next)
		if (state_of(e) == READY && !e->users && (!lru || e->last_use < lru->last_use))
			lru = e;
	if (!lru)
		return 0;
	uint64_t held = lru->charged;
	c->st.evictions++;
	unlink_entry(c, lru);
	return held ? held : 1;
}

/*
 * Count delta more bytes against the budget and the account, evicting for room. 0 or -ENOSPC.
 * Under lock.
 */
static int charge(struct pl_cache *c, struct pl_cache_entry *e, uint64_t delta)
{
	while (c->st.bytes + delta > c->st.budget || pl_mem_charge(c->acct, delta, NULL) < 0)
		if (e->no_evict || !evict_one(c))
			return -ENOSPC;
	c->st.bytes += delta;
	e->charged += delta;
	return 0;
}

static void uncharge(struct pl_cache *c, struct pl_cache_entry *e, uint64_t delta)
{
	if (!e->linked)
		return; /* unlink_entry gave back all it held */
	c->st.bytes -= delta;
	pl_mem_uncharge(c->acct, delta);
	e->charged -= delta;
}

uint64_t pl_cache_reclaim(struct pl_cache *c, uint64_t need)
{
	uint64_t freed = 0;
	pthread_mutex_lock(&c->lock);
	while (freed < need) {
		uint64_t n = evict_one(c);
		if (!n)
			break;
		freed += n;
		c->st.reclaims++;
	}
	pthread_mutex_unlock(&c->lock);
	return freed;
}

uint64_t pl_cache_reclaimable(struct pl_cache *c)
{
	uint64_t n = 0;
	pthread_mutex_lock(&c->lock);
	for (struct pl_cache_entry *e = c->head; e; e = e->next)
		if (state_of(e) == READY && !e->users)
			n += e->charged;
	pthread_mutex_unlock(&c->lock);
	return n;
}

struct pl_cache_entry *pl_cache_get(struct pl_cache *c, const struct pl_cache_key *key,
				    const struct pl_cache_user *user)
{
	struct pl_cache_entry *hit = NULL;
	pthread_mutex_lock(&c->lock);
	for (struct pl_cache_entry *e = c->head, *next; e; e = next) {
		next = e->next;
		if (!same_file(&e->key, key))
			continue;
		if (!same_key(&e->key, key)) {
			/* the file changed since: what is cached of it is wrong now */
			c->st.invalidations++;
			unlink_entry(c, e);
		} else if (state_of(e) == READY || (user && e->filler != user)) {
			hit = e;
		}
	}
	if (hit) {
		hit->users++;
		hit->last_use = ++c->tick;
		c->st.hits++;
		if (state_of(hit) == FILLING)
			c->st.follows++;
	} else {
		c->st.misses++;
	}
	pthread_mutex_unlock(&c->lock);
	return hit;
}

void pl_cache_put(struct pl_cache_entry *e)
{
	if (!e)
		return;
	struct pl_cache *c = e->c;
	pthread_mutex_lock(&c->lock);
	bool gone = --e->users == 0 && !e->linked && state_of(e) != FILLING;
	pthread_mutex_unlock(&c->lock);
	if (gone)
		entry_free(e);
}

/* A new segment of at least cap bytes (pages), charged. 0, -ENOSPC or -ENOMEM. Under lock. */
static int add_seg(struct pl_cache *c, struct pl_cache_entry *e, uint64_t cap)
{
	if (e->n_seg == MAX_SEGS)
		return -ENOSPC;
	int r = charge(c, e, cap);
	if (r < 0)
		return r;
	void *m = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	/* the pages now, not at the fill's first write: a cgroup without room for them fails
	   this call (ENOMEM, the fill is given up) instead of waking the OOM killer on a page
	   fault (faults of madvise are not a user's: the memory cgroup refuses, it kills no one).
	   EINVAL: a kernel before 5.14 (the pages come at first write, as they did). */
	if (m != MAP_FAILED && madvise(m, cap, MADV_POPULATE_WRITE) < 0 && errno != EINVAL) {
		munmap(m, cap);
		m = MAP_FAILED;
	}
	if (m == MAP_FAILED) {
		uncharge(c, e, cap);
		return -ENOMEM;
	}
	e->seg[e->n_seg++] = (struct seg){ .base = m, .cap = cap };
	return 0;
}

/* Give back the pages of segment s past its records (no record is added to it any more). */
static void trim_seg(struct pl_cache *c, struct pl_cache_entry *e, struct seg *s)
{
	uint64_t keep = page_up(s->used);
	if (keep >= s->cap)
		return;
	munmap(s->base + keep, s->cap - keep);
	uncharge(c, e, s->cap - keep);
	s->cap = keep;
}

struct pl_cache_entry *pl_cache_fill_begin(struct pl_cache *c, const struct pl_cache_key *key,
					   uint64_t size_hint, struct pl_cache_user *user,
					   unsigned flags)
{
	struct pl_cache_entry *e = NULL;
	/* a small budget starts small: segments grow */
	uint64_t most = c->st.budget / 4 / PAGE * PAGE;
	uint64_t cap = page_up(size_hint < FIRST_CAP ? (size_hint ? size_hint : 1) : FIRST_CAP);
	if (cap > most)
		cap = most > PAGE ? most : PAGE;
	pthread_mutex_lock(&c->lock);
	for (struct pl_cache_entry *x = c->head; x; x = x->next)
		if (same_key(&x->key, key))
			goto out; /* there, or being filled by another pipeline */
	if (cap > c->st.budget)
		goto out;
	e = calloc(1, sizeof(*e));
	if (!e)
		goto out;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&e->cv, &ca);
	pthread_condattr_destroy(&ca);
	e->c = c;
	e->key = *key;
	e->filler = user;
	e->no_evict = flags & PL_CACHE_FILL_NO_EVICT;
	atomic_init(&e->published, 0);
	atomic_init(&e->state, FILLING);
	atomic_init(&e->wake_at, UINT64_MAX);
	e->linked = true;
	e->next = c->head;
	c->head = e;
	if (add_seg(c, e, cap) < 0) {
		c->st.fill_aborts++;
		atomic_store(&e->state, GIVEN_UP);
		unlink_entry(c, e); /* frees it */
		e = NULL;
	}
out:
	pthread_mutex_unlock(&c->lock);
	return e;
}

/* The index block of record i and its place there. */
static unsigned ix_block(uint64_t i, uint64_t *ret_pos)
{
	uint64_t q = i / IX_FIRST + 1;
	unsigned b = 63u - (unsigned)__builtin_clzll(q);
	*ret_pos = i - IX_FIRST * ((UINT64_C(1) << b) - 1);
	return b;
}

/* Make room for n more bytes and record n_ix's index entry. 0 or -errno. Under lock. */
static int grow(struct pl_cache *c, struct pl_cache_entry *e, uint64_t n, unsigned b, bool new_ix)
{
	if (!e->linked)
		return -ESTALE; /* its file changed meanwhile */
	struct seg *s = &e->seg[e->n_seg - 1];
	if (s->used + n > s->cap) {
		uint64_t held = 0;
		for (unsigned i = 0; i < e->n_seg; i++)
			held += e->seg[i].cap;
		trim_seg(c, e, s);
		/* as much again as it holds; near the budget's end, what the record needs */
		int r = add_seg(c, e, page_up(n > held ? n : held));
		if (r == -ENOSPC && n < held)
			r = add_seg(c, e, page_up(n + SMALL_SEG));
		if (r < 0)
			return r;
	}
	if (new_ix) {
		if (b >= IX_BLOCKS)
			return -ENOSPC;
		size_t sz = (size_t)(IX_FIRST << b) * sizeof(struct pl_cache_ix);
		int r = charge(c, e, sz);
		if (r < 0)
			return r;
		e->ixb[b] = malloc(sz);
		if (!e->ixb[b]) {
			uncharge(c, e, sz);
			return -ENOMEM;
		}
	}
	return 0;
}

/* Readers waiting for what was published now, or for the fill's end, are woken. */
static void wake(struct pl_cache_entry *e)
{
	pthread_mutex_lock(&e->c->lock);
	atomic_store(&e->wake_at, UINT64_MAX);
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->c->lock);
}

int pl_cache_fill_heads(struct pl_cache_entry *e, const uint8_t *heads, uint32_t len)
{
	if (e->heads)
		return -EEXIST;
	uint8_t *h = malloc(len ? len : 1);
	if (!h)
		return -ENOMEM;
	memcpy(h, heads, len);
	e->heads_len = len;
	e->heads = h; /* readers see it once a record that needs it is published (release) */
	return 0;
}

const uint8_t *pl_cache_entry_heads(const struct pl_cache_entry *e, uint32_t *ret_len)
{
	*ret_len = e->heads_len;
	return e->heads;
}

void pl_cache_entry_ref(struct pl_cache_entry *e)
{
	pthread_mutex_lock(&e->c->lock);
	e->users++;
	pthread_mutex_unlock(&e->c->lock);
}

int pl_cache_fill_add(struct pl_cache_entry *e, const uint8_t *data, uint32_t len, uint64_t offset,
		      unsigned flags, const uint8_t **ret_stored)
{
	const unsigned decoded = PL_CACHE_REC_FLAT | PL_CACHE_REC_VALUES;
	bool footer = !(flags & (PL_CACHE_REC_CHECKED | decoded));
	uint64_t n = (uint64_t)len + (footer ? TFR_FOOTER_LEN : 0);
	uint64_t pos;
	unsigned b = ix_block(e->n_ix, &pos);
	bool new_ix = b >= IX_BLOCKS || !e->ixb[b];
	struct seg *s = &e->seg[e->n_seg - 1];
	/* decoded values are arrays of int64 and float: 8-aligned, as pbex_flatten wrote them */
	uint64_t pad = flags & decoded ? (8 - (s->used & 7)) & 7 : 0;
	if (s->used + pad + n > s->cap || new_ix) {
		struct pl_cache *c = e->c;
		pthread_mutex_lock(&c->lock);
		int r = grow(c, e, pad + n, b, new_ix);
		pthread_mutex_unlock(&c->lock);
		if (r < 0)
			return r;
		s = &e->seg[e->n_seg - 1];
		pad = flags & decoded ? (8 - (s->used & 7)) & 7 : 0;
	}
	s->used += pad; /* a new segment starts at a page: none */
	uint8_t *to = s->base + s->used;
	memcpy(to, data, (size_t)n);
	s->used += n;
	e->bytes += n;
	e->ixb[b][pos] =
		(struct pl_cache_ix){ .data = to, .offset = offset, .len = len, .flags = flags };
	e->n_ix++;
	e->n_flat += (flags & decoded) != 0;
	if (ret_stored)
		*ret_stored = to;
	/* the record, then its count (release); then whether a reader waits for it (Dekker's
	   order against the reader's store of wake_at and load of published: both seq_cst) */
	atomic_store(&e->published, e->n_ix);
	uint64_t w = atomic_load(&e->wake_at);
	if (e->n_ix >= w || (w != UINT64_MAX && e->bytes >= e->wake_bytes)) {
		e->wake_bytes = e->bytes + WAKE_BYTES;
		wake(e);
	}
	return 0;
}

uint64_t pl_cache_fill_end(struct pl_cache_entry *e, bool complete)
{
	struct pl_cache *c = e->c;
	uint64_t held = 0;
	pthread_mutex_lock(&c->lock);
	e->filler = NULL;
	if (!complete || !e->linked) {
		c->st.fill_aborts++;
		atomic_store(&e->state, GIVEN_UP);
		pthread_cond_broadcast(&e->cv);
		bool gone = !e->users;
		if (e->linked)
			unlink_entry(c, e); /* frees it unless it is read */
		else if (gone)
			entry_free(e); /* taken off the list already (its file changed) */
	} else {
		trim_seg(c, e, &e->seg[e->n_seg - 1]);
		atomic_store(&e->state, READY);
		pthread_cond_broadcast(&e->cv);
		e->last_use = ++c->tick;
		c->st.entries++;
		c->st.fills++;
		held = e->charged;
	}
	pthread_mutex_unlock(&c->lock);
	return held;
}

uint64_t pl_cache_entry_records(const struct pl_cache_entry *e)
{
	return atomic_load_explicit(&e->published, memory_order_acquire);
}

bool pl_cache_entry_ready(const struct pl_cache_entry *e)
{
	return state_of(e) == READY;
}

bool pl_cache_entry_all_flat(const struct pl_cache_entry *e)
{
	return state_of(e) == READY && e->n_flat == e->n_ix; /* both final once ready (acquire) */
}

/* Whether waiting for e's filler would wait for self: a cycle of readers. Under lock. */
static bool waits_for(const struct pl_cache_entry *e, const struct pl_cache_user *self)
{
	unsigned hops = 0;
	for (const struct pl_cache_user *u = e->filler; u; u = u->waiting_on->filler) {
		if (u == self || ++hops > 1024)
			return true;
		if (!u->waiting_on)
			return false;
	}
	return false;
}

/* Wait for record i of e: 1 (there), or pl_cache_entry_record's 0, -ECANCELED, -EAGAIN, -EDEADLK */
static int wait_record(struct pl_cache_entry *e, uint64_t i, struct pl_cache_user *user,
		       int timeout_ms)
{
	struct pl_cache *c = e->c;
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	int r;
	pthread_mutex_lock(&c->lock);
	for (bool timed_out = false;;) {
		if (i < atomic_load(&e->published)) {
			r = 1;
			break;
		}
		int st = state_of(e);
		if (st != FILLING) {
			r = st == READY ? 0 : -ECANCELED;
			break;
		}
		if ((!user && timeout_ms > 0) || (user && waits_for(e, user))) {
			r = -EDEADLK;
			break;
		}
		if (timeout_ms <= 0 || timed_out) {
			r = -EAGAIN;
			break;
		}
		uint64_t want = i + WAKE_EVERY;
		if (want < atomic_load(&e->wake_at))
			atomic_store(&e->wake_at, want);
		if (i < atomic_load(&e->published))
			continue;
		user->waiting_on = e;
		timed_out = pthread_cond_timedwait(&e->cv, &c->lock, &until) == ETIMEDOUT;
		user->waiting_on = NULL;
	}
	pthread_mutex_unlock(&c->lock);
	return r;
}

/* Record i's index entry (published), and how many entries its block holds from it on. */
static const struct pl_cache_ix *ix_at(const struct pl_cache_entry *e, uint64_t i,
				       uint64_t *ret_left)
{
	uint64_t pos;
	unsigned b = ix_block(i, &pos);
	*ret_left = ((uint64_t)IX_FIRST << b) - pos;
	return &e->ixb[b][pos];
}

int pl_cache_entry_record(struct pl_cache_entry *e, uint64_t i, struct pl_cache_user *user,
			  int timeout_ms, struct pl_cache_rec *ret)
{
	if (i >= atomic_load_explicit(&e->published, memory_order_acquire)) {
		int r = wait_record(e, i, user, timeout_ms);
		if (r <= 0)
			return r;
	}
	uint64_t left;
	const struct pl_cache_ix *x = ix_at(e, i, &left);
	/* records are read in order, a few files at a time, among other misses (a later epoch's
	   shuffle): start the index's next lines now */
	if (left > IX_AHEAD)
		__builtin_prefetch(x + IX_AHEAD);
	ret->data = x->data;
	ret->len = x->len;
	ret->offset = x->offset;
	ret->flags = x->flags;
	return 1;
}

const struct pl_cache_ix *pl_cache_entry_run(const struct pl_cache_entry *e, uint64_t i,
					     uint64_t *ret_n)
{
	uint64_t n = atomic_load_explicit(&e->published, memory_order_acquire);
	if (i >= n) {
		*ret_n = 0;
		return NULL;
	}
	uint64_t left;
	const struct pl_cache_ix *x = ix_at(e, i, &left);
	*ret_n = left < n - i ? left : n - i;
	return x;
}

uint64_t pl_cache_entry_bytes(const struct pl_cache_entry *e)
{
	return e->bytes;
}

uint64_t pl_cache_entry_held(const struct pl_cache_entry *e)
{
	pthread_mutex_lock(&e->c->lock);
	uint64_t n = e->charged; /* 0 once it was dropped (its file changed) */
	pthread_mutex_unlock(&e->c->lock);
	return n;
}

void pl_cache_get_stats(struct pl_cache *c, struct pl_cache_stats *ret)
{
	pthread_mutex_lock(&c->lock);
	*ret = c->st;
	pthread_mutex_unlock(&c->lock);
}

uint64_t pl_cache_budget(const struct pl_cache *c)
{
	return c->st.budget; /* set once by pl_cache_create */
}
