/* SPDX-License-Identifier: Apache-2.0 */
/* manifest internals: what the loader (manifest.c) and the writer (manifest_write.c) share. */
#ifndef SLUICE_IO_MANIFEST_INTERNAL_H
#define SLUICE_IO_MANIFEST_INTERNAL_H

#include "manifest.h"

/* The number of enum manifest_deser values (manifest.c's deser_names[] has one name for each). */
#define MANIFEST_DESER_COUNT_ (MANIFEST_DESER_RAW + 1)

#endif
