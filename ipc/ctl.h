/* SPDX-License-Identifier: Apache-2.0 */
/* The control-socket protocol between sluiced and its clients (DESIGN.md §6, docs/protocol.md). */
#ifndef SLUICE_IPC_CTL_H
#define SLUICE_IPC_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ipc/batch.h"

/*
 * One message per SOCK_SEQPACKET datagram: a 20-byte header, then a body of TLV fields
 * (u16 tag, u32 length, value), everything little-endian. docs/protocol.md is the reference:
 * the message types, their tags, the rules for growing the protocol.
 *
 * Receiving: ipc_ctl_recv() one datagram (and its fds), ipc_ctl_msg_parse() the header, switch
 * on msg.type, ipc_ctl_decode_<type>() the body into a typed struct. Sending: an
 * ipc_ctl_encode_<type>() into a buffer of IPC_CTL_MAX_MSG bytes, then ipc_ctl_send().
 * Nobody outside ctl.c / ctl_msg*.c reads or writes the bytes themselves.
 *
 * Errors: decoders return -EBADMSG with a one-line message in (emsg, emsg_cap) (emsg may be
 * NULL) naming the message type, the field and what was expected; encoders return -EINVAL for
 * a struct that breaks the protocol's rules (the same rules the decoder checks) and -EMSGSIZE
 * when the message does not fit the buffer or IPC_CTL_MAX_MSG.
 */

#define IPC_CTL_MAGIC	  0x4c434c53u /* "SLCL" */
#define IPC_CTL_VERSION	  1
#define IPC_CTL_HDR_SIZE  20
#define IPC_CTL_MAX_MSG	  65536u /* header included */
#define IPC_CTL_MAX_BODY  (IPC_CTL_MAX_MSG - IPC_CTL_HDR_SIZE)
#define IPC_CTL_MAX_FDS	  4 /* the most fds one message may carry (ATTACHED carries 2) */
#define IPC_CTL_FIELD_HDR 6 /* u16 tag, u32 length */

#define IPC_CTL_NAME_MAX  255  /* pipeline and client names, bytes without the NUL */
#define IPC_CTL_TEXT_MAX  1023 /* error and shutdown text */
#define IPC_CTL_KEY_MAX	  63   /* a statistics key */
#define IPC_CTL_STATE_MAX 4096 /* a reader's saved state */
#define IPC_CTL_FP_LEN	  16   /* a pipeline fingerprint (128 bits) */
#define IPC_CTL_TOKEN_MAX 512  /* a reader's resume token (ATTACHED, ATTACH) */

/* Header flags: bits 0-15 may be ignored by a receiver that does not know them, bits 16-31 may
 * not (an unknown one makes the message malformed). Version 1 defines none. */
#define IPC_CTL_F_OPTIONAL_MASK 0x0000ffffu

/* The header as it is on the wire (little-endian fields). Its layout is the same in every
 * protocol version, so that a peer can always read the version and answer a mismatch. */
struct ipc_ctl_hdr {
	uint32_t magic;	  /* IPC_CTL_MAGIC */
	uint16_t version; /* IPC_CTL_VERSION of the sender */
	uint16_t type;	  /* enum ipc_ctl_type */
	uint32_t flags;
	uint32_t req_id;   /* chosen by the client, echoed in the reply (0 in notices) */
	uint32_t body_len; /* bytes after the header: the datagram is exactly 20 + body_len */
};
_Static_assert(sizeof(struct ipc_ctl_hdr) == IPC_CTL_HDR_SIZE, "ctl header is 20 bytes");
_Static_assert(offsetof(struct ipc_ctl_hdr, version) == 4, "layout");
_Static_assert(offsetof(struct ipc_ctl_hdr, type) == 6, "layout");
_Static_assert(offsetof(struct ipc_ctl_hdr, flags) == 8, "layout");
_Static_assert(offsetof(struct ipc_ctl_hdr, req_id) == 12, "layout");
_Static_assert(offsetof(struct ipc_ctl_hdr, body_len) == 16, "layout");

