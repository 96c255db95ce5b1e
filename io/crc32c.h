/* SPDX-License-Identifier: Apache-2.0 */
/* CRC32C (Castagnoli): SSE4.2 instruction where the CPU has it, a table otherwise. */
#ifndef SLUICE_IO_CRC32C_H
#define SLUICE_IO_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * crc32c_extend(crc, buf, len) returns the CRC32C of (the bytes whose CRC is crc) followed by
 * buf. crc32c_extend(0, buf, len) is the CRC32C of buf (RFC 3720: 32 zero bytes -> 0x8a9136aa).
 * The implementation is chosen once, at first use, from the CPU's features.
 */
uint32_t crc32c_extend(uint32_t crc, const void *buf, size_t len);

/*
 * Copy len bytes from src to dst (not overlapping) and return crc32c_extend(crc, src, len),
 * in one pass over the source: each block of src is loaded once, stored to dst and folded into
 * the CRC (with the table, a few KiB are copied, then checked while they are in L1). Only
 * dst[0, len) is written.
 */
uint32_t crc32c_copy(uint32_t crc, void *dst, const void *src, size_t len);

static inline uint32_t crc32c(const void *buf, size_t len)
{
	return crc32c_extend(0, buf, len);
}

/* TFRecord's masked CRC (DESIGN.md §3.1). */
static inline uint32_t crc32c_mask(uint32_t crc)
{
	return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static inline uint32_t crc32c_unmask(uint32_t masked)
{
	uint32_t rot = masked - 0xa282ead8u;

	return (rot >> 17) | (rot << 15);
}

/* The implementations, for tests and benchmarks. */
uint32_t crc32c_extend_table(uint32_t crc, const void *buf, size_t len);
/* SSE4.2 crc32 instructions, three streams; the table where the CPU lacks them. */
uint32_t crc32c_extend_hw(uint32_t crc, const void *buf, size_t len);
/*
 * Carry-less multiply folding (AVX-512 VPCLMULQDQ) for buffers of 256 bytes or more, else
 * crc32c_extend_hw. SLUICE_CRC32C_NO_FOLD in the environment turns the folding off.
 */
uint32_t crc32c_extend_fold(uint32_t crc, const void *buf, size_t len);
/* crc32c_copy with each implementation, with the same fallbacks as crc32c_extend_*. */
uint32_t crc32c_copy_table(uint32_t crc, void *dst, const void *src, size_t len);
uint32_t crc32c_copy_hw(uint32_t crc, void *dst, const void *src, size_t len);
uint32_t crc32c_copy_fold(uint32_t crc, void *dst, const void *src, size_t len);
bool crc32c_hw_available(void);
bool crc32c_fold_available(void);
/* "vpclmulqdq", "sse4.2" or "table": what crc32c_extend uses for long buffers. */
const char *crc32c_impl_name(void);

#endif
