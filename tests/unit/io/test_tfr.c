/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for io/tfr.c and io/tfr_writer.c: framing, chunking, compression, every bad input. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "tests/unit/skip.h"

#include "io/crc32c.h"
#include "io/tfr.h"

/* ---- helpers ---------------------------------------------------------------------------- */

struct blob {
	uint8_t *p;
	size_t len;
};

static struct blob read_path(const char *path)
{
	struct blob b = { 0 };
	struct stat st;
	int fd = open(path, O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	b.len = (size_t)st.st_size;
	b.p = malloc(b.len + 1);
	assert_non_null(b.p);
	assert_int_equal(read(fd, b.p, b.len), (ssize_t)b.len);
	close(fd);
	return b;
}

/* Payload of record i: deterministic bytes of a deterministic length. */
static size_t payload_len(unsigned i)
{
	static const size_t lens[] = { 0, 1, 11, 12, 16, 100, 4095, 4096, 70000, 300000 };

	return i < 10 ? lens[i] : (size_t)((i * 2654435761u) % 5000);
}

static void payload(unsigned i, uint8_t *out, size_t len)
{
	for (size_t k = 0; k < len; k++)
		out[k] = (uint8_t)(i * 31 + k * 7 + (k >> 8));
}

static char tmpdir[64];

static int setup_dir(void **state)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/sluice-tfr-XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
	return system(cmd);
}

/* Write n records with the writer and return the file's bytes. */
static struct blob write_file(enum tfr_compression c, unsigned n)
{
	char path[128];
	struct tfr_writer *w;
	uint8_t *buf = malloc(300000);

	snprintf(path, sizeof(path), "%s/w-%s.tfrecords", tmpdir, tfr_compression_name(c));
	assert_int_equal(tfr_writer_open(path, c, -1, &w), 0);
	for (unsigned i = 0; i < n; i++) {
		size_t len = payload_len(i);

		payload(i, buf, len);
		assert_int_equal(tfr_writer_write(w, buf, len), 0);
	}
	assert_int_equal(tfr_writer_close(w), 0);
	free(buf);
	return read_path(path);
}

struct result {
	unsigned records;
	int rc; /* last return: TFR_END or the error */
	char msg[512];
	bool zero_copy_seen;
};

/*
 * The reader's next result other than TFR_NEED_INPUT, feeding it b from *pos on in pieces of
 * chunk bytes (and finishing the stream once b is used up).
 */
static int next_chunked(struct tfr_reader *r, const struct blob *b, size_t *pos, size_t chunk,
			struct tfr_record *rec, struct io_error *err)
{
	for (;;) {
		int rc = tfr_reader_next(r, rec, err);

		if (rc != TFR_NEED_INPUT)
			return rc;
		size_t n = b->len - *pos < chunk ? b->len - *pos : chunk;

		if (n == 0) {
			tfr_reader_finish(r);
		} else {
			tfr_reader_feed(r, b->p + *pos, n);
			*pos += n;
		}
	}
}

/* Read a whole buffer fed in chunks of chunk bytes; check every record's payload. */
static struct result read_chunked(const struct blob *b, enum tfr_compression c, size_t chunk,
				  bool check_payload, uint64_t max_len, bool tell_size)
{
	struct tfr_reader_opts o;
	struct tfr_reader *r;
	struct result res = { 0 };
	size_t pos = 0;
	uint8_t *want = malloc(300000);

	tfr_reader_opts_init(&o);
	o.path = "t.tfrecords";
	o.compression = c;
	if (max_len)
		o.max_record_len = max_len;
	r = tfr_reader_create(&o);
	assert_non_null(r);
	if (tell_size)
		tfr_reader_set_input_size(r, b->len);
	for (;;) {
		struct tfr_record rec;
		struct io_error err;
		int rc = next_chunked(r, b, &pos, chunk, &rec, &err);

		if (rc == TFR_RECORD) {
			assert_int_equal(rec.index, res.records);
			if (check_payload) {
				size_t len = payload_len(res.records);

				assert_int_equal(rec.len, len);
				payload(res.records, want, len);
				assert_memory_equal(rec.data, want, len);
			}
			if (rec.data >= b->p && rec.data < b->p + b->len)
				res.zero_copy_seen = true;
			res.records++;
			continue;
		}
		res.rc = rc;
		if (rc < 0)
			memcpy(res.msg, err.msg, sizeof(res.msg));
		break;
	}
	tfr_reader_destroy(r);
	free(want);
	return res;
}

