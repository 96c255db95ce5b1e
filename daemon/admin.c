/* SPDX-License-Identifier: Apache-2.0 */
/* What administrators do to sluiced's registry: rm, SIGHUP's reload, "did you mean". */
#include "registry.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/file.h"
#include "log.h"
#include "names.h"
#include "pipelines_internal.h"

/*
 * A pipeline that goes while readers read it is not destroyed under them: its engine stops at
 * once (nothing more is published), it is hidden from names, LIST and sharing (as a private
 * pipeline is), its readers get an end — an error batch saying who removed it, or the end of
 * the stream for a spec that left the config dir — and it is dropped when its last reader goes
 * (remove_reader, as a private pipeline). All on the server thread.
 */

void dmn_pipeline_remove(struct dmn_registry *d, struct dmn_pipeline *pl, uid_t by, bool drain)
{
	/*
	 * Stopped: its driver publishes nothing from here (pub_deliver and pub_end look under
	 * pl->lock), and is joined when the pipeline is dropped, on a thread of its own
	 * (reaper.c), not here: a driver stuck in a read must not hold the server.
	 */
	atomic_store(&pl->stop, true);
	pthread_mutex_lock(&pl->lock);
	pthread_cond_broadcast(&pl->attach_cond);
	pthread_mutex_unlock(&pl->lock);
	pl->removed = true;
	pl->private_ = true;
	pl->from_config = false;
	pthread_mutex_lock(&pl->lock);
	if (drain) {
		if (pl->status == DMN_RUNNING)
			ipc_ring_set_eos(pl->ring);
		if (pl->status == DMN_RUNNING)
			pl->status = DMN_FINISHED;
	} else {
		snprintf(pl->error, sizeof(pl->error), "the pipeline was removed by uid %u",
			 (unsigned)by);
		pl->status = DMN_FAILED;
		pl->end_code = -EIDRM;
		pl->end_pending = dmn_publish_error(pl, -EIDRM, pl->error, 1) == -EAGAIN;
	}
	unsigned n = pl->n_readers;
	pthread_mutex_unlock(&pl->lock);
	char why[160];
	if (drain)
		snprintf(why, sizeof(why), "removed: its file left the config dir");
	else
		snprintf(why, sizeof(why), "removed by uid %u", (unsigned)by);
	if (n == 0) {
		dmn_pipeline_drop(d, pl, why);
		return;
	}
	dmn_log("pipeline %s %s: it stopped, and goes when its %u reader%s %s gone", pl->name, why,
		n, n == 1 ? "" : "s", n == 1 ? "is" : "are");
}

void dmn_pipelines_retry_ends(struct dmn_registry *d)
{
	for (struct dmn_pipeline *pl = d->pipelines; pl; pl = pl->next) {
		if (!pl->end_pending)
			continue;
		pthread_mutex_lock(&pl->lock);
		pl->end_pending = dmn_publish_error(pl, pl->end_code, pl->error, 1) == -EAGAIN;
		pthread_mutex_unlock(&pl->lock);
	}
}

void dmn_name_suggest(struct dmn_registry *d, const char *name, const struct io_creds *who,
		      char *buf, size_t cap)
{
	/* the closest 3, by edit distance (a long common prefix may be far): insertion sort */
	enum { N = 3 };
	const char *found[N];
	unsigned dist[N], n = 0;
	buf[0] = '\0';
	for (struct dmn_pipeline *pl = d->pipelines; pl; pl = pl->next) {
		if (pl->private_ || !dmn_may_read(pl, who))
			continue;
		if (strcmp(pl->name, name) == 0) {
			/* only root misses a name that exists and it may read: a user's, which
			   root never reaches by name (DECISIONS.md, "Names belong to their owners")
			 */
			snprintf(buf, cap,
				 " of root or the host's config dir (uid %u has one: root does not "
				 "attach to a user's pipeline by name; attach by its spec, or "
				 "register one of root's)",
				 (unsigned)pl->owner);
			return;
		}
		if (!dmn_name_close(name, pl->name))
			continue;
		bool dup = false; /* two users' pipelines of one name */
		for (unsigned i = 0; i < n; i++)
			dup |= strcmp(found[i], pl->name) == 0;
		unsigned dd = dmn_name_distance(name, pl->name, DMN_NAME_DIST_MAX);
		if (dup || (n == N && dd >= dist[N - 1]))
			continue;
		unsigned k = n < N ? n++ : N - 1;
		for (; k > 0 && dist[k - 1] > dd; k--) {
			found[k] = found[k - 1];
			dist[k] = dist[k - 1];
		}
		found[k] = pl->name;
		dist[k] = dd;
	}
	if (n == 0)
		return;
	size_t len = (size_t)snprintf(buf, cap, "; did you mean");
	for (unsigned i = 0; i < n && len < cap; i++)
		len += (size_t)snprintf(buf + len, cap - len, "%s\"%s\"",
					i == 0	     ? " "
					: i + 1 == n ? (n == 2 ? " or " : ", or ")
						     : ", ",
					found[i]);
	if (len < cap)
		snprintf(buf + len, cap - len, "?");
}