/* Requests have bit 15 clear; a reply is its request's type | 0x8000; ERROR answers any
 * request; SHUTDOWN is a notice the server sends unasked. HELLO and ERROR are frozen: their
 * numbers and tags never change, so that a version mismatch can always be reported. */
enum ipc_ctl_type {
	IPC_CTL_HELLO = 0x0001,
	IPC_CTL_REGISTER = 0x0002,
	IPC_CTL_ATTACH = 0x0003,
	IPC_CTL_DETACH = 0x0004,
	IPC_CTL_SAVE_STATE = 0x0005,
	IPC_CTL_LIST = 0x0006,
	IPC_CTL_STATS = 0x0007,
	IPC_CTL_REMOVE = 0x0008,

	IPC_CTL_ERROR = 0x8000,
	IPC_CTL_HELLO_OK = 0x8001,
	IPC_CTL_REGISTERED = 0x8002,
	IPC_CTL_ATTACHED = 0x8003, /* carries 2 fds: ring data memfd, reader control memfd */
	IPC_CTL_DETACHED = 0x8004,
	IPC_CTL_STATE = 0x8005,
	IPC_CTL_LIST_REPLY = 0x8006,
	IPC_CTL_STATS_REPLY = 0x8007,
	IPC_CTL_REMOVED = 0x8008,

	IPC_CTL_SHUTDOWN = 0xc000,
};

/* "ATTACH", "ERROR", ...; "?" for a number this version does not define. */
const char *ipc_ctl_type_name(unsigned type);
/* How many fds a message of this type carries (0 for unknown types). */
unsigned ipc_ctl_type_fds(unsigned type);

/* ---- messages: header ---- */

/* A received message: its header, host order, and its body in the caller's buffer. */
struct ipc_ctl_msg {
	uint16_t version;
	uint16_t type;
	uint32_t flags;
	uint32_t req_id;
	const uint8_t *body; /* points into the buffer given to ipc_ctl_msg_parse() */
	uint32_t body_len;
};

/*
 * Check the header of the datagram [buf, buf + len) and fill *ret_msg (whose body points into
 * buf). Returns 0; -EBADMSG (shorter than the header, bad magic, body_len is not len - 20,
 * longer than IPC_CTL_MAX_MSG, unknown required flags); or -EPROTONOSUPPORT when the peer
 * speaks another protocol version. In that one error case *ret_msg is filled too (the header
 * layout is the same in every version; body is NULL unless body_len matches), and emsg says
 * "peer speaks protocol version N, this side speaks M": a server answers with an ERROR of that
 * code and text echoing req_id, and a client may still ipc_ctl_decode_error() the reply.
 * The type is not checked here: an unknown type is for the caller to answer (-EOPNOTSUPP).
 */
int ipc_ctl_msg_parse(const void *buf, size_t len, struct ipc_ctl_msg *ret_msg, char *emsg,
		      size_t emsg_cap);

/* ---- messages: typed, one struct per type ---- */

/*
 * Each decoder checks the message's type (and its version, except for the frozen HELLO and
 * ERROR), every field, and the rules of its struct, then fills *ret. Strings in char arrays are
 * copied and NUL-terminated; `const` pointers (spec, state) point into the message buffer and
 * are valid while it is. Arrays (tensors, pipelines, stats) are allocated by the decoder and
 * freed by the type's _fini (which accepts a zeroed struct). -EBADMSG with msg, or -ENOMEM.
 *
 * Each encoder writes header and body into buf (cap bytes), returns 0 and the length in
 * *ret_len; -EINVAL (the struct breaks a rule), -EMSGSIZE (does not fit). Optional fields that
 * are zero or empty are left out.
 */

