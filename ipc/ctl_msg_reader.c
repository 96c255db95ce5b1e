/* SPDX-License-Identifier: Apache-2.0 */
/* Control protocol: a reader's messages, REGISTER, ATTACH, DETACH, SAVE_STATE, their replies. */
#include "ctl_msg_internal.h"

#include <errno.h>

#include "errmsg.h"

/* ---- the rules a table cannot say ---- */

/* An optional spec_dir is an absolute path. */
static int check_spec_dir(const char *dir, uint32_t len, const char *what, char *emsg, size_t cap)
{
	if (len && dir[0] != '/')
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: spec_dir: expected an absolute path, got \"%.*s\"", what,
				  (int)(len > 64 ? 64 : len), dir);
	return 0;
}

static int check_register(const void *v, const char *what, char *emsg, size_t cap)
{
	const struct ipc_ctl_register *m = v;
	return check_spec_dir(m->spec_dir, m->spec_dir_len, what, emsg, cap);
}

static int check_attach(const void *v, const char *what, char *emsg, size_t cap)
{
	const struct ipc_ctl_attach *m = v;
	bool has_name = m->name[0] != '\0', has_spec = m->spec_len > 0;

	if (has_name == has_spec)
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: expected exactly one of name and spec, got %s", what,
				  has_name ? "both" : "neither");
	if (m->mode >= IPC_CTL_MODE_COUNT_)
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: mode: expected 0 (broadcast), 1 (split) or 2 (rank), got %u",
				  what, m->mode);
	if (m->mode == IPC_CTL_MODE_RANK) {
		if (m->rank_count == 0 || m->rank_index >= m->rank_count)
			return ipc_errmsg(-EBADMSG, emsg, cap,
					  "%s: rank_index %u, rank_count %u: expected index < "
					  "count",
					  what, m->rank_index, m->rank_count);
	} else if (m->rank_index || m->rank_count) {
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: rank_index/rank_count given for mode %u: expected them only "
				  "with "
				  "mode 2 (rank)",
				  what, m->mode);
	}
	if (m->lag_policy >= IPC_CTL_LAG_COUNT_)
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: lag_policy: expected 0 (the daemon's default), 1 (catch up) "
				  "or 2 (hold), got %u",
				  what, m->lag_policy);
	if (m->lag_policy == IPC_CTL_LAG_HOLD && (m->max_lag || m->lag_timeout_ms))
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: max_lag/lag_timeout_ms given with lag_policy 2 (hold): a "
				  "reader that holds the others back has no bound",
				  what);
	if (m->move >= IPC_CTL_MOVE_COUNT_)
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: move: expected 0 (none), 1 (moved off) or 2 (moved back), "
				  "got %u",
				  what, m->move);
	if (m->move && (m->mode != IPC_CTL_MODE_BROADCAST || !m->state_len))
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: move %u: only a broadcast reader with a state is moved",
				  what, m->move);
	if (m->moved_max_lag && !m->move)
		return ipc_errmsg(-EBADMSG, emsg, cap, "%s: moved_max_lag given without move",
				  what);
	if (m->spec_dir_len && !has_spec)
		return ipc_errmsg(-EBADMSG, emsg, cap, "%s: spec_dir given without a spec", what);
	return check_spec_dir(m->spec_dir, m->spec_dir_len, what, emsg, cap);
}

static int check_tensor(const void *v, const char *what, char *emsg, size_t cap)
{
	const struct ipc_ctl_tensor_info *m = v;
	uint32_t i;

	if (m->dtype >= IPC_DTYPE_COUNT_)
		return ipc_errmsg(-EBADMSG, emsg, cap, "%s: dtype: expected 0..%d, got %u", what,
				  IPC_DTYPE_COUNT_ - 1, m->dtype);
	if (m->rank < 1 || m->rank > IPC_BATCH_MAX_RANK)
		return ipc_errmsg(-EBADMSG, emsg, cap, "%s: shape: rank %u, expected 1..%d", what,
				  m->rank, IPC_BATCH_MAX_RANK);
	for (i = 0; i < m->rank; i++)
		if (m->shape[i] < -1)
			return ipc_errmsg(-EBADMSG, emsg, cap,
					  "%s: shape[%u]: %lld, expected -1 (varies) or a size",
					  what, i, (long long)m->shape[i]);
	return 0;
}

