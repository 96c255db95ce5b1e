/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced's own record index: a locked hash table, and a thread that keeps it on disk. */
#include "index_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "io/ioerr.h"

#define MAX_ENTRIES (1u << 20) /* files remembered at most (new ones are not, beyond) */
/*
 * The writer rewrites a directory's index at most once a second (and once more at the end):
 * a directory of many small files framed quickly is rewritten (and fsync'ed) a few times an
 * epoch, not once per file.
 */
#define WRITE_PACE_S 1

/* A data directory: its index file's name and whether the file lags behind the table. */
struct own_dir {
	struct own_dir *next;
	char *dir;
	char *file; /* STATE/index/<hash>.sluice-index, or NULL (no state directory) */
	bool dirty;
};

struct own_ent {
	struct own_ent *next; /* in its bucket */
	uint64_t h;
	struct own_dir *d;
	struct tfr_index_entry *e; /* owned; e->name the basename */
};

/*
 * The process's store. lock guards everything below it; the writer thread takes copies of a
 * directory's entries under it and writes them without it.
 */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	clockid_t clock; /* cond's, for the writer's paced waits */
	bool on, stop, dirty, writer;
	char *index_dir; /* STATE/index, or NULL */
	struct own_ent **b;
	size_t nb, n;
	struct own_dir *dirs;
	pthread_t thread;
} S = { .lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
	.clock = CLOCK_REALTIME };

static uint64_t fnv(uint64_t h, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
	return h;
}

#define FNV0 0xcbf29ce484222325ull

static uint64_t key_hash(const char *dir, size_t dl, const char *name)
{
	return fnv(fnv(FNV0, dir, dl) ^ 0xff, name, strlen(name));
}

/* Split path into its directory (length *ret_dl) and basename. */
static const char *split(const char *path, size_t *ret_dl)
{
	const char *slash = strrchr(path, '/');
	*ret_dl = slash ? (size_t)(slash - path) : 0;
	return slash ? slash + 1 : path;
}

static struct tfr_index_entry *entry_copy(const struct tfr_index_entry *e)
{
	struct tfr_index_entry *c = malloc(sizeof(*c));
	if (!c)
		return NULL;
	*c = *e;
	c->name = strdup(e->name);
	c->offsets = e->n_offsets ? malloc(e->n_offsets * sizeof(uint64_t)) : NULL;
	if (!c->name || (e->n_offsets && !c->offsets)) {
		free(c->name);
		free(c->offsets);
		free(c);
		return NULL;
	}
	if (e->n_offsets)
		memcpy(c->offsets, e->offsets, e->n_offsets * sizeof(uint64_t));
	return c;
}

/* Under the lock. The entry of dir/name, or NULL. */
static struct own_ent *find(const char *dir, size_t dl, const char *name, uint64_t h)
{
	if (!S.nb)
		return NULL;
	for (struct own_ent *x = S.b[h & (S.nb - 1)]; x; x = x->next)
		if (x->h == h && strcmp(x->e->name, name) == 0 && strlen(x->d->dir) == dl &&
		    memcmp(x->d->dir, dir, dl) == 0)
			return x;
	return NULL;
}

/* Under the lock. The directory's record (made on first use), or NULL (out of memory). */
static struct own_dir *dir_of(const char *dir, size_t dl)
{
	for (struct own_dir *d = S.dirs; d; d = d->next)
		if (strlen(d->dir) == dl && memcmp(d->dir, dir, dl) == 0)
			return d;
	struct own_dir *d = calloc(1, sizeof(*d));
	if (!d || !(d->dir = strndup(dir, dl)))
		goto fail;
	if (S.index_dir) {
		size_t n = strlen(S.index_dir) + 40;
		d->file = malloc(n);
		if (!d->file)
			goto fail;
		snprintf(d->file, n, "%s/%016llx%s", S.index_dir,
			 (unsigned long long)fnv(FNV0, dir, dl), TFR_INDEX_NAME);
	}
	d->next = S.dirs;
	S.dirs = d;
	return d;
fail:
	if (d)
		free(d->dir);
	free(d);
	return NULL;
}

