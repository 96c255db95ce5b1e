/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the control-protocol tests: a message buffer, field writers, parse_ok. */
#include "ctl_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

uint8_t buf[IPC_CTL_MAX_MSG];
char emsg[512];

void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)v);
	put16(p + 2, (uint16_t)(v >> 16));
}

/* Parse b as a message of the given type and request id, or fail the test. */
struct ipc_ctl_msg parse_ok(const void *b, size_t len, uint16_t type, uint32_t req_id)
{
	struct ipc_ctl_msg m;

	emsg[0] = '\0';
	assert_int_equal(ipc_ctl_msg_parse(b, len, &m, emsg, sizeof(emsg)), 0);
	assert_int_equal(m.version, IPC_CTL_VERSION);
	assert_int_equal(m.type, type);
	assert_int_equal(m.req_id, req_id);
	assert_int_equal(m.body_len, len - IPC_CTL_HDR_SIZE);
	return m;
}

void fill_attached(struct ipc_ctl_attached *a, struct ipc_ctl_tensor_info *t)
{
	int i;

	memset(a, 0, sizeof(*a));
	memset(t, 0, 3 * sizeof(*t));
	a->reader_id = 0x1122334455667788ull;
	snprintf(a->name, sizeof(a->name), "ctr");
	for (i = 0; i < IPC_CTL_FP_LEN; i++)
		a->fingerprint[i] = (uint8_t)i;
	a->ring_version = 1;
	a->n_slots = 64;
	a->data_bytes = 64ull << 20;
	a->ctl_bytes = 4096;
	a->max_batch_bytes = 1 << 20;
	a->first_epoch = 3;
	snprintf(t[0].name, sizeof(t[0].name), "image");
	t[0].dtype = IPC_DTYPE_STRING;
	t[0].rank = 1;
	t[0].shape[0] = -1;
	snprintf(t[1].name, sizeof(t[1].name), "label");
	t[1].dtype = IPC_DTYPE_INT64;
	t[1].rank = 2;
	t[1].shape[0] = -1;
	t[1].shape[1] = 1;
	snprintf(t[2].name, sizeof(t[2].name), "bbox");
	t[2].dtype = IPC_DTYPE_FLOAT32;
	t[2].rank = IPC_BATCH_MAX_RANK;
	for (i = 0; i < IPC_BATCH_MAX_RANK; i++)
		t[2].shape[i] = i == 1 ? -1 : i + 1;
	t[2].shape[0] = -1;
	t[2].ragged = true;
	a->tensors = t;
	a->n_tensors = 3;
}
