/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced's state directory: each pipeline's position, kept across restarts (DECISIONS.md). */
#include "keep.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "log.h"
#include "mac.h"

/*
 * One file per pipeline: RUN-FP-NAMEHASH.pos, JSON (keep_to_json below). Written by the
 * pipeline's driver thread (under the pipeline's lock) as it publishes, and by the server
 * thread when a group joins; read once, at start. This run's files are removed with their
 * pipeline when it is dropped (not when sluiced stops: a restart wants them); earlier runs'
 * stay until DMN_KEEP_MAX_AGE_S, as readers may come back to them one by one.
 */

static uint64_t name_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return h;
}

static void file_name(const struct dmn_keep *k, uint64_t run, const uint8_t fp[16],
		      const char *name, const char *sfx, char *buf, size_t cap)
{
	uint64_t a, b;
	memcpy(&a, fp, 8);
	memcpy(&b, fp + 8, 8);
	snprintf(buf, cap, "%s/%016" PRIx64 "-%016" PRIx64 "%016" PRIx64 "-%016" PRIx64 "%s",
		 k->dir, run, a, b, name_hash(name), sfx);
}

static void hex(const uint8_t *p, size_t n, char *out)
{
	static const char d[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = d[p[i] >> 4];
		out[2 * i + 1] = d[p[i] & 15];
	}
	out[2 * n] = '\0';
}

/* Hex text s into exactly n bytes (or, with n == SIZE_MAX, up to cap): the byte count or -1. */
static int unhex(const char *s, uint8_t *out, size_t cap)
{
	size_t len = s ? strlen(s) : 0;
	if (len % 2 || len / 2 > cap)
		return -1;
	for (size_t i = 0; i < len / 2; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -1;
		out[i] = (uint8_t)v;
	}
	return (int)(len / 2);
}

static json_t *jhex(const uint8_t *p, size_t n)
{
	char buf[2 * PL_STATE_MAX + 1];
	hex(p, n, buf);
	return json_string(buf);
}

uint64_t dmn_keep_group_hash(const char *group)
{
	return name_hash(group);
}

static json_t *keep_to_json(const struct dmn_kept *r)
{
	char run[17], fp[33];
	snprintf(run, sizeof(run), "%016" PRIx64, r->run);
	hex(r->fp, 16, fp);
	json_t *groups = json_array();
	for (unsigned i = 0; i < r->n_group; i++) {
		char h[17];
		snprintf(h, sizeof(h), "%016" PRIx64, r->group[i]);
		json_array_append_new(groups, json_pack("{s:s, s:I}", "name", h, "bound",
							(json_int_t)r->group_bound[i]));
	}
	json_t *ranks = json_array();
	for (unsigned i = 0; i < r->n_rank; i++)
		json_array_append_new(
			ranks, json_pack("{s:I, s:o, s:I}", "n", (json_int_t)r->rank[i].n, "state",
					 jhex(r->rank[i].state, (size_t)r->rank[i].len), "seq",
					 (json_int_t)r->rank[i].seq));
	return json_pack("{s:i, s:s, s:s, s:s, s:I, s:s, s:o, s:b, s:o, s:I, s:o, s:I, s:I, s:o, "
			 "s:o}",
			 "version", 1, "run", run, "fingerprint", fp, "name", r->name, "owner",
			 (json_int_t)(r->owner == (uid_t)-1 ? -1 : (json_int_t)r->owner), "spec",
			 r->spec_json, "spec_dir",
			 r->spec_dir ? json_string(r->spec_dir) : json_null(), "sloppy", r->sloppy,
			 "low", jhex(r->low, (size_t)r->low_len), "low_seq", (json_int_t)r->low_seq,
			 "epoch_start", jhex(r->epoch_start, (size_t)r->epoch_start_len), "bound",
			 (json_int_t)r->bound, "bound_epochs", (json_int_t)r->bound_epochs, "rank",
			 ranks, "groups", groups);
}