static struct dmn_pipeline *by_config_path(struct dmn_registry *d, const char *path)
{
	for (struct dmn_pipeline *pl = d->pipelines; pl; pl = pl->next)
		if (pl->from_config && pl->config_path && strcmp(pl->config_path, path) == 0)
			return pl;
	return NULL;
}

static int json_file(const struct dirent *e)
{
	size_t l = strlen(e->d_name);
	return e->d_name[0] != '.' && l > 5 && strcmp(e->d_name + l - 5, ".json") == 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

/* One file of the config dir at a reload: 1 started, 0 unchanged, -1 refused or bad. */
static int reload_one(struct dmn_registry *d, const char *path, const char *dir)
{
	char *text = NULL, emsg[4096 + 1024];
	size_t len = 0;
	struct io_error e;
	int r = io_file_read(path, DMN_MAX_SPEC_BYTES, &text, &len, &e);
	if (r < 0) {
		dmn_warn("reload: skipped: %s", e.msg);
		return -1;
	}
	struct dmn_pipeline *old = by_config_path(d, path);
	if (old) {
		bool same = old->spec_json && strlen(old->spec_json) == len &&
			    memcmp(old->spec_json, text, len) == 0;
		if (!same)
			dmn_warn("reload: %s changed: refused, pipeline %s goes on as it was "
				 "(remove the file, reload, and add it again to replace it)",
				 path, old->name);
		free(text);
		return same ? 0 : -1;
	}
	struct dmn_pipeline *pl;
	bool created;
	struct dmn_get_req req = { .spec = text,
				   .spec_len = len,
				   .origin = path,
				   .spec_dir = dir,
				   .owner = (uid_t)-1,
				   .mode = IPC_RING_BROADCAST };
	r = dmn_pipeline_get(d, &req, &pl, &created, emsg, sizeof(emsg));
	free(text);
	if (r < 0) {
		dmn_warn("reload: skipped: %s", emsg);
		return -1;
	}
	pl->from_config = true;
	free(pl->config_path);
	pl->config_path = strdup(path);
	dmn_log("pipeline %s from %s", pl->name, path);
	return created;
}

void dmn_reload_config_dir(struct dmn_registry *d)
{
	const char *cdir = d->cfg.config_dir;
	if (!cdir) {
		dmn_log("SIGHUP: no --config-dir to reload");
		return;
	}
	struct dirent **ents = NULL;
	int n = scandir(cdir, &ents, json_file, by_name);
	if (n < 0) {
		dmn_err("SIGHUP: %s: %s: nothing reloaded", cdir, strerror(errno));
		return;
	}
	char *dir = realpath(cdir, NULL);
	unsigned started = 0, kept = 0, refused = 0, removed = 0;
	char **paths = calloc((size_t)n + 1, sizeof(*paths));
	for (int i = 0; i < n; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", cdir, ents[i]->d_name);
		if (paths)
			paths[i] = strdup(path);
		int r = reload_one(d, path, dir);
		*(r > 0 ? &started : r == 0 ? &kept : &refused) += 1;
		free(ents[i]);
	}
	free(ents);
	free(dir);
	/* a pipeline whose file went: drained, then dropped */
	for (struct dmn_pipeline *pl = d->pipelines, *next; pl && paths; pl = next) {
		next = pl->next; /* removing one without readers drops it */
		if (!pl->from_config || !pl->config_path)
			continue;
		bool present = false;
		for (int i = 0; i < n && !present; i++)
			present = paths[i] && strcmp(paths[i], pl->config_path) == 0;
		if (!present) {
			dmn_pipeline_remove(d, pl, (uid_t)0, true);
			removed++;
		}
	}
	for (int i = 0; paths && i < n; i++)
		free(paths[i]);
	free(paths);
	dmn_log("SIGHUP: reloaded %s: %u started, %u unchanged, %u refused or skipped, %u removed",
		cdir, started, kept, refused, removed);
}
