/* SPDX-License-Identifier: Apache-2.0 */
/* TFRecord writer: framing with masked CRC32C, optional gzip/zlib stream compression. */
#include "tfr.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define OUT_LEN (256u << 10)

struct tfr_writer {
	int fd;
	enum tfr_compression comp;
	z_stream zs;
	bool zs_ready;
	uint8_t *buf; /* bytes waiting for write(2) (compressed when comp != NONE) */
	size_t len;
	int err; /* first error, sticky */
};

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int flush_buf(struct tfr_writer *w)
{
	int rc = write_all(w->fd, w->buf, w->len);

	w->len = 0;
	return rc;
}

/* Pass bytes through deflate (or straight into the buffer), flushing the buffer when full. */
static int put(struct tfr_writer *w, const void *data, size_t n, int zflush)
{
	int rc;

	if (w->err)
		return w->err;
	if (w->comp == TFR_COMPRESSION_NONE) {
		const uint8_t *p = data;

		while (n > 0) {
			size_t take = OUT_LEN - w->len < n ? OUT_LEN - w->len : n;

			memcpy(w->buf + w->len, p, take);
			w->len += take;
			p += take;
			n -= take;
			if (w->len == OUT_LEN && (rc = flush_buf(w)) < 0)
				return w->err = rc;
		}
		return 0;
	}
	w->zs.next_in = (Bytef *)data;
	w->zs.avail_in = (uInt)n;
	for (;;) {
		int zrc;

		w->zs.next_out = w->buf + w->len;
		w->zs.avail_out = (uInt)(OUT_LEN - w->len);
		zrc = deflate(&w->zs, zflush);
		w->len = OUT_LEN - w->zs.avail_out;
		if (zrc == Z_STREAM_ERROR)
			return w->err = -EINVAL;
		if (w->len == OUT_LEN) {
			if ((rc = flush_buf(w)) < 0)
				return w->err = rc;
			continue;
		}
		if (zflush == Z_FINISH ? zrc == Z_STREAM_END : w->zs.avail_in == 0)
			return 0;
	}
}

int tfr_writer_fdopen(int fd, enum tfr_compression c, int level, struct tfr_writer **ret_w)
{
	struct tfr_writer *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	w->buf = malloc(OUT_LEN);
	if (!w->buf) {
		free(w);
		return -ENOMEM;
	}
	w->fd = fd;
	w->comp = c;
	if (c != TFR_COMPRESSION_NONE) {
		int bits = c == TFR_COMPRESSION_GZIP ? 15 + 16 : 15;

		if (deflateInit2(&w->zs, level, Z_DEFLATED, bits, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
			free(w->buf);
			free(w);
			return -EINVAL;
		}
		w->zs_ready = true;
	}
	*ret_w = w;
	return 0;
}

int tfr_writer_open(const char *path, enum tfr_compression c, int level, struct tfr_writer **ret_w)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int rc;

	if (fd < 0)
		return -errno;
	rc = tfr_writer_fdopen(fd, c, level, ret_w);
	if (rc < 0)
		close(fd);
	return rc;
}

int tfr_writer_write(struct tfr_writer *w, const void *data, size_t len)
{
	uint8_t head[TFR_HEADER_LEN], foot[TFR_FOOTER_LEN];
	int rc;

	tfr_frame_header(head, len);
	tfr_frame_footer(foot, data, len);
	if ((rc = put(w, head, sizeof(head), Z_NO_FLUSH)) < 0 ||
	    (rc = put(w, data, len, Z_NO_FLUSH)) < 0 ||
	    (rc = put(w, foot, sizeof(foot), Z_NO_FLUSH)) < 0)
		return rc;
	return 0;
}

int tfr_writer_close(struct tfr_writer *w)
{
	int rc = 0;

	if (!w)
		return 0;
	if (w->comp != TFR_COMPRESSION_NONE)
		rc = put(w, "", 0, Z_FINISH);
	if (rc == 0 && w->len > 0)
		rc = flush_buf(w);
	if (rc == 0)
		rc = w->err;
	if (close(w->fd) < 0 && rc == 0)
		rc = -errno;
	if (w->zs_ready)
		deflateEnd(&w->zs);
	free(w->buf);
	free(w);
	return rc;
}
