/* SPDX-License-Identifier: Apache-2.0 */
/* Tests for sched/topo.c: synthetic and real topologies, placement, pipeline node, binding. */
#include <errno.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/unit/skip.h"
#include <numa.h>
#include <numaif.h>

#include "sched/topo.h"
#include "sched/topo_internal.h"

static struct topo *synth(const char *desc)
{
	struct topo *t = NULL;

	assert_int_equal(topo_load_synthetic(desc, &t), 0);
	assert_non_null(t);
	return t;
}

static void test_synthetic_shape(void **state)
{
	struct topo *t = synth("node:2 core:4 pu:2");

	assert_false(topo_is_real(t));
	assert_int_equal(topo_nodes(t), 2);
	assert_int_equal(topo_cores(t), 8);
	assert_int_equal(topo_pus(t), 16);
	for (unsigned i = 0; i < 16; i++) {
		const struct topo_pu *p = topo_pu(t, i);

		assert_non_null(p);
		assert_int_equal(p->os_index, i);
		assert_int_equal(p->core, i / 2);
		assert_int_equal(p->node, i / 8);
	}
	assert_null(topo_pu(t, 16));
	assert_int_equal(topo_node_os_index(t, 1), 1);
	assert_int_equal(topo_node_os_index(t, 2), -EINVAL);
	assert_int_equal(topo_node_distance(t, 0, 0), 10);
	assert_int_equal(topo_node_distance(t, 0, 1), 20);
	assert_int_equal(topo_node_distance(t, 0, 2), 0);
	assert_int_equal(topo_bind_thread(t, 0), -EOPNOTSUPP);
	assert_int_equal(topo_bind_thread(t, 16), -EINVAL);
	topo_destroy(t);

	/* NUMA nodes under packages: nearer within a package than across. */
	t = synth("package:2 node:2 core:3 pu:1");
	assert_int_equal(topo_nodes(t), 4);
	assert_int_equal(topo_cores(t), 12);
	assert_int_equal(topo_pus(t), 12);
	for (unsigned i = 0; i < 12; i++) {
		assert_int_equal(topo_pu(t, i)->node, i / 3);
		assert_int_equal(topo_pu(t, i)->core, i);
	}
	assert_int_equal(topo_node_distance(t, 0, 1), 20);
	assert_int_equal(topo_node_distance(t, 2, 3), 20);
	assert_int_equal(topo_node_distance(t, 1, 2), 30);
	assert_int_equal(topo_node_distance(t, 3, 0), 30);
	assert_int_equal(topo_node_distance(t, 3, 3), 10);
	topo_destroy(t);

	/* One node, and no node at all in the description: both are one node. */
	t = synth("node:1 core:2 pu:1");
	assert_int_equal(topo_nodes(t), 1);
	assert_int_equal(topo_cores(t), 2);
	assert_int_equal(topo_pus(t), 2);
	topo_destroy(t);
	t = synth("core:3 pu:2");
	assert_int_equal(topo_nodes(t), 1);
	assert_int_equal(topo_cores(t), 3);
	assert_int_equal(topo_pus(t), 6);
	assert_int_equal(topo_pu(t, 5)->node, 0);
	topo_destroy(t);
}

static void test_synthetic_invalid(void **state)
{
	static const char *const bad[] = { "bogus:3", "node:2 core:x", "", "pu:0" };
	struct topo *t = (struct topo *)0x1;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(topo_load_synthetic(bad[i], &t), -EINVAL);
		assert_ptr_equal(t, (struct topo *)0x1); /* untouched on failure */
	}
	assert_int_equal(topo_load_synthetic(NULL, &t), -EINVAL);
	topo_destroy(NULL);
}

static void expect_place(const struct topo *t, unsigned n, const unsigned *want)
{
	unsigned got[64];

	assert_true(n <= 64);
	assert_int_equal(topo_place_workers(t, n, got), 0);
	for (unsigned i = 0; i < n; i++) {
		if (got[i] != want[i])
			fail_msg("n=%u worker %u: PU %u, want %u", n, i, got[i], want[i]);
	}
}

