/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the control-protocol tests: a message buffer, field writers, parse_ok. */
#ifndef SLUICE_TESTS_UNIT_IPC_CTL_FIXTURE_H
#define SLUICE_TESTS_UNIT_IPC_CTL_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "ipc/ctl.h"

/* The message buffer and the error text the tests encode and decode into, one test at a time. */
extern uint8_t buf[IPC_CTL_MAX_MSG];
extern char emsg[512];

/* Little-endian stores, to write and patch headers and fields by hand. */
void put16(uint8_t *p, uint16_t v);
void put32(uint8_t *p, uint32_t v);

/* Parse b as a message of the given type and request id, or fail the test. */
struct ipc_ctl_msg parse_ok(const void *b, size_t len, uint16_t type, uint32_t req_id);

/* Expect -EBADMSG with a message containing want (the user includes cmocka.h and string.h). */
#define EXPECT_BAD(call, want)                                                            \
	do {                                                                              \
		emsg[0] = '\0';                                                           \
		assert_int_equal((call), -EBADMSG);                                       \
		if (!strstr(emsg, (want)))                                                \
			fail_msg("message \"%s\" does not contain \"%s\"", emsg, (want)); \
	} while (0)

/* An ATTACHED with three tensors of every kind; a->tensors points at t (3 entries). */
void fill_attached(struct ipc_ctl_attached *a, struct ipc_ctl_tensor_info *t);

#endif /* SLUICE_TESTS_UNIT_IPC_CTL_FIXTURE_H */
