/* SPDX-License-Identifier: Apache-2.0 */
/* tensorjson: a tensor's values as JSON and its CRC-32 digest (sluicectl run and drain). */
#include "tensorjson.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "ipc/batch.h"

/* IEEE half to float (exact). */
static float half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
	float f;

	if (exp == 0x1f) {
		bits = sign | 0x7f800000u | (man << 13);
	} else if (exp) {
		bits = sign | ((exp + 112) << 23) | (man << 13);
	} else {
		/* zero or subnormal: man * 2^-24 */
		f = ldexpf((float)man, -24);
		return sign ? -f : f;
	}
	memcpy(&f, &bits, 4);
	return f;
}

static void json_real(struct jsonout *j, double v, int digits)
{
	char buf[40];
	int n;

	if (isnan(v)) {
		jsonout_cstr(j, "\"nan\"");
		return;
	}
	if (isinf(v)) {
		jsonout_cstr(j, v < 0 ? "\"-inf\"" : "\"inf\"");
		return;
	}
	n = snprintf(buf, sizeof(buf), "%.*g", digits, v);
	jsonout_raw(j, buf, (size_t)n);
}

/* One element of a numeric tensor at p. */
static void json_elem(struct jsonout *j, enum ipc_dtype t, const uint8_t *p)
{
	union {
		int8_t i8;
		int16_t i16;
		int32_t i32;
		int64_t i64;
		uint8_t u8;
		uint16_t u16;
		uint32_t u32;
		uint64_t u64;
		float f32;
		double f64;
	} u;

	memcpy(&u, p, ipc_dtype_size(t));
	switch (t) {
	case IPC_DTYPE_INT8:
		jsonout_int64(j, u.i8);
		break;
	case IPC_DTYPE_INT16:
		jsonout_int64(j, u.i16);
		break;
	case IPC_DTYPE_INT32:
		jsonout_int64(j, u.i32);
		break;
	case IPC_DTYPE_INT64:
		jsonout_int64(j, u.i64);
		break;
	case IPC_DTYPE_UINT8:
		jsonout_uint64(j, u.u8);
		break;
	case IPC_DTYPE_UINT16:
		jsonout_uint64(j, u.u16);
		break;
	case IPC_DTYPE_UINT32:
		jsonout_uint64(j, u.u32);
		break;
	case IPC_DTYPE_UINT64:
		jsonout_uint64(j, u.u64);
		break;
	case IPC_DTYPE_FLOAT16:
		json_real(j, half_to_float(u.u16), 9);
		break;
	case IPC_DTYPE_FLOAT32:
		json_real(j, u.f32, 9);
		break;
	case IPC_DTYPE_BFLOAT16: { /* the top half of a float32 */
		uint32_t bits = (uint32_t)u.u16 << 16;
		float f;
		memcpy(&f, &bits, sizeof(f));
		json_real(j, f, 9);
		break;
	}
	case IPC_DTYPE_FLOAT64:
		json_real(j, u.f64, 17);
		break;
	case IPC_DTYPE_BOOL:
		jsonout_char(j, u.u8 ? '1' : '0');
		break;
	default:
		jsonout_cstr(j, "null");
		break;
	}
}

/*
 * A JSON string of bytes read as Latin-1: '"' and '\\' escaped, control bytes, 0x7f and bytes
 * from 0x80 as \u00XX, so that the string's code points are the bytes.
 */
static void json_latin1(struct jsonout *j, const uint8_t *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t i, run = 0;

	jsonout_char(j, '"');
	for (i = 0; i < n; i++) {
		uint8_t c = s[i];
		char esc[6];

		if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
			continue;
		jsonout_raw(j, s + run, i - run);
		run = i + 1;
		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			jsonout_raw(j, esc, 2);
		} else {
			memcpy(esc, "\\u00", 4);
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 15];
			jsonout_raw(j, esc, 6);
		}
	}
	jsonout_raw(j, s + run, n - run);
	jsonout_char(j, '"');
}

void tj_values(struct jsonout *j, unsigned dtype, const void *data, const int64_t *offsets,
	       uint64_t n_elems)
{
	const uint8_t *d = data;
	uint64_t k;

	jsonout_char(j, '[');
	for (k = 0; k < n_elems; k++) {
		if (k)
			jsonout_raw(j, ", ", 2);
		if (dtype == IPC_DTYPE_STRING)
			json_latin1(j, d + offsets[k], (size_t)(offsets[k + 1] - offsets[k]));
		else
			json_elem(j, (enum ipc_dtype)dtype, d + k * ipc_dtype_size(dtype));
	}
	jsonout_char(j, ']');
}

void tj_int64s(struct jsonout *j, const int64_t *a, uint64_t n)
{
	uint64_t k;

	jsonout_char(j, '[');
	for (k = 0; k < n; k++) {
		if (k)
			jsonout_raw(j, ", ", 2);
		jsonout_int64(j, a[k]);
	}
	jsonout_char(j, ']');
}

uint32_t tj_crc(uint32_t crc, const void *p, uint64_t n)
{
	const Bytef *b = p;
	uLong c = crc;

	/* crc32() takes 32-bit lengths. */
	while (n) {
		uInt len = n > (1u << 30) ? (1u << 30) : (uInt)n;

		c = crc32(c, b, len);
		b += len;
		n -= len;
	}
	return (uint32_t)c;
}

uint32_t tj_tensor_crc(uint32_t crc, const int64_t *splits, uint64_t rows, const int64_t *offsets,
		       uint64_t n_elems, const void *data, uint64_t data_len)
{
	if (splits)
		crc = tj_crc(crc, splits, (rows + 1) * 8);
	if (offsets)
		crc = tj_crc(crc, offsets, (n_elems + 1) * 8);
	return tj_crc(crc, data, data_len);
}