static void test_place_two_nodes_smt(void **state)
{
	struct topo *t = synth("node:2 core:4 pu:2");
	/* Node 0: PUs 0-7, node 1: 8-15; core k holds PUs 2k and 2k+1. */
	static const unsigned p1[] = { 0 };
	static const unsigned p2[] = { 0, 8 };
	static const unsigned p3[] = { 0, 2, 8 }; /* 1.5 : 1.5, tie to node 0 */
	static const unsigned p4[] = { 0, 2, 8, 10 };
	static const unsigned p8[] = { 0, 2, 4, 6, 8, 10, 12, 14 };
	static const unsigned p16[] = { 0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15 };
	unsigned p17[17], p19[19];
	unsigned dummy;

	expect_place(t, 1, p1);
	expect_place(t, 2, p2);
	expect_place(t, 3, p3);
	expect_place(t, 4, p4);
	expect_place(t, 8, p8);
	expect_place(t, 16, p16);
	/* Oversubscribed: every PU once, then the extra workers placed afresh. */
	memcpy(p17, p16, sizeof(p16));
	p17[16] = 0;
	expect_place(t, 17, p17);
	memcpy(p19, p16, sizeof(p16));
	p19[16] = 0;
	p19[17] = 2;
	p19[18] = 8;
	expect_place(t, 19, p19);
	assert_int_equal(topo_place_workers(t, 0, &dummy), -EINVAL);
	topo_destroy(t);
}

static void test_place_packages(void **state)
{
	struct topo *t = synth("package:2 node:2 core:3 pu:1");
	/* Four nodes of three PUs: 0-2, 3-5, 6-8, 9-11. */
	static const unsigned p2[] = { 0, 3 };
	static const unsigned p4[] = { 0, 3, 6, 9 };
	static const unsigned p6[] = { 0, 1, 3, 4, 6, 9 };
	static const unsigned p12[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 };

	expect_place(t, 2, p2);
	expect_place(t, 4, p4);
	expect_place(t, 6, p6);
	expect_place(t, 12, p12);
	topo_destroy(t);

	t = synth("node:1 core:2 pu:1");
	static const unsigned q3[] = { 0, 1, 0 };
	expect_place(t, 3, q3);
	topo_destroy(t);
}

static struct topo *from_pus(const struct topo_pu *pu, unsigned n)
{
	struct topo *t = NULL;

	assert_int_equal(topo_create_from_pus(pu, n, &t), 0);
	return t;
}

static void test_place_uneven_nodes(void **state)
{
	/* Node 0: three single-thread cores; node 1: two. hwloc's synthetic form is symmetric. */
	static const struct topo_pu pus[] = {
		{ 10, 0, 0 }, { 11, 1, 0 }, { 12, 2, 0 }, { 20, 3, 1 }, { 21, 4, 1 },
	};
	struct topo *t = from_pus(pus, 5);
	static const unsigned p1[] = { 0 };	  /* 0.6 : 0.4 */
	static const unsigned p2[] = { 0, 3 };	  /* 1.2 : 0.8, remainder to node 1 */
	static const unsigned p3[] = { 0, 1, 3 }; /* 1.8 : 1.2 */
	static const unsigned p4[] = { 0, 1, 3, 4 };
	static const unsigned p5[] = { 0, 1, 2, 3, 4 };
	static const unsigned p7[] = { 0, 1, 2, 3, 4, 0, 3 };

	assert_int_equal(topo_nodes(t), 2);
	assert_int_equal(topo_cores(t), 5);
	assert_int_equal(topo_pus(t), 5);
	assert_true(topo_is_real(t) == false);
	expect_place(t, 1, p1);
	expect_place(t, 2, p2);
	expect_place(t, 3, p3);
	expect_place(t, 4, p4);
	expect_place(t, 5, p5);
	expect_place(t, 7, p7);
	topo_destroy(t);

	/* A node without CPUs (memory only) gets no workers; SMT cores fill first threads first. */
	static const struct topo_pu pus2[] = {
		{ 0, 0, 0 }, { 1, 0, 0 }, { 2, 1, 0 }, { 3, 1, 0 }, { 4, 2, 2 }, { 5, 2, 2 },
	};
	t = from_pus(pus2, 6);
	assert_int_equal(topo_nodes(t), 3);
	static const unsigned q2[] = { 0, 4 };
	static const unsigned q3[] = { 0, 2, 4 };
	static const unsigned q4[] = { 0, 2, 1, 4 }; /* 2.67 : 0 : 1.33 */
	static const unsigned q5[] = { 0, 2, 1, 4, 5 };
	expect_place(t, 2, q2);
	expect_place(t, 3, q3);
	expect_place(t, 4, q4);
	expect_place(t, 5, q5);
	topo_destroy(t);

	struct topo *bad = (struct topo *)0x1;
	assert_int_equal(topo_create_from_pus(pus, 0, &bad), -EINVAL);
	assert_ptr_equal(bad, (struct topo *)0x1);
}

