/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Dropped pipelines are destroyed off the server thread: joining a driver that is stuck (a read
 * that never returns, a dead NFS server's) must not stop sluiced answering everyone else, nor
 * stopping (issue 37: "nothing a user can name blocks a thread that others need").
 */
#include "pipelines_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"

struct reap {
	struct dmn_registry *d;
	struct dmn_pipeline *pl;
	struct dmn_keep *keep; /* its kept record: forget it, or orphan it (resumable) */
	bool resumable;
	bool done;     /* destroyed (under lock) */
	bool reported; /* said to be stuck */
	uint64_t since_ms;
	uint8_t fp[16];
	char name[IPC_CTL_NAME_MAX + 1];
	struct reap *next;
};

/* One list for the process: a daemon has one registry (tests make more: they share it). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER; /* a reap is done */
static struct reap *reaps;

/* Take r off the list and free it. Under lock. */
static void unlink_reap(struct reap *r)
{
	for (struct reap **pp = &reaps; *pp; pp = &(*pp)->next) {
		if (*pp == r) {
			*pp = r->next;
			break;
		}
	}
	free(r);
}

static void *reap_main(void *arg)
{
	struct reap *r = arg;
	dmn_pipeline_destroy(r->d, r->pl); /* joins its driver: as long as that takes */
	if (r->keep && r->resumable)
		dmn_keep_orphan(r->keep, r->fp, r->name, dmn_now_ns());
	else if (r->keep)
		dmn_keep_forget(r->keep, r->fp, r->name);
	pthread_mutex_lock(&lock);
	if (r->reported)
		dmn_log("pipeline %s: stopped at last, %llu ms after it was dropped", r->name,
			(unsigned long long)(dmn_now_ms() - r->since_ms));
	r->done = true;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	return NULL;
}

/* Wait on cond until r is done (r NULL: every reap) or until deadline_ms. Under lock. */
static bool wait_done(struct reap *r, uint64_t deadline_ms)
{
	for (;;) {
		bool all = true;
		for (struct reap *x = reaps, *next; x; x = next) {
			next = x->next;
			if (x->done && x != r)
				unlink_reap(x);
			else if (!x->done && (!r || x == r))
				all = false;
		}
		if (all)
			return true;
		uint64_t now = dmn_now_ms();
		if (now >= deadline_ms)
			return false;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t ns = (uint64_t)ts.tv_nsec + (deadline_ms - now) * 1000000;
		ts.tv_sec += (time_t)(ns / 1000000000);
		ts.tv_nsec = (long)(ns % 1000000000);
		pthread_cond_timedwait(&cond, &lock, &ts);
	}
}

void dmn_reap(struct dmn_registry *d, struct dmn_pipeline *pl, struct dmn_keep *keep,
	      bool resumable)
{
	struct reap *r = calloc(1, sizeof(*r));
	pthread_attr_t attr;
	pthread_t t;
	if (r) {
		*r = (struct reap){ .d = d,
				    .pl = pl,
				    .keep = keep,
				    .resumable = resumable,
				    .since_ms = dmn_now_ms() };
		memcpy(r->fp, pl->fp, sizeof(r->fp));
		snprintf(r->name, sizeof(r->name), "%s", pl->name);
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_mutex_lock(&lock);
	int e = r ? pthread_create(&t, &attr, reap_main, r) : ENOMEM;
	pthread_attr_destroy(&attr);
	if (e) { /* no thread: here, then (it was so before) */
		pthread_mutex_unlock(&lock);
		dmn_warn("pipeline %s: no thread to stop it on (%s): stopping it here", pl->name,
			 strerror(e));
		if (r) {
			reap_main(r); /* r is on no list */
			free(r);
		} else {
			dmn_pipeline_destroy(d, pl);
		}
		return;
	}
	r->next = reaps;
	reaps = r;
	/* the common case stays as it was: what it held is given back before the caller goes on */
	if (wait_done(r, r->since_ms + DMN_REAP_WAIT_MS))
		unlink_reap(r);
	pthread_mutex_unlock(&lock);
}

void dmn_reap_report(void)
{
	uint64_t now = dmn_now_ms();
	pthread_mutex_lock(&lock);
	for (struct reap *r = reaps; r; r = r->next) {
		if (r->done || r->reported || now - r->since_ms < DMN_REAP_REPORT_MS)
			continue;
		r->reported = true;
		dmn_warn("pipeline %s: its engine has not stopped %llu ms after it was dropped (a "
			 "read that does not return?): it is left to a thread of its own, and what "
			 "it "
			 "holds stays charged to --memory until it stops",
			 r->name, (unsigned long long)(now - r->since_ms));
	}
	pthread_mutex_unlock(&lock);
}

bool dmn_reap_wait(uint64_t timeout_ms)
{
	pthread_mutex_lock(&lock);
	bool all = wait_done(NULL, dmn_now_ms() + timeout_ms);
	for (struct reap *r = reaps; r && !all; r = r->next)
		if (!r->done)
			dmn_warn("pipeline %s: its engine did not stop within %llu ms of sluiced's "
				 "stop (%llu ms since it was dropped): abandoned",
				 r->name, (unsigned long long)timeout_ms,
				 (unsigned long long)(dmn_now_ms() - r->since_ms));
	pthread_mutex_unlock(&lock);
	return all;
}
