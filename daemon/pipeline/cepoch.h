/* SPDX-License-Identifier: Apache-2.0 */
/* A cached epoch: every file of an epoch in the record cache, decoded; its compact rows. */
#ifndef SLUICE_PIPELINE_CEPOCH_H
#define SLUICE_PIPELINE_CEPOCH_H

#include <stdint.h>

#include "cache.h"
#include "plan.h"
#include "record.h"

/*
 * When the record cache holds every file a pipeline reads, ready and decoded (every record in
 * the flat form), an epoch needs none of a record's references and messages on its way to the
 * batch: only where its features are. Such an epoch runs on compact rows (struct pl_crow, 16
 * bytes) instead of records (64): the same stages, the same draws, a quarter of the bytes moved
 * between them and between threads (docs/pipeline.md, "Cached epochs").
 *
 * A struct pl_cepoch holds the epoch's entries (one reference each) for as long as a batch of
 * its rows is in flight, and turns a row's id back into the record it stands for (file, index,
 * offset), for the rows the fast path does not take and for their messages. Reference-counted;
 * any thread.
 */
struct pl_cepoch;

/*
 * The cached epoch of plan's files in cache, whose entries are keyed with proj_key (struct
 * pl_cache_key's proj): 1 and *ret (one reference, the caller's) when every file is there,
 * ready, every record decoded, the values-only ones' heads the same in every file, and (file,
 * index) fits 31 bits; else 0. -ENOMEM.
 */
int pl_cepoch_create(struct pl_cache *cache, const struct pl_plan *plan, uint64_t proj_key,
		     struct pl_cepoch **ret);
void pl_cepoch_ref(struct pl_cepoch *cx);
void pl_cepoch_unref(struct pl_cepoch *cx); /* NULL is fine */
/* The entry of file (an index into the dataset's files, one of the plan's), held by cx. */
struct pl_cache_entry *pl_cepoch_entry(const struct pl_cepoch *cx, uint32_t file);
/* The compact row of a record the cache gave for cx's epoch (rec->flat). */
struct pl_crow pl_cepoch_row(const struct pl_cepoch *cx, const struct pl_rec *rec);
/*
 * The record row stands for, as the frame stage gave it from the cache (file, index, offset,
 * flags, its whole flat form), holding no reference: valid as long as cx is held. A row of values
 * (PL_CROW_VALUES) is put back together with its heads in *buf (grown to *cap; the caller
 * frees it): buf NULL leaves ret->data at the values (for a message). 0 or -ENOMEM.
 */
int pl_cepoch_rec(const struct pl_cepoch *cx, const struct pl_crow *row, struct pl_rec *ret,
		  uint8_t **buf, size_t *cap);
/* The heads (*ret_len bytes) every PL_CROW_VALUES row of cx's epoch shares, or NULL: none. */
const uint8_t *pl_cepoch_heads(const struct pl_cepoch *cx, uint32_t *ret_len);

#endif
