/* SPDX-License-Identifier: Apache-2.0 */
/* TFRecord reader: chunk-fed framing with both CRCs, gzip/zlib inflate, precise errors. */
#include "tfr.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "crc32c.h"

/*
 * The reader turns a byte stream that arrives in chunks into records. Bytes come from a
 * "source": the fed chunk itself (no compression) or the inflate window (gzip/zlib). A record
 * that lies wholly inside what the source has at hand is returned in place (zero-copy); one
 * that straddles the end is assembled in asm_buf, which grows only as bytes actually arrive, so
 * a forged length never makes us allocate more than the cap or more than the stream holds.
 */

#define WINDOW_LEN (256u << 10)
#define ASM_KEEP   (1u << 20) /* an assembly buffer kept from one file to the next */

struct tfr_reader {
	struct tfr_reader_opts opts;
	char *path;
	uint64_t input_size; /* total input bytes when known, else 0 */

	/* input chunk (borrowed from the caller until we return TFR_NEED_INPUT) */
	const uint8_t *in;
	size_t in_len, in_pos;
	uint64_t in_consumed; /* input bytes consumed before the current chunk */
	bool finished;

	/* inflate state (compressed streams) */
	z_stream zs;
	bool zs_ready;
	bool zs_ended; /* the current member/stream reached its end */
	bool zs_any;   /* at least one input byte has gone into inflate */
	uint8_t *win;
	size_t win_len, win_pos;

	/* assembly of a record that straddles the source's end */
	uint8_t *asm_buf;
	size_t asm_cap, asm_len, asm_need;
	uint64_t asm_reserved; /* room held through opts.reserve for it */
	bool assembling;
	uint64_t rec_off; /* stream offset of the header being assembled */

	uint64_t stream_off; /* offset in the (decompressed) stream of the next unread byte */
	uint64_t index;

	int sticky; /* sticky error, 0 when none */
	char sticky_msg[sizeof(((struct io_error *)0)->msg)];
};

void tfr_reader_opts_init(struct tfr_reader_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->size = sizeof(*opts);
	opts->compression = TFR_COMPRESSION_NONE;
	opts->max_record_len = TFR_DEFAULT_MAX_RECORD_LEN;
	opts->verify_crc = true;
}

static uint64_t load_le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static uint32_t load_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void store_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

void tfr_frame_header(uint8_t out[TFR_HEADER_LEN], uint64_t len)
{
	for (int i = 0; i < 8; i++)
		out[i] = (uint8_t)(len >> (8 * i));
	store_le32(out + 8, crc32c_mask(crc32c(out, 8)));
}

bool tfr_frame_header_check(const uint8_t h[TFR_HEADER_LEN], uint64_t *ret_len)
{
	*ret_len = load_le64(h);
	return crc32c_mask(crc32c(h, 8)) == load_le32(h + 8);
}

void tfr_frame_footer(uint8_t out[TFR_FOOTER_LEN], const void *data, size_t len)
{
	store_le32(out, crc32c_mask(crc32c(data, len)));
}

static int zs_setup(struct tfr_reader *r)
{
	int bits = r->opts.compression == TFR_COMPRESSION_GZIP ? 15 + 16 : 15;

	if (r->zs_ready)
		return inflateReset2(&r->zs, bits) == Z_OK ? 0 : -ENOMEM;
	memset(&r->zs, 0, sizeof(r->zs));
	if (inflateInit2(&r->zs, bits) != Z_OK)
		return -ENOMEM;
	r->zs_ready = true;
	return 0;
}

struct tfr_reader *tfr_reader_create(const struct tfr_reader_opts *opts)
{
	struct tfr_reader *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	tfr_reader_opts_init(&r->opts);
	if (opts)
		memcpy(&r->opts, opts, opts->size < sizeof(r->opts) ? opts->size : sizeof(r->opts));
	r->opts.size = sizeof(r->opts);
	if (r->opts.max_record_len == 0)
		r->opts.max_record_len = TFR_DEFAULT_MAX_RECORD_LEN;
	r->opts.path = NULL;
	if (tfr_reader_reset(r, opts ? opts->path : NULL) < 0) {
		tfr_reader_destroy(r);
		return NULL;
	}
	return r;
}

