/* SPDX-License-Identifier: Apache-2.0 */
/* libsluice: a reader's attach options, checked and copied (for attaching and re-attaching). */
#include "client_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int lc_reader_setup(struct sluice_reader *r, const struct sluice_attach_opts *opts,
		    struct sluice_error *err)
{
	struct sluice_attach_opts o;
	bool by_name, by_spec;
	size_t len;

	if (!opts || opts->size == 0)
		return lc_fail(err, -EINVAL, "attach: no options (sluice_attach_opts_init them)");
	sluice_attach_opts_init(&o);
	memcpy(&o, opts, opts->size < sizeof(o) ? opts->size : sizeof(o));
	by_name = o.name && o.name[0];
	by_spec = o.spec_json && o.spec_json[0];
	if (by_name == by_spec)
		return lc_fail(err, -EINVAL, "attach: give a pipeline name or a spec, not %s",
			       by_name ? "both" : "neither");
	if (by_name) {
		len = strlen(o.name);
		if (len > IPC_CTL_NAME_MAX)
			return lc_fail(err, -EINVAL, "attach: the name is %zu bytes, at most %d",
				       len, IPC_CTL_NAME_MAX);
		memcpy(r->opt_name, o.name, len + 1);
	} else {
		len = strlen(o.spec_json);
		if (len > IPC_CTL_MAX_BODY - 512)
			return lc_fail(err, -EMSGSIZE,
				       "attach: the spec is %zu bytes, at most %u "
				       "fit a message",
				       len, IPC_CTL_MAX_BODY - 512);
		r->spec = malloc(len);
		if (!r->spec)
			return lc_fail(err, -ENOMEM, "attach: out of memory");
		memcpy(r->spec, o.spec_json, len);
		r->spec_len = len;
		int rc = lc_spec_dir(o.spec_dir, "attach", &r->spec_dir, err);
		if (rc < 0)
			return rc;
	}
	if ((unsigned)o.mode > SLUICE_MODE_RANK)
		return lc_fail(err, -EINVAL, "attach: mode %u is not broadcast, split or rank",
			       (unsigned)o.mode);
	if (o.mode == SLUICE_MODE_RANK && (o.rank_count == 0 || o.rank_index >= o.rank_count))
		return lc_fail(err, -EINVAL, "attach: rank_index %u must be below rank_count %u",
			       o.rank_index, o.rank_count);
	if (o.state_len > IPC_CTL_STATE_MAX || (o.state_len && !o.state))
		return lc_fail(err, -EINVAL, "attach: a state of %zu bytes (at most %d)",
			       o.state_len, IPC_CTL_STATE_MAX);
	if (o.group && o.group[0]) {
		size_t gl = strlen(o.group);
		if (o.mode == SLUICE_MODE_BROADCAST)
			return lc_fail(err, -EINVAL,
				       "attach: group \"%s\": a broadcast reader is a group of its "
				       "own; a named group reads in split or rank mode",
				       o.group);
		if (gl > IPC_CTL_NAME_MAX)
			return lc_fail(err, -EINVAL, "attach: the group is %zu bytes, at most %d",
				       gl, IPC_CTL_NAME_MAX);
		memcpy(r->group, o.group, gl + 1);
	}
	r->mode = (uint32_t)o.mode;
	r->rank_index = o.mode == SLUICE_MODE_RANK ? o.rank_index : 0;
	r->rank_count = o.mode == SLUICE_MODE_RANK ? o.rank_count : 0;
	if (o.lag_policy > SLUICE_LAG_HOLD ||
	    (o.lag_policy == SLUICE_LAG_CATCH_UP && o.mode != SLUICE_MODE_BROADCAST))
		return lc_fail(err, -EINVAL,
			       "attach: lag_policy %u (0 the daemon's default, 1 catch up, 2 hold; "
			       "catch up for broadcast readers only)",
			       o.lag_policy);
	if ((o.max_lag || o.lag_timeout_ms) &&
	    (o.lag_policy == SLUICE_LAG_HOLD || o.mode != SLUICE_MODE_BROADCAST))
		return lc_fail(err, -EINVAL,
			       "attach: max_lag and lag_timeout_ms bound a broadcast reader that "
			       "does not hold the others back (lag_policy 0 or 1)");
	r->lag_policy = o.mode == SLUICE_MODE_BROADCAST ? o.lag_policy : SLUICE_LAG_DEFAULT;
	r->max_lag = o.max_lag;
	r->lag_timeout_ms = o.lag_timeout_ms;
	r->tries = o.reconnect_tries;
	if (o.state_len)
		memcpy(r->state, o.state, o.state_len);
	r->state_len = o.state_len;
	return 0;
}