/* HELLO (frozen), the first request on a connection. */
struct ipc_ctl_hello {
	uint32_t version; /* the client's IPC_CTL_VERSION; required, not 0 */
	uint32_t pid;	  /* the client's pid (informational: SO_PEERCRED is the truth) */
	char client[IPC_CTL_NAME_MAX + 1]; /* optional: a name for logs ("sluicectl", "python") */
};

/* HELLO_OK: the server's version and limits. */
struct ipc_ctl_hello_ok {
	uint32_t version; /* the server's IPC_CTL_VERSION */
	uint32_t server_pid;
	uint32_t max_msg;     /* the largest datagram the server accepts */
	uint32_t max_readers; /* readers per pipeline; 0: no limit */
};

/* The longest spec_dir (an absolute path without its NUL). */
#define IPC_CTL_DIR_MAX 4095

/* REGISTER: a pipeline spec (DESIGN.md §3.4) as JSON text. */
struct ipc_ctl_register {
	const char *spec; /* not NUL-terminated, no NUL inside; spec_len >= 1 */
	uint32_t spec_len;
	/*
	 * Optional: the absolute directory that relative dataset paths of the spec are relative
	 * to (the spec file's, or the client's working directory). Not NUL-terminated.
	 */
	const char *spec_dir;
	uint32_t spec_dir_len;
};

/* REGISTERED: the pipeline now running for that spec. */
struct ipc_ctl_registered {
	char name[IPC_CTL_NAME_MAX + 1]; /* non-empty */
	uint8_t fingerprint[IPC_CTL_FP_LEN];
	bool created; /* true: started for this request; false: an existing one was matched */
};

enum ipc_ctl_mode {
	IPC_CTL_MODE_BROADCAST = 0, /* every reader sees every batch */
	IPC_CTL_MODE_SPLIT = 1,	    /* each batch goes to one reader, first come first served */
	IPC_CTL_MODE_RANK = 2,	    /* batch k to the reader with rank_index k mod rank_count */
	IPC_CTL_MODE_COUNT_ = 3,
};

/*
 * A broadcast reader's lag policy (docs/protocol.md, ATTACH field 7). DEFAULT (0, what a
 * client that says nothing gets): the daemon's, which moves a reader off the shared stream
 * when it is max_lag batches behind the leading other reader or has held the others back for
 * lag_timeout_ms; CATCH_UP: moved off past max_lag batches behind head (and past the time
 * bound); HOLD: it holds the others back, however long.
 */
enum ipc_ctl_lag {
	IPC_CTL_LAG_DEFAULT = 0,
	IPC_CTL_LAG_CATCH_UP = 1,
	IPC_CTL_LAG_HOLD = 2,
	IPC_CTL_LAG_COUNT_ = 3,
};

/* ATTACH: exactly one of name (non-empty) and spec (spec_len >= 1). */
struct ipc_ctl_attach {
	char name[IPC_CTL_NAME_MAX + 1];
	const char *spec;
	uint32_t spec_len;
	uint32_t mode;	     /* enum ipc_ctl_mode */
	uint32_t rank_index; /* MODE_RANK: < rank_count; otherwise both 0 */
	uint32_t rank_count;
	const void *state;	 /* optional: a STATE's bytes to resume from */
	uint32_t state_len;	 /* <= IPC_CTL_STATE_MAX */
	uint32_t lag_policy;	 /* enum ipc_ctl_lag */
	uint64_t max_lag;	 /* batches; 0: the pipeline's default */
	uint64_t lag_timeout_ms; /* DEFAULT, CATCH_UP: the time bound; 0: the daemon's default */
	const char *spec_dir;	 /* with spec: as REGISTER's */
	uint32_t spec_dir_len;
	/* split/rank: the consumer group (DESIGN.md §5); "": the pipeline's default group */
	char group[IPC_CTL_NAME_MAX + 1];
	/*
	 * Resuming after the daemon restarted (docs/DECISIONS.md, "Restarts"): the token the
	 * reader's last ATTACHED gave (opaque, <= IPC_CTL_TOKEN_MAX bytes), and resume_seq, 1 +
	 * the seq of the last batch the reader took (0: it took none).
	 */
	const void *resume;
	uint32_t resume_len;
	uint64_t resume_seq;
	/*
	 * A broadcast reader that the lag policy moves (docs/DECISIONS.md, "Readers that cannot
	 * hold others"): MOVE_OFF, it was moved off the shared stream and attaches (with its
	 * state) to a private pipeline that moves it back once it has caught up, back within
	 * moved_max_lag (its max_lag; 0: the pipeline's default) of the others; MOVE_BACK, that
	 * private pipeline moved it back and it attaches (with its state and its own lag policy)
	 * to the shared ring at its position. 0: neither.
	 */
	uint32_t move; /* enum ipc_ctl_move */
	uint64_t moved_max_lag;
};

