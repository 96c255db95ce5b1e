/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced's log lines. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>

void dmn_log(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("sluiced: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}