static int grow(void)
{
	size_t nb = S.nb ? S.nb * 2 : 256;
	struct own_ent **b = calloc(nb, sizeof(*b));
	if (!b)
		return -ENOMEM;
	for (size_t i = 0; i < S.nb; i++)
		for (struct own_ent *x = S.b[i], *nx; x; x = nx) {
			nx = x->next;
			x->next = b[x->h & (nb - 1)];
			b[x->h & (nb - 1)] = x;
		}
	free(S.b);
	S.b = b;
	S.nb = nb;
	return 0;
}

/* Under the lock: e (taken) becomes the entry of dir/e->name. False: e was freed instead. */
static bool insert(const char *dir, size_t dl, struct tfr_index_entry *e)
{
	uint64_t h = key_hash(dir, dl, e->name);
	struct own_ent *x = find(dir, dl, e->name, h);
	if (x) {
		tfr_index_entry_destroy(x->e);
		x->e = e;
		return true;
	}
	struct own_dir *d = NULL;
	if (S.n >= MAX_ENTRIES || (S.n >= S.nb && grow() < 0) || !(d = dir_of(dir, dl)) ||
	    !(x = malloc(sizeof(*x)))) {
		tfr_index_entry_destroy(e);
		return false;
	}
	x->h = h;
	x->d = d;
	x->e = e;
	x->next = S.b[h & (S.nb - 1)];
	S.b[h & (S.nb - 1)] = x;
	S.n++;
	return true;
}

/* The writer: each directory whose entries changed, rewritten (temp + rename) off the lock. */
static void *writer(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&S.lock);
	for (;;) {
		while (!S.dirty && !S.stop)
			pthread_cond_wait(&S.cond, &S.lock);
		if (!S.dirty)
			break; /* stopped, everything written */
		S.dirty = false;
		for (struct own_dir *d = S.dirs; d; d = d->next) {
			if (!d->dirty || !d->file)
				continue;
			d->dirty = false;
			size_t n = 0, cap = 16;
			struct tfr_index_entry **v = malloc(cap * sizeof(*v));
			for (size_t i = 0; v && i < S.nb; i++)
				for (struct own_ent *x = S.b[i]; v && x; x = x->next) {
					if (x->d != d)
						continue;
					if (n == cap) {
						void *nv = realloc(v, 2 * cap * sizeof(*v));
						if (!nv)
							break;
						v = nv;
						cap *= 2;
					}
					if ((v[n] = entry_copy(x->e)) != NULL)
						n++;
				}
			pthread_mutex_unlock(&S.lock);
			/* d and its strings live until fini, which joins this thread first */
			struct io_error err;
			err.msg[0] = 0;
			if (v && n)
				(void)tfr_index_update(d->file, d->dir,
						       (const struct tfr_index_entry *const *)v, n,
						       NULL, &err); /* a failure: kept in memory */
			for (size_t i = 0; i < n; i++)
				tfr_index_entry_destroy(v[i]);
			free(v);
			pthread_mutex_lock(&S.lock);
		}
		/* pace: entries that come meanwhile go in the next write (at once when stopping) */
		struct timespec until;
		clock_gettime(S.clock, &until);
		until.tv_sec += WRITE_PACE_S;
		while (!S.stop && pthread_cond_timedwait(&S.cond, &S.lock, &until) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&S.lock);
	return NULL;
}

/*
 * Whether an entry read back is worth keeping: not when its data file is gone or changed
 * since (stat with sluiced's own rights: it only tells what to drop; an entry is used only
 * against fstat of the file opened with the requester's rights, pl_own_index_records).
 */
static bool still_there(const char *dir, const struct tfr_index_entry *e)
{
	char path[4096];
	struct stat st;
	if (snprintf(path, sizeof(path), "%s/%s", dir, e->name) >= (int)sizeof(path))
		return false;
	if (stat(path, &st) < 0)
		return errno != ENOENT && errno != ENOTDIR; /* EACCES: kept, its user may read it */
	struct io_error err;
	err.msg[0] = 0;
	return tfr_index_entry_check(e, &st, &err) == 0;
}