/* ATTACH's move (field 14). */
enum ipc_ctl_move {
	IPC_CTL_MOVE_NONE = 0,
	IPC_CTL_MOVE_OFF = 1,
	IPC_CTL_MOVE_BACK = 2,
	IPC_CTL_MOVE_COUNT_ = 3,
};

/* One output tensor of a pipeline's schema (the order of ipc_batch_tensor.schema_index). */
struct ipc_ctl_tensor_info {
	char name[IPC_CTL_NAME_MAX + 1];   /* non-empty */
	uint32_t dtype;			   /* enum ipc_dtype */
	uint32_t rank;			   /* 1..IPC_BATCH_MAX_RANK, the batch dimension included */
	int64_t shape[IPC_BATCH_MAX_RANK]; /* shape[0] = -1 (rows); -1 where it varies; >= -1 */
	bool ragged;			   /* axis 1 is ragged (row_splits) */
};

/* ATTACHED: the reader and its ring; the datagram carries fds[0] = the ring's data memfd
 * (sealed, map it read-only), fds[1] = this reader's control memfd (map it read-write). */
struct ipc_ctl_attached {
	uint64_t reader_id;
	char name[IPC_CTL_NAME_MAX + 1];
	uint8_t fingerprint[IPC_CTL_FP_LEN];
	uint32_t ring_version;		     /* the ring layout version (ipc/ring.h) */
	uint32_t n_slots;		     /* batch slots in the ring */
	uint64_t data_bytes;		     /* size of the data memfd */
	uint64_t ctl_bytes;		     /* size of the control memfd */
	uint64_t max_batch_bytes;	     /* the largest extent a batch may take; 0: not fixed */
	struct ipc_ctl_tensor_info *tensors; /* the schema summary; decoded: allocated */
	uint32_t n_tensors;
	/*
	 * The first epoch this reader gets whole (DESIGN.md §5: a late reader receives whole
	 * epochs): the client gives back, unread, the batches of earlier epochs it finds first.
	 */
	uint64_t first_epoch;
	/*
	 * Restarts (docs/DECISIONS.md): the token to give back in ATTACH's resume when this
	 * reader re-attaches (a view into the message; empty: the daemon keeps no position);
	 * after a resume, batches with seq < skip_below are given back unread by the client (it
	 * read them), batches with seq < redelivered_below or epoch < redelivered_epochs are
	 * marked re-delivered (they may have been delivered before the restart).
	 */
	const void *token;
	uint32_t token_len;
	uint64_t skip_below;
	uint64_t redelivered_below;
	uint64_t redelivered_epochs;
};
void ipc_ctl_attached_fini(struct ipc_ctl_attached *m);

/*
 * DETACH, SAVE_STATE, and the DETACHED reply: one reader. SAVE_STATE only: with at, the state of
 * the position (at_epoch, at_index: batches done in that epoch, at_seq: the stream's seq there)
 * that the client names, for any mode (a rank group's epoch position: every rank took its
 * batches below it); without, the reader's own position (broadcast readers only). With at and
 * name instead of reader_id (0): that position of the pipeline named, for a process that holds
 * no reader of it (the main process of a DataLoader whose workers read).
 */