void tfr_reader_destroy(struct tfr_reader *r)
{
	if (!r)
		return;
	if (r->zs_ready)
		inflateEnd(&r->zs);
	free(r->win);
	free(r->asm_buf);
	if (r->asm_reserved && r->opts.unreserve)
		r->opts.unreserve(r->opts.reserve_ctx, r->asm_reserved);
	free(r->path);
	free(r);
}

int tfr_reader_reset(struct tfr_reader *r, const char *path)
{
	if (path) {
		char *p = strdup(path);

		if (!p)
			return -ENOMEM;
		free(r->path);
		r->path = p;
	}
	r->input_size = 0;
	r->in = NULL;
	r->in_len = r->in_pos = 0;
	r->in_consumed = 0;
	r->finished = false;
	r->zs_ended = false;
	r->zs_any = false;
	r->win_len = r->win_pos = 0;
	r->asm_len = r->asm_need = 0;
	if (r->asm_cap > ASM_KEEP) { /* a big record's buffer: not kept for the next file */
		free(r->asm_buf);
		r->asm_buf = NULL;
		r->asm_cap = 0;
		if (r->asm_reserved && r->opts.unreserve)
			r->opts.unreserve(r->opts.reserve_ctx, r->asm_reserved);
		r->asm_reserved = 0;
	}
	r->assembling = false;
	r->stream_off = 0;
	r->index = 0;
	r->sticky = 0;
	if (r->opts.compression != TFR_COMPRESSION_NONE) {
		if (!r->win) {
			r->win = malloc(WINDOW_LEN);
			if (!r->win)
				return -ENOMEM;
		}
		if (zs_setup(r) < 0)
			return -ENOMEM;
	}
	return 0;
}

void tfr_reader_set_input_size(struct tfr_reader *r, uint64_t size)
{
	r->input_size = size;
}

void tfr_reader_feed(struct tfr_reader *r, const void *buf, size_t len)
{
	r->in_consumed += r->in_pos;
	r->in = buf;
	r->in_len = len;
	r->in_pos = 0;
}

void tfr_reader_finish(struct tfr_reader *r)
{
	r->finished = true;
}

bool tfr_reader_failed(const struct tfr_reader *r)
{
	return r->sticky != 0;
}

uint64_t tfr_reader_records(const struct tfr_reader *r)
{
	return r->index;
}

uint64_t tfr_reader_input_bytes(const struct tfr_reader *r)
{
	return r->in_consumed + r->in_pos;
}

static const char *name_of(const struct tfr_reader *r)
{
	return r->path ? r->path : "<stream>";
}

static const char *where(const struct tfr_reader *r)
{
	return r->opts.compression == TFR_COMPRESSION_NONE ? "offset" : "decompressed offset";
}

/* Record an error (sticky unless told otherwise) and return it. */
static int fail(struct tfr_reader *r, int rc, bool sticky, struct io_error *err, const char *fmt,
		...) __attribute__((format(printf, 5, 6)));

