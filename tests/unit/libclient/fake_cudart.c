/* SPDX-License-Identifier: Apache-2.0 */
/* A fake CUDA runtime for test_cuda: copies are deferred until a sync, registrations recorded. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * Just the functions libclient/cuda.c resolves, with the runtime's numbering of errors and
 * flags. "Device memory" is host memory: cudaMemcpyAsync only queues the copy, and an event
 * or stream sync performs every queued copy, so a test sees whether a batch's memory was still
 * there (not given back to the ring) when its copies ran. FAKE_CUDA_DEVICES sets the device
 * count (default 1). The test reads what happened through fake_cuda_state().
 */

struct fake_cuda_state {
	int registered, unregistered; /* cudaHostRegister / cudaHostUnregister calls */
	const void *reg_base;
	size_t reg_len;
	unsigned reg_flags;
	int copies_queued, copies_done, unpinned; /* unpinned: sources outside the registration */
	int events_live, event_syncs;
};

#define MAX_OPS 1024

struct op {
	void *dst;
	const void *src;
	size_t len;
};

static struct fake_cuda_state st;
static struct op ops[MAX_OPS];
static int n_ops;

/* These are the runtime's names: declared here so that -Wmissing-prototypes is happy. */
struct fake_cuda_state *fake_cuda_state(void);
int cudaGetDeviceCount(int *count);
int cudaGetDevice(int *dev);
int cudaDeviceGetAttribute(int *value, int attr, int dev);
int cudaHostRegister(void *p, size_t len, unsigned flags);
int cudaHostUnregister(void *p);
int cudaMemcpyAsync(void *dst, const void *src, size_t len, int kind, void *stream);
int cudaEventCreateWithFlags(void **ev, unsigned flags);
int cudaEventRecord(void *ev, void *stream);
int cudaEventSynchronize(void *ev);
int cudaEventDestroy(void *ev);
int cudaStreamSynchronize(void *stream);
int cudaGetLastError(void);
const char *cudaGetErrorString(int e);

struct fake_cuda_state *fake_cuda_state(void)
{
	return &st;
}

static void run_ops(void)
{
	for (int i = 0; i < n_ops; i++)
		memcpy(ops[i].dst, ops[i].src, ops[i].len);
	st.copies_done += n_ops;
	n_ops = 0;
}

int cudaGetDeviceCount(int *count)
{
	const char *e = getenv("FAKE_CUDA_DEVICES");

	*count = e && e[0] ? (int)strtol(e, NULL, 10) : 1;
	return 0;
}

int cudaGetDevice(int *dev)
{
	*dev = 0;
	return 0;
}

int cudaDeviceGetAttribute(int *value, int attr, int dev)
{
	*value = attr == 113; /* cudaDevAttrHostRegisterReadOnlySupported */
	return 0;
}

int cudaHostRegister(void *p, size_t len, unsigned flags)
{
	long page = sysconf(_SC_PAGESIZE);

	if ((uintptr_t)p % (uintptr_t)page || len == 0)
		return 1; /* cudaErrorInvalidValue */
	st.registered++;
	st.reg_base = p;
	st.reg_len = len;
	st.reg_flags = flags;
	return 0;
}

int cudaHostUnregister(void *p)
{
	if (p != st.reg_base)
		return 1;
	st.unregistered++;
	return 0;
}

int cudaMemcpyAsync(void *dst, const void *src, size_t len, int kind, void *stream)
{
	const char *s = src, *b = st.reg_base;

	if (kind != 1 || n_ops == MAX_OPS) /* cudaMemcpyHostToDevice */
		return 1;
	if (st.registered == st.unregistered || s < b || s + len > b + st.reg_len)
		st.unpinned++;
	ops[n_ops].dst = dst;
	ops[n_ops].src = src;
	ops[n_ops].len = len;
	n_ops++;
	st.copies_queued++;
	return 0;
}

int cudaEventCreateWithFlags(void **ev, unsigned flags)
{
	*ev = malloc(1);
	if (!*ev)
		return 2; /* cudaErrorMemoryAllocation */
	st.events_live++;
	return 0;
}

int cudaEventRecord(void *ev, void *stream)
{
	return ev ? 0 : 400; /* cudaErrorInvalidResourceHandle */
}

int cudaEventSynchronize(void *ev)
{
	st.event_syncs++;
	run_ops();
	return 0;
}

int cudaEventDestroy(void *ev)
{
	free(ev);
	st.events_live--;
	return 0;
}

int cudaStreamSynchronize(void *stream)
{
	run_ops();
	return 0;
}

int cudaGetLastError(void)
{
	return 0;
}

const char *cudaGetErrorString(int e)
{
	return "fake CUDA error";
}