/* ---- round trips -------------------------------------------------------------------------- */

static void roundtrip(enum tfr_compression c)
{
	static const size_t chunks[] = { 1, 7, 12, 13, 4096, 65536, 1 << 30 };
	struct blob b = write_file(c, 60);

	for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
		struct result res = read_chunked(&b, c, chunks[i], true, 0, false);

		assert_int_equal(res.rc, TFR_END);
		assert_int_equal(res.records, 60);
		if (c == TFR_COMPRESSION_NONE && chunks[i] == (1 << 30))
			assert_true(res.zero_copy_seen);
	}
	free(b.p);
}

static void test_roundtrip_none(void **state)
{
	roundtrip(TFR_COMPRESSION_NONE);
}

static void test_roundtrip_gzip(void **state)
{
	roundtrip(TFR_COMPRESSION_GZIP);
}

static void test_roundtrip_zlib(void **state)
{
	roundtrip(TFR_COMPRESSION_ZLIB);
}

static void test_empty_file(void **state)
{
	struct blob b = { .p = (uint8_t *)"", .len = 0 };

	for (int c = 0; c < 3; c++) {
		struct result res = read_chunked(&b, (enum tfr_compression)c, 4096, true, 0, false);

		assert_int_equal(res.rc, TFR_END);
		assert_int_equal(res.records, 0);
	}
	/* A gzip file with no records is a valid gzip stream of 0 bytes. */
	struct blob g = write_file(TFR_COMPRESSION_GZIP, 0);
	struct result res = read_chunked(&g, TFR_COMPRESSION_GZIP, 5, true, 0, false);

	assert_int_equal(res.rc, TFR_END);
	assert_int_equal(res.records, 0);
	free(g.p);
}

/* gzip members concatenated (as `cat a.gz b.gz`) read as one stream. */
static void test_gzip_concatenated(void **state)
{
	struct blob a = write_file(TFR_COMPRESSION_GZIP, 30);
	struct blob cat;

	cat.len = 2 * a.len;
	cat.p = malloc(cat.len);
	memcpy(cat.p, a.p, a.len);
	memcpy(cat.p + a.len, a.p, a.len);
	for (size_t chunk = 3; chunk < (1u << 30); chunk *= 97) {
		struct result res =
			read_chunked(&cat, TFR_COMPRESSION_GZIP, chunk, false, 0, false);

		assert_int_equal(res.rc, TFR_END);
		assert_int_equal(res.records, 60);
	}
	free(a.p);
	free(cat.p);
}

static void test_detect(void **state)
{
	struct blob n = write_file(TFR_COMPRESSION_NONE, 3);
	struct blob g = write_file(TFR_COMPRESSION_GZIP, 3);
	struct blob z = write_file(TFR_COMPRESSION_ZLIB, 3);

	assert_int_equal(tfr_compression_detect(n.p, n.len), TFR_COMPRESSION_NONE);
	assert_int_equal(tfr_compression_detect(g.p, g.len), TFR_COMPRESSION_GZIP);
	assert_int_equal(tfr_compression_detect(z.p, z.len), TFR_COMPRESSION_ZLIB);
	/* A record of length 0x9c78 starts with the bytes of a zlib header: still none. */
	uint8_t h[TFR_HEADER_LEN];
	tfr_frame_header(h, 0x9c78);
	assert_int_equal(h[0], 0x78);
	assert_int_equal(tfr_compression_detect(h, sizeof(h)), TFR_COMPRESSION_NONE);

	enum tfr_compression c;
	assert_int_equal(tfr_compression_parse("gzip", &c), 0);
	assert_int_equal(c, TFR_COMPRESSION_GZIP);
	assert_int_equal(tfr_compression_parse("GZIP", &c), -EINVAL);
	free(n.p);
	free(g.p);
	free(z.p);
}

/* ---- bad input ---------------------------------------------------------------------------- */

