/* SPDX-License-Identifier: Apache-2.0 */
/* libsluice: what the daemon runs, for tools and monitoring (sluice_list, sluice_stats). */
#include "client_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(SLUICE_NAME_MAX == IPC_CTL_NAME_MAX, "a pipeline name is the protocol's");
_Static_assert((int)SLUICE_PIPELINE_RUNNING == (int)IPC_CTL_PL_RUNNING &&
		       (int)SLUICE_PIPELINE_FINISHED == (int)IPC_CTL_PL_FINISHED &&
		       (int)SLUICE_PIPELINE_FAILED == (int)IPC_CTL_PL_FAILED,
	       "the statuses are the protocol's");
_Static_assert(SLUICE_OWNER_HOST == IPC_CTL_OWNER_HOST &&
		       SLUICE_OWNER_UNKNOWN == IPC_CTL_OWNER_UNKNOWN,
	       "the owners are the protocol's");

static int list_call(struct sluice_client *c, struct ipc_ctl_list_reply *ret,
		     struct sluice_error *err)
{
	struct ipc_ctl_msg m;
	size_t len, nfds = 0;
	char emsg[256];
	uint32_t req;
	int rc;

	pthread_mutex_lock(&c->lock);
	rc = lc_ensure_locked(c, err);
	if (rc < 0)
		goto out;
	req = lc_req_id_locked(c);
	rc = ipc_ctl_encode_empty(c->sbuf, IPC_CTL_MAX_MSG, IPC_CTL_LIST, req, &len);
	if (rc < 0) {
		rc = lc_fail(err, rc, "list: encoding: %s", strerror(-rc));
		goto out;
	}
	rc = lc_call_locked(c, len, req, IPC_CTL_LIST_REPLY, &m, NULL, 0, &nfds, "list", err);
	if (rc < 0)
		goto out;
	rc = ipc_ctl_decode_list_reply(&m, ret, emsg, sizeof(emsg));
	if (rc < 0)
		rc = lc_fail(err, rc, "list: %s", emsg);
out:
	pthread_mutex_unlock(&c->lock);
	return rc;
}

static int stats_call(struct sluice_client *c, const char *name, struct ipc_ctl_stats_reply *ret,
		      struct sluice_error *err)
{
	struct ipc_ctl_stats st;
	struct ipc_ctl_msg m;
	size_t len, nfds = 0;
	char emsg[256], what[300];
	uint32_t req;
	int rc;