/*
 * Properties on every n up to 3 x PUs: per-node shares within one of proportional, every PU used
 * floor(n / P) or ceil(n / P) times, and placement deterministic.
 */
static void check_props(const struct topo *t)
{
	unsigned P = topo_pus(t), N = topo_nodes(t);
	unsigned *pu = calloc(3 * P, sizeof(*pu)), *again = calloc(3 * P, sizeof(*again));
	unsigned *use = calloc(P, sizeof(*use)), *per_node = calloc(N, sizeof(*per_node));
	unsigned *node_p = calloc(N, sizeof(*node_p));

	assert_non_null(pu);
	assert_non_null(again);
	assert_non_null(use);
	assert_non_null(per_node);
	assert_non_null(node_p);
	for (unsigned i = 0; i < P; i++)
		node_p[topo_pu(t, i)->node]++;
	for (unsigned n = 1; n <= 3 * P; n++) {
		assert_int_equal(topo_place_workers(t, n, pu), 0);
		assert_int_equal(topo_place_workers(t, n, again), 0);
		assert_memory_equal(pu, again, n * sizeof(*pu));
		memset(use, 0, P * sizeof(*use));
		memset(per_node, 0, N * sizeof(*per_node));
		for (unsigned i = 0; i < n; i++) {
			assert_true(pu[i] < P);
			use[pu[i]]++;
		}
		for (unsigned i = 0; i < P; i++)
			assert_true(use[i] >= n / P && use[i] <= (n + P - 1) / P);
		/* The first min(n, P) workers: shares within one of n * P_k / P. */
		unsigned m = n < P ? n : P;
		for (unsigned i = 0; i < m; i++)
			per_node[topo_pu(t, pu[i])->node]++;
		for (unsigned k = 0; k < N; k++) {
			unsigned lo = m * node_p[k] / P;

			assert_true(per_node[k] >= lo && per_node[k] <= lo + 1);
		}
	}
	free(pu);
	free(again);
	free(use);
	free(per_node);
	free(node_p);
}

static void test_place_properties(void **state)
{
	static const char *const descs[] = {
		"node:2 core:4 pu:2",
		"package:2 node:2 core:3 pu:1",
		"node:3 core:5 pu:4",
		"node:1 core:2 pu:1",
		"pu:1",
	};
	static const struct topo_pu odd[] = {
		{ 0, 0, 0 }, { 1, 1, 1 }, { 2, 1, 1 }, { 3, 2, 1 }, { 4, 3, 2 },
		{ 5, 4, 2 }, { 6, 5, 2 }, { 7, 6, 2 }, { 8, 7, 3 },
	};

	for (size_t i = 0; i < sizeof(descs) / sizeof(descs[0]); i++) {
		struct topo *t = synth(descs[i]);

		check_props(t);
		topo_destroy(t);
	}
	struct topo *t = from_pus(odd, 9);
	check_props(t);
	topo_destroy(t);
}