static int fail(struct tfr_reader *r, int rc, bool sticky, struct io_error *err, const char *fmt,
		...)
{
	char msg[sizeof(r->sticky_msg)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (sticky) {
		r->sticky = rc;
		memcpy(r->sticky_msg, msg, sizeof(msg));
	}
	io_error_set(err, "%s", msg);
	return rc;
}

/*
 * Inflate more input into the (empty) window. Returns 1 when bytes were produced, 0 when more
 * input is needed or the stream is complete, or a negative errno.
 */
static int inflate_more(struct tfr_reader *r, struct io_error *err)
{
	const char *kind = r->opts.compression == TFR_COMPRESSION_GZIP ? "gzip" : "zlib";

	r->win_len = r->win_pos = 0;
	for (;;) {
		size_t avail_in = r->in_len - r->in_pos;
		int zrc;

		if (r->zs_ended) {
			if (avail_in == 0)
				return 0;
			if (r->opts.compression == TFR_COMPRESSION_ZLIB)
				return fail(r, -EBADMSG, true, err,
					    "%s: %zu bytes of garbage after the end of the zlib "
					    "stream at compressed offset %llu",
					    name_of(r), avail_in,
					    (unsigned long long)tfr_reader_input_bytes(r));
			/* Another gzip member follows (concatenated gzip). */
			if (zs_setup(r) < 0)
				return fail(r, -ENOMEM, true, err, "%s: out of memory", name_of(r));
			r->zs_ended = false;
		}
		if (avail_in == 0)
			return 0;
		r->zs.next_in = (Bytef *)(r->in + r->in_pos);
		r->zs.avail_in = (uInt)(avail_in > (1u << 30) ? (1u << 30) : avail_in);
		r->zs.next_out = r->win;
		r->zs.avail_out = WINDOW_LEN;
		r->zs_any = true;
		zrc = inflate(&r->zs, Z_NO_FLUSH);
		r->in_pos = (size_t)((const uint8_t *)r->zs.next_in - r->in);
		r->win_len = WINDOW_LEN - r->zs.avail_out;
		switch (zrc) {
		case Z_STREAM_END:
			r->zs_ended = true;
			break;
		case Z_OK:
		case Z_BUF_ERROR:
			break;
		case Z_MEM_ERROR:
			return fail(r, -ENOMEM, true, err, "%s: out of memory in inflate",
				    name_of(r));
		default:
			return fail(r, -EBADMSG, true, err,
				    "%s: corrupt %s stream at compressed offset %llu: %s",
				    name_of(r), kind, (unsigned long long)tfr_reader_input_bytes(r),
				    r->zs.msg ? r->zs.msg : "inflate error");
		}
		if (r->win_len > 0)
			return 1;
	}
}

/*
 * What the source has at hand, in ret_p and ret_n. Returns 1 when bytes are available, 0 when the
 * caller must feed more (or the stream is done), or a negative errno.
 */
static int src_peek(struct tfr_reader *r, const uint8_t **ret_p, size_t *ret_n,
		    struct io_error *err)
{
	if (r->opts.compression == TFR_COMPRESSION_NONE) {
		*ret_p = r->in + r->in_pos;
		*ret_n = r->in_len - r->in_pos;
		return *ret_n > 0;
	}
	if (r->win_pos == r->win_len) {
		int rc = inflate_more(r, err);

		if (rc <= 0)
			return rc;
	}
	*ret_p = r->win + r->win_pos;
	*ret_n = r->win_len - r->win_pos;
	return 1;
}

static void src_consume(struct tfr_reader *r, size_t n)
{
	if (r->opts.compression == TFR_COMPRESSION_NONE)
		r->in_pos += n;
	else
		r->win_pos += n;
	r->stream_off += n;
}

/* Check a header; on success *ret_len is the payload length. */
static int check_header(struct tfr_reader *r, const uint8_t *h, uint64_t off, uint64_t *ret_len,
			struct io_error *err)
{
	uint64_t len = load_le64(h);
	uint32_t stored = load_le32(h + 8);

	if (r->opts.verify_crc) {
		uint32_t want = crc32c_mask(crc32c(h, 8));

		if (want != stored)
			return fail(r, -EBADMSG, true, err,
				    "%s: record %llu at %s %llu: header CRC mismatch (stored "
				    "0x%08x, "
				    "computed 0x%08x over length field %llu)",
				    name_of(r), (unsigned long long)r->index, where(r),
				    (unsigned long long)off, stored, want, (unsigned long long)len);
	}
	if (len > r->opts.max_record_len)
		return fail(r, -EMSGSIZE, true, err,
			    "%s: record %llu at %s %llu: length %llu exceeds the limit of %llu "
			    "bytes",
			    name_of(r), (unsigned long long)r->index, where(r),
			    (unsigned long long)off, (unsigned long long)len,
			    (unsigned long long)r->opts.max_record_len);
	if (r->opts.compression == TFR_COMPRESSION_NONE && r->input_size) {
		uint64_t left = r->input_size > off + TFR_HEADER_LEN
					? r->input_size - off - TFR_HEADER_LEN
					: 0;

		if (len > left || left - len < TFR_FOOTER_LEN)
			return fail(r, -EBADMSG, true, err,
				    "%s: record %llu at offset %llu: length %llu runs past the end "
				    "of the file (%llu bytes left after the header)",
				    name_of(r), (unsigned long long)r->index,
				    (unsigned long long)off, (unsigned long long)len,
				    (unsigned long long)left);
	}
	*ret_len = len;
	return 0;
}

static int crc_mismatch(struct io_error *err, const char *path, const struct tfr_record *rec,
			uint32_t stored, uint32_t want)
{
	io_error_set(err,
		     "%s: record %llu at %s %llu: data CRC mismatch (stored 0x%08x, computed "
		     "0x%08x over %zu bytes)",
		     path ? path : "<stream>", (unsigned long long)rec->index,
		     rec->decompressed ? "decompressed offset" : "offset",
		     (unsigned long long)rec->offset, stored, want, rec->len);
	return -EBADMSG;
}

int tfr_record_verify(const struct tfr_record *rec, const char *path, struct io_error *err)
{
	uint32_t want, stored;

	if (rec->crc_checked)
		return 0;
	want = crc32c_mask(crc32c(rec->data, rec->len));
	stored = tfr_record_stored_crc(rec->data, rec->len);
	return want == stored ? 0 : crc_mismatch(err, path, rec, stored, want);
}

/*
 * Fill ret_rec and check its data CRC (unless deferred or off). A mismatch is not sticky: the
 * framing is intact, so the reader can go on with the next record (skip_record). The footer
 * follows data (both callers). When the check is deferred it is not read here but prefetched
 * with the next record's header, which share a cache line or two: on a large record just read
 * by DMA that line is a miss, which a caller interleaving files then takes in the background.
 */
static int emit(struct tfr_reader *r, const uint8_t *data, uint64_t len, uint64_t off,
		struct tfr_record *ret_rec, struct io_error *err)
{
	struct tfr_record rec = {
		.data = data,
		.len = (size_t)len,
		.offset = off,
		.index = r->index++,
		.decompressed = r->opts.compression != TFR_COMPRESSION_NONE,
		.crc_checked = r->opts.verify_crc && !r->opts.defer_data_crc,
	};

	if (r->opts.defer_data_crc && r->opts.verify_crc) {
		__builtin_prefetch(data + len);
		__builtin_prefetch(data + len + TFR_FOOTER_LEN + TFR_HEADER_LEN - 1);
	} else {
		rec.masked_crc = load_le32(data + len);
	}
	if (rec.crc_checked) {
		uint32_t want = crc32c_mask(crc32c(data, len));

		if (want != rec.masked_crc)
			return crc_mismatch(err, name_of(r), &rec, rec.masked_crc, want);
	}
	if (!r->opts.verify_crc)
		rec.crc_checked = true; /* nothing left to check */
	*ret_rec = rec;
	return TFR_RECORD;
}

/*
 * The record whose header starts at r->rec_off is r->asm_need bytes with header and footer and
 * is about to be assembled: ask opts.reserve for the room first. 0 or -ENOMEM (refused: said).
 */
static int asm_admit(struct tfr_reader *r, struct io_error *err)
{
	if (!r->opts.reserve || r->asm_need <= r->asm_reserved)
		return 0;
	char why[200] = "";
	uint64_t more = r->asm_need - r->asm_reserved;
	if (r->opts.reserve(r->opts.reserve_ctx, more, why, sizeof(why)) < 0)
		return fail(r, -ENOMEM, true, err,
			    "%s: record %llu at offset %llu is %llu bytes and is not read: %s",
			    name_of(r), (unsigned long long)r->index,
			    (unsigned long long)r->rec_off,
			    (unsigned long long)(r->asm_need - TFR_HEADER_LEN - TFR_FOOTER_LEN),
			    why[0] ? why : "no room");
	r->asm_reserved += more;
	return 0;
}

static int asm_reserve(struct tfr_reader *r, size_t need)
{
	uint8_t *nb;
	size_t cap;

	if (need <= r->asm_cap)
		return 0;
	cap = r->asm_cap ? r->asm_cap : 4096;
	while (cap < need)
		cap *= 2;
	nb = realloc(r->asm_buf, cap);
	if (!nb)
		return -ENOMEM;
	r->asm_buf = nb;
	r->asm_cap = cap;
	return 0;
}

static int at_end(struct tfr_reader *r, struct io_error *err)
{
	const char *part;
	size_t have, of;

	if (r->opts.compression != TFR_COMPRESSION_NONE && r->zs_any && !r->zs_ended)
		return fail(r, -EBADMSG, true, err,
			    "%s: %s stream cut short: it ends at compressed offset %llu without "
			    "its trailer (record %llu, decompressed offset %llu)",
			    name_of(r), tfr_compression_name(r->opts.compression),
			    (unsigned long long)tfr_reader_input_bytes(r),
			    (unsigned long long)r->index, (unsigned long long)r->stream_off);
	if (!r->assembling)
		return TFR_END;
	have = r->asm_len;
	if (have < TFR_HEADER_LEN) {
		part = "header";
		of = TFR_HEADER_LEN;
	} else if (have < r->asm_need - TFR_FOOTER_LEN) {
		part = "data";
		have -= TFR_HEADER_LEN;
		of = r->asm_need - TFR_HEADER_LEN - TFR_FOOTER_LEN;
	} else {
		part = "data CRC";
		have -= r->asm_need - TFR_FOOTER_LEN;
		of = TFR_FOOTER_LEN;
	}
	return fail(r, -EBADMSG, true, err,
		    "%s: record %llu at %s %llu: truncated: the file ends in the record's %s "
		    "(%zu of %zu bytes)",
		    name_of(r), (unsigned long long)r->index, where(r),
		    (unsigned long long)r->rec_off, part, have, of);
}

int tfr_reader_next(struct tfr_reader *r, struct tfr_record *ret_rec, struct io_error *err)
{
	const uint8_t *p;
	size_t n;
	int rc;

	if (r->sticky) {
		io_error_set(err, "%s", r->sticky_msg);
		return r->sticky;
	}
	for (;;) {
		rc = src_peek(r, &p, &n, err);
		if (rc < 0)
			return rc;
		if (rc == 0)
			return r->finished ? at_end(r, err) : TFR_NEED_INPUT;

		if (!r->assembling) {
			uint64_t len, off = r->stream_off;

			if (n >= TFR_HEADER_LEN) {
				rc = check_header(r, p, off, &len, err);
				if (rc < 0)
					return rc;
				if (n - TFR_HEADER_LEN >= len &&
				    n - TFR_HEADER_LEN - len >= TFR_FOOTER_LEN) {
					/* Zero-copy: the whole record is at hand. */
					src_consume(r, TFR_HEADER_LEN + len + TFR_FOOTER_LEN);
					return emit(r, p + TFR_HEADER_LEN, len, off, ret_rec, err);
				}
				r->asm_need = TFR_HEADER_LEN + len + TFR_FOOTER_LEN;
			} else {
				r->asm_need = TFR_HEADER_LEN;
			}
			r->assembling = true;
			r->asm_len = 0;
			r->rec_off = off;
			rc = asm_admit(r, err);
			if (rc < 0)
				return rc;
		}

		/* Assemble: copy what is at hand, up to what the record needs. */
		{
			size_t take = r->asm_need - r->asm_len;

			if (take > n)
				take = n;
			if (asm_reserve(r, r->asm_len + take) < 0)
				return fail(r, -ENOMEM, true, err, "%s: out of memory", name_of(r));
			memcpy(r->asm_buf + r->asm_len, p, take);
			r->asm_len += take;
			src_consume(r, take);
		}
		if (r->asm_len < r->asm_need)
			continue;
		if (r->asm_need == TFR_HEADER_LEN) {
			uint64_t len;

			rc = check_header(r, r->asm_buf, r->rec_off, &len, err);
			if (rc < 0)
				return rc;
			r->asm_need = TFR_HEADER_LEN + len + TFR_FOOTER_LEN;
			rc = asm_admit(r, err);
			if (rc < 0)
				return rc;
			continue;
		}
		r->assembling = false;
		{
			uint64_t len = r->asm_need - TFR_HEADER_LEN - TFR_FOOTER_LEN;

			return emit(r, r->asm_buf + TFR_HEADER_LEN, len, r->rec_off, ret_rec, err);
		}
	}
}