	snprintf(what, sizeof(what), "stats \"%s\"", name);
	len = strlen(name);
	if (!len || len > IPC_CTL_NAME_MAX)
		return lc_fail(err, -EINVAL, "%s: a name has 1 to %d bytes", what,
			       IPC_CTL_NAME_MAX);
	memcpy(st.name, name, len + 1);
	pthread_mutex_lock(&c->lock);
	rc = lc_ensure_locked(c, err);
	if (rc < 0)
		goto out;
	req = lc_req_id_locked(c);
	rc = ipc_ctl_encode_stats(c->sbuf, IPC_CTL_MAX_MSG, req, &st, &len);
	if (rc < 0) {
		rc = lc_fail(err, rc, "%s: encoding: %s", what, strerror(-rc));
		goto out;
	}
	rc = lc_call_locked(c, len, req, IPC_CTL_STATS_REPLY, &m, NULL, 0, &nfds, what, err);
	if (rc < 0)
		goto out;
	rc = ipc_ctl_decode_stats_reply(&m, ret, emsg, sizeof(emsg));
	if (rc < 0)
		rc = lc_fail(err, rc, "%s: %s", what, emsg);
out:
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int sluice_list(struct sluice_client *c, struct sluice_pipeline_info **ret_list, size_t *ret_n,
		struct sluice_error *err)
{
	struct ipc_ctl_list_reply lr;
	memset(&lr, 0, sizeof(lr));
	int rc = list_call(c, &lr, err);
	if (rc < 0)
		return rc;
	struct sluice_pipeline_info *out = NULL;
	if (lr.n_pipelines) {
		out = calloc(lr.n_pipelines, sizeof(*out));
		if (!out) {
			ipc_ctl_list_reply_fini(&lr);
			return lc_fail(err, -ENOMEM, "list: out of memory");
		}
	}
	for (uint32_t i = 0; i < lr.n_pipelines; i++) {
		const struct ipc_ctl_pipeline_info *p = &lr.pipelines[i];
		snprintf(out[i].name, sizeof(out[i].name), "%s", p->name);
		memcpy(out[i].fingerprint, p->fingerprint, sizeof(out[i].fingerprint));
		out[i].status = (enum sluice_pipeline_status)p->status;
		out[i].n_readers = p->n_readers;
		out[i].batches_published = p->batches_published;
		out[i].ring_slots_used = p->slots_used;
		out[i].ring_slots = p->n_slots;
		out[i].owner_uid = p->owner_uid;
	}
	*ret_n = lr.n_pipelines;
	*ret_list = out;
	ipc_ctl_list_reply_fini(&lr);
	return 0;
}

void sluice_list_free(struct sluice_pipeline_info *list)
{
	free(list);
}

struct sluice_stats {
	struct ipc_ctl_stats_reply r;
};

int sluice_stats(struct sluice_client *c, const char *name, struct sluice_stats **ret_stats,
		 struct sluice_error *err)
{
	struct sluice_stats *s = calloc(1, sizeof(*s));
	if (!s)
		return lc_fail(err, -ENOMEM, "stats: out of memory");
	int rc = stats_call(c, name, &s->r, err);
	if (rc < 0) {
		free(s);
		return rc;
	}
	*ret_stats = s;
	return 0;
}

size_t sluice_stats_count(const struct sluice_stats *s)
{
	return s->r.n_stats;
}

const char *sluice_stats_at(const struct sluice_stats *s, size_t i, int64_t *ret_value)
{
	if (i >= s->r.n_stats)
		return NULL;
	*ret_value = s->r.stats[i].value;
	return s->r.stats[i].key;
}

int sluice_stats_get(const struct sluice_stats *s, const char *key, int64_t *ret_value)
{
	for (uint32_t i = 0; i < s->r.n_stats; i++) {
		if (strcmp(s->r.stats[i].key, key) == 0) {
			*ret_value = s->r.stats[i].value;
			return 0;
		}
	}
	return -ENOENT;
}

const char *sluice_stats_name(const struct sluice_stats *s)
{
	return s->r.name;
}

void sluice_stats_free(struct sluice_stats *s)
{
	if (!s)
		return;
	ipc_ctl_stats_reply_fini(&s->r);
	free(s);
}

int sluice_remove(struct sluice_client *c, const char *name, struct sluice_error *err)
{
	struct ipc_ctl_remove rm, out;
	struct ipc_ctl_msg m;
	size_t len, nfds = 0;
	char emsg[256], what[300];
	uint32_t req;
	int rc;

	snprintf(what, sizeof(what), "rm \"%s\"", name);
	len = strlen(name);
	if (!len || len > IPC_CTL_NAME_MAX)
		return lc_fail(err, -EINVAL, "%s: a name has 1 to %d bytes", what,
			       IPC_CTL_NAME_MAX);
	memcpy(rm.name, name, len + 1);
	pthread_mutex_lock(&c->lock);
	rc = lc_ensure_locked(c, err);
	if (rc < 0)
		goto out;
	req = lc_req_id_locked(c);
	rc = ipc_ctl_encode_remove(c->sbuf, IPC_CTL_MAX_MSG, IPC_CTL_REMOVE, req, &rm, &len);
	if (rc < 0) {
		rc = lc_fail(err, rc, "%s: encoding: %s", what, strerror(-rc));
		goto out;
	}
	rc = lc_call_locked(c, len, req, IPC_CTL_REMOVED, &m, NULL, 0, &nfds, what, err);
	if (rc < 0)
		goto out;
	rc = ipc_ctl_decode_remove(&m, IPC_CTL_REMOVED, &out, emsg, sizeof(emsg));
	if (rc < 0)
		rc = lc_fail(err, rc, "%s: %s", what, emsg);
out:
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int sluice_state_at(struct sluice_client *c, const char *name, uint64_t epoch,
		    uint64_t index_in_epoch, uint64_t seq, void *buf, size_t cap, size_t *ret_len,
		    struct sluice_error *err)
{
	struct ipc_ctl_reader_ref ref = {
		.at = true, .at_epoch = epoch, .at_index = index_in_epoch, .at_seq = seq
	};
	char what[300];
	uint64_t id;
	size_t len;
	int rc;

	if (!c || !name || !buf || !ret_len)
		return lc_fail(err, -EINVAL, "state: no client, name, buffer or ret_len");
	snprintf(what, sizeof(what), "state of \"%s\" at epoch %" PRIu64 " index %" PRIu64, name,
		 epoch, index_in_epoch);
	len = strlen(name);
	if (!len || len > IPC_CTL_NAME_MAX)
		return lc_fail(err, -EINVAL, "%s: a name has 1 to %d bytes", what,
			       IPC_CTL_NAME_MAX);
	memcpy(ref.name, name, len + 1);
	pthread_mutex_lock(&c->lock);
	rc = lc_ensure_locked(c, err);
	if (rc == 0)
		rc = lc_save_state_locked(c, &ref, what, buf, cap, ret_len, &id, err);
	pthread_mutex_unlock(&c->lock);
	return rc;
}
