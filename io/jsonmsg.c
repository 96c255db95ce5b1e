/* SPDX-License-Identifier: Apache-2.0 */
/* JSON values and paths in error messages (the manifest and the pipeline spec). */
#include "jsonmsg.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *jsonmsg_describe(const json_t *v, char *buf, size_t n)
{
	char *s;
	size_t len;

	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "an object";
	case JSON_ARRAY:
		return "an array";
	case JSON_TRUE:
		return "true";
	case JSON_FALSE:
		return "false";
	case JSON_NULL:
		return "null";
	case JSON_INTEGER:
		snprintf(buf, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		return buf;
	case JSON_REAL:
	case JSON_STRING:
		break;
	}
	s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
	if (!s)
		return "a value";
	len = strlen(s);
	if (len > JSONMSG_DESCRIBE_MAX && json_is_string(v))
		snprintf(buf, n, "%.*s...\"", JSONMSG_DESCRIBE_MAX - 4, s);
	else
		snprintf(buf, n, "%.*s", JSONMSG_DESCRIBE_MAX, s);
	free(s);
	return buf;
}

const char *jsonmsg_quote(const char *s, char *buf, size_t n)
{
	json_t *v = json_string(s);
	const char *r = v ? jsonmsg_describe(v, buf, n) : "a name";

	json_decref(v);
	return r;
}

void jsonmsg_path_key(char *out, size_t n, const char *path, const char *key)
{
	size_t i, len = strlen(key);
	bool plain = len > 0 && len <= JSONMSG_DESCRIBE_MAX;
	char buf[JSONMSG_DESCRIBE_MAX + 8];

	for (i = 0; plain && i < len; i++) {
		unsigned char ch = (unsigned char)key[i];

		plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			(ch >= '0' && ch <= '9') || ch == '_';
	}
	if (plain)
		snprintf(out, n, "%s%s%s", path, *path ? "." : "", key);
	else
		snprintf(out, n, "%s[%s]", path, jsonmsg_quote(key, buf, sizeof(buf)));
}

int jsonmsg_fail(const struct jsonmsg_ctx *c, const char *path, const char *fmt, ...)
{
	char msg[sizeof(c->err->msg)];
	va_list ap;

	if (!c->err)
		return -EINVAL;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (path && *path)
		io_error_set(c->err, "%s: %s: %s", c->origin, path, msg);
	else
		io_error_set(c->err, "%s: %s", c->origin, msg);
	return -EINVAL;
}

int jsonmsg_oom(const struct jsonmsg_ctx *c)
{
	io_error_set(c->err, "%s: out of memory", c->origin);
	return -ENOMEM;
}

/*
 * Blank out "//" comments outside strings, to the end of the line, keeping every other byte in
 * place so that jansson's line/column/position still point into the original text.
 */
static void strip_comments(char *s, size_t len)
{
	bool in_str = false, esc = false;
	size_t i;

	for (i = 0; i < len; i++) {
		if (in_str) {
			if (esc)
				esc = false;
			else if (s[i] == '\\')
				esc = true;
			else if (s[i] == '"')
				in_str = false;
			continue;
		}
		if (s[i] == '"') {
			in_str = true;
		} else if (s[i] == '/' && i + 1 < len && s[i + 1] == '/') {
			while (i < len && s[i] != '\n')
				s[i++] = ' ';
		}
	}
}

int jsonmsg_load(const struct jsonmsg_ctx *c, const char *json, size_t len, json_t **ret_root)
{
	json_error_t je;
	char *copy = malloc(len ? len : 1);
	if (!copy)
		return jsonmsg_oom(c);
	if (len)
		memcpy(copy, json, len);
	strip_comments(copy, len);
	json_t *root = json_loadb(copy, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
	free(copy);
	if (!root) {
		if (json_error_code(&je) == json_error_out_of_memory)
			return jsonmsg_oom(c);
		io_error_set(c->err, "%s:%d:%d: invalid JSON: %s (byte %d)", c->origin, je.line,
			     je.column, je.text, je.position);
		return -EBADMSG;
	}
	*ret_root = root;
	return 0;
}

int jsonmsg_key_index(const char *key, const char *const *keys, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(key, keys[i]) == 0)
			return (int)i;
	return -1;
}

