/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced's log: one line per event on stderr (the journal under systemd). */
#ifndef SLUICE_DAEMON_LOG_H
#define SLUICE_DAEMON_LOG_H

void dmn_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