struct ipc_ctl_reader_ref {
	uint64_t reader_id;
	bool at;
	uint64_t at_epoch, at_index, at_seq;
	char name[IPC_CTL_NAME_MAX + 1]; /* SAVE_STATE only: "" or the pipeline, with at */
};

/* STATE: a reader's position, for ATTACH's state. */
struct ipc_ctl_state {
	uint64_t reader_id;
	const void *state; /* 1..IPC_CTL_STATE_MAX bytes */
	uint32_t state_len;
};

enum ipc_ctl_pipeline_status {
	IPC_CTL_PL_RUNNING = 0,
	IPC_CTL_PL_FINISHED = 1, /* end of stream reached */
	IPC_CTL_PL_FAILED = 2,
	IPC_CTL_PL_COUNT_ = 3,
};

/* One pipeline in a LIST_REPLY. */
struct ipc_ctl_pipeline_info {
	char name[IPC_CTL_NAME_MAX + 1]; /* non-empty */
	uint8_t fingerprint[IPC_CTL_FP_LEN];
	uint32_t status; /* enum ipc_ctl_pipeline_status */
	uint32_t n_readers;
	uint64_t batches_published;
	uint32_t slots_used; /* ring occupancy: slots_used of n_slots */
	uint32_t n_slots;
	/*
	 * Who registered it: a uid (0, root, included), or IPC_CTL_OWNER_HOST for one of the
	 * daemon's config dir. Decoded from a daemon that predates the field: IPC_CTL_OWNER_UNKNOWN.
	 */
	uint32_t owner_uid;
};
#define IPC_CTL_OWNER_HOST    UINT32_MAX       /* (uid_t)-1: the host's, from the config dir */
#define IPC_CTL_OWNER_UNKNOWN (UINT32_MAX - 1) /* absent on the wire (docs/protocol.md) */

/* LIST_REPLY (LIST has no fields: ipc_ctl_encode_empty()). */
struct ipc_ctl_list_reply {
	struct ipc_ctl_pipeline_info *pipelines; /* decoded: allocated */
	uint32_t n_pipelines;
};
void ipc_ctl_list_reply_fini(struct ipc_ctl_list_reply *m);

/* STATS: one pipeline by name. */
struct ipc_ctl_stats {
	char name[IPC_CTL_NAME_MAX + 1]; /* non-empty */
};

/* A number of STATS_REPLY: keys are the daemon's ("batches_published", "wait_ns", ...). */
struct ipc_ctl_stat {
	char key[IPC_CTL_KEY_MAX + 1]; /* non-empty */
	int64_t value;
};

struct ipc_ctl_stats_reply {
	char name[IPC_CTL_NAME_MAX + 1];
	struct ipc_ctl_stat *stats; /* decoded: allocated */
	uint32_t n_stats;
};
void ipc_ctl_stats_reply_fini(struct ipc_ctl_stats_reply *m);

/* REMOVE (drop a pipeline by name) and its reply REMOVED (the name that was dropped). */
struct ipc_ctl_remove {
	char name[IPC_CTL_NAME_MAX + 1]; /* non-empty */
};

/* ERROR (frozen): the answer to a request that failed. */
struct ipc_ctl_error {
	int32_t code;			 /* a negative errno, -4095..-1 */
	char text[IPC_CTL_TEXT_MAX + 1]; /* optional, for a person */
};

#define IPC_CTL_SHUTDOWN_RESTART 1u /* the server expects to be back (reconnect and re-attach) */

/* SHUTDOWN: the server is going away (SIGTERM); sent with req_id 0 before it closes. */
struct ipc_ctl_shutdown {
	uint32_t flags; /* IPC_CTL_SHUTDOWN_* */
	char reason[IPC_CTL_TEXT_MAX + 1];
};

