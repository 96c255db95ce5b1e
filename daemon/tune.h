/* SPDX-License-Identifier: Apache-2.0 */
/* sluiced's tuner: the knobs of "auto" and the pool's weights, from the measured rates. */
#ifndef SLUICE_DAEMON_TUNE_H
#define SLUICE_DAEMON_TUNE_H

#include <stdint.h>

#include "server.h"

/* The tuner's window: long enough for a few batches of most pipelines, short enough to reach
   its steady knobs within seconds (a step per window, at most 5 of them per knob). */
#define DMN_TUNE_WINDOW_NS (500ull * 1000 * 1000)

/*
 * Every DMN_TUNE_WINDOW_NS (now: dmn_now_ns()), with --autotune: each running pipeline's window
 * fitted by the resource model, the knobs its spec left "auto" stepped (logged when they move),
 * and the pool's weights set from Plumber's allocation of --cpus between them. Server thread.
 */
void dmn_tune_tick(struct dmn *d, uint64_t now);

#endif
