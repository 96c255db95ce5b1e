/* SPDX-License-Identifier: Apache-2.0 */
/* What the iox tests share: pattern files, an iox per engine, a gate before the backend. */
#include "tests/unit/io/iox_fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/unit/skip.h"

uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

void pattern_fill(uint64_t seed, uint64_t off, uint8_t *out, size_t len)
{
	size_t i;

	for (i = 0; i < len;) {
		uint64_t pos = off + i;
		uint64_t w = mix64(seed + pos / 8);
		unsigned b = (unsigned)(pos % 8);

		for (; b < 8 && i < len; b++, i++)
			out[i] = (uint8_t)(w >> (8 * b));
	}
}

void write_pattern(const char *path, uint64_t seed, uint64_t size)
{
	uint8_t *buf = malloc(1 << 20);
	uint64_t off = 0;
	int fd;

	assert_non_null(buf);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	while (off < size) {
		size_t n = size - off < (1u << 20) ? (size_t)(size - off) : (1u << 20);

		pattern_fill(seed, off, buf, n);
		assert_int_equal(write(fd, buf, n), (ssize_t)n);
		off += n;
	}
	assert_int_equal(close(fd), 0);
	free(buf);
}

struct iox *make_iox(void **state, struct iox_opts *o)
{
	enum iox_engine e = *(const enum iox_engine *)*state;
	struct io_error err = { "" };
	struct iox *iox = NULL;
	int ret;

	o->engine = e;
	ret = iox_create(o, &iox, &err);
	if (ret < 0 && e == IOX_ENGINE_URING && ret != -EINVAL && ret != -ENOMEM) {
		SL_SKIP("[io_uring] io_uring refused here: %s", err.msg);
	}
	assert_int_equal(ret, 0);
	assert_non_null(iox);
	assert_int_equal(iox_engine_used(iox), e);
	return iox;
}

struct gate g_gate;

static int gate_queue(struct iox *iox, const struct iox_rd *rd)
{
	struct iox_rd r = *rd;

	if (g_gate.closed) {
		assert_true(g_gate.nheld < 256);
		g_gate.held[g_gate.nheld++] = r;
		return 0;
	}
	if (g_gate.shorten && r.len > 1) {
		r.len = r.len / 3 + 1;
		g_gate.cut++;
	}
	return g_gate.real->queue(iox, &r);
}

static int gate_flush(struct iox *iox)
{
	return g_gate.real->flush(iox);
}

static int gate_reap(struct iox *iox, int timeout_ms, struct iox_cqe *out, unsigned max)
{
	return g_gate.real->reap(iox, timeout_ms, out, max);
}

static void gate_destroy(struct iox *iox)
{
	g_gate.real->destroy(iox);
}

void gate_install(struct iox *iox)
{
	memset(&g_gate, 0, sizeof(g_gate));
	g_gate.real = iox->ops;
	g_gate.ops.queue = gate_queue;
	g_gate.ops.flush = gate_flush;
	g_gate.ops.reap = gate_reap;
	g_gate.ops.destroy = gate_destroy;
	iox->ops = &g_gate.ops;
}

void gate_open(struct iox *iox)
{
	unsigned i;

	g_gate.closed = 0;
	for (i = 0; i < g_gate.nheld; i++)
		assert_int_equal(g_gate.real->queue(iox, &g_gate.held[i]), 0);
	g_gate.nheld = 0;
}
