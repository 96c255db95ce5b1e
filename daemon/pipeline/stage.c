/* SPDX-License-Identifier: Apache-2.0 */
/* Stage names and the split of the driver's CPU time. */
#include "stage.h"

#include <stddef.h>
#include <string.h>

static const char *const names[PL_STAGE_COUNT_] = {
	[PL_STAGE_FILES] = "files",	      [PL_STAGE_READ] = "read",
	[PL_STAGE_FRAME] = "frame",	      [PL_STAGE_WINDOW] = "window",
	[PL_STAGE_INTERLEAVE] = "interleave", [PL_STAGE_SHUFFLE] = "shuffle",
	[PL_STAGE_PARSE] = "parse",	      [PL_STAGE_DECODE] = "decode",
	[PL_STAGE_DELIVER] = "deliver",
};

const char *pl_stage_name(unsigned id)
{
	return id < PL_STAGE_COUNT_ ? names[id] : 0;
}

void pl_prof_split(struct pl_prof *p, uint64_t cpu_ns)
{
	unsigned __int128 busy = 0;
	for (unsigned i = 0; i < PL_STAGE_COUNT_; i++)
		busy += p->round[i];
	if (busy > 0) {
		uint64_t d = cpu_ns > p->cpu_at ? cpu_ns - p->cpu_at : 0;
		for (unsigned i = 0; i < PL_STAGE_COUNT_; i++) {
			p->cpu[i] += (uint64_t)((unsigned __int128)d * p->round[i] / busy);
			p->last[i] = p->round[i];
		}
		p->cpu_at = cpu_ns;
	}
	memset(p->round, 0, sizeof(p->round));
}

void pl_prof_share(const uint64_t cpu[PL_STAGE_COUNT_], const uint64_t last[PL_STAGE_COUNT_],
		   uint64_t since_ns, struct pl_stage_stats st[PL_STAGE_COUNT_])
{
	unsigned __int128 busy = 0;
	for (unsigned i = 0; i < PL_STAGE_COUNT_; i++)
		busy += last[i];
	for (unsigned i = 0; i < PL_STAGE_COUNT_; i++) {
		st[i].cpu_ns += cpu[i];
		if (busy > 0)
			st[i].cpu_ns += (uint64_t)((unsigned __int128)since_ns * last[i] / busy);
	}
}

static const struct {
	const char *name;
	size_t off;
} counters[] = {
#define C(f)                                           \
	{                                              \
#f, offsetof(struct pl_stage_stats, f) \
	}
	C(elems_in),   C(elems_out),	C(bytes_in), C(bytes_out), C(completions), C(cpu_ns),
	C(wait_up_ns), C(wait_down_ns), C(buffered), C(capacity),  C(dropped),
#undef C
};
_Static_assert(sizeof(counters) / sizeof(counters[0]) * sizeof(uint64_t) ==
		       sizeof(struct pl_stage_stats),
	       "every counter of struct pl_stage_stats is listed");

const char *pl_stage_counter(const struct pl_stage_stats *st, unsigned k, uint64_t *ret_value)
{
	if (k >= sizeof(counters) / sizeof(counters[0]))
		return NULL;
	*ret_value = *(const uint64_t *)((const char *)st + counters[k].off);
	return counters[k].name;
}
