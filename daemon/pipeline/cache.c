/* SPDX-License-Identifier: Apache-2.0 */
/* The shared record cache: a list of entries under one mutex, LRU eviction under a budget. */
#include "cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

/*
 * Entry bytes are mapped pages of their own (mmap, mremap to grow and to give back the tail):
 * the budget counts exactly the pages an entry holds, growing moves no bytes, and an evicted
 * entry's memory goes back to the system at once.
 */
#define PAGE 4096u
#define FIRST_CAP                                                              \
	(1u << 20) /* a fill starts here (projected records are often far less \
		      than the file) and doubles */

static uint64_t page_up(uint64_t n)
{
	return (n + PAGE - 1) / PAGE * PAGE;
}

struct rec_ix {
	uint64_t pos;	 /* of its data in buf */
	uint64_t offset; /* of its header in the file */
	uint32_t len;
	uint32_t flags; /* PL_CACHE_REC_* */
};

struct pl_cache_entry {
	struct pl_cache *c;
	struct pl_cache_key key;
	uint8_t *buf; /* records, each followed by its footer */
	uint64_t used, cap;
	struct rec_ix *ix;
	uint64_t n_ix, cap_ix;
	uint64_t charged; /* bytes counted against the budget (buf and ix capacities) */
	uint64_t last_use;
	unsigned users; /* readers (pl_cache_get), under c->lock */
	bool ready, filling, linked;
	struct pl_cache_entry *next;
};

struct pl_cache {
	pthread_mutex_t lock;
	struct pl_cache_entry *head; /* every linked entry: ready or being filled */
	uint64_t tick;
	struct pl_cache_stats st;
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
	if (e->buf)
		munmap(e->buf, e->cap);
	free(e->ix);
	free(e);
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
	pthread_mutex_destroy(&c->lock);
	free(c);
}

int pl_cache_key_of(const char *path, enum tfr_compression compression, struct pl_cache_key *ret)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return -errno;
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

/* Take e off the list; it is freed now, or by its last reader. Under lock. */
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
	e->charged = 0;
	if (e->ready)
		c->st.entries--;
	if (!e->users && !e->filling)
		entry_free(e);
}

/* Evict the least recently used entry nobody reads. false: there is none. Under lock. */
static bool evict_one(struct pl_cache *c)
{
	struct pl_cache_entry *lru = NULL;
	for (struct pl_cache_entry *e = c->head; e; e = e->next)
		if (e->ready && !e->users && (!lru || e->last_use < lru->last_use))
			lru = e;
	if (!lru)
		return false;
	c->st.evictions++;
	unlink_entry(c, lru);
	return true;
}

/* Count delta more bytes against the budget, evicting for room. 0 or -ENOSPC. Under lock. */
static int charge(struct pl_cache *c, struct pl_cache_entry *e, uint64_t delta)
{
	while (c->st.bytes + delta > c->st.budget)
		if (!evict_one(c))
			return -ENOSPC;
	c->st.bytes += delta;
	e->charged += delta;
	return 0;
}

struct pl_cache_entry *pl_cache_get(struct pl_cache *c, const struct pl_cache_key *key)
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
		} else if (e->ready) {
			hit = e;
		}
	}
	if (hit) {
		hit->users++;
		hit->last_use = ++c->tick;
		c->st.hits++;
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
	bool gone = --e->users == 0 && !e->linked;
	pthread_mutex_unlock(&c->lock);
	if (gone)
		entry_free(e);
}

struct pl_cache_entry *pl_cache_fill_begin(struct pl_cache *c, const struct pl_cache_key *key,
					   uint64_t size_hint)
{
	struct pl_cache_entry *e = NULL;
	uint64_t cap = page_up(size_hint < FIRST_CAP ? (size_hint ? size_hint : 1) : FIRST_CAP);
	pthread_mutex_lock(&c->lock);
	for (struct pl_cache_entry *x = c->head; x; x = x->next)
		if (same_key(&x->key, key))
			goto out; /* there, or being filled by another pipeline */
	if (cap > c->st.budget)
		goto out;
	e = calloc(1, sizeof(*e));
	void *m = e ? mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
		    : MAP_FAILED;
	if (m == MAP_FAILED) {
		free(e);
		e = NULL;
		goto out;
	}
	e->buf = m;
	e->c = c;
	e->key = *key;
	e->cap = cap;
	e->filling = true;
	e->linked = true;
	e->next = c->head;
	c->head = e;
	if (charge(c, e, cap) < 0) {
		c->st.fill_aborts++;
		e->filling = false;
		unlink_entry(c, e); /* frees it */
		e = NULL;
	}
out:
	pthread_mutex_unlock(&c->lock);
	return e;
}

