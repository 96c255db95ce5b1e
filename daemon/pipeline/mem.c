/* SPDX-License-Identifier: Apache-2.0 */
/* Memory accounts (mem.h): one tree of limits, charged per block before it is allocated. */
#include "mem.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int walk(struct pl_mem *m, uint64_t used, uint64_t floor, bool apply,
		struct pl_mem_full *full);

static struct pl_mem *root_of(struct pl_mem *m)
{
	while (m->parent)
		m = m->parent;
	return m;
}

void pl_mem_init(struct pl_mem *m, struct pl_mem *parent, uint64_t limit, const char *what)
{
	memset(m, 0, sizeof(*m));
	m->parent = parent;
	m->limit = limit;
	snprintf(m->what, sizeof(m->what), "%s", what ? what : "memory");
	if (!parent)
		pthread_mutex_init(&m->lock, NULL);
}

uint64_t pl_mem_fini(struct pl_mem *m)
{
	if (!m)
		return 0;
	uint64_t left = 0;
	if (m->parent) {
		struct pl_mem *root = root_of(m);
		pthread_mutex_lock(&root->lock);
		left = m->used;
		walk(m, 0, 0, true, NULL); /* a decrease passes every check */
		pthread_mutex_unlock(&root->lock);
	} else {
		left = m->used;
		pthread_mutex_destroy(&m->lock);
	}
	return left;
}

static uint64_t held_of(uint64_t used, uint64_t floor)
{
	return used > floor ? used : floor;
}

/*
 * m's used and floor become used and floor, and what it holds changes in its parents as far as
 * it changes: checked against every limit on the way (a growth only), then, with apply, done.
 * Under the root's lock.
 */
static int walk(struct pl_mem *m, uint64_t used, uint64_t floor, bool apply,
		struct pl_mem_full *full)
{
	struct pl_mem *child = NULL;
	for (struct pl_mem *n = m; n; child = n, n = n->parent) {
		uint64_t old_h = held_of(n->used, n->floor), new_h = held_of(used, floor);
		if (new_h > old_h && n->limit) {
			uint64_t leave = child ? child->leave : 0;
			if (new_h > n->limit || n->limit - new_h < leave) {
				if (full)
					*full = (struct pl_mem_full){ .at = n,
								      .used = old_h,
								      .limit = n->limit,
								      .ask = new_h - old_h,
								      .leave = leave };
				return -ENOMEM;
			}
		}
		if (apply) {
			n->used = used;
			n->floor = floor;
			if (used > n->peak)
				n->peak = used;
		}
		if (new_h == old_h || !n->parent)
			break;
		struct pl_mem *p = n->parent;
		used = new_h > old_h ? p->used + (new_h - old_h) : p->used - (old_h - new_h);
		floor = p->floor;
	}
	return 0;
}

/* walk() with the root's reclaim once when the root refused (m's lock: root's, held). */
static int walk_reclaim(struct pl_mem *m, struct pl_mem *root, uint64_t used, uint64_t floor,
			struct pl_mem_full *full)
{
	struct pl_mem_full f;
	int r = walk(m, used, floor, false, &f);
	if (r < 0 && f.at == root && root->reclaim && !m->no_reclaim) {
		uint64_t need = f.ask + f.leave - (f.limit > f.used ? f.limit - f.used : 0);
		pthread_mutex_unlock(&root->lock);
		root->reclaim(root->reclaim_ctx, need ? need : f.ask);
		pthread_mutex_lock(&root->lock);
		/* what m holds may have changed meanwhile: from its figures now */
		r = -EAGAIN;
	}
	if (r < 0 && full)
		*full = f;
	return r;
}

int pl_mem_charge(struct pl_mem *m, uint64_t bytes, struct pl_mem_full *ret_full)
{
	if (!m || !bytes)
		return 0;
	struct pl_mem *root = root_of(m);
	pthread_mutex_lock(&root->lock);
	int r = walk_reclaim(m, root, m->used + bytes, m->floor, ret_full);
	if (r == -EAGAIN)
		r = walk(m, m->used + bytes, m->floor, false, ret_full);
	if (r == 0)
		walk(m, m->used + bytes, m->floor, true, NULL);
	pthread_mutex_unlock(&root->lock);
	return r;
}

