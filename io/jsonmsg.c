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
