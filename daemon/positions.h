/* SPDX-License-Identifier: Apache-2.0 */
/* Readers that resume where they were after sluiced restarted (docs/DECISIONS.md, "Restarts"). */
#ifndef SLUICE_DAEMON_POSITIONS_H
#define SLUICE_DAEMON_POSITIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server.h"

/* What a re-attaching reader's token resolves to. */
struct dmn_resume {
	bool on;
	struct dmn_kept rec; /* the kept record (its strings owned: dmn_resume_fini) */
	uint64_t run;	     /* the token's */
	uint8_t state[PL_STATE_MAX];
	size_t state_len;
	/* for ATTACHED: given back unread below, marked re-delivered below */
	uint64_t skip_below, redelivered_below, redelivered_epochs;
	uint64_t from_seq; /* the seq of the batch it resumes at (the kept state's) */
	/* a pipeline where its split/rank group already resumed: join it there */
	struct dmn_pipeline *join;
};

/*
 * The position ATTACH's resume token and resume_seq ask for: the state to start at (the
 * pipeline's kept position for the reader's mode), or a pipeline its group resumed on.
 * -EINVAL (not a token), -ESTALE (no position kept: no state directory, the record is lost, no
 * position for this mode; msg says which and that the reader does not start over), -ENOMEM.
 */
int dmn_resume_prepare(struct dmn *d, const struct ipc_ctl_attach *m, struct dmn_resume *ret,
		       char *msg, size_t cap);
void dmn_resume_fini(struct dmn_resume *rs);
/*
 * A reader joined pl in pl->groups[group] (-1: broadcast); rs: its resume, if rs->on (the
 * group's later members resuming from the same record find it there). pl's record is written
 * at once (a rank group's place, before it takes anything). Server thread.
 */
void dmn_resume_joined(struct dmn_pipeline *pl, int group, const struct dmn_resume *rs);
/*
 * Where a split or rank reader attaching without a resume token or a state (m), that found pl,
 * joins its group: the live pipeline of the same computation where that group resumed after
 * a restart, if pl has no group of that name; else pl. pl is dropped if it was created for
 * this reader and has none (the caller must not use it then). Server thread.
 */
struct dmn_pipeline *dmn_resume_group_home(struct dmn *d, struct dmn_pipeline *pl, bool created,
					   const struct ipc_ctl_attach *m);
/*
 * What ATTACHED marks re-delivered for a reader that joined pl->groups[group] (-1: broadcast),
 * rs its resume (if rs->on): the batches below rs's bound, or below its group's if that
 * resumed after a restart (a member with an older token, or a member again without one, is
 * given what the group may have had before, as the members that resumed it are). A rank member
 * resuming with its place reads exactly once, unmarked. Server thread.
 */
uint64_t dmn_resume_redelivered_below(struct dmn_pipeline *pl, int group,
				      const struct dmn_resume *rs);
/*
 * A pipeline a user registered, gone with the restart, that a reader resuming by name (m, at
 * m->state) comes back to: made again from the kept record (its spec, spec_dir and owner), or
 * NULL (logged). It reads with its owner's rights, so only its owner (who, the reader) makes
 * it again: another reader of it waits for the owner (the record keeps no one's groups).
 * Server thread.
 */
struct dmn_pipeline *dmn_resume_recreate(struct dmn *d, const struct dmn_resume *rs,
					 const struct ipc_ctl_attach *m,
					 const struct io_creds *who);
/* The token ATTACHED gives for pl (0: none, the state directory is off). */
size_t dmn_resume_token(struct dmn *d, const struct dmn_pipeline *pl, uint8_t *buf, size_t cap);

#endif
