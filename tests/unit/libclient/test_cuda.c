/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for sluice_batch_copy_to_cuda without a GPU: ENODEV, and a fake runtime's copies. */
#include "sluice/sluice.h"

#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/unit/skip.h"

#include "ipc/batch.h"
#include "ipc/ring.h"
#include "libclient/client_internal.h"

/*
 * The process loads a CUDA runtime once it reports a device, so the order matters: first the
 * failures (no library, the real libcudart on a machine without a GPU, the fake with no
 * device), then the fake runtime (argv[1]), which stays. A batch comes from a real ring (the
 * daemon's side in this process) wrapped in libsluice's own structs, as sluice_next makes them.
 */

#define ROWS 4

static const char *fake_path;
static bool real_gpu; /* the real runtime found a device: the fake cannot be loaded any more */

struct fake_cuda_state {
	int registered, unregistered;
	const void *reg_base;
	size_t reg_len;
	unsigned reg_flags;
	int copies_queued, copies_done, unpinned;
	int events_live, event_syncs;
};

static const struct ipc_ring_tensor schema[2] = {
	{ .name = "x", .dtype = IPC_DTYPE_FLOAT32, .rank = 2, .shape = { -1, 3 } },
	{ .name = "tok", .dtype = IPC_DTYPE_INT64, .rank = 2, .ragged = 1, .shape = { -1, -1 } },
};

struct fixture {
	struct ipc_ring *ring;
	struct lc_ring *lr;
	uint64_t seq;
};

static uint64_t align64(uint64_t x)
{
	return (x + 63) & ~63ull;
}

/* Batch seq: x[r][c] = seq * 100 + 3r + c; row r of tok has r tokens seq * 10 + k. */
static uint64_t build_batch(void *mem, uint64_t seq)
{
	uint8_t *p = mem;
	struct ipc_batch_hdr *h = mem;
	struct ipc_batch_tensor *t = (struct ipc_batch_tensor *)(p + sizeof(*h));
	uint64_t off = align64(sizeof(*h) + 2 * sizeof(*t)), n = 0;
	int64_t *splits, *vals;
	float *x;

	memset(p, 0, off);
	h->magic = IPC_BATCH_MAGIC;
	h->version = IPC_BATCH_VERSION;
	h->n_tensors = 2;
	h->seq = seq;
	h->rows = ROWS;
	t[0].dtype = IPC_DTYPE_FLOAT32;
	t[0].rank = 2;
	t[0].kind = IPC_TENSOR_DENSE;
	t[0].shape[0] = ROWS;
	t[0].shape[1] = 3;
	t[0].data_off = off;
	t[0].data_len = ROWS * 3 * sizeof(float);
	x = (float *)(p + off);
	for (uint64_t i = 0; i < ROWS * 3; i++)
		x[i] = (float)(seq * 100 + i);
	off = align64(off + t[0].data_len);
	t[1].schema_index = 1;
	t[1].dtype = IPC_DTYPE_INT64;
	t[1].rank = 2;
	t[1].kind = IPC_TENSOR_RAGGED;
	t[1].shape[0] = ROWS;
	t[1].shape[1] = -1;
	t[1].splits_off = off;
	splits = (int64_t *)(p + off);
	splits[0] = 0;
	for (uint64_t r = 0; r < ROWS; r++)
		splits[r + 1] = (int64_t)(n += r);
	off = align64(off + (ROWS + 1) * 8);
	t[1].data_off = off;
	t[1].data_len = n * 8;
	vals = (int64_t *)(p + off);
	for (uint64_t k = 0; k < n; k++)
		vals[k] = (int64_t)(seq * 10 + k);
	h->total_bytes = align64(off + n * 8);
	return h->total_bytes;
}

static int setup(void **state)
{
	static struct fixture f;
	struct ipc_ring_opts o;
	struct ipc_ring_client *rc = NULL;
	char msg[256] = "";
	unsigned id;
	int cb_fd;

	memset(&f, 0, sizeof(f));
	ipc_ring_opts_init(&o);
	o.n_slots = 8;
	o.data_bytes = 1 << 20;
	o.schema = schema;
	o.n_schema = 2;
	o.name = "test-cuda";
	assert_int_equal(ipc_ring_create(&o, &f.ring, msg, sizeof(msg)), 0);
	assert_int_equal(ipc_ring_add_reader(f.ring, 0, &id, &cb_fd), 0);
	assert_int_equal(
		ipc_ring_client_attach(ipc_ring_data_fd(f.ring), cb_fd, &rc, msg, sizeof(msg)), 0);
	close(cb_fd);
	/* what ring_new() in sluice.c does */
	f.lr = calloc(1, sizeof(*f.lr));
	assert_non_null(f.lr);
	assert_int_equal(pthread_mutex_init(&f.lr->lock, NULL), 0);
	assert_int_equal(pthread_mutex_init(&f.lr->mu, NULL), 0);
	f.lr->rc = rc;
	f.lr->refs = 1;
	f.lr->schema = ipc_ring_client_schema(rc, &f.lr->n_schema);
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	lc_ring_unref(f->lr);
	ipc_ring_destroy(f->ring);
	return 0;
}