/* Read back every index file of STATE/index (entries stale by now are never used). */
static void load(void)
{
	DIR *dp = opendir(S.index_dir);
	if (!dp)
		return;
	struct dirent *de;
	size_t sl = strlen(TFR_INDEX_NAME);
	while ((de = readdir(dp)) != NULL) {
		size_t nl = strlen(de->d_name);
		if (strstr(de->d_name, TFR_INDEX_NAME ".tmp.")) { /* tfr_index_write's, cut short */
			unlinkat(dirfd(dp), de->d_name, 0);
			continue;
		}
		if (nl <= sl || strcmp(de->d_name + nl - sl, TFR_INDEX_NAME) != 0)
			continue;
		char path[4096];
		if (snprintf(path, sizeof(path), "%s/%s", S.index_dir, de->d_name) >=
		    (int)sizeof(path))
			continue;
		struct tfr_index *ix = NULL;
		struct io_error err;
		err.msg[0] = 0;
		if (tfr_index_open(path, &ix, &err) < 0)
			continue; /* damaged: rewritten when its directory's files are read again */
		const char *dir = tfr_index_data_dir(ix);
		char want[32];
		snprintf(want, sizeof(want), "%016llx%s",
			 (unsigned long long)fnv(FNV0, dir, strlen(dir)), TFR_INDEX_NAME);
		if (dir[0] != '/' || strcmp(de->d_name, want) != 0) {
			tfr_index_destroy(ix); /* not the index of the directory its header names */
			continue;
		}
		for (size_t i = 0; i < tfr_index_count(ix); i++) {
			const char *name;
			const struct tfr_index_entry *e;
			if (tfr_index_entry_at(ix, i, &name, &e, &err) < 0 || !still_there(dir, e))
				continue;
			struct tfr_index_entry *c = entry_copy(e);
			if (c)
				insert(dir, strlen(dir), c);
		}
		tfr_index_destroy(ix);
	}
	closedir(dp);
}

int pl_own_index_init(const char *state_dir)
{
	pthread_mutex_lock(&S.lock);
	int r = 0;
	if (S.on)
		goto out;
	if (state_dir && *state_dir) {
		size_t n = strlen(state_dir) + sizeof("/index");
		S.index_dir = malloc(n);
		if (!S.index_dir) {
			r = -ENOMEM;
			goto out;
		}
		snprintf(S.index_dir, n, "%s/index", state_dir);
		if (mkdir(S.index_dir, 0700) < 0 && errno != EEXIST) {
			r = -errno; /* memory only */
			free(S.index_dir);
			S.index_dir = NULL;
		}
	}
	if (S.index_dir) {
		load();
		S.stop = false;
		/* the writer's paced waits on the monotonic clock (no waiter yet: re-made here) */
		pthread_condattr_t ca;
		if (pthread_condattr_init(&ca) == 0) {
			if (pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0) {
				pthread_cond_destroy(&S.cond);
				if (pthread_cond_init(&S.cond, &ca) == 0) {
					S.clock = CLOCK_MONOTONIC;
				} else { /* not on Linux; kept usable if it did */
					pthread_cond_init(&S.cond, NULL);
					S.clock = CLOCK_REALTIME;
				}
			}
			pthread_condattr_destroy(&ca);
		}
		if (pthread_create(&S.thread, NULL, writer, NULL) == 0)
			S.writer = true;
	}
	S.on = true;
out:
	pthread_mutex_unlock(&S.lock);
	return r;
}

void pl_own_index_fini(void)
{
	pthread_mutex_lock(&S.lock);
	bool joined = S.writer;
	S.stop = true;
	pthread_cond_broadcast(&S.cond);
	pthread_mutex_unlock(&S.lock);
	if (joined)
		pthread_join(S.thread, NULL); /* it writes what is left first */
	pthread_mutex_lock(&S.lock);
	S.writer = false;
	S.on = false;
	for (size_t i = 0; i < S.nb; i++)
		for (struct own_ent *x = S.b[i], *nx; x; x = nx) {
			nx = x->next;
			tfr_index_entry_destroy(x->e);
			free(x);
		}
	free(S.b);
	S.b = NULL;
	S.nb = S.n = 0;
	for (struct own_dir *d = S.dirs, *nd; d; d = nd) {
		nd = d->next;
		free(d->dir);
		free(d->file);
		free(d);
	}
	S.dirs = NULL;
	free(S.index_dir);
	S.index_dir = NULL;
	pthread_mutex_unlock(&S.lock);
}

bool pl_own_index_on(void)
{
	pthread_mutex_lock(&S.lock);
	bool on = S.on;
	pthread_mutex_unlock(&S.lock);
	return on;
}