int ipc_ctl_encode_hello(void *buf, size_t cap, uint32_t req_id, const struct ipc_ctl_hello *m,
			 size_t *ret_len);
int ipc_ctl_decode_hello(const struct ipc_ctl_msg *msg, struct ipc_ctl_hello *ret, char *emsg,
			 size_t emsg_cap);
int ipc_ctl_encode_hello_ok(void *buf, size_t cap, uint32_t req_id,
			    const struct ipc_ctl_hello_ok *m, size_t *ret_len);
int ipc_ctl_decode_hello_ok(const struct ipc_ctl_msg *msg, struct ipc_ctl_hello_ok *ret, char *emsg,
			    size_t emsg_cap);
int ipc_ctl_encode_register(void *buf, size_t cap, uint32_t req_id,
			    const struct ipc_ctl_register *m, size_t *ret_len);
int ipc_ctl_decode_register(const struct ipc_ctl_msg *msg, struct ipc_ctl_register *ret, char *emsg,
			    size_t emsg_cap);
int ipc_ctl_encode_registered(void *buf, size_t cap, uint32_t req_id,
			      const struct ipc_ctl_registered *m, size_t *ret_len);
int ipc_ctl_decode_registered(const struct ipc_ctl_msg *msg, struct ipc_ctl_registered *ret,
			      char *emsg, size_t emsg_cap);
int ipc_ctl_encode_attach(void *buf, size_t cap, uint32_t req_id, const struct ipc_ctl_attach *m,
			  size_t *ret_len);
int ipc_ctl_decode_attach(const struct ipc_ctl_msg *msg, struct ipc_ctl_attach *ret, char *emsg,
			  size_t emsg_cap);
int ipc_ctl_encode_attached(void *buf, size_t cap, uint32_t req_id,
			    const struct ipc_ctl_attached *m, size_t *ret_len);
int ipc_ctl_decode_attached(const struct ipc_ctl_msg *msg, struct ipc_ctl_attached *ret, char *emsg,
			    size_t emsg_cap);
/* type: IPC_CTL_DETACH, IPC_CTL_SAVE_STATE or IPC_CTL_DETACHED (else -EINVAL). */
int ipc_ctl_encode_reader_ref(void *buf, size_t cap, uint16_t type, uint32_t req_id,
			      const struct ipc_ctl_reader_ref *m, size_t *ret_len);
int ipc_ctl_decode_reader_ref(const struct ipc_ctl_msg *msg, uint16_t type,
			      struct ipc_ctl_reader_ref *ret, char *emsg, size_t emsg_cap);
int ipc_ctl_encode_state(void *buf, size_t cap, uint32_t req_id, const struct ipc_ctl_state *m,
			 size_t *ret_len);
int ipc_ctl_decode_state(const struct ipc_ctl_msg *msg, struct ipc_ctl_state *ret, char *emsg,
			 size_t emsg_cap);
/* A message without fields (LIST). The decoder checks type, version and the TLV framing. */
int ipc_ctl_encode_empty(void *buf, size_t cap, uint16_t type, uint32_t req_id, size_t *ret_len);
int ipc_ctl_decode_empty(const struct ipc_ctl_msg *msg, uint16_t type, char *emsg, size_t emsg_cap);
int ipc_ctl_encode_list_reply(void *buf, size_t cap, uint32_t req_id,
			      const struct ipc_ctl_list_reply *m, size_t *ret_len);
int ipc_ctl_decode_list_reply(const struct ipc_ctl_msg *msg, struct ipc_ctl_list_reply *ret,
			      char *emsg, size_t emsg_cap);
int ipc_ctl_encode_stats(void *buf, size_t cap, uint32_t req_id, const struct ipc_ctl_stats *m,
			 size_t *ret_len);
int ipc_ctl_decode_stats(const struct ipc_ctl_msg *msg, struct ipc_ctl_stats *ret, char *emsg,
			 size_t emsg_cap);