static int check_save_state(const void *v, const char *what, char *emsg, size_t cap)
{
	const struct ipc_ctl_reader_ref *m = v;
	bool has_name = m->name[0] != '\0';

	if (has_name && m->reader_id != 0)
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: expected one of reader_id and name, got both", what);
	if (has_name && !m->at)
		return ipc_errmsg(-EBADMSG, emsg, cap,
				  "%s: name without at: a pipeline has no position of its own, "
				  "name the one to save (at_epoch, at_index, at_seq)",
				  what);
	return 0;
}

/* ---- the tables (tags are the wire contract: docs/protocol.md) ---- */

static const struct fdesc register_f[] = {
	VIEW(1, K_TEXT, F_REQ | F_NONEMPTY, struct ipc_ctl_register, spec, spec_len,
	     IPC_CTL_MAX_BODY),
	VIEW(2, K_TEXT, 0, struct ipc_ctl_register, spec_dir, spec_dir_len, IPC_CTL_DIR_MAX),
};
static const struct fdesc registered_f[] = {
	STR(1, F_REQ | F_NONEMPTY, struct ipc_ctl_registered, name),
	NUM(2, K_FP, F_REQ, struct ipc_ctl_registered, fingerprint),
	NUM(3, K_BOOL, 0, struct ipc_ctl_registered, created),
};
static const struct fdesc attach_f[] = {
	STR(1, 0, struct ipc_ctl_attach, name),
	VIEW(2, K_TEXT, 0, struct ipc_ctl_attach, spec, spec_len, IPC_CTL_MAX_BODY),
	NUM(3, K_U32, F_REQ, struct ipc_ctl_attach, mode),
	NUM(4, K_U32, 0, struct ipc_ctl_attach, rank_index),
	NUM(5, K_U32, 0, struct ipc_ctl_attach, rank_count),
	VIEW(6, K_BYTES, 0, struct ipc_ctl_attach, state, state_len, IPC_CTL_STATE_MAX),
	NUM(7, K_U32, 0, struct ipc_ctl_attach, lag_policy),
	NUM(8, K_U64, 0, struct ipc_ctl_attach, max_lag),
	VIEW(9, K_TEXT, 0, struct ipc_ctl_attach, spec_dir, spec_dir_len, IPC_CTL_DIR_MAX),
	STR(10, 0, struct ipc_ctl_attach, group),
	VIEW(11, K_BYTES, 0, struct ipc_ctl_attach, resume, resume_len, IPC_CTL_TOKEN_MAX),
	NUM(12, K_U64, 0, struct ipc_ctl_attach, resume_seq),
	NUM(13, K_U64, 0, struct ipc_ctl_attach, lag_timeout_ms),
	NUM(14, K_U32, 0, struct ipc_ctl_attach, move),
	NUM(15, K_U64, 0, struct ipc_ctl_attach, moved_max_lag),
};
static const struct fdesc tensor_f[] = {
	STR(1, F_REQ | F_NONEMPTY, struct ipc_ctl_tensor_info, name),
	NUM(2, K_U32, F_REQ, struct ipc_ctl_tensor_info, dtype),
	SHAPE(3, F_REQ, struct ipc_ctl_tensor_info, shape, rank),
	NUM(4, K_BOOL, 0, struct ipc_ctl_tensor_info, ragged),
};
static const struct mdesc tensor_d =
	MDESC("tensor", 0, false, struct ipc_ctl_tensor_info, tensor_f, check_tensor);
