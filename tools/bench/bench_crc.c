/* SPDX-License-Identifier: Apache-2.0 */
/* sluice-bench crc: CRC32C implementations and crc32c_copy against memcpy of the same bytes. */
#include "bench.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/crc32c.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);

/* GB/s of fn over a buffer of len bytes, best of 5 runs of about 20 ms. */
static double rate(crc_fn fn, const uint8_t *buf, size_t len, uint32_t *sink)
{
	size_t iters = (size_t)(256u << 20) / len + 1;
	double best = 0;

	for (int r = 0; r < 5; r++) {
		double t0 = now_s(), dt;
		uint32_t c = *sink;

		for (size_t i = 0; i < iters; i++)
			c = fn(c, buf, len);
		dt = now_s() - t0;
		*sink ^= c;
		if (dt > 0 && (double)(iters * len) / dt / 1e9 > best)
			best = (double)(iters * len) / dt / 1e9;
	}
	return best;
}

static uint8_t *copy_dst;

/* memcpy into a second buffer of the same size, shaped like a crc_fn for rate(). */
static uint32_t copy_fn(uint32_t c, const void *buf, size_t len)
{
	memcpy(copy_dst, buf, len);
	return c + copy_dst[len / 2];
}

typedef uint32_t (*copy_fn_t)(uint32_t, void *, const void *, size_t);

/* The two passes crc32c_copy replaces: copy the whole record, then check the copy. */
static uint32_t twopass_copy(uint32_t crc, void *dst, const void *src, size_t len)
{
	memcpy(dst, src, len);
	return crc32c_extend(crc, dst, len);
}

/* crc32c_copy before the fused paths: 4 KiB copied, then checked while in L1. */
static uint32_t chunked_copy(uint32_t crc, void *dst, const void *src, size_t len)
{
	uint8_t *d = dst;
	const uint8_t *p = src;

	while (len > 0) {
		size_t n = len < 4096 ? len : 4096;

		memcpy(d, p, n);
		crc = crc32c_extend(crc, d, n);
		d += n;
		p += n;
		len -= n;
	}
	return crc;
}

static uint32_t memcpy_copy(uint32_t crc, void *dst, const void *src, size_t len)
{
	memcpy(dst, src, len);
	return crc + ((const uint8_t *)dst)[len / 2];
}

/* Bytes of source the cold walk covers, and the destination window it writes into. */
#define COLD_SRC (256u << 20)
#define COLD_DST (1u << 20)
/* Each record is followed by a 16-byte gap (TFRecord framing), so sources are misaligned. */
#define FRAME 16

/*
 * GB/s of fn copying records of len bytes, best of a few runs. Hot: the same record to the same
 * place again and again. Cold: every record of a 256 MiB source (larger than any cache) once,
 * each to the next place in a 1 MiB destination window, as the pipeline copies into a batch.
 */
static double copy_rate(copy_fn_t fn, const uint8_t *src, uint8_t *dst, size_t len, bool cold,
			uint32_t *sink)
{
	size_t stride = len + FRAME, n = cold ? COLD_SRC / stride : (256u << 20) / len + 1;
	double best = 0;

	for (int r = 0; r < (cold ? 4 : 5); r++) {
		double t0 = now_s(), dt;
		uint32_t c = *sink;
		size_t at = 0;

		for (size_t i = 0; i < n; i++) {
			if (cold) {
				if (at + len > COLD_DST)
					at = 0;
				c = fn(c, dst + at, src + i * stride, len);
				at += len;
			} else {
				c = fn(c, dst, src, len);
			}
		}
		dt = now_s() - t0;
		*sink ^= c;
		if (dt > 0 && (double)(n * len) / dt / 1e9 > best)
			best = (double)(n * len) / dt / 1e9;
	}
	return best;
}

/*
 * crc32c_copy (fused) against memcpy + crc32c_extend (twopass), the 4 KiB chunked loop it
 * replaced, and memcpy alone, per record size, with hot and cold sources.
 */