int ipc_ctl_encode_stats_reply(void *buf, size_t cap, uint32_t req_id,
			       const struct ipc_ctl_stats_reply *m, size_t *ret_len);
int ipc_ctl_decode_stats_reply(const struct ipc_ctl_msg *msg, struct ipc_ctl_stats_reply *ret,
			       char *emsg, size_t emsg_cap);
/* type: IPC_CTL_REMOVE or IPC_CTL_REMOVED (else -EINVAL). */
int ipc_ctl_encode_remove(void *buf, size_t cap, unsigned type, uint32_t req_id,
			  const struct ipc_ctl_remove *m, size_t *ret_len);
int ipc_ctl_decode_remove(const struct ipc_ctl_msg *msg, unsigned type, struct ipc_ctl_remove *ret,
			  char *emsg, size_t emsg_cap);
int ipc_ctl_encode_error(void *buf, size_t cap, uint32_t req_id, const struct ipc_ctl_error *m,
			 size_t *ret_len);
int ipc_ctl_decode_error(const struct ipc_ctl_msg *msg, struct ipc_ctl_error *ret, char *emsg,
			 size_t emsg_cap);
int ipc_ctl_encode_shutdown(void *buf, size_t cap, const struct ipc_ctl_shutdown *m,
			    size_t *ret_len);
int ipc_ctl_decode_shutdown(const struct ipc_ctl_msg *msg, struct ipc_ctl_shutdown *ret, char *emsg,
			    size_t emsg_cap);

/* ---- fields: the TLV layer under the typed messages (also for tests and new types) ---- */

/*
 * A builder writes a header and then fields into buf. Every put returns 0 or the builder's
 * sticky error (-EMSGSIZE once something did not fit in cap or IPC_CTL_MAX_MSG, -EINVAL for a
 * bad argument); after an error nothing more is written. _finish() sets body_len.
 */
struct ipc_ctl_builder {
	uint8_t *buf;
	size_t cap;
	size_t len;
	int err;
};

void ipc_ctl_builder_init(struct ipc_ctl_builder *b, void *buf, size_t cap, uint16_t type,
			  uint32_t req_id);
int ipc_ctl_put_u32(struct ipc_ctl_builder *b, uint16_t tag, uint32_t v);
int ipc_ctl_put_i32(struct ipc_ctl_builder *b, uint16_t tag, int32_t v);
int ipc_ctl_put_u64(struct ipc_ctl_builder *b, uint16_t tag, uint64_t v);
int ipc_ctl_put_i64(struct ipc_ctl_builder *b, uint16_t tag, int64_t v);
int ipc_ctl_put_bytes(struct ipc_ctl_builder *b, uint16_t tag, const void *p, size_t len);
/* A string of len bytes: -EINVAL if it holds a NUL. */
int ipc_ctl_put_str(struct ipc_ctl_builder *b, uint16_t tag, const char *s, size_t len);
/* A field whose value is the fields put until _end(): returns the mark to give _end(). */
size_t ipc_ctl_put_begin(struct ipc_ctl_builder *b, uint16_t tag);
int ipc_ctl_put_end(struct ipc_ctl_builder *b, size_t mark);
/* Sets body_len; returns the sticky error or 0 with the message's length in *ret_len. */
int ipc_ctl_builder_finish(struct ipc_ctl_builder *b, size_t *ret_len);

struct ipc_ctl_field {
	uint16_t tag;
	uint32_t len;
	const uint8_t *val; /* len bytes inside the body */
};

/*
 * A reader walks the fields of a body (or of a nested field's value). Tags 1..63 may appear once
 * each unless their bit is set in `repeated` (bit t for tag t); tag 0 is invalid; tags from 64
 * up are not tracked (they are unknown to this version: the caller skips them).
 */
struct ipc_ctl_reader {
	const uint8_t *base, *p, *end; /* base: for the byte offsets in messages */
	uint64_t seen;
	uint64_t repeated;
	const char *what; /* prefix of error messages, e.g. "ctl ATTACH" */
};

