/* SPDX-License-Identifier: Apache-2.0 */
/* tensorjson: a tensor's values as JSON and its CRC-32 digest (sluicectl run and drain). */
#ifndef SLUICE_TOOLS_TENSORJSON_H
#define SLUICE_TOOLS_TENSORJSON_H

#include <stdint.h>

#include "jsonout.h"

/*
 * The element values of a tensor (dtype: enum ipc_dtype) as a JSON array: integers as they
 * are, floats with 9 (float16/32) or 17 (float64) significant digits and "nan"/"inf"/"-inf"
 * as strings, bools as 0/1, strings (offsets[n_elems + 1] into data) as JSON strings whose
 * code points are the bytes (Latin-1).
 */
void tj_values(struct jsonout *j, unsigned dtype, const void *data, const int64_t *offsets,
	       uint64_t n_elems);
/* A JSON array of int64s (shapes, row_splits). */
void tj_int64s(struct jsonout *j, const int64_t *a, uint64_t n);
/* zlib crc32 continued over n bytes (any length). */
uint32_t tj_crc(uint32_t crc, const void *p, uint64_t n);
/*
 * A tensor's digest, continued from crc (0 to start): row_splits (rows + 1 int64s, when
 * ragged), string offsets (n_elems + 1, for strings), then the data bytes.
 */
uint32_t tj_tensor_crc(uint32_t crc, const int64_t *splits, uint64_t rows, const int64_t *offsets,
		       uint64_t n_elems, const void *data, uint64_t data_len);

#endif
