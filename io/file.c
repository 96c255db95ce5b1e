/* SPDX-License-Identifier: Apache-2.0 */
/* Whole small files into memory. */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int io_file_read(const char *path, size_t max, char **ret_buf, size_t *ret_len,
		 struct io_error *err)
{
	struct stat st;
	size_t len = 0;
	char *buf = NULL;
	int r;

	/* O_NONBLOCK: a FIFO in the file's place must not block the caller (the server) */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		r = -errno;
		io_error_set(err, "%s: %s", path, strerror(-r));
		return r;
	}
	if (fstat(fd, &st) < 0) {
		r = -errno;
		io_error_set(err, "%s: %s", path, strerror(-r));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		io_error_set(err, "%s: not a regular file", path);
		r = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		goto fail;
	}
	if ((uint64_t)st.st_size > max) {
		io_error_set(err, "%s: expected at most %zu bytes, got %lld", path, max,
			     (long long)st.st_size);
		r = -EFBIG;
		goto fail;
	}
	/* One byte more than the size, to notice a file that grew meanwhile; and the NUL. */
	buf = malloc((size_t)st.st_size + 2);
	if (!buf) {
		io_error_set(err, "%s: out of memory", path);
		r = -ENOMEM;
		goto fail;
	}
	for (;;) {
		ssize_t n = read(fd, buf + len, (size_t)st.st_size + 1 - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			io_error_set(err, "%s: read: %s", path, strerror(-r));
			goto fail;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > (size_t)st.st_size) {
			io_error_set(err, "%s: file changed while being read", path);
			r = -EAGAIN;
			goto fail;
		}
	}
	close(fd);
	buf[len] = 0;
	*ret_buf = buf;
	*ret_len = len;
	return 0;

fail:
	free(buf);
	close(fd);
	return r;
}