/* Grow the index to hold need entries, charging the difference. Under lock. */
static int grow_ix(struct pl_cache *c, struct pl_cache_entry *e, uint64_t need)
{
	uint64_t n = e->cap_ix ? e->cap_ix : 64;
	while (n < need)
		n *= 2;
	int r = charge(c, e, (n - e->cap_ix) * sizeof(*e->ix));
	if (r < 0)
		return r;
	void *np = realloc(e->ix, n * sizeof(*e->ix));
	if (!np) {
		c->st.bytes -= (n - e->cap_ix) * sizeof(*e->ix);
		e->charged -= (n - e->cap_ix) * sizeof(*e->ix);
		return -ENOMEM;
	}
	e->ix = np;
	e->cap_ix = n;
	return 0;
}

/* Grow the bytes to hold need (pages, doubling), charging the difference. Under lock. */
static int grow_buf(struct pl_cache *c, struct pl_cache_entry *e, uint64_t need)
{
	uint64_t n = e->cap;
	while (n < need)
		n *= 2;
	int r = charge(c, e, n - e->cap);
	if (r < 0)
		return r;
	void *np = mremap(e->buf, e->cap, n, MREMAP_MAYMOVE);
	if (np == MAP_FAILED) {
		c->st.bytes -= n - e->cap;
		e->charged -= n - e->cap;
		return -ENOMEM;
	}
	e->buf = np;
	e->cap = n;
	return 0;
}

int pl_cache_fill_add(struct pl_cache_entry *e, const uint8_t *data, uint32_t len, uint64_t offset,
		      unsigned flags)
{
	bool footer = !(flags & PL_CACHE_REC_CHECKED);
	uint64_t need = e->used + len + (footer ? TFR_FOOTER_LEN : 0);
	int r = 0;
	if (need > e->cap || e->n_ix == e->cap_ix) {
		struct pl_cache *c = e->c;
		pthread_mutex_lock(&c->lock);
		if (!e->linked)
			r = -ESTALE; /* its file changed meanwhile */
		if (r == 0 && need > e->cap)
			r = grow_buf(c, e, need);
		if (r == 0 && e->n_ix == e->cap_ix)
			r = grow_ix(c, e, e->n_ix + 1);
		pthread_mutex_unlock(&c->lock);
		if (r < 0)
			return r;
	}
	memcpy(e->buf + e->used, data, (size_t)len + (footer ? TFR_FOOTER_LEN : 0));
	e->ix[e->n_ix++] =
		(struct rec_ix){ .pos = e->used, .offset = offset, .len = len, .flags = flags };
	e->used = need;
	return 0;
}

void pl_cache_fill_end(struct pl_cache_entry *e, bool complete)
{
	struct pl_cache *c = e->c;
	pthread_mutex_lock(&c->lock);
	e->filling = false;
	if (!complete || !e->linked) {
		c->st.fill_aborts++;
		unlink_entry(c, e); /* frees it (an entry already taken off the list too) */
	} else {
		/* give back the pages the records do not use (the index keeps its capacity) */
		uint64_t keep = page_up(e->used ? e->used : 1);
		if (keep < e->cap && mremap(e->buf, e->cap, keep, 0) != MAP_FAILED) {
			c->st.bytes -= e->cap - keep;
			e->charged -= e->cap - keep;
			e->cap = keep;
		}
		e->ready = true;
		e->last_use = ++c->tick;
		c->st.entries++;
		c->st.fills++;
	}
	pthread_mutex_unlock(&c->lock);
}

uint64_t pl_cache_entry_records(const struct pl_cache_entry *e)
{
	return e->n_ix;
}

void pl_cache_entry_record(const struct pl_cache_entry *e, uint64_t i, const uint8_t **ret_data,
			   uint32_t *ret_len, uint64_t *ret_offset, unsigned *ret_flags)
{
	const struct rec_ix *x = &e->ix[i];
	*ret_data = e->buf + x->pos;
	*ret_len = x->len;
	*ret_offset = x->offset;
	*ret_flags = x->flags;
}

const uint8_t *pl_cache_entry_record_base(const struct pl_cache_entry *e)
{
	return e->buf;
}

uint64_t pl_cache_entry_bytes(const struct pl_cache_entry *e)
{
	return e->used;
}

void pl_cache_get_stats(struct pl_cache *c, struct pl_cache_stats *ret)
{
	pthread_mutex_lock(&c->lock);
	*ret = c->st;
	pthread_mutex_unlock(&c->lock);
}