/* A file's JSON into *r (its strings allocated), or -EBADMSG. */
static int keep_from_json(json_t *j, struct dmn_kept *r)
{
	const char *run = NULL, *fp = NULL, *name = NULL, *spec = NULL, *low = NULL, *es = NULL;
	json_t *dir = NULL, *ranks = NULL, *groups = NULL;
	json_int_t version = 0, owner = 0, low_seq = 0, bound = 0, bound_epochs = 0;
	int sloppy = 0;
	memset(r, 0, sizeof(*r));
	if (json_unpack(j,
			"{s:I, s:s, s:s, s:s, s:I, s:s, s:o, s:b, s:s, s:I, s:s, s:I, s:I, s:o, "
			"s?o}",
			"version", &version, "run", &run, "fingerprint", &fp, "name", &name,
			"owner", &owner, "spec", &spec, "spec_dir", &dir, "sloppy", &sloppy, "low",
			&low, "low_seq", &low_seq, "epoch_start", &es, "bound", &bound,
			"bound_epochs", &bound_epochs, "rank", &ranks, "groups", &groups) != 0 ||
	    (groups && !json_is_array(groups)) || version != 1 || strlen(run) != 16 ||
	    strlen(name) > IPC_CTL_NAME_MAX || !json_is_array(ranks) ||
	    (!json_is_null(dir) && !json_is_string(dir)) || low_seq < 0 || bound < 0 ||
	    bound_epochs < 0)
		return -EBADMSG;
	uint8_t rb[8];
	if (unhex(run, rb, 8) != 8 || unhex(fp, r->fp, 16) != 16)
		return -EBADMSG;
	r->run = 0;
	for (int i = 0; i < 8; i++)
		r->run = r->run << 8 | rb[i];
	snprintf(r->name, sizeof(r->name), "%s", name);
	r->owner = owner < 0 ? (uid_t)-1 : (uid_t)owner;
	r->sloppy = sloppy;
	r->low_len = unhex(low, r->low, sizeof(r->low));
	r->epoch_start_len = unhex(es, r->epoch_start, sizeof(r->epoch_start));
	r->low_seq = (uint64_t)low_seq;
	r->bound = (uint64_t)bound;
	r->bound_epochs = (uint64_t)bound_epochs;
	if (r->low_len < 0 || r->epoch_start_len < 0)
		return -EBADMSG;
	size_t i;
	json_t *e;
	json_array_foreach (ranks, i, e) {
		json_int_t n = 0, seq = 0;
		const char *st = NULL;
		if (r->n_rank == DMN_KEEP_RANKS ||
		    json_unpack(e, "{s:I, s:s, s:I}", "n", &n, "state", &st, "seq", &seq) != 0 ||
		    n < 1 || n > 64 || seq < 0)
			return -EBADMSG;
		struct dmn_kept_rank *k = &r->rank[r->n_rank++];
		k->n = (uint32_t)n;
		k->seq = (uint64_t)seq;
		k->len = unhex(st, k->state, sizeof(k->state));
		if (k->len < 0)
			return -EBADMSG;
	}
	json_array_foreach (groups, i, e) { /* absent in a file of an older sluiced */
		const char *h = NULL;
		json_int_t gb = 0;
		uint8_t b[8];
		if (r->n_group == DMN_KEEP_GROUPS ||
		    json_unpack(e, "{s:s, s:I}", "name", &h, "bound", &gb) != 0 ||
		    unhex(h, b, 8) != 8 || gb < 0)
			return -EBADMSG;
		uint64_t v = 0;
		for (int k = 0; k < 8; k++)
			v = v << 8 | b[k];
		r->group[r->n_group] = v;
		r->group_bound[r->n_group++] = (uint64_t)gb;
	}
	r->spec_json = strdup(spec);
	r->spec_dir = json_is_string(dir) ? strdup(json_string_value(dir)) : NULL;
	if (!r->spec_json || (json_is_string(dir) && !r->spec_dir)) {
		dmn_kept_fini(r);
		return -ENOMEM;
	}
	return 0;
}

void dmn_kept_fini(struct dmn_kept *rec)
{
	if (!rec)
		return;
	free(rec->spec_json);
	free(rec->spec_dir);
	rec->spec_json = rec->spec_dir = NULL;
}

/* A deep copy of src into *dst, or -ENOMEM. */
static int kept_copy(struct dmn_kept *dst, const struct dmn_kept *src)
{
	*dst = *src;
	dst->next = NULL;
	dst->spec_json = src->spec_json ? strdup(src->spec_json) : NULL;
	dst->spec_dir = src->spec_dir ? strdup(src->spec_dir) : NULL;
	if ((src->spec_json && !dst->spec_json) || (src->spec_dir && !dst->spec_dir)) {
		dmn_kept_fini(dst);
		return -ENOMEM;
	}
	return 0;
}

