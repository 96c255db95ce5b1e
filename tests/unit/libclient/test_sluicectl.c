/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for sluicectl list, stats, register and drain against the fake sluiced of the fixture. */
#include "sluice/sluice.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "ipc/batch.h"
#include "ipc/ring.h"
#include "client_fixture.h"

/* ---- sluicectl list, stats, register, drain against the fake daemon ---- */

/* Run a shell command; its stdout into out (NUL-terminated); returns its exit status. */
static int run_cmd(const char *cmd, char *out, size_t cap)
{
	FILE *p = popen(cmd, "r");
	size_t n;
	int st;

	assert_non_null(p);
	n = fread(out, 1, cap - 1, p);
	out[n] = '\0';
	st = pclose(p);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* The digest drain prints for batch seq: crc32 over x's data, tok's splits and data. */
static uint32_t expected_digest(uint64_t seq)
{
	static _Alignas(64) uint8_t mem[8192];
	const struct ipc_batch_tensor *t = (const void *)(mem + sizeof(struct ipc_batch_hdr));
	uLong crc = crc32(0, Z_NULL, 0);

	build_batch(mem, sizeof(mem), seq, 0);
	crc = crc32(crc, mem + t[0].data_off, (uInt)t[0].data_len);
	crc = crc32(crc, mem + t[1].splits_off, (ROWS + 1) * 8);
	crc = crc32(crc, mem + t[1].data_off, (uInt)t[1].data_len);
	return (uint32_t)crc;
}

static void test_sluicectl(void **state)
{
	const char *ctl = getenv("SLUICECTL");
	char cmd[1024], out[8192], want[512], spec[128];
	struct srv s;
	FILE *f;

	if (!ctl || access(ctl, X_OK)) {
		print_message("SLUICECTL is not set: sluicectl not tested\n");
		return;
	}
	srv_start(&s);
	srv_publish_n(&s, 3);
	pthread_mutex_lock(&s.lock);
	assert_int_equal(ipc_ring_set_eos(s.ring), 0);
	pthread_mutex_unlock(&s.lock);

	snprintf(cmd, sizeof(cmd), "%s --socket %s list", ctl, s.path);
	assert_int_equal(run_cmd(cmd, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "train"));
	assert_non_null(strstr(out, "running"));
	assert_non_null(strstr(out, "3/8"));

	snprintf(cmd, sizeof(cmd), "SLUICE_SOCKET=%s %s stats train --json", s.path, ctl);
	assert_int_equal(run_cmd(cmd, out, sizeof(out)), 0);
	assert_string_equal(out, "{\"batches_published\": 7, \"wait_ns\": -1}\n");
	snprintf(cmd, sizeof(cmd), "%s --socket %s stats train", ctl, s.path);
	assert_int_equal(run_cmd(cmd, out, sizeof(out)), 0);
	assert_string_equal(out, "batches_published 7\nwait_ns -1\n");
	snprintf(cmd, sizeof(cmd), "%s --socket %s stats nope 2>&1", ctl, s.path);
	assert_int_equal(run_cmd(cmd, out, sizeof(out)), 1);
	assert_string_equal(out, "sluicectl: stats: stats \"nope\": no such pipeline\n");

	snprintf(spec, sizeof(spec), "%s/spec.json", s.dir);
	f = fopen(spec, "w");
	assert_non_null(f);
	fputs("{\"name\": \"x\"}\n", f);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "%s --socket %s register %s", ctl, s.path, spec);
	assert_int_equal(run_cmd(cmd, out, sizeof(out)), 0);
	assert_string_equal(out, "a-rather-long-pipeline-name 00112233445566778899aabbccddeeff\n");
	unlink(spec);

	snprintf(cmd, sizeof(cmd), "%s --socket %s drain train --json --values x", ctl, s.path);
	assert_int_equal(run_cmd(cmd, out, sizeof(out)), 0);
	snprintf(want, sizeof(want),
		 "{\"seq\": 0, \"epoch\": 0, \"rows\": 4, \"digest\": "
		 "\"%08x\", \"values\": {\"x\": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]}}\n",
		 expected_digest(0));
	assert_memory_equal(out, want, strlen(want));
	snprintf(want, sizeof(want),
		 "{\"seq\": 2, \"epoch\": 0, \"rows\": 4, \"digest\": "
		 "\"%08x\", \"values\": {\"x\": [200, ",
		 expected_digest(2));
	assert_non_null(strstr(out, want));
	snprintf(cmd, sizeof(cmd), "%s --socket %s drain train --batches 2", ctl, s.path);
	assert_int_equal(run_cmd(cmd, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "total: batches=2 rows=8 "));
	snprintf(cmd, sizeof(cmd), "%s --socket %s drain train --json --values nope 2>&1", ctl,
		 s.path);
	assert_int_equal(run_cmd(cmd, out, sizeof(out)), 1);
	assert_non_null(strstr(out, "no tensor named 'nope'"));
	snprintf(cmd, sizeof(cmd), "%s --socket %s drain train --index 1 2>/dev/null", ctl, s.path);
	assert_int_equal(run_cmd(cmd, out, sizeof(out)), 2);
	assert_int_equal(srv_readers(&s), 0); /* every drain's reader went with its socket */

	srv_stop(&s, false);
	snprintf(cmd, sizeof(cmd), "%s --socket %s list 2>&1", ctl, s.path);
	assert_int_equal(run_cmd(cmd, out, sizeof(out)), 1);
	assert_non_null(strstr(out, "sluicectl: list: connect "));
	assert_non_null(strstr(out, "is sluiced running?"));
	srv_free(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sluicectl),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