/* Three records of 100 bytes: record k's header is at 120 * k. */
static struct blob three_records(void)
{
	struct blob b;
	uint8_t data[100];

	b.len = 3 * (TFR_HEADER_LEN + 100 + TFR_FOOTER_LEN);
	b.p = malloc(b.len);
	for (int k = 0; k < 3; k++) {
		uint8_t *p = b.p + k * 116;

		memset(data, 'a' + k, sizeof(data));
		tfr_frame_header(p, sizeof(data));
		memcpy(p + TFR_HEADER_LEN, data, sizeof(data));
		tfr_frame_footer(p + TFR_HEADER_LEN + 100, data, sizeof(data));
	}
	return b;
}

static void expect_error(struct blob *b, size_t chunk, unsigned records, const char *substr)
{
	struct result res = read_chunked(b, TFR_COMPRESSION_NONE, chunk, false, 0, false);

	assert_int_equal(res.records, records);
	assert_int_equal(res.rc, -EBADMSG);
	if (!strstr(res.msg, substr))
		fail_msg("message \"%s\" lacks \"%s\"", res.msg, substr);
}

static void test_truncated_header(void **state)
{
	struct blob b = three_records();

	b.len = 2 * 116 + 5;
	expect_error(&b, 4096, 2,
		     "t.tfrecords: record 2 at offset 232: truncated: the file ends in the "
		     "record's header (5 of 12 bytes)");
	expect_error(&b, 1, 2, "the record's header (5 of 12 bytes)");
	free(b.p);
}

static void test_truncated_data(void **state)
{
	struct blob b = three_records();

	b.len = 116 + 12 + 40;
	expect_error(&b, 4096, 1,
		     "record 1 at offset 116: truncated: the file ends in the record's data (40 "
		     "of 100 bytes)");
	free(b.p);
}

static void test_truncated_footer(void **state)
{
	struct blob b = three_records();

	b.len = 3 * 116 - 1;
	expect_error(&b, 64, 2,
		     "record 2 at offset 232: truncated: the file ends in the record's data CRC "
		     "(3 of 4 bytes)");
	free(b.p);
}

static void test_header_crc(void **state)
{
	struct blob b = three_records();

	b.p[116 + 9] ^= 0x40;
	expect_error(&b, 4096, 1, "record 1 at offset 116: header CRC mismatch");
	expect_error(&b, 3, 1, "record 1 at offset 116: header CRC mismatch");
	/* A flipped length bit is caught by the header CRC too. */
	b.p[116 + 9] ^= 0x40;
	b.p[116 + 1] ^= 0x01;
	expect_error(&b, 4096, 1, "header CRC mismatch");
	free(b.p);
}

/* A data-CRC mismatch is reported, and the reader goes on with the next record. */
static void test_data_crc_recoverable(void **state)
{
	struct blob b = three_records();
	struct tfr_reader *r = tfr_reader_create(NULL);
	struct tfr_record rec;
	struct io_error err;

	b.p[116 + 12 + 50] ^= 1;
	assert_non_null(r);
	for (int pass = 0; pass < 2; pass++) {
		size_t chunk = pass ? 7 : b.len;
		size_t pos = 0;
		int got[3] = { 0 }, k = 0;

		assert_int_equal(tfr_reader_reset(r, "x"), 0);
		for (;;) {
			int rc = next_chunked(r, &b, &pos, chunk, &rec, &err);

			if (rc == TFR_END)
				break;
			assert_true(k < 3);
			got[k++] = rc;
			if (rc < 0) {
				assert_int_equal(rc, -EBADMSG);
				assert_non_null(strstr(err.msg, "x: record 1 at offset 116: data "
								"CRC mismatch"));
				assert_false(tfr_reader_failed(r));
			} else {
				assert_int_equal(rec.data[0], 'a' + (k == 1 ? 0 : 2));
			}
		}
		assert_int_equal(k, 3);
		assert_int_equal(got[0], TFR_RECORD);
		assert_int_equal(got[1], -EBADMSG);
		assert_int_equal(got[2], TFR_RECORD);
	}
	tfr_reader_destroy(r);
	free(b.p);
}

