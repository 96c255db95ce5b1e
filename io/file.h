/* SPDX-License-Identifier: Apache-2.0 */
/* Small whole files (manifests, specs, config files, states) read into memory. */
#ifndef SLUICE_IO_FILE_H
#define SLUICE_IO_FILE_H

#include <stddef.h>

#include "ioerr.h"

/*
 * Read all of the regular file at path, at most max bytes, into a new buffer with a NUL after
 * the last byte (the caller frees *ret_buf). Errors name the file: -ENOENT (and open's other
 * errors), -EISDIR / -EINVAL (not a regular file), -EFBIG (larger than max), -EAGAIN (it grew
 * while being read), -ENOMEM, read's -errno.
 */
int io_file_read(const char *path, size_t max, char **ret_buf, size_t *ret_len,
		 struct io_error *err);

#endif
