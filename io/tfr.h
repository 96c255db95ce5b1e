/* SPDX-License-Identifier: Apache-2.0 */
/* TFRecord framing: a chunk-fed reader (with gzip/zlib inflate) and a writer. */
#ifndef SLUICE_IO_TFR_H
#define SLUICE_IO_TFR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ioerr.h"

enum tfr_compression {
	TFR_COMPRESSION_NONE = 0,
	TFR_COMPRESSION_GZIP = 1,
	TFR_COMPRESSION_ZLIB = 2,
};

/* Size of a record's header (length + masked CRC of the length) and footer (masked CRC). */
#define TFR_HEADER_LEN 12
#define TFR_FOOTER_LEN 4
/* Default cap on one record's length (in the decompressed stream). */
#define TFR_DEFAULT_MAX_RECORD_LEN (256ull << 20)

/* "none", "gzip", "zlib". */
const char *tfr_compression_name(enum tfr_compression c);
/* Accepts "none", "gzip", "zlib" (and "" / NULL as none). -EINVAL otherwise. */
int tfr_compression_parse(const char *s, enum tfr_compression *ret_c);
/*
 * Guess the compression of a file from its first bytes (at least 12 are best): a valid
 * uncompressed record header wins, then the gzip magic (1f 8b 08), then a zlib header
 * (CM=8, (CMF*256+FLG) % 31 == 0), else none.
 */
enum tfr_compression tfr_compression_detect(const void *head, size_t len);

/* One record, as the reader returns it. */
struct tfr_record {
	const uint8_t *data; /* the payload; see tfr_reader_next() for how long it stays valid */
	size_t len;
	uint64_t offset;     /* byte offset of the record's header in the (decompressed) stream */
	uint64_t index;	     /* 0-based index of the record in the file */
	uint32_t masked_crc; /* the data CRC stored in the file (masked); 0 with defer_data_crc,
			      * which leaves the footer unread: tfr_record_stored_crc() */
	bool decompressed;   /* offset is in a decompressed stream */
	bool crc_checked;    /* the reader verified the data CRC */
};

/*
 * Check a record's data CRC where the reader left it to the caller (opts.defer_data_crc), for
 * example on the worker that decodes it. 0, or -EBADMSG with the reader's message ("PATH:
 * record N at offset O: data CRC mismatch ..."). A record the reader checked passes at once.
 */
int tfr_record_verify(const struct tfr_record *rec, const char *path, struct io_error *err);

/*
 * The data CRC stored in the file (masked): the record's footer, the TFR_FOOTER_LEN bytes right
 * after data, which stay valid as long as data does (also for an assembled record).
 */
static inline uint32_t tfr_record_stored_crc(const uint8_t *data, size_t len)
{
	const uint8_t *f = data + len;

	return (uint32_t)f[0] | (uint32_t)f[1] << 8 | (uint32_t)f[2] << 16 | (uint32_t)f[3] << 24;
}

struct tfr_reader_opts {
	size_t size;			  /* sizeof(struct tfr_reader_opts), set by _init */
	const char *path;		  /* for messages only; copied; may be NULL */
	enum tfr_compression compression; /* of the whole stream */
	uint64_t max_record_len;	  /* records longer than this are an error (-EMSGSIZE) */
	bool verify_crc;		  /* check both CRCs (default true) */
	bool defer_data_crc;		  /* leave the data CRC to tfr_record_verify(), and the
					   * footer unread: only prefetched, with the next header
					   * (a caller that frames other files meanwhile then finds
					   * it in cache) */
	/*
	 * Room for a record that has to be assembled (it straddles the chunks it arrives in),
	 * asked for its whole length when its header is read, before any of its bytes are
	 * buffered (NULL: none asked). reserve returns 0, or -ENOMEM with why filled: the
	 * record is then refused (-ENOMEM, sticky) with why in the message, naming the record.
	 * The room is held while the reader keeps its assembly buffer, given back with
	 * unreserve (at tfr_reader_destroy, or at a reset after a record over 1 MiB).
	 */
	int (*reserve)(void *ctx, uint64_t bytes, char *why, size_t why_cap);
	void (*unreserve)(void *ctx, uint64_t bytes);
	void *reserve_ctx;
};

void tfr_reader_opts_init(struct tfr_reader_opts *opts);