int jsonmsg_missing(const struct jsonmsg_ctx *c, const char *path, const char *key, const char *why)
{
	char sub[JSONMSG_PATH_MAX];

	jsonmsg_path_key(sub, sizeof(sub), path, key);
	return jsonmsg_fail(c, sub, "required key is missing%s", why);
}

int jsonmsg_unknown_key(const struct jsonmsg_ctx *c, const char *path, const char *key,
			const char *expected)
{
	char sub[JSONMSG_PATH_MAX];

	jsonmsg_path_key(sub, sizeof(sub), path, key);
	return jsonmsg_fail(c, sub, "unknown key (expected one of: %s)", expected);
}

int jsonmsg_get_object(const struct jsonmsg_ctx *c, const json_t *v, const char *path)
{
	char buf[JSONMSG_DESCRIBE_MAX + 8];

	if (json_is_object(v))
		return 0;
	if (!path || !*path)
		return jsonmsg_fail(c, NULL, "expected a JSON object at the top level, got %s",
				    jsonmsg_describe(v, buf, sizeof(buf)));
	return jsonmsg_fail(c, path, "expected an object, got %s",
			    jsonmsg_describe(v, buf, sizeof(buf)));
}

int jsonmsg_get_bool(const struct jsonmsg_ctx *c, const json_t *v, const char *path,
		     bool *ret_value)
{
	char buf[JSONMSG_DESCRIBE_MAX + 8];

	if (!json_is_boolean(v))
		return jsonmsg_fail(c, path, "expected true or false, got %s",
				    jsonmsg_describe(v, buf, sizeof(buf)));
	*ret_value = json_is_true(v);
	return 0;
}

int jsonmsg_get_name(const struct jsonmsg_ctx *c, const json_t *v, const char *path,
		     const char **ret_name)
{
	char buf[JSONMSG_DESCRIBE_MAX + 8];

	if (!json_is_string(v) || json_string_length(v) == 0)
		return jsonmsg_fail(c, path, "expected a non-empty string, got %s",
				    jsonmsg_describe(v, buf, sizeof(buf)));
	*ret_name = json_string_value(v);
	return 0;
}

int jsonmsg_get_enum(const struct jsonmsg_ctx *c, const json_t *v, const char *path,
		     const char *const *names, size_t n, const char *expected, unsigned *ret_index)
{
	char buf[JSONMSG_DESCRIBE_MAX + 8];
	int i = json_is_string(v) ? jsonmsg_key_index(json_string_value(v), names, n) : -1;

	if (i < 0)
		return jsonmsg_fail(c, path, "expected %s, got %s", expected,
				    jsonmsg_describe(v, buf, sizeof(buf)));
	*ret_index = (unsigned)i;
	return 0;
}

int jsonmsg_get_array(const struct jsonmsg_ctx *c, const json_t *v, const char *path, size_t sz,
		      size_t *ret_n, void **ret_elems)
{
	char buf[JSONMSG_DESCRIBE_MAX + 8];
	void *elems = NULL;
	size_t n;

	if (!json_is_array(v))
		return jsonmsg_fail(c, path, "expected an array of objects, got %s",
				    jsonmsg_describe(v, buf, sizeof(buf)));
	n = json_array_size(v);
	if (n) {
		elems = calloc(n, sz);
		if (!elems)
			return jsonmsg_oom(c);
	}
	*ret_n = n;
	*ret_elems = elems;
	return 0;
}

int jsonmsg_check_keys(const struct jsonmsg_ctx *c, const json_t *o, const char *path,
		       const char *const *keys, size_t n, const char *expected)
{
	const char *key;
	json_t *v;

	json_object_foreach ((json_t *)o, key, v) {
		if (jsonmsg_key_index(key, keys, n) < 0)
			return jsonmsg_unknown_key(c, path, key, expected);
	}
	return 0;
}