static struct dmn_kept **find_locked(struct dmn_keep *k, uint64_t run, const uint8_t fp[16],
				     const char *name)
{
	struct dmn_kept **pp = &k->list;
	for (; *pp; pp = &(*pp)->next)
		if ((*pp)->run == run && memcmp((*pp)->fp, fp, 16) == 0 &&
		    strcmp((*pp)->name, name) == 0)
			return pp;
	return pp;
}

#define MAC_TAG	      "hmac-sha256 "
#define KEEP_FILE_MAX (1u << 20)

/* The record text's MAC line ("hmac-sha256 HEX\n") under k's key into out (cap >= 80). */
static void mac_line(const struct dmn_keep *k, const char *text, size_t len, char *out)
{
	uint8_t mac[DMN_SHA256_LEN];
	dmn_hmac_sha256(k->key, sizeof(k->key), text, len, mac);
	memcpy(out, MAC_TAG, sizeof(MAC_TAG) - 1);
	char *h = out + sizeof(MAC_TAG) - 1;
	hex(mac, sizeof(mac), h);
	h[2 * DMN_SHA256_LEN] = '\n';
	h[2 * DMN_SHA256_LEN + 1] = '\0';
}

/*
 * Whether buf (a record file: its JSON, a newline, its MAC line) carries this directory's MAC;
 * *ret_len is the JSON's length.
 */
static bool mac_ok(const struct dmn_keep *k, const char *buf, size_t len, size_t *ret_len)
{
	char want[128];
	const size_t line = sizeof(MAC_TAG) - 1 + 2 * DMN_SHA256_LEN + 1;
	if (len < line + 1 || buf[len - line - 1] != '\n')
		return false;
	size_t jl = len - line - 1;
	mac_line(k, buf, jl, want);
	*ret_len = jl;
	return dmn_mac_equal((const uint8_t *)want, (const uint8_t *)buf + jl + 1, line);
}

static void load_one(struct dmn_keep *k, int dfd, const char *fname, time_t now)
{
	struct stat st;
	int fd = openat(dfd, fname, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)(now - st.st_mtime) > DMN_KEEP_MAX_AGE_S) {
		if (fd >= 0)
			close(fd);
		unlinkat(dfd, fname, 0);
		return;
	}
	if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
		dmn_warn("state dir %s: %s: ignored and removed: owned by uid %u with mode %04o, "
			 "not sluiced's (uid %u) and writable by it alone",
			 k->dir, fname, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
			 (unsigned)geteuid());
		close(fd);
		unlinkat(dfd, fname, 0);
		return;
	}
	char *buf =
		st.st_size > 0 && st.st_size <= KEEP_FILE_MAX ? malloc((size_t)st.st_size) : NULL;
	ssize_t got = buf ? read(fd, buf, (size_t)st.st_size) : -1;
	close(fd);
	size_t jl = 0;
	if (got != st.st_size || !mac_ok(k, buf, (size_t)got, &jl)) {
		dmn_warn("state dir %s: %s: ignored and removed: %s", k->dir, fname,
			 got != st.st_size ? "cannot be read whole"
					   : "its MAC does not check (not written by a sluiced "
					     "of this state directory, or edited since)");
		free(buf);
		unlinkat(dfd, fname, 0);
		return;
	}
	json_error_t je;
	json_t *j = json_loadb(buf, jl, 0, &je);
	free(buf);
	struct dmn_kept *r = calloc(1, sizeof(*r));
	int rc = !r ? -ENOMEM : !j ? -EBADMSG : keep_from_json(j, r);
	json_decref(j);
	if (rc < 0) {
		dmn_log("state dir %s: %s: %s: removed", k->dir, fname,
			rc == -EBADMSG ? "not a position this sluiced wrote" : strerror(-rc));
		unlinkat(dfd, fname, 0);
		free(r);
		return;
	}
	r->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	r->next = k->list;
	k->list = r;
}

/*
 * Whether path and each directory above it are sluiced's user's or root's and writable by no
 * one else (a sticky directory, /tmp, excepted: nobody can rename what is in it): else why,
 * into why.
 */
