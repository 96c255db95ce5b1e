/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tests for daemon/budget.c: what pipelines may cost. A registry of fake pipelines (no engine,
 * no ring): the daemon-wide cap, the per-uid quotas (root and the config dir's not counted,
 * ended pipelines without readers not counted), the memory budget that drops ended idle
 * pipelines, least recently used first, and --linger's expiry.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/pipelines_internal.h"

#define MB (1ull << 20)

static void reg_init(struct dmn_registry *d)
{
	memset(d, 0, sizeof(*d));
	d->cfg.pipeline_bytes = 8 * MB;
	d->cfg.total_bytes = 64 * MB;
	d->cfg.linger_ns = 60ull * 1000000000;
	dmn_budget_init(d);
}

/* A pipeline of owner in status, holding 8 MiB, with readers; last used at tick. */
static struct dmn_pipeline *add(struct dmn_registry *d, const char *name, uid_t owner,
				enum dmn_status status, unsigned readers, uint64_t tick)
{
	struct dmn_pipeline *pl = calloc(1, sizeof(*pl));
	assert_non_null(pl);
	snprintf(pl->name, sizeof(pl->name), "%s", name);
	pl->owner = owner;
	pl->status = status;
	pl->n_readers = readers;
	pl->data_bytes = 8 * MB;
	pl->last_used = tick;
	pthread_mutex_init(&pl->lock, NULL);
	pthread_cond_init(&pl->attach_cond, NULL);
	pl->next = d->pipelines;
	d->pipelines = pl;
	d->n_pipelines++;
	char msg[512];
	assert_int_equal(dmn_budget_attach(d, pl), 0);
	uint64_t ring = 8 * MB;
	int r = dmn_budget_reserve(d, pl, &ring, msg, sizeof(msg));
	if (r)
		fail_msg("%s", msg);
	return pl;
}

static bool has(struct dmn_registry *d, const char *name)
{
	for (struct dmn_pipeline *pl = d->pipelines; pl; pl = pl->next)
		if (!strcmp(pl->name, name))
			return true;
	return false;
}

static void reg_fini(struct dmn_registry *d)
{
	while (d->pipelines)
		dmn_pipeline_drop(d, d->pipelines, "the test ends");
	assert_int_equal(d->n_pipelines, 0);
	assert_true(dmn_budget_used(d) == 0); /* every charge was released */
	dmn_budget_fini(d);
}

static void test_daemon_cap(void **state)
{
	(void)state;
	struct dmn_registry d;
	char msg[256];
	reg_init(&d);
	d.cfg.max_pipelines = 2;
	add(&d, "a", 0, DMN_RUNNING, 1, 1);
	assert_int_equal(dmn_budget_admit(&d, 0, msg, sizeof(msg)), 0);
	add(&d, "b", 0, DMN_RUNNING, 1, 2);
	assert_int_equal(dmn_budget_admit(&d, 0, msg, sizeof(msg)), -EUSERS);
	assert_non_null(strstr(msg, "limit of 2 pipelines"));
	reg_fini(&d);
}

static void test_user_quota(void **state)
{
	(void)state;
	struct dmn_registry d;
	char msg[256];
	reg_init(&d);
	d.cfg.user_pipelines = 2;
	add(&d, "u1", 1000, DMN_RUNNING, 1, 1);
	add(&d, "u2", 1000, DMN_RUNNING, 0, 2);	 /* running without readers: it counts */
	add(&d, "u3", 1000, DMN_FINISHED, 0, 3); /* ended, no reader: it does not */
	add(&d, "r", 0, DMN_RUNNING, 1, 4);
	add(&d, "c", (uid_t)-1, DMN_RUNNING, 1, 5);
	assert_int_equal(dmn_budget_admit(&d, 1000, msg, sizeof(msg)), -EDQUOT);
	assert_non_null(strstr(msg, "uid 1000's quota: it runs 2 pipelines of 2"));
	assert_int_equal(dmn_budget_admit(&d, 1001, msg, sizeof(msg)), 0); /* another uid */
	assert_int_equal(dmn_budget_admit(&d, 0, msg, sizeof(msg)), 0);	   /* root: no quota */
	assert_int_equal(dmn_budget_admit(&d, (uid_t)-1, msg, sizeof(msg)), 0);
	/* bytes: two rings of 8 MiB held, a third does not fit 20 MiB */
	d.cfg.user_pipelines = 0;
	d.cfg.user_bytes = 20 * MB;
	assert_int_equal(dmn_budget_admit(&d, 1000, msg, sizeof(msg)), -EDQUOT);
	assert_non_null(strstr(msg, "holds 16777216 of 20971520 bytes"));
	d.cfg.user_bytes = 24 * MB;
	assert_int_equal(dmn_budget_admit(&d, 1000, msg, sizeof(msg)), 0);
	reg_fini(&d);
}