/* With defer_data_crc the reader returns the record and tfr_record_verify() finds the damage. */
static void test_deferred_data_crc(void **state)
{
	struct blob b = three_records();
	struct tfr_reader_opts o;
	struct tfr_reader *r;
	struct tfr_record rec;
	struct io_error err;

	b.p[116 + 12 + 50] ^= 1;
	tfr_reader_opts_init(&o);
	o.defer_data_crc = true;
	o.path = "d.tfrecords";
	r = tfr_reader_create(&o);
	tfr_reader_feed(r, b.p, b.len);
	for (int k = 0; k < 3; k++) {
		assert_int_equal(tfr_reader_next(r, &rec, &err), TFR_RECORD);
		assert_false(rec.crc_checked);
		assert_int_equal(rec.index, k);
		assert_int_equal(rec.masked_crc, 0); /* the footer is left unread */
		if (k != 1)			     /* ...and still there, after data */
			assert_int_equal(tfr_record_stored_crc(rec.data, rec.len),
					 crc32c_mask(crc32c(rec.data, rec.len)));
		if (k == 1) {
			assert_int_equal(tfr_record_verify(&rec, "d.tfrecords", &err), -EBADMSG);
			assert_non_null(strstr(err.msg, "d.tfrecords: record 1 at offset 116: data "
							"CRC mismatch"));
		} else {
			assert_int_equal(tfr_record_verify(&rec, "d.tfrecords", &err), 0);
		}
	}
	tfr_reader_finish(r);
	assert_int_equal(tfr_reader_next(r, &rec, &err), TFR_END);
	/* Without deferral the record arrives checked, and verify passes at once. */
	tfr_reader_destroy(r);
	r = tfr_reader_create(NULL);
	tfr_reader_feed(r, b.p, b.len);
	assert_int_equal(tfr_reader_next(r, &rec, &err), TFR_RECORD);
	assert_true(rec.crc_checked);
	assert_int_equal(tfr_record_verify(&rec, NULL, &err), 0);
	assert_int_equal(tfr_reader_next(r, &rec, &err), -EBADMSG);
	tfr_reader_destroy(r);
	/* Fed 7 bytes at a time, every record is assembled: its footer still follows data. */
	tfr_reader_opts_init(&o);
	o.defer_data_crc = true;
	r = tfr_reader_create(&o);
	size_t pos = 0;
	int k = 0;
	for (;;) {
		int rc = next_chunked(r, &b, &pos, 7, &rec, &err);
		if (rc == TFR_END)
			break;
		assert_int_equal(rc, TFR_RECORD);
		assert_int_equal(tfr_record_verify(&rec, NULL, &err), k == 1 ? -EBADMSG : 0);
		k++;
	}
	assert_int_equal(k, 3);
	tfr_reader_destroy(r);
	free(b.p);
}

/* Errors other than a data CRC are sticky. */
static void test_sticky(void **state)
{
	struct blob b = three_records();
	struct tfr_reader *r = tfr_reader_create(NULL);
	struct tfr_record rec;
	struct io_error err;

	b.p[8] ^= 1;
	tfr_reader_feed(r, b.p, b.len);
	assert_false(tfr_reader_failed(r));
	assert_int_equal(tfr_reader_next(r, &rec, &err), -EBADMSG);
	assert_true(tfr_reader_failed(r));
	assert_int_equal(tfr_reader_next(r, &rec, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "header CRC mismatch"));
	tfr_reader_destroy(r);
	free(b.p);
}

/* A huge length with a valid header CRC: refused at the header, nothing allocated. */
static void test_huge_length(void **state)
{
	uint8_t h[TFR_HEADER_LEN + 8];
	struct blob b = { .p = h, .len = sizeof(h) };

	tfr_frame_header(h, 0x7fffffffffffull);
	memset(h + TFR_HEADER_LEN, 0, 8);
	struct result res = read_chunked(&b, TFR_COMPRESSION_NONE, 4096, false, 1 << 20, false);
	assert_int_equal(res.rc, -EMSGSIZE);
	assert_non_null(strstr(res.msg, "record 0 at offset 0: length 140737488355327 exceeds "
					"the limit of 1048576 bytes"));
	/* Within the cap but past the end of a file of known size. */
	tfr_frame_header(h, 1000);
	res = read_chunked(&b, TFR_COMPRESSION_NONE, 4096, false, 1 << 20, true);
	assert_int_equal(res.rc, -EBADMSG);
	assert_non_null(strstr(res.msg, "length 1000 runs past the end of the file (8 bytes left "
					"after the header)"));
}