static bool dir_safe(const char *path, char *why, size_t cap)
{
	char p[4096];
	if (!realpath(path, p)) {
		snprintf(why, cap, "%s", strerror(errno));
		return false;
	}
	for (bool first = true;; first = false) {
		struct stat st;
		if (lstat(p, &st) < 0) {
			snprintf(why, cap, "%.400s: %s", p, strerror(errno));
			return false;
		}
		bool owner_ok = st.st_uid == geteuid() || st.st_uid == 0;
		bool others_w = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
		if (!owner_ok || (others_w && (first || !(st.st_mode & S_ISVTX)))) {
			snprintf(why, cap,
				 "%.300s is owned by uid %u with mode %04o: another user could "
				 "write "
				 "there and plant positions that grant rights (it must be "
				 "sluiced's "
				 "uid %u's or root's, writable by no one else)",
				 p, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
				 (unsigned)geteuid());
			return false;
		}
		char *slash = strrchr(p, '/');
		if (!slash || p[1] == '\0')
			return true;
		if (slash == p)
			slash[1] = '\0'; /* "/" */
		else
			*slash = '\0';
	}
}

/* STATE/key: read, or made (32 random bytes, 0600) when there is none. 0, or -errno and why. */
static int load_key(struct dmn_keep *k, int dfd, char *why, size_t cap)
{
	int fd = openat(dfd, "key", O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0 && errno == ENOENT) {
		uint8_t key[sizeof(k->key)];
		if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key)) {
			snprintf(why, cap, "getrandom: %s", strerror(errno));
			return -EIO;
		}
		fd = openat(dfd, "key.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
			    0600);
		bool ok = fd >= 0 && write(fd, key, sizeof(key)) == (ssize_t)sizeof(key);
		if (fd >= 0)
			ok = close(fd) == 0 && ok;
		/* linkat, not rename: of two sluiced starting at once, the first key stays */
		if (ok && linkat(dfd, "key.tmp", dfd, "key", 0) < 0 && errno != EEXIST)
			ok = false;
		unlinkat(dfd, "key.tmp", 0);
		if (!ok) {
			snprintf(why, cap, "key: cannot write it: %s", strerror(errno));
			return -EIO;
		}
		fd = openat(dfd, "key", O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	}
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		snprintf(why, cap, "key: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -EIO;
	}
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) ||
	    st.st_size != (off_t)sizeof(k->key) ||
	    read(fd, k->key, sizeof(k->key)) != (ssize_t)sizeof(k->key)) {
		snprintf(why, cap,
			 "key: not a file of %zu bytes that sluiced's uid %u alone may read "
			 "(uid %u, mode %04o, %lld bytes)",
			 sizeof(k->key), (unsigned)geteuid(), (unsigned)st.st_uid,
			 (unsigned)(st.st_mode & 07777), (long long)st.st_size);
		close(fd);
		return -EPERM;
	}
	close(fd);
	return 0;
}

/* By pipeline (fingerprint, name), newest first. */
static int by_pipeline_newest(const void *a, const void *b)
{
	const struct dmn_kept *x = *(const struct dmn_kept *const *)a;
	const struct dmn_kept *y = *(const struct dmn_kept *const *)b;
	int c = memcmp(x->fp, y->fp, 16);
	if (!c)
		c = strcmp(x->name, y->name);
	if (!c)
		c = x->mtime_ns < y->mtime_ns ? 1 : x->mtime_ns > y->mtime_ns ? -1 : 0;
	return c;
}

/*
 * Keep the newest DMN_KEEP_PER_NAME records of each pipeline, remove the others and their
 * files: a daemon that restarts in a loop leaves one file per config-dir pipeline each time.
 */
static void keep_newest(struct dmn_keep *k)
{
	size_t n = 0, i = 0, run = 0;
	for (struct dmn_kept *r = k->list; r; r = r->next)
		n++;
	struct dmn_kept **v = n ? malloc(n * sizeof(*v)) : NULL;
	if (!v)
		return;
	for (struct dmn_kept *r = k->list; r; r = r->next)
		v[i++] = r;
	qsort(v, n, sizeof(*v), by_pipeline_newest);
	k->list = NULL;
	for (i = 0; i < n; i++) {
		bool same = i && memcmp(v[i]->fp, v[i - 1]->fp, 16) == 0 &&
			    strcmp(v[i]->name, v[i - 1]->name) == 0;
		run = same ? run + 1 : 0;
		if (run < DMN_KEEP_PER_NAME) {
			v[i]->next = k->list;
			k->list = v[i];
			continue;
		}
		char path[4200];
		file_name(k, v[i]->run, v[i]->fp, v[i]->name, ".pos", path, sizeof(path));
		unlink(path);
		dmn_kept_fini(v[i]);
		free(v[i]);
	}
	free(v);
}

