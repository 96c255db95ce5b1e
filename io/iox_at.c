/* SPDX-License-Identifier: Apache-2.0 */
/* iox's reads at offsets (iox_read_at): single reads into the pool, delivered as they complete. */
#include "iox.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "iox_internal.h"

/*
 * Reads at offsets take a buffer when asked and keep it until released, like a file's chunk.
 * They share the queue_depth slots with the files' reads (iox.c): one goes to the backend at
 * once when a slot is free, else it waits on a FIFO and is issued, before any file's read, as
 * slots open. Completed ones wait on a FIFO done list, which iox_next takes from in turn with
 * the files' ready list.
 */

/* Append buffer idx to the FIFO list (*head, *tail) linked through iox_buf.next. */
static void iox_list_push(struct iox *iox, uint32_t *head, uint32_t *tail, uint32_t idx)
{
	iox->bufs[idx].next = IOX_NONE;
	if (*tail == IOX_NONE)
		*head = idx;
	else
		iox->bufs[*tail].next = idx;
	*tail = idx;
}

static uint32_t iox_list_pop(struct iox *iox, uint32_t *head, uint32_t *tail)
{
	uint32_t idx = *head;

	*head = iox->bufs[idx].next;
	if (*head == IOX_NONE)
		*tail = IOX_NONE;
	iox->bufs[idx].next = IOX_NONE;
	return idx;
}

/* Hand the rest of at-read idx to the backend (its first part, or the rest of a short read). */
static int iox_at_read(struct iox *iox, uint32_t idx)
{
	struct iox_buf *b = &iox->bufs[idx];
	struct iox_rd rd;

	b->state = IOX_BUF_INFLIGHT;
	iox->inflight++;
	iox->unstarted++;
	rd.fd = b->at_fd;
	rd.buf = idx;
	rd.addr = iox->mem + (size_t)idx * iox->opts.chunk_len + b->filled;
	rd.len = b->want - b->filled;
	rd.off = b->off + b->filled;
	return iox->ops->queue(iox, &rd);
}

/* Issue the waiting at-reads, oldest first, while queue_depth allows. */
int iox_at_pump(struct iox *iox)
{
	int ret;

	while (iox->at_wait_head != IOX_NONE && iox->inflight < iox->opts.queue_depth) {
		ret = iox_at_read(iox, iox_list_pop(iox, &iox->at_wait_head, &iox->at_wait_tail));
		if (ret < 0)
			return ret;
	}
	return 0;
}

int iox_read_at(struct iox *iox, int fd, const char *path, uint64_t off, size_t len, void *user)
{
	struct iox_buf *b;
	uint32_t idx;
	int ret;

	if (!iox || fd < 0 || len == 0 || len > iox->opts.chunk_len)
		return -EINVAL;
	if (iox->failed)
		return iox->failed;
	if (iox->nfree == 0)
		return -ENOBUFS;
	idx = iox->free_head;
	b = &iox->bufs[idx];
	iox->free_head = b->next;
	iox->nfree--;
	b->state = IOX_BUF_QUEUED;
	b->file_id = IOX_AT_FILE;
	b->off = off;
	b->want = (uint32_t)len; /* chunk_len <= IOX_MAX_CHUNK fits */
	b->filled = 0;
	b->at_fd = fd;
	b->at_err = 0;
	b->at_path = path;
	b->at_user = user;
	iox->at_pending++;
	/* Behind the waiting ones, so that they go to the backend in the order asked. */
	iox_list_push(iox, &iox->at_wait_head, &iox->at_wait_tail, idx);
	ret = iox_at_pump(iox);
	/* The backend refused a read: an engine failure, sticky as in iox_next. */
	if (ret < 0)
		iox->failed = ret;
	return ret;
}

unsigned iox_at_pending(const struct iox *iox)
{
	return iox ? iox->at_pending : 0;
}

unsigned iox_free_buffers(const struct iox *iox)
{
	return iox ? iox->nfree : 0;
}

/* One at-read finished: continue a short read, or put it on the done list. */
int iox_at_complete(struct iox *iox, const struct iox_cqe *c)
{
	struct iox_buf *b = &iox->bufs[c->buf];
	uint64_t end;

	iox->inflight--;
	iox->stats.reads++;
	if (c->res == -EINTR || c->res == -EAGAIN)
		return iox_at_read(iox, c->buf);
	if (c->res < 0) {
		b->at_err = c->res;
	} else if (c->res > 0) {
		iox->stats.bytes += (uint64_t)c->res;
		end = (uint64_t)b->filled + (uint64_t)c->res;
		b->filled = end > b->want ? b->want : (uint32_t)end; /* the kernel reads <= len */
		if (b->filled < b->want)
			return iox_at_read(iox, c->buf); /* short: continue from where it ended */
	}
	/* Complete, failed, or end of file (0 bytes): it ends with the bytes it has. */
	b->state = IOX_BUF_PENDING;
	iox_list_push(iox, &iox->at_done_head, &iox->at_done_tail, c->buf);
	return 0;
}

/*
 * Take the oldest completed at-read. A chunk with bytes holds its buffer until iox_release;
 * one with none (past the end of the file, or failed) gives the buffer back at once.
 */
void iox_at_deliver(struct iox *iox, struct iox_chunk *ret_chunk, struct io_error *err)
{
	uint32_t idx = iox_list_pop(iox, &iox->at_done_head, &iox->at_done_tail);
	struct iox_buf *b = &iox->bufs[idx];
	struct iox_chunk c;
	char eb[128];

	memset(&c, 0, sizeof(c));
	c.user = b->at_user;
	c.file_id = IOX_AT_FILE;
	c.offset = b->off;
	c.last = true;
	c.buf_ = IOX_NO_BUF;
	iox->at_pending--;
	if (b->at_err) {
		c.error = b->at_err;
		if (b->at_path)
			io_error_set(err, "%s: read at offset %" PRIu64 ": %s", b->at_path,
				     b->off + b->filled, iox_strerror(-b->at_err, eb, sizeof(eb)));
		else
			io_error_set(err, "fd %d: read at offset %" PRIu64 ": %s", b->at_fd,
				     b->off + b->filled, iox_strerror(-b->at_err, eb, sizeof(eb)));
		iox_buf_free(iox, idx);
	} else if (b->filled == 0) {
		iox_buf_free(iox, idx);
	} else {
		c.data = iox->mem + (size_t)idx * iox->opts.chunk_len;
		c.len = b->filled;
		b->state = IOX_BUF_HELD;
		b->gen_ = b->gen_ >= IOX_GEN_MAX ? 0 : b->gen_ + 1;
		c.buf_ = ((uint32_t)b->gen_ << IOX_BUF_BITS) | idx;
	}
	*ret_chunk = c;
}