/* A record exactly at max_record_len is read; one byte longer is refused (the limit is
 * inclusive: a mutation to >= went unnoticed, docs/testing.md "Mutations tried"). */
static void test_length_at_the_limit(void **state)
{
	struct blob b = three_records(); /* records of 100 bytes */
	struct result res = read_chunked(&b, TFR_COMPRESSION_NONE, 4096, false, 100, true);

	assert_int_equal(res.rc, TFR_END);
	assert_int_equal(res.records, 3);
	res = read_chunked(&b, TFR_COMPRESSION_NONE, 4096, false, 99, true);
	assert_int_equal(res.rc, -EMSGSIZE);
	assert_int_equal(res.records, 0);
	assert_non_null(strstr(res.msg, "record 0 at offset 0: length 100 exceeds the limit of 99 "
					"bytes"));
	free(b.p);
}

/* In a file of known size, a last record whose footer is cut by 1 to 4 bytes is refused at
 * its header, before its data is read: each cut is one byte of the footer's four. */
static void test_known_size_footer_cut(void **state)
{
	struct blob b = three_records();
	char want[128];

	for (size_t cut = 1; cut <= TFR_FOOTER_LEN; cut++) {
		b.len = 3 * 116 - cut;
		struct result res = read_chunked(&b, TFR_COMPRESSION_NONE, 4096, false, 0, true);

		assert_int_equal(res.records, 2);
		assert_int_equal(res.rc, -EBADMSG);
		snprintf(want, sizeof(want),
			 "record 2 at offset 232: length 100 runs past the end of the file (%zu "
			 "bytes left after the header)",
			 116 - TFR_HEADER_LEN - cut);
		if (!strstr(res.msg, want))
			fail_msg("cut %zu: message \"%s\" lacks \"%s\"", cut, res.msg, want);
	}
	free(b.p);
}

/* ---- compressed streams ------------------------------------------------------------------- */

static void test_gzip_cut(void **state)
{
	struct blob g = write_file(TFR_COMPRESSION_GZIP, 40);
	size_t full = g.len;

	g.len = full - 5; /* inside the 8-byte trailer */
	struct result res = read_chunked(&g, TFR_COMPRESSION_GZIP, 1000, false, 0, false);
	assert_int_equal(res.rc, -EBADMSG);
	assert_non_null(strstr(res.msg, "gzip stream cut short"));
	assert_int_equal(res.records, 40);

	g.len = full / 2; /* in the middle of the deflate data */
	res = read_chunked(&g, TFR_COMPRESSION_GZIP, 1000, false, 0, false);
	assert_int_equal(res.rc, -EBADMSG);
	assert_true(strstr(res.msg, "gzip stream cut short") || strstr(res.msg, "truncated: the "
										"file ends"));
	assert_true(res.records < 40);
	free(g.p);
}

static void test_gzip_bad_trailer(void **state)
{
	struct blob g = write_file(TFR_COMPRESSION_GZIP, 10);

	g.p[g.len - 6] ^= 0xff; /* the CRC-32 of the trailer */
	struct result res = read_chunked(&g, TFR_COMPRESSION_GZIP, 1 << 20, false, 0, false);
	assert_int_equal(res.rc, -EBADMSG);
	assert_non_null(strstr(res.msg, "corrupt gzip stream at compressed offset"));
	assert_non_null(strstr(res.msg, "incorrect data check"));
	g.p[g.len - 6] ^= 0xff;
	g.p[g.len - 2] ^= 0x01; /* the length (ISIZE) */
	res = read_chunked(&g, TFR_COMPRESSION_GZIP, 1 << 20, false, 0, false);
	assert_non_null(strstr(res.msg, "incorrect length check"));
	free(g.p);
}

