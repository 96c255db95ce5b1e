/* SPDX-License-Identifier: Apache-2.0 */
/* libsluice: sluice_batch_copy_to_cuda, over a CUDA runtime loaded with dlopen at first use. */
#include "client_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_api.h"

/*
 * No build dependency on CUDA: the few runtime functions used here are declared by hand
 * (cudaError_t is an int, streams and events are pointers) and resolved with dlsym from
 * $SLUICE_CUDA_LIBRARY, else the first libcudart already loaded into the process (by torch,
 * say), else the first that dlopen finds. The runtime is kept once it reports a device; after
 * a failure the next call tries again (it is cheap, and lets tests point the variable at
 * another library). A loaded runtime is never dlclose()d: libcudart does not support it.
 *
 * Rings: the first copy from a ring registers its whole data area with cudaHostRegister
 * (portable, and read-only where the device supports it: the mapping is PROT_READ), so copies
 * are DMA from pinned memory; lc_cuda_ring_fini() unregisters it before the ring is unmapped.
 * When registering fails, copies go on from pageable memory (slower, still correct).
 *
 * Batches: an event recorded on the caller's stream after a batch's copies; the release waits
 * for it (lc_cuda_batch_wait), so the daemon cannot reuse the memory while DMA reads it.
 */

enum { LC_CUDA_REG_NONE = 0, LC_CUDA_REG_OURS = 1, LC_CUDA_REG_NO = 2 };

#define LC_CUDA_FIELD(field, sym, ret, args) ret(*field) args;
struct cudart {
	LC_CUDA_FNS(LC_CUDA_FIELD)
};
#undef LC_CUDA_FIELD

static pthread_mutex_t cuda_lock = PTHREAD_MUTEX_INITIALIZER; /* loading, ring registration */
static struct cudart cu;				      /* valid once cuda_ready */
static _Atomic bool cuda_ready; /* set (release) after cu is filled, under cuda_lock */

static const char *const cuda_candidates[] = {
	"libcudart.so",
	"libcudart.so.13",
	"libcudart.so.12",
	"libcudart.so.11.0",
};

static const char *cu_str(int e)
{
	const char *s = cu.get_error_string ? cu.get_error_string(e) : NULL;

	return s ? s : "unknown CUDA error";
}

/* dlsym into a function pointer of any type (fn points at it). */
static bool resolve(void *h, const char *name, void *fn)
{
	void *sym = dlsym(h, name);

	if (!sym)
		return false;
	memcpy(fn, &sym, sizeof(sym));
	return true;
}

