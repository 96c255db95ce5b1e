/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced's log: one line per event on stderr (the journal under systemd). */
#ifndef SLUICE_DAEMON_LOG_H
#define SLUICE_DAEMON_LOG_H

#include <stdbool.h>

/* syslog's priorities, as sd-daemon(3)'s "<N>" prefixes carry them */
enum dmn_prio { DMN_LOG_ERR = 3, DMN_LOG_WARNING = 4, DMN_LOG_INFO = 6 };

/*
 * Whether stderr is the journal: $JOURNAL_STREAM ("DEV:INODE", set by systemd) names the file
 * stderr is. Then every line starts with "<N>" (its priority) and no "sluiced: ". Call once at
 * the start; returns what it found.
 */
bool dmn_log_init(void);
void dmn_log_at(enum dmn_prio prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An event (info). */
void dmn_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void dmn_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void dmn_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