static void test_zlib_bad_checksum(void **state)
{
	struct blob z = write_file(TFR_COMPRESSION_ZLIB, 10);

	z.p[z.len - 1] ^= 0x01; /* Adler-32 */
	struct result res = read_chunked(&z, TFR_COMPRESSION_ZLIB, 333, false, 0, false);
	assert_int_equal(res.rc, -EBADMSG);
	assert_non_null(strstr(res.msg, "corrupt zlib stream"));
	assert_non_null(strstr(res.msg, "incorrect data check"));
	free(z.p);
}

static void test_zlib_trailing_garbage(void **state)
{
	struct blob z = write_file(TFR_COMPRESSION_ZLIB, 4);
	uint8_t *p = realloc(z.p, z.len + 3);

	memcpy(p + z.len, "xyz", 3);
	z.p = p;
	z.len += 3;
	struct result res = read_chunked(&z, TFR_COMPRESSION_ZLIB, 1 << 20, false, 0, false);
	assert_int_equal(res.rc, -EBADMSG);
	assert_non_null(strstr(res.msg, "3 bytes of garbage after the end of the zlib stream"));
	free(z.p);
}

static void test_gzip_garbage(void **state)
{
	static const uint8_t junk[] = "this is not gzip at all";
	struct blob b = { .p = (uint8_t *)junk, .len = sizeof(junk) };
	struct result res = read_chunked(&b, TFR_COMPRESSION_GZIP, 1 << 20, false, 0, false);

	assert_int_equal(res.rc, -EBADMSG);
	assert_non_null(strstr(res.msg, "corrupt gzip stream at compressed offset"));
}

/* A decompression bomb: a record header claiming 200 MB, refused by the cap before buffering. */
static void test_bomb(void **state)
{
	uint8_t h[TFR_HEADER_LEN];
	size_t zeros = 8 << 20;
	uint8_t *raw = calloc(1, TFR_HEADER_LEN + zeros);
	uLongf clen = compressBound(TFR_HEADER_LEN + zeros);
	struct blob z;

	tfr_frame_header(h, 200ull << 20);
	memcpy(raw, h, sizeof(h));
	z.p = malloc(clen);
	assert_int_equal(compress(z.p, &clen, raw, TFR_HEADER_LEN + zeros), Z_OK);
	z.len = clen;
	struct result res = read_chunked(&z, TFR_COMPRESSION_ZLIB, 4096, false, 1 << 20, false);
	assert_int_equal(res.rc, -EMSGSIZE);
	assert_non_null(strstr(res.msg, "decompressed offset 0: length 209715200 exceeds the "
					"limit of 1048576 bytes"));
	free(raw);
	free(z.p);
}

/* ---- the real files ----------------------------------------------------------------------- */

