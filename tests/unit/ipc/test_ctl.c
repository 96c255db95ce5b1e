/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for ipc/ctl_msg*.c: round trips of every message, versions, the builder and the reader. */
#include "ipc/ctl.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ctl_fixture.h"

/* ---- round trips ---- */

static void test_hello(void **state)
{
	struct ipc_ctl_hello in = { .version = IPC_CTL_VERSION, .pid = 4242 }, out;
	struct ipc_ctl_hello_ok ok = { .version = IPC_CTL_VERSION,
				       .server_pid = 7,
				       .max_msg = IPC_CTL_MAX_MSG,
				       .max_readers = 64 },
				ok2;
	struct ipc_ctl_msg m;
	size_t len;

	(void)state;
	snprintf(in.client, sizeof(in.client), "sluicectl");
	assert_int_equal(ipc_ctl_encode_hello(buf, sizeof(buf), 1, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_HELLO, 1);
	memset(&out, 0x5a, sizeof(out));
	assert_int_equal(ipc_ctl_decode_hello(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.version, IPC_CTL_VERSION);
	assert_int_equal(out.pid, 4242);
	assert_string_equal(out.client, "sluicectl");

	/* The optional client name is left out when empty and decodes as "". */
	in.client[0] = '\0';
	assert_int_equal(ipc_ctl_encode_hello(buf, sizeof(buf), 2, &in, &len), 0);
	assert_int_equal(len, IPC_CTL_HDR_SIZE + 2 * (6 + 4));
	m = parse_ok(buf, len, IPC_CTL_HELLO, 2);
	assert_int_equal(ipc_ctl_decode_hello(&m, &out, emsg, sizeof(emsg)), 0);
	assert_string_equal(out.client, "");

	assert_int_equal(ipc_ctl_encode_hello_ok(buf, sizeof(buf), 1, &ok, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_HELLO_OK, 1);
	assert_int_equal(ipc_ctl_decode_hello_ok(&m, &ok2, emsg, sizeof(emsg)), 0);
	assert_memory_equal(&ok, &ok2, sizeof(ok));
}

static void test_register(void **state)
{
	static const char spec[] = "{\"name\": \"x\", \"type\": \"independent\", \"args\": {}}";
	struct ipc_ctl_register in = { .spec = spec, .spec_len = sizeof(spec) - 1 }, out;
	struct ipc_ctl_registered r = { .created = true }, r2;
	struct ipc_ctl_msg m;
	size_t len;
	int i;

	(void)state;
	assert_int_equal(ipc_ctl_encode_register(buf, sizeof(buf), 9, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_REGISTER, 9);
	assert_int_equal(ipc_ctl_decode_register(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.spec_len, in.spec_len);
	assert_memory_equal(out.spec, spec, in.spec_len);
	assert_true((const uint8_t *)out.spec > buf && (const uint8_t *)out.spec < buf + len);
	assert_int_equal(out.spec_dir_len, 0); /* optional */

	/* the spec's directory travels with it, and must be absolute */
	in.spec_dir = "/home/ada/conf";
	in.spec_dir_len = 14;
	assert_int_equal(ipc_ctl_encode_register(buf, sizeof(buf), 9, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_REGISTER, 9);
	assert_int_equal(ipc_ctl_decode_register(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.spec_dir_len, 14);
	assert_memory_equal(out.spec_dir, "/home/ada/conf", 14);
	in.spec_dir = "conf";
	in.spec_dir_len = 4;
	assert_int_equal(ipc_ctl_encode_register(buf, sizeof(buf), 9, &in, &len), -EINVAL);
	struct ipc_ctl_attach at = {
		.spec = spec, .spec_len = 3, .spec_dir = "rel", .spec_dir_len = 3
	};
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 9, &at, &len), -EINVAL);

	snprintf(r.name, sizeof(r.name), "imagenet-train");
	for (i = 0; i < IPC_CTL_FP_LEN; i++)
		r.fingerprint[i] = (uint8_t)(0xf0 + i);
	assert_int_equal(ipc_ctl_encode_registered(buf, sizeof(buf), 9, &r, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_REGISTERED, 9);
	assert_int_equal(ipc_ctl_decode_registered(&m, &r2, emsg, sizeof(emsg)), 0);
	assert_string_equal(r2.name, "imagenet-train");
	assert_memory_equal(r2.fingerprint, r.fingerprint, IPC_CTL_FP_LEN);
	assert_true(r2.created);

	r.created = false;
	assert_int_equal(ipc_ctl_encode_registered(buf, sizeof(buf), 10, &r, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_REGISTERED, 10);
	assert_int_equal(ipc_ctl_decode_registered(&m, &r2, emsg, sizeof(emsg)), 0);
	assert_false(r2.created);
}

static void test_attach(void **state)
{
	static const uint8_t st[5] = { 1, 0, 2, 0, 0xff };
	struct ipc_ctl_attach in, out;
	struct ipc_ctl_msg m;
	size_t len;

	(void)state;
	/* By name, rank mode, with a saved state and a lag policy. */
	memset(&in, 0, sizeof(in));
	snprintf(in.name, sizeof(in.name), "imagenet-train");
	in.mode = IPC_CTL_MODE_RANK;
	in.rank_index = 3;
	in.rank_count = 8;
	in.state = st;
	in.state_len = sizeof(st);
	in.lag_policy = IPC_CTL_LAG_CATCH_UP;
	in.max_lag = 1ull << 40;
	in.lag_timeout_ms = 1ull << 35;
	snprintf(in.group, sizeof(in.group), "torch:run-7");
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 77, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_ATTACH, 77);
	assert_int_equal(ipc_ctl_decode_attach(&m, &out, emsg, sizeof(emsg)), 0);
	assert_string_equal(out.name, "imagenet-train");
	assert_null(out.spec);
	assert_int_equal(out.spec_len, 0);
	assert_int_equal(out.mode, IPC_CTL_MODE_RANK);
	assert_int_equal(out.rank_index, 3);
	assert_int_equal(out.rank_count, 8);
	assert_int_equal(out.state_len, sizeof(st));
	assert_memory_equal(out.state, st, sizeof(st));
	assert_int_equal(out.lag_policy, IPC_CTL_LAG_CATCH_UP);
	assert_true(out.max_lag == 1ull << 40);
	assert_true(out.lag_timeout_ms == 1ull << 35);
	assert_string_equal(out.group, "torch:run-7");
	assert_int_equal(out.resume_len, 0); /* optional: a first attach */
	assert_true(out.resume_seq == 0);

	/* Re-attaching after a restart: the token and where the reader was. */
	in.state = NULL;
	in.state_len = 0;
	in.resume = "SLRT-token";
	in.resume_len = 10;
	in.resume_seq = 1ull << 33;
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 76, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_ATTACH, 76);
	assert_int_equal(ipc_ctl_decode_attach(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.resume_len, 10);
	assert_memory_equal(out.resume, "SLRT-token", 10);
	assert_true(out.resume_seq == 1ull << 33);
	assert_int_equal(out.state_len, 0);

	/* By spec, broadcast, defaults everywhere else. */
	memset(&in, 0, sizeof(in));
	in.spec = "{}";
	in.spec_len = 2;
	in.mode = IPC_CTL_MODE_BROADCAST;
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 78, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_ATTACH, 78);
	assert_int_equal(ipc_ctl_decode_attach(&m, &out, emsg, sizeof(emsg)), 0);
	assert_string_equal(out.name, "");
	assert_int_equal(out.spec_len, 2);
	assert_memory_equal(out.spec, "{}", 2);
	assert_int_equal(out.mode, IPC_CTL_MODE_BROADCAST);
	assert_null(out.state);
	assert_int_equal(out.state_len, 0);
	assert_int_equal(out.max_lag, 0);
	assert_int_equal(out.lag_policy, IPC_CTL_LAG_DEFAULT); /* optional: the daemon's policy */
	assert_int_equal(out.lag_timeout_ms, 0);
	assert_string_equal(out.group, ""); /* optional: the default group */

	/* An explicit hold is its own value, not the default; it takes no bounds. */
	in.lag_policy = IPC_CTL_LAG_HOLD;
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 80, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_ATTACH, 80);
	assert_int_equal(ipc_ctl_decode_attach(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.lag_policy, IPC_CTL_LAG_HOLD);
	in.lag_timeout_ms = 1000;
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 81, &in, &len), -EINVAL);
	in.lag_timeout_ms = 0;
	in.lag_policy = IPC_CTL_LAG_COUNT_;
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 82, &in, &len), -EINVAL);
	in.lag_policy = IPC_CTL_LAG_DEFAULT;
	assert_int_equal(out.move, IPC_CTL_MOVE_NONE); /* optional: no move */
	assert_true(out.moved_max_lag == 0);

	/* Moved off by the lag policy: a hold on its private pipeline, its own bound to come
	   back within (field 15 travels with a hold: it is not the private ring's bound). */
	in.state = st;
	in.state_len = sizeof(st);
	in.lag_policy = IPC_CTL_LAG_HOLD;
	in.move = IPC_CTL_MOVE_OFF;
	in.moved_max_lag = 1ull << 36;
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 83, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_ATTACH, 83);
	assert_int_equal(ipc_ctl_decode_attach(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.move, IPC_CTL_MOVE_OFF);
	assert_true(out.moved_max_lag == 1ull << 36);
	in.lag_policy = IPC_CTL_LAG_DEFAULT;
	in.move = IPC_CTL_MOVE_BACK;
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 84, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_ATTACH, 84);
	assert_int_equal(ipc_ctl_decode_attach(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.move, IPC_CTL_MOVE_BACK);
	/* refused: an unknown move, a move without a state, a bound without a move */
	in.move = IPC_CTL_MOVE_COUNT_;
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 85, &in, &len), -EINVAL);
	in.move = IPC_CTL_MOVE_OFF;
	in.state = NULL;
	in.state_len = 0;
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 86, &in, &len), -EINVAL);
	in.move = IPC_CTL_MOVE_NONE;
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 87, &in, &len), -EINVAL);
	in.moved_max_lag = 0;

	/* Split mode. */
	in.mode = IPC_CTL_MODE_SPLIT;
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 79, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_ATTACH, 79);
	assert_int_equal(ipc_ctl_decode_attach(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.mode, IPC_CTL_MODE_SPLIT);
}