struct tfr_reader;

/* NULL only when out of memory. opts may be NULL (defaults). */
struct tfr_reader *tfr_reader_create(const struct tfr_reader_opts *opts);
void tfr_reader_destroy(struct tfr_reader *r);

/*
 * Reset for a new file with the same options (path replaced when path is not NULL), keeping the
 * buffers. Used to read many files with one reader.
 */
int tfr_reader_reset(struct tfr_reader *r, const char *path);

/*
 * Tell the reader the input's total size when it is known (uncompressed files): a record whose
 * length runs past the end is then rejected at its header, before any byte is buffered.
 */
void tfr_reader_set_input_size(struct tfr_reader *r, uint64_t size);

/*
 * Hand the reader the next chunk of the file. Allowed only when the last tfr_reader_next()
 * returned TFR_NEED_INPUT (or before the first call). The reader keeps a pointer to buf and
 * reads it during the following tfr_reader_next() calls: buf must stay unchanged until next()
 * returns TFR_NEED_INPUT again. len may be 0.
 */
void tfr_reader_feed(struct tfr_reader *r, const void *buf, size_t len);
/* Say that the file has no more bytes (after the last feed). */
void tfr_reader_finish(struct tfr_reader *r);

enum {
	TFR_NEED_INPUT = 0, /* feed the next chunk, or finish */
	TFR_RECORD = 1,	    /* *ret_rec holds a record */
	TFR_END = 2,	    /* clean end of the file after the last record */
};

/*
 * Next record. Returns TFR_RECORD, TFR_NEED_INPUT, TFR_END, or a negative errno with a message
 * in err that names the file (opts.path), the byte offset of the bad record, its index, and what
 * was wrong (truncated header / data / CRC, header CRC mismatch, data CRC mismatch, length over
 * the cap or past the end of the file, gzip/zlib stream errors with the compressed offset).
 *
 * ret_rec->data points into the fed chunk when the record lies inside it (zero-copy), else
 * into the reader's own buffer (the record spanned chunks, or the stream is compressed). It is
 * valid until the next call of tfr_reader_next(), _feed(), _reset() or _destroy().
 *
 * Errors: -EBADMSG (corrupt framing or CRC, truncation, bad compressed stream), -EMSGSIZE
 * (length over max_record_len), -ENOMEM. A data-CRC mismatch is recoverable: the reader has
 * already moved past that record, and calling next() again goes on with the following one
 * (on_corrupt = skip_record). Every other error is sticky: later calls return it again.
 */
int tfr_reader_next(struct tfr_reader *r, struct tfr_record *ret_rec, struct io_error *err);

/*
 * True once the reader has hit a sticky error (everything but a data-CRC mismatch): the rest of
 * the file cannot be framed, and next() returns that error again.
 */
bool tfr_reader_failed(const struct tfr_reader *r);

/* Records returned so far, and bytes consumed from the (compressed) input so far. */
uint64_t tfr_reader_records(const struct tfr_reader *r);
uint64_t tfr_reader_input_bytes(const struct tfr_reader *r);

/* Frame helpers for writers and tests. */
void tfr_frame_header(uint8_t out[TFR_HEADER_LEN], uint64_t len);
/* The reverse, for a header read alone: its payload length, and whether its CRC checks. */
bool tfr_frame_header_check(const uint8_t h[TFR_HEADER_LEN], uint64_t *ret_len);
void tfr_frame_footer(uint8_t out[TFR_FOOTER_LEN], const void *data, size_t len);

/*
 * The writer: buffered, compresses the whole stream as TensorFlow's TFRecordWriter does
 * (gzip: one gzip member; zlib: one zlib stream). level is zlib's (-1 = default).
 */
struct tfr_writer;

/* Creates or truncates path (mode 0644). */
int tfr_writer_open(const char *path, enum tfr_compression c, int level, struct tfr_writer **ret_w);
/* Takes fd; it is closed by tfr_writer_close(). */
int tfr_writer_fdopen(int fd, enum tfr_compression c, int level, struct tfr_writer **ret_w);
int tfr_writer_write(struct tfr_writer *w, const void *data, size_t len);
/* Flush, end the compressed stream, close the file and free w (also on error). NULL is ok. */
int tfr_writer_close(struct tfr_writer *w);

#endif
