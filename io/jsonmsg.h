/* SPDX-License-Identifier: Apache-2.0 */
/* JSON values and paths in error messages (the manifest and the pipeline spec). */
#ifndef SLUICE_IO_JSONMSG_H
#define SLUICE_IO_JSONMSG_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "ioerr.h"

/* Values longer than this are cut in messages. */
#define JSONMSG_DESCRIBE_MAX 64

/*
 * A short rendering of a JSON value for "got ...": quoted strings (cut with ..." past
 * JSONMSG_DESCRIBE_MAX), numbers, literals, "an object", "an array". Returns buf or a constant.
 */
const char *jsonmsg_describe(const json_t *v, char *buf, size_t n);
/* s quoted as a JSON string (for names in messages), as jsonmsg_describe renders it. */
const char *jsonmsg_quote(const char *s, char *buf, size_t n);
/* path + "." + key, or path + "[\"key\"]" when key is not a plain identifier. */
void jsonmsg_path_key(char *out, size_t n, const char *path, const char *key);

/* Where a JSON document came from and where its errors go. */
struct jsonmsg_ctx {
	const char *origin;   /* a path, or "<spec>" */
	struct io_error *err; /* may be NULL */
};

/*
 * Write "ORIGIN: PATH: message" (or "ORIGIN: message" when path is empty) into c->err and
 * return -EINVAL: the one shape of a rule violation in a JSON document.
 */
int jsonmsg_fail(const struct jsonmsg_ctx *c, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The longest JSON path a message names (longer ones are cut). */
#define JSONMSG_PATH_MAX 320

/* Index of key in keys[0..n), or -1 (for a switch over an object's keys). */
int jsonmsg_key_index(const char *key, const char *const *keys, size_t n);
/* "ORIGIN: PATH.KEY: required key is missing WHY" (why: "" or " (for ...)"); -EINVAL. */
int jsonmsg_missing(const struct jsonmsg_ctx *c, const char *path, const char *key,
		    const char *why);
/* "ORIGIN: PATH.KEY: unknown key (expected one of: EXPECTED)"; -EINVAL. */
int jsonmsg_unknown_key(const struct jsonmsg_ctx *c, const char *path, const char *key,
			const char *expected);

/*
 * One value of the expected kind, or -EINVAL with "ORIGIN: PATH: expected ..., got ..." (the
 * same words for the manifest and the spec). The ret_ out-parameters are written only on success.
 */

/* An object ("expected a JSON object at the top level" when path is NULL or ""). */
int jsonmsg_get_object(const struct jsonmsg_ctx *c, const json_t *v, const char *path);
/* true or false. */
int jsonmsg_get_bool(const struct jsonmsg_ctx *c, const json_t *v, const char *path,
		     bool *ret_value);
/* A non-empty string; *ret_name points into v (it lives as long as v does). */
int jsonmsg_get_name(const struct jsonmsg_ctx *c, const json_t *v, const char *path,
		     const char **ret_name);
/* One of the strings names[0..n) (compared exactly), its index; expected: them, for the message. */
int jsonmsg_get_enum(const struct jsonmsg_ctx *c, const json_t *v, const char *path,
		     const char *const *names, size_t n, const char *expected, unsigned *ret_index);
/*
 * An array (of objects, as the message says): its size, and a zeroed array of that many elements
 * of sz bytes for the caller to fill (the caller frees it; NULL when the array is empty). -ENOMEM
 * with "ORIGIN: out of memory".
 */
int jsonmsg_get_array(const struct jsonmsg_ctx *c, const json_t *v, const char *path, size_t sz,
		      size_t *ret_n, void **ret_elems);
/* Every key of object o is one of keys[0..n); else jsonmsg_unknown_key() for the first that is not.
 */
int jsonmsg_check_keys(const struct jsonmsg_ctx *c, const json_t *o, const char *path,
		       const char *const *keys, size_t n, const char *expected);

/* "ORIGIN: out of memory" into c->err; -ENOMEM. */
int jsonmsg_oom(const struct jsonmsg_ctx *c);

/*
 * Parse a JSON document (manifest, pipeline spec) the way every one of ours is read: "//"
 * comments to the end of a line allowed outside strings (nnetmaker strips them from its
 * manifests the same way), duplicate keys rejected, any value at the top. 0 and *ret_root (the
 * caller json_decref()s it), -EBADMSG with "ORIGIN:LINE:COLUMN: invalid JSON: ... (byte N)",
 * or -ENOMEM.
 */
int jsonmsg_load(const struct jsonmsg_ctx *c, const char *json, size_t len, json_t **ret_root);

#endif