/* dlopen the runtime as the comment at the top says; its name goes to *ret_name. */
static void *open_runtime(const char **ret_name, char *why, size_t cap)
{
	const char *env = getenv("SLUICE_CUDA_LIBRARY");
	const char *e;
	void *h;
	size_t i, n = sizeof(cuda_candidates) / sizeof(cuda_candidates[0]);

	if (env && env[0]) {
		*ret_name = env;
		h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			e = dlerror();
			snprintf(why, cap, "%s", e ? e : "dlopen failed");
		}
		return h;
	}
	for (i = 0; i < n; i++) {
		h = dlopen(cuda_candidates[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
		if (h) {
			*ret_name = cuda_candidates[i];
			return h;
		}
	}
	for (i = 0; i < n; i++) {
		h = dlopen(cuda_candidates[i], RTLD_NOW | RTLD_LOCAL);
		if (h) {
			*ret_name = cuda_candidates[i];
			return h;
		}
	}
	*ret_name = cuda_candidates[0];
	e = dlerror();
	snprintf(why, cap, "%s", e ? e : "not found");
	return NULL;
}

/* Load the runtime and check that it sees a device. 0, or -ENODEV with a message. */
static int cuda_load(struct sluice_error *err)
{
	struct cudart t;
	const char *name = NULL, *missing = NULL;
	char why[256] = "";
	void *h;
	int rc = 0, count = 0, e;

	/* Pairs with the release store below: cu is complete when cuda_ready reads true. */
	if (atomic_load_explicit(&cuda_ready, memory_order_acquire))
		return 0;
	pthread_mutex_lock(&cuda_lock);
	if (atomic_load_explicit(&cuda_ready, memory_order_relaxed))
		goto out;
	h = open_runtime(&name, why, sizeof(why));
	if (!h) {
		rc = lc_fail(err, -ENODEV, "copy_to_cuda: cannot load the CUDA runtime %s: %s",
			     name, why);
		goto out;
	}
	memset(&t, 0, sizeof(t));
#define RESOLVE(field, sym, ret, args)               \
	if (!missing && !resolve(h, #sym, &t.field)) \
		missing = #sym;
	LC_CUDA_FNS(RESOLVE)
#undef RESOLVE
	if (missing) {
		rc = lc_fail(err, -ENODEV, "copy_to_cuda: the CUDA runtime %s lacks %s", name,
			     missing);
		goto out;
	}
	e = t.get_device_count(&count);
	if (e != CU_SUCCESS || count <= 0) {
		const char *s = e != CU_SUCCESS ? t.get_error_string(e) : NULL;

		rc = lc_fail(err, -ENODEV,
			     "copy_to_cuda: no CUDA device (cudaGetDeviceCount of "
			     "%s: %s%s%d)",
			     name, e != CU_SUCCESS ? (s ? s : "error") : "",
			     e != CU_SUCCESS ? " " : "count ", e != CU_SUCCESS ? e : count);
		goto out;
	}
	cu = t;
	/* Pairs with the acquire load above. */
	atomic_store_explicit(&cuda_ready, true, memory_order_release);
out:
	pthread_mutex_unlock(&cuda_lock);
	return rc;
}

/* Register the ring's data area once (best effort: a failure leaves copies pageable). */
static void ring_register(struct lc_ring *ring)
{
	const void *base;
	uint64_t len = 0;
	unsigned flags = CU_HOST_REGISTER_PORTABLE;
	int dev = 0, ro = 0, state;

	/* Pairs with the release store below: the registration is done when it reads set. */
	if (atomic_load_explicit(&ring->cuda_reg, memory_order_acquire) != LC_CUDA_REG_NONE)
		return;
	pthread_mutex_lock(&cuda_lock);
	if (atomic_load_explicit(&ring->cuda_reg, memory_order_relaxed) == LC_CUDA_REG_NONE) {
		base = ipc_ring_client_data(ring->rc, &len);
		if (cu.get_device(&dev) == CU_SUCCESS &&
		    cu.device_get_attribute(&ro, CU_ATTR_HOST_REGISTER_READ_ONLY, dev) ==
			    CU_SUCCESS &&
		    ro)
			flags |= CU_HOST_REGISTER_READ_ONLY;
		if (base && len &&
		    cu.host_register((void *)(uintptr_t)base, (size_t)len, flags) == CU_SUCCESS) {
			state = LC_CUDA_REG_OURS;
		} else {
			cu.get_last_error(); /* not left for the caller's next call to find */
			state = LC_CUDA_REG_NO;
		}
		/* Pairs with the acquire load above. */
		atomic_store_explicit(&ring->cuda_reg, state, memory_order_release);
	}
	pthread_mutex_unlock(&cuda_lock);
}

void lc_cuda_ring_fini(struct lc_ring *ring)
{
	uint64_t len;

	/* The last reference is going: nobody registers concurrently. */
	if (atomic_load_explicit(&ring->cuda_reg, memory_order_acquire) != LC_CUDA_REG_OURS)
		return;
	cu.host_unregister((void *)(uintptr_t)ipc_ring_client_data(ring->rc, &len));
	atomic_store_explicit(&ring->cuda_reg, LC_CUDA_REG_NONE, memory_order_relaxed);
}

void lc_cuda_batch_wait(struct sluice_batch *b)
{
	if (!b->cuda_event)
		return; /* never copied: the runtime may not even be loaded */
	cu.event_synchronize(b->cuda_event);
	cu.event_destroy(b->cuda_event);
	b->cuda_event = NULL;
}

/* Enqueue one copy; -EIO with a message naming the tensor on failure. */
static int copy_one(void *dst, const void *src, uint64_t len, void *stream,
		    const struct sluice_tensor *t, const char *part, struct sluice_error *err)
{
	int e;

	if (!len)
		return 0;
	e = cu.memcpy_async(dst, src, (size_t)len, CU_MEMCPY_HOST_TO_DEVICE, stream);
	if (e == CU_SUCCESS)
		return 0;
	cu.get_last_error();
	return lc_fail(err, -EIO,
		       "copy_to_cuda: tensor \"%s\" %s (%" PRIu64 " bytes): "
		       "cudaMemcpyAsync: %s (%d)",
		       t->name, part, len, cu_str(e), e);
}

/*
 * dst[i] NULL skips tensor i (its aux too); dst_aux NULL or dst_aux[i] NULL skips its
 * row_splits / offsets. Nothing is enqueued unless every tensor of the batch checks out.
 */
int sluice_batch_copy_to_cuda(struct sluice_batch *b, void *const *dst, void *const *dst_aux,
			      void *stream, struct sluice_error *err)
{
	struct sluice_tensor t;
	size_t i, n;
	int rc, e, copied = 0;

	if (!b || !dst)
		return lc_fail(err, -EINVAL, "copy_to_cuda: no batch or no dst array");
	rc = cuda_load(err);
	if (rc < 0)
		return rc;
	n = sluice_batch_num_tensors(b);
	for (i = 0; i < n; i++) {
		rc = sluice_batch_tensor_at(b, i, &t);
		if (rc < 0)
			return lc_fail(err, rc, "copy_to_cuda: batch %" PRIu64 ": tensor %zu: %s",
				       sluice_batch_seq(b), i, sluice_strerror(rc));
	}
	ring_register(b->ring);
	if (b->cuda_event) {
		/* Copied before: let those copies finish, so that one event covers them all. */
		cu.event_synchronize(b->cuda_event);
	} else {
		e = cu.event_create_with_flags(&b->cuda_event, CU_EVENT_DISABLE_TIMING);
		if (e != CU_SUCCESS) {
			cu.get_last_error();
			b->cuda_event = NULL;
			return lc_fail(err, -EIO, "copy_to_cuda: cudaEventCreateWithFlags: %s (%d)",
				       cu_str(e), e);
		}
	}
	for (i = 0; i < n && rc == 0; i++) {
		void *aux = dst_aux ? dst_aux[i] : NULL;

		if (!dst[i] || sluice_batch_tensor_at(b, i, &t) < 0)
			continue;
		rc = copy_one(dst[i], t.data, t.nbytes, stream, &t, "data", err);
		if (rc == 0 && aux && t.row_splits)
			rc = copy_one(aux, t.row_splits, ((uint64_t)t.shape[0] + 1) * 8, stream, &t,
				      "row_splits", err);
		else if (rc == 0 && aux && t.offsets)
			rc = copy_one(aux, t.offsets, (t.n_elems + 1) * 8, stream, &t, "offsets",
				      err);
		copied++;
	}
	e = cu.event_record(b->cuda_event, stream);
	if (e != CU_SUCCESS) {
		/* Without the event the release could not wait for the copies: wait now. */
		cu.get_last_error();
		if (copied)
			cu.stream_synchronize(stream);
		if (rc == 0)
			rc = lc_fail(err, -EIO, "copy_to_cuda: cudaEventRecord: %s (%d)", cu_str(e),
				     e);
		cu.event_destroy(b->cuda_event);
		b->cuda_event = NULL;
	}
	return rc;
}