void dmn_keep_init(struct dmn_keep *k, const char *dir)
{
	memset(k, 0, sizeof(*k));
	pthread_mutex_init(&k->lock, NULL);
	if (getrandom(&k->run, sizeof(k->run), 0) != (ssize_t)sizeof(k->run))
		k->run = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
	if (!dir || !*dir) {
		dmn_log("no state directory (--state-dir, $STATE_DIRECTORY): after a restart, "
			"readers cannot resume where they were (they get ESTALE)");
		return;
	}
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		dmn_log("state directory %s: %s: readers cannot resume after a restart", dir,
			strerror(errno));
		return;
	}
	char why[600];
	if (!dir_safe(dir, why, sizeof(why))) {
		dmn_err("state directory %s: not used: %s: readers cannot resume after a restart",
			dir, why);
		return;
	}
	DIR *dp = opendir(dir);
	if (!dp || access(dir, W_OK) < 0) {
		dmn_log("state directory %s: %s: readers cannot resume after a restart", dir,
			strerror(errno));
		if (dp)
			closedir(dp);
		return;
	}
	if (load_key(k, dirfd(dp), why, sizeof(why)) < 0) {
		dmn_err("state directory %s: not used: %s: readers cannot resume after a restart",
			dir, why);
		closedir(dp);
		return;
	}
	k->dir = strdup(dir);
	if (!k->dir) {
		closedir(dp);
		return;
	}
	unsigned n = 0;
	time_t now = time(NULL);
	for (struct dirent *e; (e = readdir(dp)) != NULL;) {
		size_t len = strlen(e->d_name);
		if (len > 4 && strcmp(e->d_name + len - 4, ".tmp") == 0)
			unlinkat(dirfd(dp), e->d_name, 0); /* a write cut short */
		else if (len > 4 && strcmp(e->d_name + len - 4, ".pos") == 0)
			load_one(k, dirfd(dp), e->d_name, now);
	}
	closedir(dp);
	keep_newest(k);
	for (struct dmn_kept *r = k->list; r; r = r->next)
		n++;
	dmn_log("state directory %s: %u pipeline positions kept from earlier runs; this run is "
		"%016" PRIx64,
		dir, n, k->run);
}

void dmn_keep_fini(struct dmn_keep *k)
{
	while (k->list) {
		struct dmn_kept *r = k->list;
		k->list = r->next;
		dmn_kept_fini(r);
		free(r);
	}
	free(k->dir);
	k->dir = NULL;
	pthread_mutex_destroy(&k->lock);
}

/* Write rec's file: a temporary file, then rename over the old one. */
static int write_file(struct dmn_keep *k, const struct dmn_kept *rec)
{
	char path[4200], tmp[4210];
	file_name(k, rec->run, rec->fp, rec->name, ".pos", path, sizeof(path));
	file_name(k, rec->run, rec->fp, rec->name, ".tmp", tmp, sizeof(tmp));
	json_t *j = keep_to_json(rec);
	char *json = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	size_t jl = json ? strlen(json) : 0;
	char *text = json ? malloc(jl + 128) : NULL;
	if (!text) {
		free(json);
		return -ENOMEM;
	}
	/* the record, then its MAC under the directory's key (load_one checks it) */
	memcpy(text, json, jl);
	text[jl] = '\n';
	mac_line(k, json, jl, text + jl + 1);
	free(json);
	int rc = 0;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	size_t len = strlen(text);
	if (fd < 0)
		rc = -errno;
	else if (write(fd, text, len) != (ssize_t)len)
		rc = errno ? -errno : -EIO;
	if (fd >= 0 && close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc < 0)
		unlink(tmp);
	free(text);
	return rc;
}

int dmn_keep_save(struct dmn_keep *k, const struct dmn_kept *rec)
{
	if (!k->dir)
		return 0;
	struct dmn_kept *n = malloc(sizeof(*n));
	if (!n || kept_copy(n, rec) < 0) {
		free(n);
		return -ENOMEM;
	}
	n->orphan_ns = 0; /* written again: its pipeline runs */
	pthread_mutex_lock(&k->lock);
	struct dmn_kept **pp = find_locked(k, rec->run, rec->fp, rec->name);
	if (*pp) {
		struct dmn_kept *old = *pp;
		n->next = old->next;
		*pp = n;
		dmn_kept_fini(old);
		free(old);
	} else {
		n->next = k->list;
		k->list = n;
	}
	int rc = write_file(k, rec);
	pthread_mutex_unlock(&k->lock);
	return rc;
}

