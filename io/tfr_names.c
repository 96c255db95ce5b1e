/* SPDX-License-Identifier: Apache-2.0 */
/* TFRecord compression names and detection (no zlib needed: used by the manifest too). */
#include "tfr.h"

#include <errno.h>
#include <string.h>

#include "crc32c.h"

const char *tfr_compression_name(enum tfr_compression c)
{
	switch (c) {
	case TFR_COMPRESSION_NONE:
		return "none";
	case TFR_COMPRESSION_GZIP:
		return "gzip";
	case TFR_COMPRESSION_ZLIB:
		return "zlib";
	}
	return "?";
}

int tfr_compression_parse(const char *s, enum tfr_compression *ret_c)
{
	enum tfr_compression c;

	if (!s || !*s || strcmp(s, "none") == 0)
		c = TFR_COMPRESSION_NONE;
	else if (strcmp(s, "gzip") == 0)
		c = TFR_COMPRESSION_GZIP;
	else if (strcmp(s, "zlib") == 0)
		c = TFR_COMPRESSION_ZLIB;
	else
		return -EINVAL;
	*ret_c = c;
	return 0;
}

static uint32_t load_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

enum tfr_compression tfr_compression_detect(const void *head, size_t len)
{
	const uint8_t *p = head;

	/* A valid uncompressed header first: a zlib header is two bytes that a length can hold. */
	if (len >= TFR_HEADER_LEN && crc32c_mask(crc32c(p, 8)) == load_le32(p + 8))
		return TFR_COMPRESSION_NONE;
	if (len >= 3 && p[0] == 0x1f && p[1] == 0x8b && p[2] == 0x08)
		return TFR_COMPRESSION_GZIP;
	if (len >= 2 && (p[0] & 0x0f) == 8 && (p[0] >> 4) <= 7 &&
	    ((unsigned)p[0] * 256 + p[1]) % 31 == 0)
		return TFR_COMPRESSION_ZLIB;
	return TFR_COMPRESSION_NONE;
}
