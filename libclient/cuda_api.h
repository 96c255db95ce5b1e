/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA runtime functions and constants libsluice uses, declared by hand (no CUDA at build). */
#ifndef SLUICE_LIBCLIENT_CUDA_API_H
#define SLUICE_LIBCLIENT_CUDA_API_H

#include <stddef.h>

/*
 * cuda.c resolves these with dlsym and calls them through a table made from LC_CUDA_FNS, with
 * the runtime's types spelt as the C types they are passed as: cudaError_t and the enums as
 * int, streams and events as void *. Where the CUDA headers are found at build time,
 * cuda_check.c spells the same list with the real types (LC_CU_* defined before this header)
 * and checks, with the compiler, that every prototype is the runtime's and that each real type
 * is passed as its stand-in is: a signature or constant that drifts is a build error.
 */
#ifndef LC_CU_ERR
#define LC_CU_ERR    int    /* cudaError_t */
#define LC_CU_STREAM void * /* cudaStream_t */
#define LC_CU_EVENT  void * /* cudaEvent_t */
#define LC_CU_KIND   int    /* enum cudaMemcpyKind */
#define LC_CU_ATTR   int    /* enum cudaDeviceAttr */
#endif

/* X(table field, runtime symbol, return type, parameters) */
#define LC_CUDA_FNS(X)                                                                       \
	X(get_device_count, cudaGetDeviceCount, LC_CU_ERR, (int *count))                     \
	X(get_device, cudaGetDevice, LC_CU_ERR, (int *dev))                                  \
	X(device_get_attribute, cudaDeviceGetAttribute, LC_CU_ERR,                           \
	  (int *value, LC_CU_ATTR attr, int dev))                                            \
	X(host_register, cudaHostRegister, LC_CU_ERR, (void *p, size_t len, unsigned flags)) \
	X(host_unregister, cudaHostUnregister, LC_CU_ERR, (void *p))                         \
	X(memcpy_async, cudaMemcpyAsync, LC_CU_ERR,                                          \
	  (void *dst, const void *src, size_t len, LC_CU_KIND kind, LC_CU_STREAM stream))    \
	X(event_create_with_flags, cudaEventCreateWithFlags, LC_CU_ERR,                      \
	  (LC_CU_EVENT * ev, unsigned flags))                                                \
	X(event_record, cudaEventRecord, LC_CU_ERR, (LC_CU_EVENT ev, LC_CU_STREAM stream))   \
	X(event_synchronize, cudaEventSynchronize, LC_CU_ERR, (LC_CU_EVENT ev))              \
	X(event_destroy, cudaEventDestroy, LC_CU_ERR, (LC_CU_EVENT ev))                      \
	X(stream_synchronize, cudaStreamSynchronize, LC_CU_ERR, (LC_CU_STREAM stream))       \
	X(get_last_error, cudaGetLastError, LC_CU_ERR, (void))                               \
	X(get_error_string, cudaGetErrorString, const char *, (LC_CU_ERR e))

/* X(our name, the runtime's name, value) */
#define LC_CUDA_CONSTS(X)                                              \
	X(CU_SUCCESS, cudaSuccess, 0)                                  \
	X(CU_MEMCPY_HOST_TO_DEVICE, cudaMemcpyHostToDevice, 1)         \
	X(CU_HOST_REGISTER_PORTABLE, cudaHostRegisterPortable, 0x01u)  \
	X(CU_HOST_REGISTER_READ_ONLY, cudaHostRegisterReadOnly, 0x08u) \
	X(CU_EVENT_DISABLE_TIMING, cudaEventDisableTiming, 0x02u)      \
	X(CU_ATTR_HOST_REGISTER_READ_ONLY, cudaDevAttrHostRegisterReadOnlySupported, 113)

#define LC_CUDA_CONST_ENUM(ours, theirs, value) ours = value,
enum { LC_CUDA_CONSTS(LC_CUDA_CONST_ENUM) };
#undef LC_CUDA_CONST_ENUM

#endif