int pl_own_index_records(const char *path, const struct stat *st, enum tfr_compression compression,
			 uint64_t *ret_records)
{
	size_t dl;
	const char *name = split(path, &dl);
	int r = -ENOENT;
	pthread_mutex_lock(&S.lock);
	struct own_ent *x = S.on ? find(path, dl, name, key_hash(path, dl, name)) : NULL;
	if (x) {
		struct io_error err;
		err.msg[0] = 0;
		r = x->e->compression == compression ? tfr_index_entry_check(x->e, st, &err)
						     : -ESTALE;
		if (r == 0)
			*ret_records = x->e->records;
	}
	pthread_mutex_unlock(&S.lock);
	return r;
}

/* ---- a framer's collection ---- */

static int stat_path(const struct io_creds *creds, const char *path, struct stat *ret)
{
	int fd = io_creds_open(creds, path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return fd;
	int r = fstat(fd, ret) < 0 ? -errno : 0;
	close(fd);
	return r;
}

static int64_t ns(const struct timespec *t)
{
	return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

void pl_own_collect_begin(struct pl_own_collect *c, const struct io_creds *creds, const char *path,
			  enum tfr_compression compression)
{
	c->on = false;
	if (!pl_own_index_on() || stat_path(creds, path, &c->st) < 0 || !S_ISREG(c->st.st_mode))
		return;
	uint64_t have;
	if (pl_own_index_records(path, &c->st, compression, &have) == 0)
		return; /* known already */
	if (!c->offs && !(c->offs = malloc(PL_OWN_INDEX_OFFSETS * sizeof(uint64_t))))
		return;
	c->next = 0;
	c->payload = 0;
	c->mask = 0;
	c->n = 0;
	c->on = true;
}

void pl_own_collect_keep_(struct pl_own_collect *c, uint64_t offset)
{
	if (c->n == PL_OWN_INDEX_OFFSETS) { /* every other one goes: the stride doubles */
		for (uint64_t i = 0; i < c->n / 2; i++)
			c->offs[i] = c->offs[2 * i];
		c->n /= 2;
		c->mask = 2 * c->mask + 1;
		if ((c->next - 1) & c->mask)
			return; /* this record is not one of the new stride's */
	}
	c->offs[c->n++] = offset;
}

void pl_own_collect_end(struct pl_own_collect *c, const struct io_creds *creds, const char *path,
			enum tfr_compression compression)
{
	if (!c->on)
		return;
	c->on = false;
	struct stat now;
	if (stat_path(creds, path, &now) < 0 || now.st_dev != c->st.st_dev ||
	    now.st_ino != c->st.st_ino || now.st_size != c->st.st_size ||
	    ns(&now.st_mtim) != ns(&c->st.st_mtim) || ns(&now.st_ctim) != ns(&c->st.st_ctim))
		return; /* it changed while it was read */
	uint64_t stream = 16 * c->next + c->payload;
	if (compression == TFR_COMPRESSION_NONE && stream != (uint64_t)c->st.st_size)
		return; /* trailing bytes the reader let pass: not an entry the format takes */
	size_t dl;
	const char *name = split(path, &dl);
	struct tfr_index_entry *e = calloc(1, sizeof(*e));
	if (!e)
		return;
	e->name = strdup(name);
	e->offsets = c->n ? malloc(c->n * sizeof(uint64_t)) : NULL;
	if (!e->name || (c->n && !e->offsets)) {
		tfr_index_entry_destroy(e);
		return;
	}
	if (c->n)
		memcpy(e->offsets, c->offs, c->n * sizeof(uint64_t));
	e->size = (uint64_t)c->st.st_size;
	e->mtime_ns = ns(&c->st.st_mtim);
	e->ctime_ns = ns(&c->st.st_ctim);
	e->ino = (uint64_t)c->st.st_ino;
	e->compression = compression;
	e->records = c->next;
	e->payload_bytes = c->payload;
	e->stream_bytes = stream;
	e->stride = c->mask + 1;
	e->n_offsets = c->n;
	pthread_mutex_lock(&S.lock);
	if (S.on && insert(path, dl, e)) {
		struct own_ent *x = find(path, dl, name, key_hash(path, dl, name));
		if (x && x->d->file) {
			x->d->dirty = true;
			S.dirty = true;
			pthread_cond_signal(&S.cond);
		}
	} else if (!S.on) {
		tfr_index_entry_destroy(e);
	}
	pthread_mutex_unlock(&S.lock);
}

void pl_own_collect_fini(struct pl_own_collect *c)
{
	free(c->offs);
	c->offs = NULL;
	c->on = false;
}
