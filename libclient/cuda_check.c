/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Built only where the CUDA headers are found (libclient/meson.build), and never linked: the
 * compiler checks cuda_api.h's hand-written declarations against cuda_runtime_api.h. Each
 * prototype, spelt with the runtime's own types, must be the runtime's; each real type must
 * be passed as the stand-in cuda.c calls it with; each constant must have the runtime's value.
 */
#include <cuda_runtime_api.h>

#define LC_CU_ERR    cudaError_t
#define LC_CU_STREAM cudaStream_t
#define LC_CU_EVENT  cudaEvent_t
#define LC_CU_KIND   enum cudaMemcpyKind
#define LC_CU_ATTR   enum cudaDeviceAttr
#include "cuda_api.h"

#define CHECK_FN(field, sym, ret, args)                                             \
	_Static_assert(__builtin_types_compatible_p(__typeof__(&sym), ret(*) args), \
		       #sym ": its prototype in cuda_runtime_api.h is not cuda_api.h's");
LC_CUDA_FNS(CHECK_FN)

/* the stand-ins: the enums as int, the handles as pointers (what cuda.c passes) */
#define SAME_AS(real, standin)                                                                 \
	_Static_assert(sizeof(real) == sizeof(standin) && _Alignof(real) == _Alignof(standin), \
		       #real " is not passed as " #standin);
SAME_AS(cudaError_t, int)
SAME_AS(enum cudaMemcpyKind, int)
SAME_AS(enum cudaDeviceAttr, int)
SAME_AS(cudaStream_t, void *)
SAME_AS(cudaEvent_t, void *)
_Static_assert(__builtin_classify_type((cudaStream_t)0) == __builtin_classify_type((void *)0),
	       "cudaStream_t is not a pointer");
_Static_assert(__builtin_classify_type((cudaEvent_t)0) == __builtin_classify_type((void *)0),
	       "cudaEvent_t is not a pointer");

#define CHECK_CONST(ours, theirs, value)                                             \
	_Static_assert((long long)(theirs) == (long long)(value) && ours == (value), \
		       #theirs " is not " #value " (cuda_api.h's " #ours ")");
LC_CUDA_CONSTS(CHECK_CONST)

/* an object file needs something in it */
int lc_cuda_check_built(void);
int lc_cuda_check_built(void)
{
	return 1;
}
