/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced's registry: its pipelines, who may read one, finding one by name, dropping one. */
#include "pipelines_internal.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

static bool in_group(const struct io_creds *who, uint32_t gid)
{
	if (who->gid == gid)
		return true;
	for (size_t i = 0; i < who->n_groups; i++)
		if (who->groups[i] == gid)
			return true;
	return false;
}

bool dmn_may_read(const struct dmn_pipeline *pl, const struct io_creds *who)
{
	if (!who || who->uid == 0 || pl->owner == (uid_t)-1 || pl->owner == who->uid)
		return true;
	for (size_t i = 0; i < pl->n_reader_uids; i++)
		if (pl->reader_uids[i] == (uint32_t)who->uid)
			return true;
	for (size_t i = 0; i < pl->n_reader_gids; i++)
		if (in_group(who, pl->reader_gids[i]))
			return true;
	return false;
}

struct dmn_pipeline *dmn_pipeline_find(struct dmn_registry *d, const char *name,
				       const struct io_creds *who, bool any_owner, bool *ret_hidden)
{
	uid_t mine = dmn_name_space(who ? who->uid : (uid_t)-1);
	struct dmn_pipeline *host = NULL, *other = NULL;
	bool hidden = false;
	for (struct dmn_pipeline *pl = d->pipelines; pl; pl = pl->next) {
		if (pl->private_ || strcmp(pl->name, name) != 0)
			continue;
		uid_t ns = dmn_name_space(pl->owner);
		if (ns == mine)
			return pl;
		if (!dmn_may_read(pl, who))
			hidden = true;
		else if (ns == (uid_t)-1)
			host = pl;
		else if (!other && (any_owner || mine != (uid_t)-1))
			other = pl; /* root never reaches a user's name by chance: no squatting */
	}
	if (ret_hidden)
		*ret_hidden = !host && !other && hidden;
	return host ? host : other;
}

/* resumable: a reader may come back with its token: its record stays for a while */
static void drop(struct dmn_registry *d, struct dmn_pipeline *pl, const char *why, bool resumable)
{
	for (struct dmn_pipeline **pp = &d->pipelines; *pp; pp = &(*pp)->next) {
		if (*pp == pl) {
			*pp = pl->next;
			d->n_pipelines--;
			dmn_log("%spipeline %s %s", pl->private_ ? "private " : "", pl->name, why);
			/* a group that had moved to it is gone with it */
			for (struct dmn_pipeline *o = d->pipelines; o; o = o->next) {
				pthread_mutex_lock(&o->lock);
				for (int i = 0; i < IPC_RING_MAX_GROUPS; i++)
					if (o->groups[i].used && o->groups[i].moved_to == pl)
						o->groups[i].used = false;
				pthread_mutex_unlock(&o->lock);
			}
			/* no reader left to resume it: its record goes, once its driver (which
			   writes it) is joined; or, when one may come back, after --linger. Its
			   driver is joined on a thread of its own (reaper.c). */
			dmn_reap(d, pl, d->stopping ? NULL : pl->keep, resumable);
			return;
		}
	}
}

void dmn_pipeline_drop(struct dmn_registry *d, struct dmn_pipeline *pl, const char *why)
{
	drop(d, pl, why, false);
}

void dmn_pipeline_drop_private(struct dmn_registry *d, struct dmn_pipeline *pl, bool resumable)
{
	resumable &= !pl->removed && pl->keep != NULL;
	drop(d, pl,
	     pl->removed ? "dropped: its last reader is gone"
	     : resumable ? "stopped: its reader's connection closed (its position is kept for "
			   "--linger, should it come back)"
			 : "stopped: its reader is gone",
	     resumable);
}

void dmn_pipeline_destroy(struct dmn_registry *d, struct dmn_pipeline *pl)
{
	if (!pl)
		return;
	atomic_store(&pl->stop, true);
	pthread_mutex_lock(&pl->lock);
	pthread_cond_broadcast(&pl->attach_cond);
	pthread_mutex_unlock(&pl->lock);
	pl_pipeline_destroy(pl->pl); /* joins the driver, and with it the callbacks */
	ipc_ring_destroy(pl->ring);
	dmn_budget_close(pl); /* the engine is gone: nothing more is charged */
	pthread_cond_destroy(&pl->attach_cond);
	pthread_mutex_destroy(&pl->lock);
	for (unsigned i = 0; i < IPC_RING_MAX_READERS; i++)
		free(pl->moved[i].state);
	free(pl->resv);
	free(pl->reader_uids);
	free(pl->reader_gids);
	if (pl->creds)
		io_creds_clear(pl->creds);
	free(pl->creds);
	free(pl->spec_json);
	free(pl->spec_dir);
	free(pl->start_state);
	free(pl->config_path);
	free(pl);
}