void ipc_ctl_reader_init(struct ipc_ctl_reader *r, const void *body, size_t len, uint64_t repeated,
			 const char *what);
/* 1 and the next field in *ret_field, 0 at the end, -EBADMSG (truncated field header, length
 * past the end, tag 0, a tag seen twice). */
int ipc_ctl_reader_next(struct ipc_ctl_reader *r, struct ipc_ctl_field *ret_field, char *emsg,
			size_t emsg_cap);
/* The value of a field as a number: its length must be 4 (u32, i32) or 8 (u64, i64). */
int ipc_ctl_field_u32(const struct ipc_ctl_field *f, uint32_t *ret, char *emsg, size_t emsg_cap);
int ipc_ctl_field_i32(const struct ipc_ctl_field *f, int32_t *ret, char *emsg, size_t emsg_cap);
int ipc_ctl_field_u64(const struct ipc_ctl_field *f, uint64_t *ret, char *emsg, size_t emsg_cap);
int ipc_ctl_field_i64(const struct ipc_ctl_field *f, int64_t *ret, char *emsg, size_t emsg_cap);
/* The value as a string of at most max_len bytes without a NUL; *ret points into the body. */
int ipc_ctl_field_str(const struct ipc_ctl_field *f, size_t max_len, const char **ret, char *emsg,
		      size_t emsg_cap);

/* ---- the socket ---- */

/*
 * Send one message (len bytes, a whole message from an encoder) with n_fds file descriptors
 * (SCM_RIGHTS; they stay open here). sendmsg with MSG_NOSIGNAL, EINTR retried. Returns 0,
 * -EINVAL (len shorter than a header, n_fds more than the message's type carries),
 * -EMSGSIZE (len > IPC_CTL_MAX_MSG), or sendmsg's -errno (-EPIPE: the peer is gone; -EAGAIN on
 * a non-blocking socket whose buffer is full).
 */
int ipc_ctl_send(int fd, const void *msg, size_t len, const int *fds, size_t n_fds);

/*
 * Receive one datagram into buf (cap bytes) and up to max_fds (<= IPC_CTL_MAX_FDS) file
 * descriptors into fds[] (MSG_CMSG_CLOEXEC: they arrive close-on-exec). Returns the
 * message's length and the number of fds in *ret_nfds; the fds are the caller's to close.
 * Fds past max_fds, or past what the message's type carries (ipc_ctl_type_fds() of the type in
 * the header; none when the header is unreadable), are closed here and not counted.
 * Returns 0 when the peer has closed the connection (or sent an empty datagram, which is not a
 * message either). Errors (nothing is left open, *ret_nfds and fds[] are not written):
 * -EMSGSIZE (MSG_TRUNC: the message was larger than cap, its tail is lost: drop the
 * connection), -EBADMSG (MSG_CTRUNC: more fds were sent than fit max_fds, or the process ran
 * out of descriptors; whatever arrived is closed: drop the connection), -EINVAL, or recvmsg's
 * -errno (-EAGAIN on a non-blocking socket with nothing to read). EINTR is retried.
 */
int ipc_ctl_recv(int fd, void *buf, size_t cap, int *fds, size_t max_fds, size_t *ret_nfds);

/* The connected peer's credentials (SO_PEERCRED: as of connect()). Any ret_ may be NULL. */
int ipc_ctl_peer_cred(int fd, uid_t *ret_uid, gid_t *ret_gid, pid_t *ret_pid);
/*
 * The connected peer's supplementary groups (SO_PEERGROUPS, Linux 4.13: as of connect(), so
 * no /proc race with a pid that is reused) in a new array (*ret_groups, NULL when none; the
 * caller frees it). 0 or -errno (-ENOPROTOOPT: an older kernel).
 */
int ipc_ctl_peer_groups(int fd, gid_t **ret_groups, size_t *ret_n);

#endif