static void test_memory_drops_idle_lru(void **state)
{
	(void)state;
	struct dmn_registry d;
	char msg[256];
	reg_init(&d);
	d.cfg.total_bytes = 32 * MB; /* four rings, root's (a user's fair share: below) */
	add(&d, "busy", 0, DMN_RUNNING, 1, 1);
	add(&d, "old", 0, DMN_FINISHED, 0, 2);
	add(&d, "read", 0, DMN_FINISHED, 1, 3); /* ended, but read: it stays */
	add(&d, "new", 0, DMN_FAILED, 0, 4);
	assert_true(dmn_budget_used(&d) == 32 * MB);
	assert_int_equal(dmn_budget_admit(&d, 0, msg, sizeof(msg)), 0);
	assert_false(has(&d, "old")); /* the least recently used idle one made room */
	assert_true(has(&d, "new") && has(&d, "read") && has(&d, "busy"));
	assert_true(dmn_budget_used(&d) == 24 * MB);
	add(&d, "next", 0, DMN_RUNNING, 1, 5);
	assert_int_equal(dmn_budget_admit(&d, 0, msg, sizeof(msg)), 0);
	assert_false(has(&d, "new"));
	add(&d, "last", 0, DMN_RUNNING, 1, 6);
	/* nothing idle left: refused with the figures */
	assert_int_equal(dmn_budget_admit(&d, 0, msg, sizeof(msg)), -ENOSPC);
	assert_string_equal(msg, "memory budget: 33554432 of 33554432 bytes in use, a pipeline "
				 "takes 8388608 (--memory, --pipeline-memory)");
	reg_fini(&d);
}

/*
 * Fair shares: users other than root leave an eighth of --memory (at least a ring) and of
 * --max-pipelines (at least one) to root and the config dir; a uid that holds nothing may take
 * what users may have, one that holds some at most half of it. Two users at their default
 * --user-memory (half each) no longer fill --memory: root's next pipeline fits (issue 37
 * item 6), and a third user who has nothing still gets one while there is room.
 */