static void test_attached(void **state)
{
	struct ipc_ctl_tensor_info t[3];
	struct ipc_ctl_attached in, out;
	struct ipc_ctl_msg m;
	size_t len;
	unsigned i;

	(void)state;
	fill_attached(&in, t);
	assert_int_equal(ipc_ctl_encode_attached(buf, sizeof(buf), 5, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_ATTACHED, 5);
	assert_int_equal(ipc_ctl_decode_attached(&m, &out, emsg, sizeof(emsg)), 0);
	assert_true(out.reader_id == in.reader_id);
	assert_string_equal(out.name, "ctr");
	assert_memory_equal(out.fingerprint, in.fingerprint, IPC_CTL_FP_LEN);
	assert_int_equal(out.ring_version, 1);
	assert_int_equal(out.n_slots, 64);
	assert_true(out.data_bytes == 64ull << 20);
	assert_int_equal(out.ctl_bytes, 4096);
	assert_int_equal(out.max_batch_bytes, 1 << 20);
	assert_true(out.first_epoch == in.first_epoch);
	assert_int_equal(out.token_len, 0); /* no state directory: no token */
	assert_true(out.skip_below == 0 && out.redelivered_below == 0 &&
		    out.redelivered_epochs == 0);
	assert_int_equal(out.n_tensors, 3);
	assert_non_null(out.tensors);
	for (i = 0; i < 3; i++)
		assert_memory_equal(&out.tensors[i], &t[i], sizeof(t[i]));
	ipc_ctl_attached_fini(&out);
	assert_null(out.tensors);

	/* A resume: the token to keep, what to skip and what to mark. */
	in.token = "tok";
	in.token_len = 3;
	in.skip_below = 13;
	in.redelivered_below = 45;
	in.redelivered_epochs = 2;
	assert_int_equal(ipc_ctl_encode_attached(buf, sizeof(buf), 6, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_ATTACHED, 6);
	assert_int_equal(ipc_ctl_decode_attached(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.token_len, 3);
	assert_memory_equal(out.token, "tok", 3);
	assert_true(out.skip_below == 13 && out.redelivered_below == 45 &&
		    out.redelivered_epochs == 2);
	ipc_ctl_attached_fini(&out);
	assert_int_equal(out.n_tensors, 0);
	ipc_ctl_attached_fini(&out); /* twice is fine, as is NULL */
	ipc_ctl_attached_fini(NULL);

	/* No tensors at all. */
	in.n_tensors = 0;
	in.tensors = NULL;
	assert_int_equal(ipc_ctl_encode_attached(buf, sizeof(buf), 6, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_ATTACHED, 6);
	assert_int_equal(ipc_ctl_decode_attached(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.n_tensors, 0);
	assert_null(out.tensors);
	ipc_ctl_attached_fini(&out);
}

static void test_reader_ref_state(void **state)
{
	static const uint16_t types[] = { IPC_CTL_DETACH, IPC_CTL_SAVE_STATE, IPC_CTL_DETACHED };
	static const uint8_t blob[64] = { 9, 8, 7 };
	struct ipc_ctl_reader_ref ref = { .reader_id = 12 }, ref2;
	struct ipc_ctl_state st = { .reader_id = 12, .state = blob, .state_len = sizeof(blob) };
	struct ipc_ctl_state st2;
	struct ipc_ctl_msg m;
	size_t len, i;

	(void)state;
	for (i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		assert_int_equal(
			ipc_ctl_encode_reader_ref(buf, sizeof(buf), types[i], 3, &ref, &len), 0);
		m = parse_ok(buf, len, types[i], 3);
		assert_int_equal(ipc_ctl_decode_reader_ref(&m, types[i], &ref2, emsg, sizeof(emsg)),
				 0);
		assert_int_equal(ref2.reader_id, 12);
		/* Decoding it as another of the three is a type error. */
		EXPECT_BAD(ipc_ctl_decode_reader_ref(&m, types[(i + 1) % 3], &ref2, emsg,
						     sizeof(emsg)),
			   "got a");
	}
	assert_int_equal(ipc_ctl_encode_reader_ref(buf, sizeof(buf), IPC_CTL_LIST, 3, &ref, &len),
			 -EINVAL);

	/* SAVE_STATE "at" a position the client names: every field comes back; DETACH does not
	   carry them (its table has only the reader) */
	struct ipc_ctl_reader_ref at = { .reader_id = 12,
					 .at = true,
					 .at_epoch = 3,
					 .at_index = 20,
					 .at_seq = (1ull << 40) + 5 };
	assert_int_equal(
		ipc_ctl_encode_reader_ref(buf, sizeof(buf), IPC_CTL_SAVE_STATE, 5, &at, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_SAVE_STATE, 5);
	memset(&ref2, 0, sizeof(ref2));
	assert_int_equal(
		ipc_ctl_decode_reader_ref(&m, IPC_CTL_SAVE_STATE, &ref2, emsg, sizeof(emsg)), 0);
	assert_true(ref2.at);
	assert_int_equal(ref2.at_epoch, 3);
	assert_int_equal(ref2.at_index, 20);
	assert_int_equal(ref2.at_seq, (1ull << 40) + 5);
	assert_int_equal(ipc_ctl_encode_reader_ref(buf, sizeof(buf), IPC_CTL_DETACH, 5, &at, &len),
			 0);
	m = parse_ok(buf, len, IPC_CTL_DETACH, 5);
	memset(&ref2, 0, sizeof(ref2));
	assert_int_equal(ipc_ctl_decode_reader_ref(&m, IPC_CTL_DETACH, &ref2, emsg, sizeof(emsg)),
			 0);
	assert_false(ref2.at);
	assert_int_equal(ref2.at_seq, 0);

	/* SAVE_STATE by pipeline name (no reader: a DataLoader's main process), with at only */
	struct ipc_ctl_reader_ref by = { .at = true, .at_epoch = 1, .at_index = 2, .at_seq = 9 };
	snprintf(by.name, sizeof(by.name), "pipe-a");
	assert_int_equal(
		ipc_ctl_encode_reader_ref(buf, sizeof(buf), IPC_CTL_SAVE_STATE, 6, &by, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_SAVE_STATE, 6);
	memset(&ref2, 0, sizeof(ref2));
	assert_int_equal(
		ipc_ctl_decode_reader_ref(&m, IPC_CTL_SAVE_STATE, &ref2, emsg, sizeof(emsg)), 0);
	assert_string_equal(ref2.name, "pipe-a");
	assert_int_equal(ref2.reader_id, 0);
	assert_int_equal(ref2.at_seq, 9);
	/* the encoder refuses what the decoder would: both, neither, a name without at */
	struct ipc_ctl_reader_ref bad = by;
	bad.reader_id = 3;
	assert_int_equal(ipc_ctl_encode_reader_ref(buf, sizeof(buf), IPC_CTL_SAVE_STATE, 6, &bad,
						   &len),
			 -EINVAL);
	bad = by;
	bad.at = false;
	assert_int_equal(ipc_ctl_encode_reader_ref(buf, sizeof(buf), IPC_CTL_SAVE_STATE, 6, &bad,
						   &len),
			 -EINVAL);
	struct ipc_ctl_builder b;
	static const struct {
		uint64_t reader;
		const char *name;
		bool at;
		const char *why;
	} wire[] = {
		{ 3, "pipe-a", true, "both" },
		{ 0, "pipe-a", false, "name without at" },
	};
	for (i = 0; i < sizeof(wire) / sizeof(wire[0]); i++) {
		ipc_ctl_builder_init(&b, buf, sizeof(buf), IPC_CTL_SAVE_STATE, 7);
		if (wire[i].reader)
			ipc_ctl_put_u64(&b, 1, wire[i].reader);
		if (wire[i].at)
			ipc_ctl_put_u32(&b, 2, 1);
		if (wire[i].name)
			ipc_ctl_put_str(&b, 6, wire[i].name, strlen(wire[i].name));
		assert_int_equal(ipc_ctl_builder_finish(&b, &len), 0);
		m = parse_ok(buf, len, IPC_CTL_SAVE_STATE, 7);
		EXPECT_BAD(ipc_ctl_decode_reader_ref(&m, IPC_CTL_SAVE_STATE, &ref2, emsg,
						     sizeof(emsg)),
			   wire[i].why);
	}

	assert_int_equal(ipc_ctl_encode_state(buf, sizeof(buf), 4, &st, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_STATE, 4);
	assert_int_equal(ipc_ctl_decode_state(&m, &st2, emsg, sizeof(emsg)), 0);
	assert_int_equal(st2.reader_id, 12);
	assert_int_equal(st2.state_len, sizeof(blob));
	assert_memory_equal(st2.state, blob, sizeof(blob));
}

static void test_list(void **state)
{
	struct ipc_ctl_pipeline_info p[3];
	struct ipc_ctl_list_reply in = { .pipelines = p, .n_pipelines = 3 }, out;
	struct ipc_ctl_msg m;
	size_t len;
	unsigned i;

	(void)state;
	assert_int_equal(ipc_ctl_encode_empty(buf, sizeof(buf), IPC_CTL_LIST, 8, &len), 0);
	assert_int_equal(len, IPC_CTL_HDR_SIZE);
	m = parse_ok(buf, len, IPC_CTL_LIST, 8);
	assert_int_equal(ipc_ctl_decode_empty(&m, IPC_CTL_LIST, emsg, sizeof(emsg)), 0);
	EXPECT_BAD(ipc_ctl_decode_empty(&m, IPC_CTL_STATS, emsg, sizeof(emsg)), "got a LIST");

	memset(p, 0, sizeof(p));
	for (i = 0; i < 3; i++) {
		snprintf(p[i].name, sizeof(p[i].name), "pipeline-%u", i);
		memset(p[i].fingerprint, (int)i + 1, IPC_CTL_FP_LEN);
		p[i].status = i;
		p[i].n_readers = i * 2;
		p[i].batches_published = 1000000007ull * i;
		p[i].slots_used = i;
		p[i].n_slots = 64;
	}
	p[0].owner_uid = 0; /* root: sent, not taken for an absent owner */
	p[1].owner_uid = 1000;
	p[2].owner_uid = IPC_CTL_OWNER_HOST;
	assert_int_equal(ipc_ctl_encode_list_reply(buf, sizeof(buf), 8, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_LIST_REPLY, 8);
	assert_int_equal(ipc_ctl_decode_list_reply(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.n_pipelines, 3);
	for (i = 0; i < 3; i++)
		assert_memory_equal(&out.pipelines[i], &p[i], sizeof(p[i]));
	ipc_ctl_list_reply_fini(&out);

	/* An empty list. */
	in.n_pipelines = 0;
	in.pipelines = NULL;
	assert_int_equal(ipc_ctl_encode_list_reply(buf, sizeof(buf), 8, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_LIST_REPLY, 8);
	assert_int_equal(ipc_ctl_decode_list_reply(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.n_pipelines, 0);
	ipc_ctl_list_reply_fini(&out);
}

/* LIST_REPLY's owner_uid (tag 8) came after version 1: an entry without it is an older daemon's. */
static void test_list_owner_absent(void **state)
{
	static const uint8_t fp[IPC_CTL_FP_LEN] = { 1 };
	struct ipc_ctl_pipeline_info p;
	struct ipc_ctl_list_reply in = { .pipelines = &p, .n_pipelines = 1 }, out;
	static uint8_t buf2[1024];
	struct ipc_ctl_builder b;
	struct ipc_ctl_msg m;
	size_t len, len2, mark;

	(void)state;
	ipc_ctl_builder_init(&b, buf, sizeof(buf), IPC_CTL_LIST_REPLY, 3);
	mark = ipc_ctl_put_begin(&b, 1);
	ipc_ctl_put_str(&b, 1, "old", 3);
	ipc_ctl_put_bytes(&b, 2, fp, sizeof(fp));
	ipc_ctl_put_end(&b, mark);
	assert_int_equal(ipc_ctl_builder_finish(&b, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_LIST_REPLY, 3);
	assert_int_equal(ipc_ctl_decode_list_reply(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.n_pipelines, 1);
	assert_string_equal(out.pipelines[0].name, "old");
	assert_int_equal(out.pipelines[0].owner_uid, IPC_CTL_OWNER_UNKNOWN);

	/* ... and an unknown owner is left out again: the same bytes */
	p = out.pipelines[0];
	ipc_ctl_list_reply_fini(&out);
	assert_int_equal(ipc_ctl_encode_list_reply(buf2, sizeof(buf2), 3, &in, &len2), 0);
	assert_int_equal(len2, len);
	assert_memory_equal(buf2, buf, len);

	/* root's uid 0 is on the wire: 4 bytes more than without an owner */
	p.owner_uid = 0;
	assert_int_equal(ipc_ctl_encode_list_reply(buf2, sizeof(buf2), 3, &in, &len2), 0);
	assert_int_equal(len2, len + IPC_CTL_FIELD_HDR + 4);
	m = parse_ok(buf2, len2, IPC_CTL_LIST_REPLY, 3);
	assert_int_equal(ipc_ctl_decode_list_reply(&m, &out, emsg, sizeof(emsg)), 0);
	assert_int_equal(out.pipelines[0].owner_uid, 0);
	ipc_ctl_list_reply_fini(&out);
}

static void test_stats(void **state)
{
	static const char *const keys[] = { "batches_published", "batches_taken", "wait_ns", "lag",
					    "occupancy_permille" };
	struct ipc_ctl_stats s = { .name = "ctr" }, s2;
	struct ipc_ctl_stat st[5];
	struct ipc_ctl_stats_reply in = { .name = "ctr", .stats = st, .n_stats = 5 }, out;
	struct ipc_ctl_msg m;
	size_t len;
	unsigned i;

	(void)state;
	assert_int_equal(ipc_ctl_encode_stats(buf, sizeof(buf), 2, &s, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_STATS, 2);
	assert_int_equal(ipc_ctl_decode_stats(&m, &s2, emsg, sizeof(emsg)), 0);
	assert_string_equal(s2.name, "ctr");

	memset(st, 0, sizeof(st));
	for (i = 0; i < 5; i++) {
		snprintf(st[i].key, sizeof(st[i].key), "%s", keys[i]);
		st[i].value = i == 2 ? INT64_MIN : (int64_t)i * 1000 - 1;
	}
	assert_int_equal(ipc_ctl_encode_stats_reply(buf, sizeof(buf), 2, &in, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_STATS_REPLY, 2);
	assert_int_equal(ipc_ctl_decode_stats_reply(&m, &out, emsg, sizeof(emsg)), 0);
	assert_string_equal(out.name, "ctr");
	assert_int_equal(out.n_stats, 5);
	for (i = 0; i < 5; i++) {
		assert_string_equal(out.stats[i].key, keys[i]);
		assert_true(out.stats[i].value == st[i].value);
	}
	ipc_ctl_stats_reply_fini(&out);
}

/* REMOVE and REMOVED (sluicectl rm): a name each way; neither type is taken for the other. */
static void test_remove(void **state)
{
	struct ipc_ctl_remove r = { .name = "mnist-train" }, r2;
	struct ipc_ctl_msg m;
	size_t len;

	(void)state;
	assert_int_equal(ipc_ctl_encode_remove(buf, sizeof(buf), IPC_CTL_REMOVE, 5, &r, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_REMOVE, 5);
	assert_int_equal(ipc_ctl_decode_remove(&m, IPC_CTL_REMOVE, &r2, emsg, sizeof(emsg)), 0);
	assert_string_equal(r2.name, "mnist-train");
	assert_int_equal(ipc_ctl_decode_remove(&m, IPC_CTL_REMOVED, &r2, emsg, sizeof(emsg)),
			 -EBADMSG);
	assert_int_equal(ipc_ctl_encode_remove(buf, sizeof(buf), IPC_CTL_REMOVED, 5, &r, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_REMOVED, 5);
	assert_int_equal(ipc_ctl_decode_remove(&m, IPC_CTL_REMOVED, &r2, emsg, sizeof(emsg)), 0);
	assert_string_equal(r2.name, "mnist-train");
	assert_string_equal(ipc_ctl_type_name(IPC_CTL_REMOVE), "REMOVE");
	assert_string_equal(ipc_ctl_type_name(IPC_CTL_REMOVED), "REMOVED");
	/* a name is required and not empty; no other type goes through this codec */
	r.name[0] = '\0';
	assert_int_equal(ipc_ctl_encode_remove(buf, sizeof(buf), IPC_CTL_REMOVE, 5, &r, &len),
			 -EINVAL);
	assert_int_equal(ipc_ctl_encode_remove(buf, sizeof(buf), IPC_CTL_STATS, 5, &r2, &len),
			 -EINVAL);
}

static void test_error_shutdown(void **state)
{
	struct ipc_ctl_error e = { .code = -EACCES }, e2;
	struct ipc_ctl_shutdown s = { .flags = IPC_CTL_SHUTDOWN_RESTART }, s2;
	struct ipc_ctl_msg m;
	size_t len;

	(void)state;
	snprintf(e.text, sizeof(e.text), "permission denied");
	assert_int_equal(ipc_ctl_encode_error(buf, sizeof(buf), 31, &e, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_ERROR, 31);
	assert_int_equal(ipc_ctl_decode_error(&m, &e2, emsg, sizeof(emsg)), 0);
	assert_int_equal(e2.code, -EACCES);
	assert_string_equal(e2.text, "permission denied");

	/* The longest text fits. */
	memset(e.text, 'x', IPC_CTL_TEXT_MAX);
	e.text[IPC_CTL_TEXT_MAX] = '\0';
	assert_int_equal(ipc_ctl_encode_error(buf, sizeof(buf), 31, &e, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_ERROR, 31);
	assert_int_equal(ipc_ctl_decode_error(&m, &e2, emsg, sizeof(emsg)), 0);
	assert_int_equal(strlen(e2.text), IPC_CTL_TEXT_MAX);

	snprintf(s.reason, sizeof(s.reason), "SIGTERM");
	assert_int_equal(ipc_ctl_encode_shutdown(buf, sizeof(buf), &s, &len), 0);
	m = parse_ok(buf, len, IPC_CTL_SHUTDOWN, 0);
	assert_int_equal(ipc_ctl_decode_shutdown(&m, &s2, emsg, sizeof(emsg)), 0);
	assert_int_equal(s2.flags, IPC_CTL_SHUTDOWN_RESTART);
	assert_string_equal(s2.reason, "SIGTERM");
}

static void test_type_names(void **state)
{
	(void)state;
	assert_string_equal(ipc_ctl_type_name(IPC_CTL_ATTACHED), "ATTACHED");
	assert_string_equal(ipc_ctl_type_name(IPC_CTL_SHUTDOWN), "SHUTDOWN");
	assert_string_equal(ipc_ctl_type_name(0x1234), "?");
	assert_int_equal(ipc_ctl_type_fds(IPC_CTL_ATTACHED), 2);
	assert_int_equal(ipc_ctl_type_fds(IPC_CTL_ATTACH), 0);
	assert_int_equal(ipc_ctl_type_fds(0x1234), 0);
}

/* ---- versions ---- */

static void test_version_mismatch(void **state)
{
	struct ipc_ctl_hello h = { .version = 2, .pid = 1 }, h2;
	struct ipc_ctl_error e = { .code = -EPROTONOSUPPORT }, e2;
	struct ipc_ctl_msg m;
	struct ipc_ctl_stats st;
	size_t len;

	(void)state;
	/* A client of version 2 says HELLO: the server sees -EPROTONOSUPPORT and both versions,
	 * still reads the request id and (HELLO is frozen) the body. */
	assert_int_equal(ipc_ctl_encode_hello(buf, sizeof(buf), 55, &h, &len), 0);
	put16(buf + 4, 2);
	emsg[0] = '\0';
	assert_int_equal(ipc_ctl_msg_parse(buf, len, &m, emsg, sizeof(emsg)), -EPROTONOSUPPORT);
	assert_non_null(strstr(emsg, "peer speaks protocol version 2, this side speaks 1"));
	assert_int_equal(m.version, 2);
	assert_int_equal(m.type, IPC_CTL_HELLO);
	assert_int_equal(m.req_id, 55);
	assert_int_equal(ipc_ctl_decode_hello(&m, &h2, emsg, sizeof(emsg)), 0);
	assert_int_equal(h2.version, 2);

	/* The server answers with ERROR; a version-2 client reads it although the header says 1. */
	snprintf(e.text, sizeof(e.text), "client speaks protocol 2, sluiced speaks 1");
	assert_int_equal(ipc_ctl_encode_error(buf, sizeof(buf), m.req_id, &e, &len), 0);
	put16(buf + 4, 7); /* as if from a server of version 7 */
	assert_int_equal(ipc_ctl_msg_parse(buf, len, &m, emsg, sizeof(emsg)), -EPROTONOSUPPORT);
	assert_int_equal(m.type, IPC_CTL_ERROR);
	assert_int_equal(m.req_id, 55);
	assert_int_equal(ipc_ctl_decode_error(&m, &e2, emsg, sizeof(emsg)), 0);
	assert_int_equal(e2.code, -EPROTONOSUPPORT);
	assert_string_equal(e2.text, e.text);

	/* Types that are not frozen are not decoded across versions. */
	assert_int_equal(ipc_ctl_encode_stats(buf, sizeof(buf), 1,
					      &(struct ipc_ctl_stats){ .name = "a" }, &len),
			 0);
	put16(buf + 4, 2);
	assert_int_equal(ipc_ctl_msg_parse(buf, len, &m, emsg, sizeof(emsg)), -EPROTONOSUPPORT);
	assert_int_equal(ipc_ctl_decode_stats(&m, &st, emsg, sizeof(emsg)), -EPROTONOSUPPORT);

	/* A mismatched version with an inconsistent length: header only, no body. */
	put32(buf + 16, 9999);
	put16(buf + 6, IPC_CTL_ERROR);
	assert_int_equal(ipc_ctl_msg_parse(buf, len, &m, emsg, sizeof(emsg)), -EPROTONOSUPPORT);
	assert_null(m.body);
	assert_int_equal(m.body_len, 0);
	EXPECT_BAD(ipc_ctl_decode_error(&m, &e2, emsg, sizeof(emsg)), "missing field code");
}

/* ---- encoders and the builder ---- */

static void test_encode_limits(void **state)
{
	struct ipc_ctl_stats s = { .name = "abc" };
	struct ipc_ctl_stat st[1] = { { .key = "k", .value = 1 } };
	struct ipc_ctl_stats_reply sr = { .name = "abc", .stats = st, .n_stats = 1 };
	struct ipc_ctl_attach a;
	struct ipc_ctl_builder b;
	static char spec[IPC_CTL_MAX_MSG];
	size_t len, mark;

	(void)state;
	/* Too small a buffer: -EMSGSIZE for every size short of the message. */
	assert_int_equal(ipc_ctl_encode_stats(buf, sizeof(buf), 1, &s, &len), 0);
	for (size_t cap = 0; cap < len; cap++)
		assert_int_equal(ipc_ctl_encode_stats(buf, cap, 1, &s, &len), -EMSGSIZE);
	assert_int_equal(ipc_ctl_encode_stats_reply(buf, 40, 1, &sr, &len), -EMSGSIZE);

	/* Structs that break the rules are refused, not sent. */
	s.name[0] = '\0';
	assert_int_equal(ipc_ctl_encode_stats(buf, sizeof(buf), 1, &s, &len), -EINVAL);
	memset(s.name, 'x', sizeof(s.name)); /* no NUL */
	assert_int_equal(ipc_ctl_encode_stats(buf, sizeof(buf), 1, &s, &len), -EINVAL);
	memset(&a, 0, sizeof(a));
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 1, &a, &len), -EINVAL);
	a.spec = "{\0}";
	a.spec_len = 3;
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 1, &a, &len), -EINVAL);
	sr.stats = NULL;
	assert_int_equal(ipc_ctl_encode_stats_reply(buf, sizeof(buf), 1, &sr, &len), -EINVAL);
	assert_int_equal(ipc_ctl_encode_error(buf, sizeof(buf), 1,
					      &(struct ipc_ctl_error){ .code = 0 }, &len),
			 -EINVAL);

	/* A spec that fills the message exactly; one byte more does not fit. */
	memset(spec, ' ', sizeof(spec));
	memset(&a, 0, sizeof(a));
	a.spec = spec;
	a.spec_len = IPC_CTL_MAX_BODY - 6 - 10;
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 1, &a, &len), 0);
	assert_int_equal(len, IPC_CTL_MAX_MSG);
	parse_ok(buf, len, IPC_CTL_ATTACH, 1);
	a.spec_len++;
	assert_int_equal(ipc_ctl_encode_attach(buf, sizeof(buf), 1, &a, &len), -EMSGSIZE);

	/* The builder's error is sticky; nesting marks are checked. */
	ipc_ctl_builder_init(&b, buf, 40, 0x7000, 1);
	assert_int_equal(ipc_ctl_put_u64(&b, 1, 1), 0);
	assert_int_equal(ipc_ctl_put_u64(&b, 2, 2), -EMSGSIZE);
	assert_int_equal(ipc_ctl_put_u32(&b, 3, 3), -EMSGSIZE);
	assert_int_equal(ipc_ctl_builder_finish(&b, &len), -EMSGSIZE);
	ipc_ctl_builder_init(&b, buf, sizeof(buf), 0x7000, 1);
	assert_int_equal(ipc_ctl_put_str(&b, 1, "a\0b", 3), -EINVAL);
	ipc_ctl_builder_init(&b, buf, sizeof(buf), 0x7000, 1);
	assert_int_equal(ipc_ctl_put_u32(&b, 0, 1), -EINVAL);
	ipc_ctl_builder_init(&b, buf, sizeof(buf), 0x7000, 1);
	assert_int_equal(ipc_ctl_put_end(&b, 3), -EINVAL);
	ipc_ctl_builder_init(&b, buf, sizeof(buf), 0x7000, 1);
	mark = ipc_ctl_put_begin(&b, 5);
	assert_int_equal(ipc_ctl_put_i64(&b, 1, -2), 0);
	assert_int_equal(ipc_ctl_put_i32(&b, 2, -3), 0);
	assert_int_equal(ipc_ctl_put_end(&b, mark), 0);
	assert_int_equal(ipc_ctl_put_bytes(&b, 6, "xyz", 3), 0);
	assert_int_equal(ipc_ctl_builder_finish(&b, &len), 0);
	assert_int_equal(len, IPC_CTL_HDR_SIZE + 6 + (6 + 8) + (6 + 4) + 6 + 3);
}

/* The generic field reader and accessors, on a body built with the builder. */
static void test_reader(void **state)
{
	struct ipc_ctl_builder b;
	struct ipc_ctl_reader rd, sub;
	struct ipc_ctl_field f, g;
	struct ipc_ctl_msg m;
	const char *s;
	uint64_t u64;
	int64_t i64;
	uint32_t u32;
	int32_t i32;
	size_t len, mark;

	(void)state;
	ipc_ctl_builder_init(&b, buf, sizeof(buf), 0x7001, 3);
	ipc_ctl_put_u32(&b, 1, 0xdeadbeef);
	ipc_ctl_put_i64(&b, 2, -5);
	mark = ipc_ctl_put_begin(&b, 3);
	ipc_ctl_put_i32(&b, 1, -7);
	ipc_ctl_put_u64(&b, 2, UINT64_MAX);
	ipc_ctl_put_end(&b, mark);
	mark = ipc_ctl_put_begin(&b, 3);
	ipc_ctl_put_end(&b, mark);
	ipc_ctl_put_str(&b, 4, "hello", 5);
	assert_int_equal(ipc_ctl_builder_finish(&b, &len), 0);
	m = parse_ok(buf, len, 0x7001, 3);

	ipc_ctl_reader_init(&rd, m.body, m.body_len, UINT64_C(1) << 3, "t");
	assert_int_equal(ipc_ctl_reader_next(&rd, &f, emsg, sizeof(emsg)), 1);
	assert_int_equal(ipc_ctl_field_u32(&f, &u32, emsg, sizeof(emsg)), 0);
	assert_int_equal(u32, 0xdeadbeef);
	EXPECT_BAD(ipc_ctl_field_u64(&f, &u64, emsg, sizeof(emsg)), "length 4, expected 8");
	assert_int_equal(ipc_ctl_reader_next(&rd, &f, emsg, sizeof(emsg)), 1);
	assert_int_equal(ipc_ctl_field_i64(&f, &i64, emsg, sizeof(emsg)), 0);
	assert_int_equal(i64, -5);
	assert_int_equal(ipc_ctl_reader_next(&rd, &f, emsg, sizeof(emsg)), 1);
	assert_int_equal(f.tag, 3);
	ipc_ctl_reader_init(&sub, f.val, f.len, 0, "t.3");
	assert_int_equal(ipc_ctl_reader_next(&sub, &g, emsg, sizeof(emsg)), 1);
	assert_int_equal(ipc_ctl_field_i32(&g, &i32, emsg, sizeof(emsg)), 0);
	assert_int_equal(i32, -7);
	assert_int_equal(ipc_ctl_reader_next(&sub, &g, emsg, sizeof(emsg)), 1);
	assert_int_equal(ipc_ctl_field_u64(&g, &u64, emsg, sizeof(emsg)), 0);
	assert_true(u64 == UINT64_MAX);
	assert_int_equal(ipc_ctl_reader_next(&sub, &g, emsg, sizeof(emsg)), 0);
	assert_int_equal(ipc_ctl_reader_next(&rd, &f, emsg, sizeof(emsg)), 1); /* repeated 3 */
	assert_int_equal(f.tag, 3);
	assert_int_equal(f.len, 0);
	assert_int_equal(ipc_ctl_reader_next(&rd, &f, emsg, sizeof(emsg)), 1);
	assert_int_equal(ipc_ctl_field_str(&f, 5, &s, emsg, sizeof(emsg)), 0);
	assert_memory_equal(s, "hello", 5);
	EXPECT_BAD(ipc_ctl_field_str(&f, 4, &s, emsg, sizeof(emsg)), "5 bytes, at most 4");
	assert_int_equal(ipc_ctl_reader_next(&rd, &f, emsg, sizeof(emsg)), 0);
	assert_int_equal(ipc_ctl_reader_next(&rd, &f, emsg, sizeof(emsg)), 0);

	/* Without the repeated bit, the second 3 is a duplicate. */
	ipc_ctl_reader_init(&rd, m.body, m.body_len, 0, "t");
	while ((u32 = (uint32_t)ipc_ctl_reader_next(&rd, &f, emsg, sizeof(emsg))) == 1)
		;
	assert_int_equal((int)u32, -EBADMSG);
	assert_non_null(strstr(emsg, "t: field 3 at byte"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hello),
		cmocka_unit_test(test_register),
		cmocka_unit_test(test_attach),
		cmocka_unit_test(test_attached),
		cmocka_unit_test(test_reader_ref_state),
		cmocka_unit_test(test_list),
		cmocka_unit_test(test_list_owner_absent),
		cmocka_unit_test(test_stats),
		cmocka_unit_test(test_remove),
		cmocka_unit_test(test_error_shutdown),
		cmocka_unit_test(test_type_names),
		cmocka_unit_test(test_version_mismatch),
		cmocka_unit_test(test_encode_limits),
		cmocka_unit_test(test_reader),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