/* Every file of files.tsv: record counts for the ones SOURCES.md states, framing OK for all. */
static void test_testdata(void **state)
{
	static const struct {
		const char *name;
		unsigned records;
	} want[] = {
		{ "tensorflow+tfx__tfx_examples_mnist_data_mnist.tfrecord", 1000 },
		{ "tensorflow+tfx__tfx_components_testdata_penguin_data_Split-eval_data_tfrecord-"
		  "00000-of-00001.gz",
		  100 },
		{ "tensorflow+tfx__tfx_components_testdata_csv_example_gen_Split-eval_data_"
		  "tfrecord-00000-of-00012.gz",
		  424 },
		{ "tensorflow+tfx__tfx_components_testdata_external_tfrecord_data_tfrecord-00001-"
		  "of-00002.gz",
		  5012 },
		{ "tensorflow+tfx__tfx_components_testdata_tfrecord_sequence_Split-eval_data_"
		  "tfrecord_eval.gz",
		  4500 },
		{ "tensorflow+tfx__tfx_components_testdata_external_tfrecord_sequence_data_"
		  "tfrecord-00000-of-00001.gz",
		  15000 },
		{ "tensorflow+tfx__tfx_examples_tfjs_next_page_prediction_data_data.tfrecord.gz",
		  100 },
		{ "jongwook+tfrecord_lite__tests_test.tfrecord", 42 },
		{ "pwnall+tfrecord__testdata_singles.tfrecords", 3 },
		{ "google+yggdrasil-decision-forests__yggdrasil_decision_forests_test_data_dataset_"
		  "adult_test.recordio.gz",
		  9769 },
		{ "mindspore-ai+mindspore_test__tests_ut_data_dataset_tf_file_dataset_test1.data",
		  10 },
		{ "mindspore-ai+mindspore_test__tests_ut_data_dataset_tf_file_dataset_test1.data."
		  "gz",
		  10 },
		{ "mindspore-ai+mindspore_test__tests_ut_data_dataset_tf_file_dataset_test1.data."
		  "zlib",
		  10 },
		{ "mindspore-ai+mindspore_test__tests_ut_data_dataset_tf_file_dataset_test3.data."
		  "zlib",
		  10 },
		{ "tensorflow+lingvo__lingvo_tasks_mt_testdata_en_fr.tfrecord", 2 },
		{ "domj07+Tensorflow-Ion-Detetection__models_research_deeplab_testing_pascal_voc_"
		  "seg_val-00000-of-00001.tfrecord",
		  3 },
	};
	const char *dir = sl_testdata_dir();
	char path[1024];

	if (!dir)
		SL_SKIP("[testdata] no ../shared/testdata (SLUICE_SHARED_DIR)");
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, want[i].name);
		struct blob b = read_path(path);
		enum tfr_compression c = tfr_compression_detect(b.p, b.len);
		bool gz = strstr(want[i].name, ".gz") != NULL;

		assert_int_equal(c, gz				    ? TFR_COMPRESSION_GZIP
				    : strstr(want[i].name, ".zlib") ? TFR_COMPRESSION_ZLIB
								    : TFR_COMPRESSION_NONE);
		for (size_t chunk = 4099; chunk < (1u << 30); chunk *= 1024) {
			struct result res = read_chunked(&b, c, chunk, false, 0, true);

			if (res.rc != TFR_END)
				fail_msg("%s: %s", want[i].name, res.msg);
			assert_int_equal(res.records, want[i].records);
		}
		free(b.p);
	}
}

/* The CRLF-damaged file: record 0's header is fine, its data CRC is not, then framing is lost. */
static void test_testdata_corrupt(void **state)
{
	const char *dir = sl_testdata_dir();
	char path[1024];

	if (!dir)
		SL_SKIP("[testdata] no ../shared/testdata (SLUICE_SHARED_DIR)");
	snprintf(path, sizeof(path),
		 "%s/CORRUPT-crlf__domj07+Tensorflow-Ion-Detetection__models_"
		 "research_object_detection_test_data_pets_examples.record",
		 dir);
	struct blob b = read_path(path);
	struct result res = read_chunked(&b, TFR_COMPRESSION_NONE, 65536, false, 0, true);
	assert_int_equal(res.records, 0);
	assert_int_equal(res.rc, -EBADMSG);
	assert_non_null(strstr(res.msg, "record 0 at offset 0: data CRC mismatch"));
	free(b.p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip_none),
		cmocka_unit_test(test_roundtrip_gzip),
		cmocka_unit_test(test_roundtrip_zlib),
		cmocka_unit_test(test_empty_file),
		cmocka_unit_test(test_gzip_concatenated),
		cmocka_unit_test(test_detect),
		cmocka_unit_test(test_truncated_header),
		cmocka_unit_test(test_truncated_data),
		cmocka_unit_test(test_truncated_footer),
		cmocka_unit_test(test_header_crc),
		cmocka_unit_test(test_data_crc_recoverable),
		cmocka_unit_test(test_deferred_data_crc),
		cmocka_unit_test(test_sticky),
		cmocka_unit_test(test_huge_length),
		cmocka_unit_test(test_length_at_the_limit),
		cmocka_unit_test(test_known_size_footer_cut),
		cmocka_unit_test(test_gzip_cut),
		cmocka_unit_test(test_gzip_bad_trailer),
		cmocka_unit_test(test_zlib_bad_checksum),
		cmocka_unit_test(test_zlib_trailing_garbage),
		cmocka_unit_test(test_gzip_garbage),
		cmocka_unit_test(test_bomb),
		cmocka_unit_test(test_testdata),
		cmocka_unit_test(test_testdata_corrupt),
	};

	return SL_RUN_GROUP(tests, setup_dir, teardown_dir);
}