static void test_pipeline_node(void **state)
{
	struct topo *t = synth("node:2 core:4 pu:2");
	static const unsigned both[] = { 0, 2, 8 };
	static const unsigned mostly1[] = { 8, 0, 10 };
	static const unsigned tie[] = { 8, 0 };
	static const unsigned only0[] = { 0, 2 };
	static const unsigned bad[] = { 16 };
	unsigned node = 99;

	/* A consumer node with workers, and without: the memory goes to the consumer. */
	assert_int_equal(topo_pipeline_node(t, 1, both, 3, &node), 0);
	assert_int_equal(node, 1);
	assert_int_equal(topo_pipeline_node(t, 1, only0, 2, &node), 0);
	assert_int_equal(node, 1);
	assert_int_equal(topo_pipeline_node(t, 0, mostly1, 3, &node), 0);
	assert_int_equal(node, 0);
	/* Unknown consumer: most workers, lowest node on ties. */
	assert_int_equal(topo_pipeline_node(t, -1, both, 3, &node), 0);
	assert_int_equal(node, 0);
	assert_int_equal(topo_pipeline_node(t, -1, mostly1, 3, &node), 0);
	assert_int_equal(node, 1);
	assert_int_equal(topo_pipeline_node(t, -1, tie, 2, &node), 0);
	assert_int_equal(node, 0);
	assert_int_equal(topo_pipeline_node(t, -1, NULL, 0, &node), 0);
	assert_int_equal(node, 0);
	/* Errors leave ret_node alone. */
	node = 99;
	assert_int_equal(topo_pipeline_node(t, 2, both, 3, &node), -EINVAL);
	assert_int_equal(topo_pipeline_node(t, -2, both, 3, &node), -EINVAL);
	assert_int_equal(topo_pipeline_node(t, -1, bad, 1, &node), -EINVAL);
	assert_int_equal(topo_pipeline_node(t, -1, NULL, 1, &node), -EINVAL);
	assert_int_equal(node, 99);
	topo_destroy(t);

	/* Four nodes: a tie between nodes 2 and 3 goes to 2; workers alone pick node 3. */
	t = synth("package:2 node:2 core:3 pu:1");
	static const unsigned tie23[] = { 9, 10, 6, 7 };
	static const unsigned on3[] = { 11, 9, 0 };
	assert_int_equal(topo_pipeline_node(t, -1, tie23, 4, &node), 0);
	assert_int_equal(node, 2);
	assert_int_equal(topo_pipeline_node(t, -1, on3, 3, &node), 0);
	assert_int_equal(node, 3);
	assert_int_equal(topo_pipeline_node(t, 3, tie23, 0, &node), 0);
	assert_int_equal(node, 3);
	topo_destroy(t);
}

static void test_real_topology(void **state)
{
	struct topo *t = NULL;
	cpu_set_t aff;

	assert_int_equal(topo_load(&t), 0);
	assert_true(topo_is_real(t));
	assert_true(topo_pus(t) >= 1);
	assert_true(topo_nodes(t) >= 1);
	assert_true(topo_cores(t) >= 1 && topo_cores(t) <= topo_pus(t));
	assert_int_equal(sched_getaffinity(0, sizeof(aff), &aff), 0);
	/* Restricted to where we may run: exactly the affinity mask's CPUs. */
	assert_int_equal(topo_pus(t), CPU_COUNT(&aff));
	for (unsigned i = 0; i < topo_pus(t); i++) {
		const struct topo_pu *p = topo_pu(t, i);

		assert_true(CPU_ISSET(p->os_index, &aff));
		assert_true(p->node < topo_nodes(t));
		assert_true(p->core < topo_cores(t));
		for (unsigned j = 0; j < i; j++)
			assert_int_not_equal(topo_pu(t, j)->os_index, p->os_index);
	}
	for (unsigned k = 0; k < topo_nodes(t); k++) {
		assert_true(topo_node_os_index(t, k) >= 0);
		assert_int_equal(topo_node_distance(t, k, k), 10);
	}
	topo_destroy(t);
}

