/* SPDX-License-Identifier: Apache-2.0 */
/* manifest internals: what the loader (manifest.c) and the writer (manifest_write.c) share. */
#ifndef SLUICE_IO_MANIFEST_INTERNAL_H
#define SLUICE_IO_MANIFEST_INTERNAL_H

#include "manifest.h"

/* The number of enum manifest_deser values (manifest.c's deser_names[] has one name for each). */
#define MANIFEST_DESER_COUNT_ (MANIFEST_DESER_RAW + 1)

/*
 * Blank out "//" comments outside strings, to the end of the line, keeping every other byte
 * in place so that jansson's line/column/position still point into the original text
 * (nnetmaker strips "//" comments from its manifests the same way). Used for manifests and
 * pipeline specs (daemon/pipeline/spec.c).
 */
void manifest_strip_comments(char *s, size_t len);

#endif