static const struct fdesc attached_f[] = {
	NUM(1, K_U64, F_REQ, struct ipc_ctl_attached, reader_id),
	STR(2, F_REQ | F_NONEMPTY, struct ipc_ctl_attached, name),
	NUM(3, K_FP, F_REQ, struct ipc_ctl_attached, fingerprint),
	NUM(4, K_U32, F_REQ, struct ipc_ctl_attached, ring_version),
	NUM(5, K_U32, F_REQ, struct ipc_ctl_attached, n_slots),
	NUM(6, K_U64, F_REQ, struct ipc_ctl_attached, data_bytes),
	NUM(7, K_U64, F_REQ, struct ipc_ctl_attached, ctl_bytes),
	NUM(8, K_U64, 0, struct ipc_ctl_attached, max_batch_bytes),
	SEQ(9, struct ipc_ctl_attached, tensors, n_tensors, &tensor_d),
	NUM(10, K_U64, 0, struct ipc_ctl_attached, first_epoch),
	VIEW(11, K_BYTES, 0, struct ipc_ctl_attached, token, token_len, IPC_CTL_TOKEN_MAX),
	NUM(12, K_U64, 0, struct ipc_ctl_attached, skip_below),
	NUM(13, K_U64, 0, struct ipc_ctl_attached, redelivered_below),
	NUM(14, K_U64, 0, struct ipc_ctl_attached, redelivered_epochs),
};
static const struct fdesc reader_ref_f[] = {
	NUM(1, K_U64, F_REQ, struct ipc_ctl_reader_ref, reader_id),
};
static const struct fdesc save_state_f[] = {
	NUM(1, K_U64, 0, struct ipc_ctl_reader_ref, reader_id),
	NUM(2, K_BOOL, 0, struct ipc_ctl_reader_ref, at),
	NUM(3, K_U64, 0, struct ipc_ctl_reader_ref, at_epoch),
	NUM(4, K_U64, 0, struct ipc_ctl_reader_ref, at_index),
	NUM(5, K_U64, 0, struct ipc_ctl_reader_ref, at_seq),
	STR(6, 0, struct ipc_ctl_reader_ref, name),
};
static const struct fdesc state_f[] = {
	NUM(1, K_U64, F_REQ, struct ipc_ctl_state, reader_id),
	VIEW(2, K_BYTES, F_REQ | F_NONEMPTY, struct ipc_ctl_state, state, state_len,
	     IPC_CTL_STATE_MAX),
};

static const struct mdesc register_d = MDESC("ctl REGISTER", IPC_CTL_REGISTER, false,
					     struct ipc_ctl_register, register_f, check_register);
static const struct mdesc registered_d = MDESC("ctl REGISTERED", IPC_CTL_REGISTERED, false,
					       struct ipc_ctl_registered, registered_f, NULL);
static const struct mdesc attach_d =
	MDESC("ctl ATTACH", IPC_CTL_ATTACH, false, struct ipc_ctl_attach, attach_f, check_attach);
static const struct mdesc attached_d =
	MDESC("ctl ATTACHED", IPC_CTL_ATTACHED, false, struct ipc_ctl_attached, attached_f, NULL);
static const struct mdesc detach_d =
	MDESC("ctl DETACH", IPC_CTL_DETACH, false, struct ipc_ctl_reader_ref, reader_ref_f, NULL);
static const struct mdesc save_state_d =
	MDESC("ctl SAVE_STATE", IPC_CTL_SAVE_STATE, false, struct ipc_ctl_reader_ref, save_state_f,
	      check_save_state);
static const struct mdesc detached_d = MDESC("ctl DETACHED", IPC_CTL_DETACHED, false,
					     struct ipc_ctl_reader_ref, reader_ref_f, NULL);
static const struct mdesc state_d =
	MDESC("ctl STATE", IPC_CTL_STATE, false, struct ipc_ctl_state, state_f, NULL);

/* ---- the typed API ---- */

CODEC(register, register_d, struct ipc_ctl_register)
CODEC(registered, registered_d, struct ipc_ctl_registered)
CODEC(attach, attach_d, struct ipc_ctl_attach)
CODEC(attached, attached_d, struct ipc_ctl_attached)
CODEC(state, state_d, struct ipc_ctl_state)

static const struct mdesc *ref_desc(uint16_t type)
{
	switch (type) {
	case IPC_CTL_DETACH:
		return &detach_d;
	case IPC_CTL_SAVE_STATE:
		return &save_state_d;
	case IPC_CTL_DETACHED:
		return &detached_d;
	default:
		return NULL;
	}
}

int ipc_ctl_encode_reader_ref(void *buf, size_t cap, uint16_t type, uint32_t req_id,
			      const struct ipc_ctl_reader_ref *m, size_t *ret_len)
{
	const struct mdesc *d = ref_desc(type);

	return d ? ipc_ctl_msg_encode_(d, type, buf, cap, req_id, m, ret_len) : -EINVAL;
}

int ipc_ctl_decode_reader_ref(const struct ipc_ctl_msg *msg, uint16_t type,
			      struct ipc_ctl_reader_ref *ret, char *emsg, size_t emsg_cap)
{
	const struct mdesc *d = ref_desc(type);

	return d ? ipc_ctl_msg_decode_(d, msg, ret, emsg, emsg_cap) : -EINVAL;
}

void ipc_ctl_attached_fini(struct ipc_ctl_attached *m)
{
	if (m)
		ipc_ctl_msg_free_seqs_(&attached_d, m);
}