static void test_bind_thread(void **state)
{
	struct topo *t = NULL;
	cpu_set_t saved;
	bool bound_any = false;

	assert_int_equal(sched_getaffinity(0, sizeof(saved), &saved), 0);
	assert_int_equal(topo_load(&t), 0);
	for (unsigned i = 0; i < topo_pus(t); i++) {
		int ret = topo_bind_thread(t, i);

		if (ret == -EPERM || ret == -ENOSYS || ret == -EXDEV)
			continue;
		assert_int_equal(ret, 0);
		bound_any = true;
		/* Pinned to one CPU: the next time we look we are running on it. */
		assert_int_equal(sched_getcpu(), (int)topo_pu(t, i)->os_index);
	}
	assert_int_equal(topo_bind_thread(t, topo_pus(t)), -EINVAL);
	assert_int_equal(sched_setaffinity(0, sizeof(saved), &saved), 0);
	topo_destroy(t);
	if (!bound_any)
		SL_SKIP("[affinity] no CPU of the topology accepts a thread here "
			"(sched_setaffinity)");
}

/* The node of every page of [p, p + len), or -1 where the kernel will not say. */
static int pages_node(void *p, size_t len)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = (len + pg - 1) / pg;
	void **pages = calloc(n, sizeof(*pages));
	int *status = calloc(n, sizeof(*status));
	int node = -1;

	assert_non_null(pages);
	assert_non_null(status);
	for (size_t i = 0; i < n; i++)
		pages[i] = (char *)p + i * pg;
	if (move_pages(0, (unsigned long)n, pages, NULL, status, 0) == 0) {
		node = status[0];
		for (size_t i = 1; i < n; i++)
			if (status[i] != node)
				node = -2;
	}
	free(pages);
	free(status);
	return node;
}

static void test_memory(void **state)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), len = 4 * pg + 1;
	unsigned char *p = topo_alloc_on_node(len, 0);

	assert_non_null(p);
	memset(p, 0xa5, 5 * pg); /* rounded up to pages: all five are ours */
	assert_int_equal(p[5 * pg - 1], 0xa5);
	if (numa_available() >= 0) {
		int node = pages_node(p, len);

		if (node != -1)
			assert_int_equal(node, 0);
	}
	topo_free(p, len);

	/* Binding a region already touched moves it (or leaves it, on node 0 already). */
	p = mmap(NULL, 8 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(p != MAP_FAILED);
	memset(p, 1, 8 * pg);
	int ret = topo_bind_memory(p, 8 * pg, 0);
	if (ret != -EPERM && ret != -ENOSYS) {
		assert_int_equal(ret, 0);
		if (numa_available() >= 0) {
			int node = pages_node(p, 8 * pg);

			if (node != -1)
				assert_int_equal(node, 0);
		}
	}
	assert_int_equal(topo_bind_memory(p + 1, pg, 0), -EINVAL);
	assert_int_equal(topo_bind_memory(p, 0, 0), -EINVAL);
	assert_int_equal(topo_bind_memory(p, pg, -1), -EINVAL);
	assert_int_equal(topo_bind_memory(p, pg, 4096), -EINVAL);
	munmap(p, 8 * pg);

	/* No preference, and the refusals. */
	p = topo_alloc_on_node(100, -1);
	assert_non_null(p);
	p[99] = 7;
	topo_free(p, 100);
	errno = 0;
	assert_null(topo_alloc_on_node(0, 0));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(topo_alloc_on_node(pg, 4096));
	assert_int_equal(errno, EINVAL);
	topo_free(NULL, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_synthetic_shape),
		cmocka_unit_test(test_synthetic_invalid),
		cmocka_unit_test(test_place_two_nodes_smt),
		cmocka_unit_test(test_place_packages),
		cmocka_unit_test(test_place_uneven_nodes),
		cmocka_unit_test(test_place_properties),
		cmocka_unit_test(test_pipeline_node),
		cmocka_unit_test(test_real_topology),
		cmocka_unit_test(test_bind_thread),
		cmocka_unit_test(test_memory),
	};

	return SL_RUN_GROUP(tests, NULL, NULL);
}