static int bench_copy(uint32_t *sink)
{
	static const size_t lens[] = { 1024, 16384, 102400 };
	uint8_t *src = malloc(COLD_SRC), *dst = malloc(COLD_DST);

	if (!src || !dst) {
		free(src);
		free(dst);
		return 1;
	}
	for (size_t i = 0; i < COLD_SRC; i++)
		src[i] = (uint8_t)(i * 131 + (i >> 9));
	memset(dst, 0, COLD_DST);
	for (int cold = 0; cold < 2; cold++)
		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			size_t len = lens[i];
			double base = copy_rate(memcpy_copy, src, dst, len, cold, sink);
			double fused = copy_rate(crc32c_copy, src, dst, len, cold, sink);
			double two = copy_rate(twopass_copy, src, dst, len, cold, sink);
			double chunk = copy_rate(chunked_copy, src, dst, len, cold, sink);
			double hw = 0, fold = 0;

			if (crc32c_hw_available())
				hw = copy_rate(crc32c_copy_hw, src, dst, len, cold, sink);
			if (crc32c_fold_available())
				fold = copy_rate(crc32c_copy_fold, src, dst, len, cold, sink);

			printf("bench=crc32c_copy len=%zu src=%s fused_gb_per_s=%.2f "
			       "twopass_gb_per_s=%.2f chunked_gb_per_s=%.2f sse42_gb_per_s=%.2f "
			       "fold_gb_per_s=%.2f impl=%s memcpy_gb_per_s=%.2f ratio=%.3f\n",
			       len, cold ? "cold" : "hot", fused, two, chunk, hw, fold,
			       crc32c_impl_name(), base, base > 0 ? fused / base : 0);
		}
	free(src);
	free(dst);
	return 0;
}

static void crc_usage(FILE *f)
{
	fprintf(f, "usage: sluice-bench crc\n"
		   "\n"
		   "CRC32C of buffers of 64 B to 1 MiB, hot and cold, with each implementation\n"
		   "(table, SSE4.2, VPCLMULQDQ where the CPU has them) and the one crc32c()\n"
		   "picks, against memcpy of the same buffers.\n");
}

int bench_crc(int argc, char **argv)
{
	static const size_t lens[] = { 64, 256, 800, 4096, 16384, 1u << 20 };
	uint8_t *buf;
	uint32_t sink = 0;

	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	optind = 0;
	while ((c = bench_getopt(argc, argv, opts, NULL)) != -1) {
		crc_usage(c == 'h' ? stdout : stderr);
		return c == 'h' ? 0 : 2;
	}
	if (optind != argc) {
		crc_usage(stderr);
		return 2;
	}
	buf = malloc(lens[5]);
	copy_dst = malloc(lens[5]);
	if (!buf || !copy_dst) {
		free(buf);
		free(copy_dst);
		return 1;
	}
	for (size_t i = 0; i < lens[5]; i++)
		buf[i] = (uint8_t)(i * 131 + (i >> 9));
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		size_t len = lens[i];
		double base = rate(copy_fn, buf, len, &sink);
		double tab = rate(crc32c_extend_table, buf, len, &sink);
		double hw = crc32c_hw_available() ? rate(crc32c_extend_hw, buf, len, &sink) : 0;
		double fold =
			crc32c_fold_available() ? rate(crc32c_extend_fold, buf, len, &sink) : 0;
		double used = rate(crc32c_extend, buf, len, &sink);

		printf("bench=crc32c len=%zu table_gb_per_s=%.2f sse42_gb_per_s=%.2f "
		       "fold_gb_per_s=%.2f used_gb_per_s=%.2f impl=%s "
		       "baseline_memcpy_gb_per_s=%.2f "
		       "ratio=%.3f\n",
		       len, tab, hw, fold, used, crc32c_impl_name(), base,
		       base > 0 ? used / base : 0);
	}
	free(buf);
	free(copy_dst);
	if (bench_copy(&sink))
		return 1;
	/* sink keeps the compiler from dropping the loops */
	return sink == 0x5eed ? 0 : 0;
}
