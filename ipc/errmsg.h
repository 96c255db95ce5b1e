/* SPDX-License-Identifier: Apache-2.0 */
/* ipc/ internal: the message of a refusal, for the callers' char *msg, size_t cap buffers. */
#ifndef SLUICE_IPC_ERRMSG_H
#define SLUICE_IPC_ERRMSG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

static inline int ipc_errmsg(int code, char *msg, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Write the message (when there is a buffer for one) and return code (a negative errno). */
static inline int ipc_errmsg(int code, char *msg, size_t cap, const char *fmt, ...)
{
	va_list ap;

	if (msg && cap) {
		va_start(ap, fmt);
		vsnprintf(msg, cap, fmt, ap);
		va_end(ap);
	}
	return code;
}

#endif