/* Unlink and free *pp, and remove its file. Under lock. */
static void forget_locked(struct dmn_keep *k, struct dmn_kept **pp)
{
	char path[4200];
	struct dmn_kept *old = *pp;
	file_name(k, old->run, old->fp, old->name, ".pos", path, sizeof(path));
	unlink(path);
	*pp = old->next;
	dmn_kept_fini(old);
	free(old);
}

void dmn_keep_forget(struct dmn_keep *k, const uint8_t fp[16], const char *name)
{
	if (!k->dir)
		return;
	char path[4200];
	pthread_mutex_lock(&k->lock);
	struct dmn_kept **pp = find_locked(k, k->run, fp, name);
	if (*pp) {
		forget_locked(k, pp);
	} else {
		file_name(k, k->run, fp, name, ".pos", path, sizeof(path));
		unlink(path);
	}
	pthread_mutex_unlock(&k->lock);
}

void dmn_keep_orphan(struct dmn_keep *k, const uint8_t fp[16], const char *name, uint64_t now_ns)
{
	if (!k->dir)
		return;
	pthread_mutex_lock(&k->lock);
	struct dmn_kept **pp = find_locked(k, k->run, fp, name);
	if (*pp)
		(*pp)->orphan_ns = now_ns ? now_ns : 1;
	pthread_mutex_unlock(&k->lock);
}

void dmn_keep_expire(struct dmn_keep *k, uint64_t now_ns, uint64_t linger_ns)
{
	if (!k->dir)
		return;
	pthread_mutex_lock(&k->lock);
	for (struct dmn_kept **pp = &k->list; *pp;) {
		if ((*pp)->orphan_ns && now_ns - (*pp)->orphan_ns >= linger_ns)
			forget_locked(k, pp);
		else
			pp = &(*pp)->next;
	}
	pthread_mutex_unlock(&k->lock);
}

int dmn_keep_find(struct dmn_keep *k, uint64_t run, const uint8_t fp[16], const char *name,
		  struct dmn_kept *ret)
{
	pthread_mutex_lock(&k->lock);
	struct dmn_kept **pp = find_locked(k, run, fp, name);
	int rc = *pp ? kept_copy(ret, *pp) : -ENOENT;
	pthread_mutex_unlock(&k->lock);
	return rc;
}

uint64_t dmn_keep_max_bound(struct dmn_keep *k, const uint8_t fp[16], const char *group)
{
	uint64_t max = 0, h = name_hash(group);
	pthread_mutex_lock(&k->lock);
	for (const struct dmn_kept *r = k->list; r; r = r->next) {
		if (memcmp(r->fp, fp, 16) != 0)
			continue;
		for (unsigned i = 0; i < r->n_group; i++)
			if (r->group[i] == h && r->group_bound[i] > max)
				max = r->group_bound[i];
	}
	pthread_mutex_unlock(&k->lock);
	return max;
}

/* The token: "SLRT", version 1, run (LE), fp, the pipeline's name. */
size_t dmn_token_make(uint64_t run, const uint8_t fp[16], const char *name, uint8_t *buf,
		      size_t cap)
{
	size_t nl = strlen(name);
	if (cap < 29 + nl)
		return 0;
	memcpy(buf, "SLRT", 4);
	buf[4] = 1;
	for (int i = 0; i < 8; i++)
		buf[5 + i] = (uint8_t)(run >> (8 * i));
	memcpy(buf + 13, fp, 16);
	memcpy(buf + 29, name, nl);
	return 29 + nl;
}

int dmn_token_parse(const void *tok, size_t len, uint64_t *ret_run, uint8_t ret_fp[16],
		    char ret_name[IPC_CTL_NAME_MAX + 1])
{
	const uint8_t *p = tok;
	if (len < 30 || len > 29 + IPC_CTL_NAME_MAX || memcmp(p, "SLRT", 4) != 0 || p[4] != 1 ||
	    memchr(p + 29, '\0', len - 29))
		return -EINVAL;
	uint64_t run = 0;
	for (int i = 0; i < 8; i++)
		run |= (uint64_t)p[5 + i] << (8 * i);
	*ret_run = run;
	memcpy(ret_fp, p + 13, 16);
	memcpy(ret_name, p + 29, len - 29);
	ret_name[len - 29] = '\0';
	return 0;
}
