/* SPDX-License-Identifier: Apache-2.0 */
/* Control protocol: what tools ask, LIST, STATS and REMOVE, and their replies. */
#include "ctl_msg_internal.h"

#include <errno.h>

#include "errmsg.h"

/* ---- the rules a table cannot say ---- */

static int check_pipeline(const void *v, const char *what, char *emsg, size_t cap)
{
	const struct ipc_ctl_pipeline_info *m = v;

	if (m->status >= IPC_CTL_PL_COUNT_)
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: status: expected 0 (running), 1 (finished) or 2 (failed), "
				  "got %u",
				  what, m->status);
	if (m->slots_used > m->n_slots)
		return ipc_errmsg(-EBADMSG, emsg, cap, "%s: slots_used %u is more than n_slots %u",
				  what, m->slots_used, m->n_slots);
	return 0;
}

/* ---- the tables (tags are the wire contract: docs/protocol.md) ---- */

static const struct fdesc pipeline_f[] = {
	STR(1, F_REQ | F_NONEMPTY, struct ipc_ctl_pipeline_info, name),
	NUM(2, K_FP, F_REQ, struct ipc_ctl_pipeline_info, fingerprint),
	NUM(3, K_U32, 0, struct ipc_ctl_pipeline_info, status),
	NUM(4, K_U32, 0, struct ipc_ctl_pipeline_info, n_readers),
	NUM(5, K_U64, 0, struct ipc_ctl_pipeline_info, batches_published),
	NUM(6, K_U32, 0, struct ipc_ctl_pipeline_info, slots_used),
	NUM(7, K_U32, 0, struct ipc_ctl_pipeline_info, n_slots),
	NUM_OR(8, K_U32, struct ipc_ctl_pipeline_info, owner_uid, IPC_CTL_OWNER_UNKNOWN),
};
static const struct mdesc pipeline_d =
	MDESC("pipeline", 0, false, struct ipc_ctl_pipeline_info, pipeline_f, check_pipeline);
static const struct fdesc list_reply_f[] = {
	SEQ(1, struct ipc_ctl_list_reply, pipelines, n_pipelines, &pipeline_d),
};
static const struct fdesc stats_f[] = {
	STR(1, F_REQ | F_NONEMPTY, struct ipc_ctl_stats, name),
};
static const struct fdesc remove_f[] = {
	STR(1, F_REQ | F_NONEMPTY, struct ipc_ctl_remove, name),
};
static const struct fdesc stat_f[] = {
	STR(1, F_REQ | F_NONEMPTY, struct ipc_ctl_stat, key),
	NUM(2, K_I64, F_REQ, struct ipc_ctl_stat, value),
};
static const struct mdesc stat_d = MDESC("stat", 0, false, struct ipc_ctl_stat, stat_f, NULL);
static const struct fdesc stats_reply_f[] = {
	STR(1, F_REQ | F_NONEMPTY, struct ipc_ctl_stats_reply, name),
	SEQ(2, struct ipc_ctl_stats_reply, stats, n_stats, &stat_d),
};

static const struct mdesc list_reply_d = MDESC("ctl LIST_REPLY", IPC_CTL_LIST_REPLY, false,
					       struct ipc_ctl_list_reply, list_reply_f, NULL);
static const struct mdesc stats_d =
	MDESC("ctl STATS", IPC_CTL_STATS, false, struct ipc_ctl_stats, stats_f, NULL);
static const struct mdesc stats_reply_d = MDESC("ctl STATS_REPLY", IPC_CTL_STATS_REPLY, false,
						struct ipc_ctl_stats_reply, stats_reply_f, NULL);
static const struct mdesc remove_d =
	MDESC("ctl REMOVE", IPC_CTL_REMOVE, false, struct ipc_ctl_remove, remove_f, NULL);
static const struct mdesc removed_d =
	MDESC("ctl REMOVED", IPC_CTL_REMOVED, false, struct ipc_ctl_remove, remove_f, NULL);

/* ---- the typed API ---- */

CODEC(list_reply, list_reply_d, struct ipc_ctl_list_reply)
CODEC(stats, stats_d, struct ipc_ctl_stats)
CODEC(stats_reply, stats_reply_d, struct ipc_ctl_stats_reply)

int ipc_ctl_encode_remove(void *buf, size_t cap, unsigned type, uint32_t req_id,
			  const struct ipc_ctl_remove *m, size_t *ret_len)
{
	if (type != IPC_CTL_REMOVE && type != IPC_CTL_REMOVED)
		return -EINVAL;
	const struct mdesc *d = type == IPC_CTL_REMOVE ? &remove_d : &removed_d;
	return ipc_ctl_msg_encode_(d, d->type, buf, cap, req_id, m, ret_len);
}

int ipc_ctl_decode_remove(const struct ipc_ctl_msg *msg, unsigned type, struct ipc_ctl_remove *ret,
			  char *emsg, size_t emsg_cap)
{
	if (type != IPC_CTL_REMOVE && type != IPC_CTL_REMOVED)
		return -EINVAL;
	return ipc_ctl_msg_decode_(type == IPC_CTL_REMOVE ? &remove_d : &removed_d, msg, ret, emsg,
				   emsg_cap);
}

void ipc_ctl_list_reply_fini(struct ipc_ctl_list_reply *m)
{
	if (m)
		ipc_ctl_msg_free_seqs_(&list_reply_d, m);
}

void ipc_ctl_stats_reply_fini(struct ipc_ctl_stats_reply *m)
{
	if (m)
		ipc_ctl_msg_free_seqs_(&stats_reply_d, m);
}
