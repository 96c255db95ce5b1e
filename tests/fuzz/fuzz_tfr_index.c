/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: tfr_index_parse on any bytes; every entry it hands out must keep its promises. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/crc32c.h"
#include "io/tfr_index.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * A timespec whose ns since the epoch (as tfr_index.c counts them: tv_sec * 1e9 + tv_nsec) is
 * ns. Truncating division (tv_nsec takes ns's sign) keeps that sum within int64 for every ns.
 */
static struct timespec ts_of(int64_t ns)
{
	struct timespec ts;

	ts.tv_sec = (time_t)(ns / 1000000000);
	ts.tv_nsec = (long)(ns % 1000000000);
	return ts;
}

static void st_of(const struct tfr_index_entry *e, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_mode = S_IFREG | 0644;
	st->st_size = (off_t)e->size;
	st->st_mtim = ts_of(e->mtime_ns);
	st->st_ctim = ts_of(e->ctime_ns);
	st->st_ino = (ino_t)e->ino;
}

/* The invariants of an intact entry (tfr_index.c's format comment); abort() on a broken one. */
static void check_entry(const struct tfr_index_entry *e, const char *name)
{
	if (!e->name || strcmp(e->name, name) || e->name[0] == '\0' || strchr(e->name, '/'))
		abort();
	if (e->compression > TFR_COMPRESSION_ZLIB)
		abort();
	if (e->stride < 1)
		abort();
	if (e->n_offsets != (e->records ? (e->records - 1) / e->stride + 1 : 0))
		abort();
	if (e->n_offsets && !e->offsets)
		abort();
	/* every record takes at least a 12-byte header and a 4-byte footer */
	if (e->records > e->stream_bytes / 16 ||
	    e->payload_bytes != e->stream_bytes - 16 * e->records)
		abort();
	if (e->compression == TFR_COMPRESSION_NONE && e->stream_bytes != e->size)
		abort();
	for (uint64_t i = 0; i < e->n_offsets; i++) {
		uint64_t o = e->offsets[i];
		/* records i * stride .. records - 1 start at o: at least 16 bytes each */
		uint64_t after = e->records - i * e->stride;

		if (i == 0 && o != 0)
			abort();
		if (i > 0 && o <= e->offsets[i - 1])
			abort();
		if (o > e->stream_bytes || after > (e->stream_bytes - o) / 16)
			abort();
	}
}

static void check_offsets(const struct tfr_index_entry *e)
{
	const uint64_t recs[] = { 0, e->records / 2, e->records ? e->records - 1 : 0 };
	uint64_t off, skip;

	if (e->records > 0) {
		for (size_t i = 0; i < sizeof(recs) / sizeof(recs[0]); i++) {
			if (tfr_index_entry_offset(e, recs[i], &off, &skip) != 0)
				abort();
			if (skip >= e->stride || recs[i] - skip != recs[i] / e->stride * e->stride)
				abort();
			if (off != e->offsets[recs[i] / e->stride])
				abort();
		}
	}
	if (tfr_index_entry_offset(e, e->records, &off, &skip) != -ERANGE)
		abort();
}

static uint32_t ld32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t ld64(const uint8_t *p)
{
	return (uint64_t)ld32(p) | (uint64_t)ld32(p + 4) << 32;
}

static void st32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> 8 * i);
}

/*
 * Rewrite every CRC that the table lets us find (each entry's, then the header's) so that a
 * mutated field reaches the parser's checks of fields instead of stopping at a CRC mismatch.
 * Only what lies inside the bytes is touched; the parser decides about everything else.
 */
static void fix_crcs(uint8_t *b, size_t len)
{
	uint64_t hlen, at, end;

	if (len < 32 || memcmp(b, TFR_INDEX_MAGIC, 8))
		return;
	hlen = ld32(b + 12);
	if (hlen < 32 || hlen > len)
		return;
	end = hlen - 4;
	at = 28 + (uint64_t)ld32(b + 24);
	while (at <= end && end - at >= 20) {
		uint64_t eoff = ld64(b + at), elen = ld64(b + at + 8), nl = ld32(b + at + 16);

		if (eoff >= hlen && eoff <= len && elen >= 4 && elen <= len - eoff)
			st32(b + eoff + elen - 4, crc32c(b + eoff, (size_t)(elen - 4)));
		at += 20;
		if (nl > end - at)
			break;
		at += nl;
	}
	st32(b + end, crc32c(b, (size_t)end));
}

static int run(const uint8_t *data, size_t size)
{
	struct tfr_index *ix = (struct tfr_index *)&size;
	struct io_error err = { { 0 } };
	size_t n, i;
	int r;

	r = tfr_index_parse(data, size, "<fuzz>", &ix, &err);
	if (r < 0) {
		if (ix != (struct tfr_index *)&size || err.msg[0] == '\0')
			abort();
		return 0;
	}
	if (r != 0 || !tfr_index_data_dir(ix))
		abort();
	n = tfr_index_count(ix);
	for (i = 0; i < n; i++) {
		const struct tfr_index_entry *e = NULL, *f = NULL, *g = NULL;
		const char *name = NULL;
		struct stat st;

		r = tfr_index_entry_at(ix, i, &name, &e, &err);
		if (!name || name[0] == '\0' || strchr(name, '/'))
			abort();
		if (i > 0) {
			const char *prev = NULL;
			const struct tfr_index_entry *pe;

			/* name order, no duplicates */
			tfr_index_entry_at(ix, i - 1, &prev, &pe, &err);
			if (!prev || strcmp(prev, name) >= 0)
				abort();
		}
		if (tfr_index_find(ix, name, &f, &err) != r)
			abort();
		if (r == -EBADMSG) {
			if (err.msg[0] == '\0')
				abort();
			if (tfr_index_lookup(ix, name, &(struct stat){ 0 }, &g, &err) != -EBADMSG)
				abort();
			continue;
		}
		if (r != 0 || !e || f != e)
			abort();
		check_entry(e, name);
		check_offsets(e);
		st_of(e, &st);
		if (tfr_index_lookup(ix, name, &st, &g, &err) != 0 || g != e)
			abort();
		st.st_size = (off_t)(e->size + 1);
		if (tfr_index_lookup(ix, name, &st, &g, &err) != -ESTALE)
			abort();
	}
	{
		const char *name;
		const struct tfr_index_entry *e;

		if (tfr_index_entry_at(ix, n, &name, &e, &err) != -ERANGE)
			abort();
	}
	tfr_index_destroy(ix);
	return 0;
}

/* The bytes as they are, then with their CRCs made to match (fix_crcs). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *copy;

	run(data, size);
	copy = malloc(size ? size : 1);
	if (!copy)
		return 0;
	memcpy(copy, data, size);
	fix_crcs(copy, size);
	run(copy, size);
	free(copy);
	return 0;
}
