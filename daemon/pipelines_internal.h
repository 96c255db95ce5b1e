/* SPDX-License-Identifier: Apache-2.0 */
/* The registry's internals: what pipelines.c and groups.c (its consumer groups) share. */
#ifndef SLUICE_DAEMON_PIPELINES_INTERNAL_H
#define SLUICE_DAEMON_PIPELINES_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "registry.h"

/*
 * Close the groups of pl that have had no member for DMN_GROUP_GRACE_NS (the producer waits for
 * room); whether one was closed. Under pl->lock.
 */
bool dmn_groups_expire(struct dmn_pipeline *pl);

#endif