/* Publish the next batch and take it as sluice_next() would. */
static struct sluice_batch *next_batch(struct fixture *f)
{
	struct ipc_ring_extent e;
	struct ipc_ring_batch rb;
	struct sluice_batch *b;
	uint64_t bad = 0;

	ipc_ring_collect(f->ring, &bad);
	assert_int_equal(ipc_ring_reserve(f->ring, 8192, &e), 0);
	assert_int_equal(ipc_ring_publish(f->ring, &e, build_batch(e.mem, f->seq), 0, 0, NULL), 0);
	assert_int_equal(ipc_ring_client_next(f->lr->rc, 0, &rb), 0);
	b = calloc(1, sizeof(*b));
	assert_non_null(b);
	b->ring = f->lr;
	b->rb = rb;
	assert_int_equal(ipc_batch_view(rb.mem, rb.len, &b->v, NULL, 0), 0);
	f->lr->refs++;
	f->seq++;
	return b;
}

static void test_bad_arguments(void **state)
{
	struct fixture *f = *state;
	struct sluice_batch *b = next_batch(f);
	struct sluice_error err = { 0, "" };

	assert_int_equal(sluice_batch_copy_to_cuda(NULL, NULL, NULL, NULL, &err), -EINVAL);
	assert_int_equal(err.code, -EINVAL);
	assert_int_equal(sluice_batch_copy_to_cuda(b, NULL, NULL, NULL, NULL), -EINVAL);
	sluice_batch_release(b);
}

static void test_no_runtime_is_enodev(void **state)
{
	struct fixture *f = *state;
	struct sluice_batch *b = next_batch(f);
	struct sluice_error err = { 0, "" };
	void *dst[2] = { NULL, NULL };

	setenv("SLUICE_CUDA_LIBRARY", "/nonexistent/libcudart.so", 1);
	assert_int_equal(sluice_batch_copy_to_cuda(b, dst, NULL, NULL, &err), -ENODEV);
	assert_int_equal(err.code, -ENODEV);
	assert_non_null(strstr(err.msg, "cannot load the CUDA runtime /nonexistent/libcudart.so"));
	sluice_batch_release(b); /* nothing to wait for */
}

/* The real libcudart, where there is one: without a GPU it says so. */
static void test_real_runtime_without_gpu(void **state)
{
	struct fixture *f = *state;
	const char *real = "/usr/local/cuda/lib64/libcudart.so";
	struct sluice_batch *b;
	struct sluice_error err = { 0, "" };
	void *dst[2] = { NULL, NULL }; /* skip both tensors: safe with a real GPU too */
	int rc;

	if (access(real, R_OK) != 0)
		SL_SKIP("[cuda] no CUDA toolkit runtime at %s", real);
	b = next_batch(f);
	setenv("SLUICE_CUDA_LIBRARY", real, 1);
	rc = sluice_batch_copy_to_cuda(b, dst, NULL, NULL, &err);
	if (rc == 0)
		real_gpu = true; /* a GPU machine: the runtime stays, the fake tests skip */
	else
		assert_int_equal(rc, -ENODEV);
	if (rc < 0)
		assert_non_null(strstr(err.msg, "no CUDA device"));
	sluice_batch_release(b);
}

static void test_fake_without_device_is_enodev(void **state)
{
	struct fixture *f = *state;
	struct sluice_batch *b;
	struct sluice_error err = { 0, "" };
	void *dst[2] = { NULL, NULL };

	if (real_gpu)
		SL_SKIP("[gpu-present] a real GPU: the fake runtime cannot be loaded after the "
			"real one");
	b = next_batch(f);
	setenv("SLUICE_CUDA_LIBRARY", fake_path, 1);
	setenv("FAKE_CUDA_DEVICES", "0", 1);
	assert_int_equal(sluice_batch_copy_to_cuda(b, dst, NULL, NULL, &err), -ENODEV);
	assert_non_null(strstr(err.msg, "no CUDA device"));
	assert_non_null(strstr(err.msg, "count 0"));
	unsetenv("FAKE_CUDA_DEVICES");
	sluice_batch_release(b);
}

static struct fake_cuda_state *fake_state(void)
{
	void *h = dlopen(fake_path, RTLD_NOW | RTLD_NOLOAD);
	struct fake_cuda_state *(*fn)(void);
	void *sym;

	assert_non_null(h);
	sym = dlsym(h, "fake_cuda_state");
	assert_non_null(sym);
	memcpy(&fn, &sym, sizeof(sym));
	dlclose(h); /* drops the reference NOLOAD took; cuda.c keeps its own */
	return fn();
}