int pl_mem_take(struct pl_mem *m, uint64_t bytes, const char *fmt, ...)
{
	struct pl_mem_full f;
	int r = pl_mem_charge(m, bytes, &f);
	if (r == 0)
		return 0;
	struct pl_mem *root = root_of(m);
	pthread_mutex_lock(&root->lock);
	if (!m->refused.at) {
		m->refused = f;
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(m->refused_for, sizeof(m->refused_for), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&root->lock);
	return r;
}

bool pl_mem_refusal(struct pl_mem *m, char *buf, size_t cap)
{
	if (!m)
		return false;
	struct pl_mem *root = root_of(m);
	pthread_mutex_lock(&root->lock);
	struct pl_mem_full f = m->refused;
	char what[sizeof(m->refused_for)];
	memcpy(what, m->refused_for, sizeof(what));
	pthread_mutex_unlock(&root->lock);
	if (!f.at)
		return false;
	char fig[256];
	pl_mem_full_text(&f, fig, sizeof(fig));
	snprintf(buf, cap, "%s: %s", what, fig);
	return true;
}

void pl_mem_set_limit(struct pl_mem *m, uint64_t limit, uint64_t leave)
{
	struct pl_mem *root = root_of(m);
	pthread_mutex_lock(&root->lock);
	m->limit = limit;
	m->leave = leave;
	pthread_mutex_unlock(&root->lock);
}

void pl_mem_uncharge(struct pl_mem *m, uint64_t bytes)
{
	if (!m || !bytes)
		return;
	struct pl_mem *root = root_of(m);
	pthread_mutex_lock(&root->lock);
	assert(m->used >= bytes);
	walk(m, m->used - bytes, m->floor, true, NULL); /* a decrease passes every check */
	pthread_mutex_unlock(&root->lock);
}

int pl_mem_set_floor(struct pl_mem *m, uint64_t floor, struct pl_mem_full *ret_full)
{
	struct pl_mem *root = root_of(m);
	pthread_mutex_lock(&root->lock);
	int r = 0;
	if (floor > m->floor) {
		r = walk_reclaim(m, root, m->used, floor, ret_full);
		if (r == -EAGAIN)
			r = walk(m, m->used, floor, false, ret_full);
	}
	if (r == 0)
		walk(m, m->used, floor, true, NULL);
	pthread_mutex_unlock(&root->lock);
	return r;
}

/* One of m's figures, read under the tree's lock. */
static uint64_t read_locked(struct pl_mem *m, const uint64_t *field)
{
	struct pl_mem *root = root_of(m);
	pthread_mutex_lock(&root->lock);
	uint64_t v = field ? *field : held_of(m->used, m->floor);
	pthread_mutex_unlock(&root->lock);
	return v;
}

uint64_t pl_mem_held(struct pl_mem *m)
{
	return read_locked(m, NULL);
}

uint64_t pl_mem_floor(struct pl_mem *m)
{
	return read_locked(m, &m->floor);
}

uint64_t pl_mem_used(struct pl_mem *m)
{
	return read_locked(m, &m->used);
}

uint64_t pl_mem_peak(struct pl_mem *m)
{
	return read_locked(m, &m->peak);
}

uint64_t pl_mem_room(struct pl_mem *m)
{
	struct pl_mem *root = root_of(m);
	pthread_mutex_lock(&root->lock);
	uint64_t room = UINT64_MAX;
	/* m itself: its floor's unused part is room already held */
	uint64_t spare = m->floor > m->used ? m->floor - m->used : 0;
	struct pl_mem *child = NULL;
	for (struct pl_mem *n = m; n; child = n, n = n->parent) {
		if (!n->limit)
			continue;
		uint64_t h = held_of(n->used, n->floor), leave = child ? child->leave : 0;
		uint64_t free_ = n->limit > h + leave ? n->limit - h - leave : 0;
		if (n != m)
			free_ += spare; /* m's floor is held there already */
		if (free_ < room)
			room = free_;
	}
	pthread_mutex_unlock(&root->lock);
	return room;
}

void pl_mem_full_text(const struct pl_mem_full *f, char *buf, size_t cap)
{
	if (!f->at) {
		snprintf(buf, cap, "out of memory");
		return;
	}
	if (f->leave)
		snprintf(buf, cap,
			 "%llu bytes more would pass %s (%llu of %llu bytes in use, %llu of them "
			 "kept for root and the config dir)",
			 (unsigned long long)f->ask, f->at->what, (unsigned long long)f->used,
			 (unsigned long long)f->limit, (unsigned long long)f->leave);
	else
		snprintf(buf, cap, "%llu bytes more would pass %s (%llu of %llu bytes in use)",
			 (unsigned long long)f->ask, f->at->what, (unsigned long long)f->used,
			 (unsigned long long)f->limit);
}
