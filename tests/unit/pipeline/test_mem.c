/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tests for daemon/pipeline/mem.c: the memory accounts. A tree like sluiced's (--memory, a
 * uid's --user-memory that leaves root a reserve, a pipeline with a floor): charges that pass
 * and charges refused at each level with the figures, floors used before the parents are
 * charged, the root's reclaim asked once, and threads charging at once.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/pipeline/mem.h"

#define MB (1ull << 20)

static void test_limits_and_figures(void **state)
{
	(void)state;
	struct pl_mem root, user, pipe;
	pl_mem_init(&root, NULL, 64 * MB, "--memory");
	pl_mem_init(&user, &root, 32 * MB, "uid 1000's --user-memory");
	user.leave = 8 * MB;
	pl_mem_init(&pipe, &user, 0, "pipeline p's ram_budget");
	assert_int_equal(pl_mem_charge(&pipe, 30 * MB, NULL), 0);
	assert_true(pl_mem_used(&user) == 30 * MB && pl_mem_used(&root) == 30 * MB);
	struct pl_mem_full f;
	assert_int_equal(pl_mem_charge(&pipe, 3 * MB, &f), -ENOMEM); /* the user's limit */
	assert_ptr_equal(f.at, &user);
	assert_true(f.used == 30 * MB && f.limit == 32 * MB && f.ask == 3 * MB);
	char buf[256];
	pl_mem_full_text(&f, buf, sizeof(buf));
	assert_string_equal(buf, "3145728 bytes more would pass uid 1000's --user-memory "
				 "(31457280 of 33554432 bytes in use)");
	assert_true(pl_mem_used(&pipe) == 30 * MB); /* nothing of it was counted */
	/* root's own charges (root's pipelines) fill it; a user must leave the reserve */
	assert_int_equal(pl_mem_charge(&root, 28 * MB, NULL), 0);
	assert_int_equal(pl_mem_charge(&pipe, 1 * MB, &f), -ENOMEM);
	assert_ptr_equal(f.at, &root);
	assert_true(f.leave == 8 * MB);
	assert_true(pl_mem_room(&pipe) == 0);
	assert_int_equal(pl_mem_charge(&root, 6 * MB, NULL), 0); /* root may take its reserve */
	pl_mem_uncharge(&root, 34 * MB);
	assert_int_equal(pl_mem_take(&pipe, 4 * MB, "a slab of %d", 7), -ENOMEM);
	assert_true(pl_mem_refusal(&pipe, buf, sizeof(buf)));
	assert_non_null(strstr(buf, "a slab of 7: 4194304 bytes more would pass uid 1000's"));
	pl_mem_uncharge(&pipe, 30 * MB);
	assert_true(pl_mem_used(&root) == 0 && pl_mem_peak(&pipe) == 30 * MB);
	assert_true(pl_mem_fini(&pipe) == 0);
	pl_mem_fini(&user);
	pl_mem_fini(&root);
}

static void test_floor(void **state)
{
	(void)state;
	struct pl_mem root, a, b;
	pl_mem_init(&root, NULL, 16 * MB, "--memory");
	pl_mem_init(&a, &root, 0, "a");
	pl_mem_init(&b, &root, 0, "b");
	assert_int_equal(pl_mem_set_floor(&a, 10 * MB, NULL), 0);
	assert_true(pl_mem_held(&root) == 10 * MB);
	/* a's charges use its floor first: the root does not move */
	assert_int_equal(pl_mem_charge(&a, 6 * MB, NULL), 0);
	assert_true(pl_mem_held(&root) == 10 * MB && pl_mem_room(&a) == 10 * MB);
	/* b cannot have what a reserved, even unused */
	struct pl_mem_full f;
	assert_int_equal(pl_mem_set_floor(&b, 7 * MB, &f), -ENOMEM);
	assert_ptr_equal(f.at, &root);
	assert_int_equal(pl_mem_charge(&b, 6 * MB, NULL), 0);
	/* past its floor, a charges the root */
	assert_int_equal(pl_mem_charge(&a, 5 * MB, &f), -ENOMEM);
	assert_int_equal(pl_mem_charge(&a, 4 * MB, NULL), 0);
	assert_true(pl_mem_held(&root) == 16 * MB);
	pl_mem_uncharge(&a, 10 * MB);
	assert_true(pl_mem_held(&a) == 10 * MB); /* the floor stays */
	assert_true(pl_mem_fini(&a) == 0);	 /* and goes with it */
	assert_true(pl_mem_held(&root) == 6 * MB);
	pl_mem_uncharge(&b, 5 * MB);
	assert_true(pl_mem_fini(&b) == 1 * MB); /* a charge not given back is reported */
	assert_true(pl_mem_held(&root) == 0);
	pl_mem_fini(&root);
}