/* Copies are queued; the release performs them (waits for the event) before giving back. */
static void test_copy_waits_in_release(void **state)
{
	struct fixture *f = *state;
	struct sluice_batch *b;
	struct sluice_error err = { 0, "" };
	struct fake_cuda_state *st;
	struct sluice_tensor x, tok;
	float xd[ROWS * 3];
	int64_t td[16], sd[ROWS + 1];
	void *dst[2] = { xd, td }, *aux[2] = { NULL, sd };
	uint64_t data_len;
	const void *data;

	if (real_gpu)
		SL_SKIP("[gpu-present] a real GPU: the fake runtime cannot be loaded after the "
			"real one");
	setenv("SLUICE_CUDA_LIBRARY", fake_path, 1);
	b = next_batch(f);
	memset(xd, 0, sizeof(xd));
	memset(td, 0, sizeof(td));
	memset(sd, 0, sizeof(sd));
	assert_int_equal(sluice_batch_copy_to_cuda(b, dst, aux, (void *)0x5, &err), 0);
	st = fake_state();
	data = ipc_ring_client_data(f->lr->rc, &data_len);
	assert_int_equal(st->registered, 1);
	assert_ptr_equal(st->reg_base, data);
	assert_int_equal(st->reg_len, data_len);
	assert_int_equal(st->reg_flags, 0x01 | 0x08); /* portable, read-only */
	assert_int_equal(st->copies_queued, 3);	      /* x; tok's values and row_splits */
	assert_int_equal(st->copies_done, 0);
	assert_int_equal(st->unpinned, 0);
	assert_int_equal(st->events_live, 1);
	assert_int_equal(sluice_batch_tensor(b, "x", &x), 0);
	assert_int_equal(sluice_batch_tensor(b, "tok", &tok), 0);
	assert_true(xd[5] == 0.0f); /* not copied yet */

	/* A second copy of the same batch waits for the first and reuses the event. */
	assert_int_equal(sluice_batch_copy_to_cuda(b, dst, aux, NULL, &err), 0);
	assert_int_equal(st->copies_done, 3);
	assert_int_equal(st->events_live, 1);
	assert_int_equal(memcmp(xd, x.data, x.nbytes), 0);
	memset(xd, 0, sizeof(xd));
	memset(sd, 0, sizeof(sd));

	sluice_batch_release(b);
	assert_int_equal(st->copies_done, 6);
	assert_int_equal(st->events_live, 0);
	/* the bytes that were in the batch when it went back (the fake copied them at the wait) */
	for (int i = 0; i < ROWS * 3; i++)
		assert_true(xd[i] == (float)((f->seq - 1) * 100 + (uint64_t)i));
	for (int r = 0; r <= ROWS; r++)
		assert_int_equal(sd[r], r * (r - 1) / 2);
	assert_int_equal(td[0], (int64_t)((f->seq - 1) * 10));
	assert_int_equal(td[5], (int64_t)((f->seq - 1) * 10 + 5));
}

/* NULL entries skip a tensor or its row_splits; the ring is registered once. */
static void test_skips_and_one_registration(void **state)
{
	struct fixture *f = *state;
	struct sluice_batch *b;
	struct fake_cuda_state *st;
	int64_t td[16];
	void *dst[2] = { NULL, td };
	int queued;

	if (real_gpu)
		SL_SKIP("[gpu-present] a real GPU: the fake runtime cannot be loaded after the "
			"real one");
	b = next_batch(f);
	st = fake_state();
	queued = st->copies_queued;
	assert_int_equal(sluice_batch_copy_to_cuda(b, dst, NULL, NULL, NULL), 0);
	assert_int_equal(st->copies_queued, queued + 1); /* tok's values only */
	assert_int_equal(st->registered, 1);
	sluice_batch_release(b);
	assert_int_equal(st->events_live, 0);
}

/* The last reference to a ring unregisters its data area before it is unmapped. */
static void test_ring_fini_unregisters(void **state)
{
	struct fixture *f = *state;
	struct fake_cuda_state *st;

	if (real_gpu)
		SL_SKIP("[gpu-present] a real GPU: the fake runtime cannot be loaded after the "
			"real one");
	st = fake_state();
	assert_int_equal(st->unregistered, 0);
	lc_ring_unref(f->lr);
	f->lr = NULL;
	assert_int_equal(st->unregistered, 1);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_arguments),
		cmocka_unit_test(test_no_runtime_is_enodev),
		cmocka_unit_test(test_real_runtime_without_gpu),
		cmocka_unit_test(test_fake_without_device_is_enodev),
		cmocka_unit_test(test_copy_waits_in_release),
		cmocka_unit_test(test_skips_and_one_registration),
		cmocka_unit_test(test_ring_fini_unregisters),
	};

	if (argc < 2) {
		fprintf(stderr, "usage: %s FAKE_CUDART.so\n", argv[0]);
		return 2;
	}
	fake_path = argv[1];
	return SL_RUN_GROUP(tests, setup, teardown);
}
