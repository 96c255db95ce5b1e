/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced's log lines. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static bool to_journal;

bool dmn_log_init(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	char end;
	to_journal = js && sscanf(js, "%llu:%llu%c", &dev, &ino, &end) == 2 && fstat(2, &st) == 0 &&
		     (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
	return to_journal;
}

static void vlog(enum dmn_prio prio, const char *fmt, va_list ap)
{
	char line[4096];
	vsnprintf(line, sizeof(line), fmt, ap);
	/* one write per line, so that lines of two threads never mix */
	if (to_journal)
		fprintf(stderr, "<%d>%s\n", (int)prio, line);
	else
		fprintf(stderr, "sluiced: %s\n", line);
}

void dmn_log_at(enum dmn_prio prio, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(prio, fmt, ap);
	va_end(ap);
}

void dmn_log(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(DMN_LOG_INFO, fmt, ap);
	va_end(ap);
}

void dmn_warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(DMN_LOG_WARNING, fmt, ap);
	va_end(ap);
}

void dmn_err(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(DMN_LOG_ERR, fmt, ap);
	va_end(ap);
}