struct reclaimer {
	struct pl_mem *cache;
	uint64_t asked;
	unsigned calls;
};

static uint64_t reclaim(void *ctx, uint64_t need)
{
	struct reclaimer *r = ctx;
	r->calls++;
	r->asked = need;
	pl_mem_uncharge(r->cache, need); /* the cache drops entries for it */
	return need;
}

static void test_reclaim_first(void **state)
{
	(void)state;
	struct pl_mem root, cache, pipe;
	pl_mem_init(&root, NULL, 16 * MB, "--memory");
	pl_mem_init(&cache, &root, 8 * MB, "the record cache");
	cache.no_reclaim = true;
	pl_mem_init(&pipe, &root, 0, "p");
	struct reclaimer rc = { .cache = &cache };
	root.reclaim = reclaim;
	root.reclaim_ctx = &rc;
	assert_int_equal(pl_mem_charge(&cache, 8 * MB, NULL), 0);
	assert_int_equal(pl_mem_charge(&pipe, 8 * MB, NULL), 0);
	assert_int_equal(pl_mem_charge(&cache, 1 * MB, NULL), -ENOMEM); /* no reclaim for it */
	assert_int_equal(rc.calls, 0);
	assert_int_equal(pl_mem_charge(&pipe, 3 * MB, NULL), 0); /* the cache gave way */
	assert_int_equal(rc.calls, 1);
	assert_true(rc.asked == 3 * MB);
	assert_true(pl_mem_used(&cache) == 5 * MB);
	pl_mem_uncharge(&pipe, 11 * MB);
	pl_mem_uncharge(&cache, 5 * MB);
	pl_mem_fini(&pipe);
	pl_mem_fini(&cache);
	pl_mem_fini(&root);
}

struct hammer {
	struct pl_mem *m;
	unsigned ok;
};

static void *hammer_main(void *arg)
{
	struct hammer *h = arg;
	for (int i = 0; i < 20000; i++) {
		if (pl_mem_charge(h->m, 4096, NULL) == 0) {
			h->ok++;
			pl_mem_uncharge(h->m, 4096);
		}
	}
	return NULL;
}

static void test_threads(void **state)
{
	(void)state;
	struct pl_mem root, p[4];
	pl_mem_init(&root, NULL, 4 * 4096, "--memory");
	pthread_t t[4];
	struct hammer h[4];
	for (int i = 0; i < 4; i++) {
		pl_mem_init(&p[i], &root, 0, "p");
		h[i] = (struct hammer){ .m = &p[i] };
		assert_int_equal(pthread_create(&t[i], NULL, hammer_main, &h[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(h[i].ok, 20000); /* four fit: never refused */
		assert_true(pl_mem_fini(&p[i]) == 0);
	}
	assert_true(pl_mem_used(&root) == 0 && pl_mem_peak(&root) <= 4 * 4096);
	pl_mem_fini(&root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_limits_and_figures),
		cmocka_unit_test(test_floor),
		cmocka_unit_test(test_reclaim_first),
		cmocka_unit_test(test_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