static void test_fair_shares(void **state)
{
	(void)state;
	struct dmn_registry d;
	char msg[512];
	reg_init(&d); /* 64 MiB, rings of 8 */
	d.cfg.user_bytes = 32 * MB;
	d.cfg.max_pipelines = 64;
	char name[16];
	for (int k = 0; k < 4; k++) { /* uid 1000 up to its --user-memory */
		assert_int_equal(dmn_budget_admit(&d, 1000, msg, sizeof(msg)), 0);
		snprintf(name, sizeof(name), "a%d", k);
		add(&d, name, 1000, DMN_RUNNING, 1, (uint64_t)k);
	}
	assert_int_equal(dmn_budget_admit(&d, 1000, msg, sizeof(msg)), -EDQUOT);
	/* uid 1001: two rings, then at most half of what is left to users (8 of 16) */
	for (int k = 0; k < 2; k++) {
		assert_int_equal(dmn_budget_admit(&d, 1001, msg, sizeof(msg)), 0);
		snprintf(name, sizeof(name), "b%d", k);
		add(&d, name, 1001, DMN_RUNNING, 1, 10 + (uint64_t)k);
	}
	assert_int_equal(dmn_budget_admit(&d, 1001, msg, sizeof(msg)), -EDQUOT);
	assert_non_null(strstr(msg, "uid 1001's fair share: 16777216 of 67108864 bytes are free, "
				    "8388608 of them kept for root"));
	assert_non_null(strstr(msg, "it holds 16777216"));
	/* uid 1002 holds nothing: it gets one of what users may still have */
	assert_int_equal(dmn_budget_admit(&d, 1002, msg, sizeof(msg)), 0);
	struct dmn_pipeline *c0 = add(&d, "c0", 1002, DMN_RUNNING, 1, 20);
	assert_int_equal(dmn_budget_admit(&d, 1003, msg, sizeof(msg)), -EDQUOT); /* none left */
	/* root and the config dir: the reserve is theirs */
	assert_int_equal(dmn_budget_admit(&d, 0, msg, sizeof(msg)), 0);
	assert_int_equal(dmn_budget_admit(&d, (uid_t)-1, msg, sizeof(msg)), 0);
	/* an ended pipeline without readers makes room for a user too (the reserve stays) */
	c0->status = DMN_FINISHED;
	c0->n_readers = 0;
	assert_int_equal(dmn_budget_admit(&d, 1003, msg, sizeof(msg)), 0);
	assert_false(has(&d, "c0"));
	reg_fini(&d);

	/* pipeline counts: of --max-pipelines 16, 2 are root's; half of the rest for a uid that
	   runs some */
	reg_init(&d);
	d.cfg.total_bytes = 1024 * MB;
	d.cfg.max_pipelines = 16;
	int got = 0;
	while (dmn_budget_admit(&d, 1000, msg, sizeof(msg)) == 0) {
		snprintf(name, sizeof(name), "p%d", got++);
		add(&d, name, 1000, DMN_RUNNING, 1, (uint64_t)got);
	}
	assert_non_null(strstr(msg, "fair share"));
	assert_int_equal(got, 13); /* 1 + until half of what is left is less than one */
	assert_int_equal(dmn_budget_admit(&d, 1001, msg, sizeof(msg)), 0); /* nothing yet: one */
	add(&d, "q0", 1001, DMN_RUNNING, 1, 40);
	assert_int_equal(dmn_budget_admit(&d, 1002, msg, sizeof(msg)), -EDQUOT);
	assert_int_equal(dmn_budget_admit(&d, 0, msg, sizeof(msg)), 0);
	reg_fini(&d);
}

static void test_linger(void **state)
{
	(void)state;
	struct dmn_registry d;
	reg_init(&d);
	d.cfg.linger_ns = 0;
	add(&d, "ended", 1000, DMN_FINISHED, 0, 1);
	struct dmn_pipeline *cfg = add(&d, "config", (uid_t)-1, DMN_FINISHED, 0, 2);
	cfg->from_config = true; /* the administrator's: never dropped */
	add(&d, "running", 1000, DMN_RUNNING, 0, 3);
	dmn_pipelines_expire(&d); /* notes when each became idle */
	assert_true(has(&d, "ended"));
	dmn_pipelines_expire(&d); /* ... and drops what has been for --linger (0 here) */
	assert_false(has(&d, "ended"));
	assert_true(has(&d, "config") && has(&d, "running"));
	d.cfg.linger_ns = 3600ull * 1000000000;
	add(&d, "later", 1000, DMN_FINISHED, 0, 4);
	dmn_pipelines_expire(&d);
	dmn_pipelines_expire(&d);
	assert_true(has(&d, "later")); /* an hour's linger: not yet */
	reg_fini(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_daemon_cap),
		cmocka_unit_test(test_user_quota),
		cmocka_unit_test(test_memory_drops_idle_lru),
		cmocka_unit_test(test_fair_shares),
		cmocka_unit_test(test_linger),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
