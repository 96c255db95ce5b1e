/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Opening files with a requester's rights (issue 19, docs/DECISIONS.md "Whose rights read a
 * dataset"): the calling thread takes the requester's file-system identity (fsuid, fsgid,
 * supplementary groups) around an open, as knfsd and Samba do, so that the kernel checks the
 * requester's permissions at the open itself — no path test that could race.
 */
#ifndef SLUICE_IO_CREDS_H
#define SLUICE_IO_CREDS_H

#include <sys/stat.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Whose rights: a user, its primary group and its supplementary groups (owned). */
struct io_creds {
	uid_t uid;
	gid_t gid;
	size_t n_groups;
	gid_t *groups;
};

/* A copy of src (groups copied) in *dst: 0 or -ENOMEM. */
int io_creds_copy(struct io_creds *dst, const struct io_creds *src);
void io_creds_clear(struct io_creds *c);

/*
 * Can this process take c's identity? True when c is NULL, when c is the process's own user,
 * or when it may change its file-system ids (CAP_SETUID and CAP_SETGID). Else false, with
 * why in msg.
 */
bool io_creds_usable(const struct io_creds *c, char *msg, size_t msg_cap);

/*
 * This thread takes c's file-system identity (c NULL, or the process's own user: nothing
 * changes) until io_creds_leave. Other threads are not affected. 0, or -EPERM (the process
 * may not; nothing changed).
 */
int io_creds_enter(const struct io_creds *c);
/* Back to the process's own identity (after io_creds_enter with the same c). */
void io_creds_leave(const struct io_creds *c);

/* open(2) with c's rights: an fd, or -errno. */
int io_creds_open(const struct io_creds *c, const char *path, int flags);
/*
 * A data file for reading, with c's rights: opened with O_NONBLOCK (a FIFO or a device put in
 * its place since it was listed does not block the opening thread), fstat'ed, and kept only if
 * it is a regular file; O_NONBLOCK is then cleared (io_uring honours it on regular files). flags
 * are added to O_RDONLY | O_CLOEXEC | O_NOCTTY (O_DIRECT, say). An fd with its stat in *ret_st
 * (may be NULL), or -errno; a directory is -EISDIR, another file that is not regular -EINVAL.
 */
int io_creds_open_file(const struct io_creds *c, const char *path, int flags, struct stat *ret_st);

#endif
