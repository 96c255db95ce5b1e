/* SPDX-License-Identifier: Apache-2.0 */
/* scan: read every record of a dataset on N threads, one iox and tfr_reader per thread. */
#include "scan.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sched/sched.h"

#define SCAN_MAX_QUEUED 16
/* Pool mode: chunks a thread keeps in flight on the pool, and the size of one pool task. */
#define SCAN_INFLIGHT	  4
#define SCAN_TASK_RECORDS 64
#define SCAN_TASK_BYTES	  (1u << 20)

/* State shared by the threads of one scan. */
struct scan_shared {
	const struct dataset *ds;
	const struct scan_opts *opts;
	atomic_size_t next_file; /* the next file to hand out */
	atomic_bool stop;	 /* set by a callback error: threads finish their record, leave */
	pthread_mutex_t lock;	 /* protects what follows */
	struct scan_result *res;
	int fail; /* first fatal error (negative errno) */
	struct io_error fail_err;
	struct sched_queue *q;			     /* pool mode: the scan's queue */
	atomic_uint_fast64_t bad_crc, bad_crc_bytes; /* pool mode: records the workers rejected */
};

/* One file being read by a thread: its reader and where its next record starts. */
struct scan_slot {
	bool busy;
	bool dead; /* a sticky error: drop the rest of the file's chunks */
	struct scan_file file;
	struct tfr_reader *rd;
	uint64_t next_offset; /* header offset of the record after the last one returned */
	uint64_t next_index;
};

/*
 * Pool mode: the records framed from one chunk. Those that lie in the chunk point into it (the
 * chunk is released when the batch's tasks are done); those the reader assembled or inflated
 * are copied into the arena. The tasks check each record's data CRC and call opts.fn.
 */
struct scan_batch;

struct scan_task {
	struct scan_batch *b;
	size_t lo, hi;
};

struct scan_batch {
	struct scan_thread *t;
	struct scan_file file;
	struct iox_chunk ch;
	bool has_chunk;
	struct sched_group g;
	struct tfr_record *recs;
	size_t *copy_off; /* SIZE_MAX: in the chunk; else the offset of the bytes in arena */
	size_t n, cap;
	uint8_t *arena;
	size_t arena_len, arena_cap;
	struct scan_task *tasks;
	size_t tasks_cap;
};

struct scan_thread {
	struct scan_shared *sh;
	unsigned id;
	void *ctx;
	pthread_t tid;
	struct scan_counts counts;
	struct iox *iox;
	enum iox_engine engine;
	char fallback[256];
	int rc;
	struct scan_slot slots[SCAN_MAX_QUEUED];
	struct scan_batch batches[SCAN_INFLIGHT]; /* pool mode: a FIFO of batches in flight */
	unsigned b_head, b_count;
	struct scan_batch *cur; /* the batch being filled, or NULL */
};

double scan_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double clock_s(clockid_t id)
{
	struct timespec ts;

	if (clock_gettime(id, &ts) != 0)
		return 0.0;
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double scan_process_cpu_s(void)
{
	return clock_s(CLOCK_PROCESS_CPUTIME_ID);
}

double scan_thread_cpu_s(void)
{
	return clock_s(CLOCK_THREAD_CPUTIME_ID);
}

void scan_opts_init(struct scan_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->size = sizeof(*opts);
	opts->files_queued = 2;
	opts->chunk_len = 1u << 20;
	opts->engine = IOX_ENGINE_AUTO;
	opts->verify_crc = true;
	opts->max_errors = 20;
}

unsigned scan_opts_threads(const struct scan_opts *opts, const struct dataset *ds)
{
	unsigned n;
	long cpus;

	if (opts->threads)
		return opts->threads;
	if (opts->pool) {
		bool compressed =
			ds && ds->manifest && ds->manifest->compression != TFR_COMPRESSION_NONE;
		unsigned w = sched_pool_workers(opts->pool);

		n = compressed ? w : (w + 7) / 8;
		if (ds && ds->n_files && n > ds->n_files)
			n = (unsigned)ds->n_files;
		return n ? n : 1;
	}
	cpus = sysconf(_SC_NPROCESSORS_ONLN);
	return cpus > 0 ? (unsigned)cpus : 1;
}

unsigned scan_opts_contexts(const struct scan_opts *opts, const struct dataset *ds)
{
	return opts->pool ? sched_pool_workers(opts->pool) : scan_opts_threads(opts, ds);
}

static bool error_before(const struct scan_error *a, const struct scan_error *b)
{
	if (a->file_index != b->file_index)
		return a->file_index < b->file_index;
	return a->offset < b->offset;
}

/*
 * Keep the first max_errors errors by (file, offset), whatever order the threads find them in,
 * so that the report does not depend on timing. Called with sh->lock held.
 */
static void keep_error(struct scan_shared *sh, const struct scan_error *e)
{
	struct scan_result *res = sh->res;
	size_t max = sh->opts->max_errors, i;

	res->n_errors++;
	if (!max)
		return;
	if (res->n_kept == max) {
		if (!error_before(e, &res->errors[max - 1]))
			return;
		res->n_kept--;
	}
	i = res->n_kept;
	while (i > 0 && error_before(e, &res->errors[i - 1])) {
		res->errors[i] = res->errors[i - 1];
		i--;
	}
	res->errors[i] = *e;
	res->n_kept++;
}

static void add_error(struct scan_shared *sh, const struct scan_file *f, int code, uint64_t offset,
		      uint64_t record, const struct io_error *ioe, bool file_failed)
{
	struct scan_error e;

	memset(&e, 0, sizeof(e));
	e.file_index = f->index;
	e.record = record;
	e.offset = offset;
	e.code = code;
	if (ioe && ioe->msg[0])
		snprintf(e.msg, sizeof(e.msg), "%s", ioe->msg);
	else
		snprintf(e.msg, sizeof(e.msg), "%s: %s", f->path, strerror(-code));
	pthread_mutex_lock(&sh->lock);
	keep_error(sh, &e);
	if (file_failed)
		sh->res->files_failed++;
	pthread_mutex_unlock(&sh->lock);
}

static void set_fail(struct scan_shared *sh, int code, const struct io_error *ioe)
{
	pthread_mutex_lock(&sh->lock);
	if (!sh->fail) {
		sh->fail = code;
		if (ioe)
			sh->fail_err = *ioe;
		else
			io_error_set(&sh->fail_err, "scan: %s", strerror(-code));
	}
	pthread_mutex_unlock(&sh->lock);
	atomic_store_explicit(&sh->stop, true, memory_order_relaxed);
}

/* Take the next file from the shared index and queue it in this thread's iox. */
static int start_file(struct scan_thread *t, struct scan_slot *s, size_t idx)
{
	const struct dataset_file *df = &t->sh->ds->files[idx];
	int rc;

	rc = tfr_reader_reset(s->rd, df->path);
	if (rc < 0)
		return rc;
	/* Reset clears it; a length past the end is then caught at the header. */
	tfr_reader_set_input_size(s->rd, df->size);
	s->file.path = df->path;
	s->file.index = (uint32_t)idx;
	s->file.size = df->size;
	s->next_offset = 0;
	s->next_index = 0;
	s->dead = false;
	rc = iox_add_file(t->iox, df->path, s);
	if (rc < 0)
		return rc;
	s->busy = true;
	return 0;
}

/* ---- pool mode: framed records go to the pool in batches, one batch per chunk ------------ */

static bool pool_mode(const struct scan_thread *t)
{
	return t->sh->opts->pool != NULL;
}

/* A pool task: check the data CRC of records [lo, hi) of a batch and pass them to opts.fn. */
static void scan_task_run(void *arg)
{
	const struct scan_task *k = arg;
	const struct scan_batch *b = k->b;
	struct scan_shared *sh = b->t->sh;
	const struct scan_opts *o = sh->opts;
	int w = sched_worker_index(o->pool);
	void *ctx = o->thread_ctx && w >= 0 ? o->thread_ctx[w] : NULL;
	struct io_error ioe;

	for (size_t i = k->lo; i < k->hi; i++) {
		const struct tfr_record *rec = &b->recs[i];
		int rc;

		if (atomic_load_explicit(&sh->stop, memory_order_relaxed))
			return;
		ioe.msg[0] = '\0';
		rc = tfr_record_verify(rec, b->file.path, &ioe);
		if (rc < 0) {
			atomic_fetch_add_explicit(&sh->bad_crc, 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&sh->bad_crc_bytes, rec->len,
						  memory_order_relaxed);
			add_error(sh, &b->file, rc, rec->offset, rec->index, &ioe, false);
			continue;
		}
		if (o->fn) {
			rc = o->fn(ctx, &b->file, rec, &ioe);
			if (rc < 0) {
				set_fail(sh, rc, &ioe);
				return;
			}
		}
	}
}

/* Wait for the oldest batch in flight and give its chunk back to the iox. */
static void batch_retire(struct scan_thread *t)
{
	struct scan_batch *b = &t->batches[t->b_head];

	sched_group_wait(&b->g);
	if (b->has_chunk)
		iox_release(t->iox, &b->ch);
	b->has_chunk = false;
	t->b_head = (t->b_head + 1) % SCAN_INFLIGHT;
	t->b_count--;
}

/* Start collecting the records framed from chunk ch (waits for a free batch). */
static void batch_open(struct scan_thread *t, const struct scan_slot *s, const struct iox_chunk *ch)
{
	struct scan_batch *b;

	if (t->b_count == SCAN_INFLIGHT)
		batch_retire(t);
	b = &t->batches[(t->b_head + t->b_count) % SCAN_INFLIGHT];
	b->t = t;
	b->file = s->file;
	b->ch = *ch;
	b->has_chunk = true;
	b->n = 0;
	b->arena_len = 0;
	t->cur = b;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	size_t n = *cap ? *cap : 64;
	void *np;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	np = realloc(*p, n * elem);
	if (!np)
		return -ENOMEM;
	*p = np;
	*cap = n;
	return 0;
}

/*
 * Add a record: in place when it lies in the chunk, else copied (the reader reuses its buffer),
 * with its footer: the worker that checks the data CRC reads the stored one there.
 */
static int batch_add(struct scan_batch *b, const struct tfr_record *rec)
{
	uintptr_t lo = (uintptr_t)b->ch.data, hi = lo + b->ch.len, d = (uintptr_t)rec->data;
	size_t cap = b->cap;

	if (grow((void **)&b->recs, &cap, b->n + 1, sizeof(*b->recs)) < 0)
		return -ENOMEM;
	if (grow((void **)&b->copy_off, &b->cap, b->n + 1, sizeof(*b->copy_off)) < 0)
		return -ENOMEM;
	b->recs[b->n] = *rec;
	if (b->ch.len && d >= lo && d + rec->len + TFR_FOOTER_LEN <= hi) {
		b->copy_off[b->n] = SIZE_MAX;
	} else {
		size_t n = rec->len + TFR_FOOTER_LEN;

		if (grow((void **)&b->arena, &b->arena_cap, b->arena_len + n, 1) < 0)
			return -ENOMEM;
		memcpy(b->arena + b->arena_len, rec->data, n);
		b->copy_off[b->n] = b->arena_len;
		b->arena_len += n;
	}
	b->n++;
	return 0;
}

/* Hand the current batch to the pool, in tasks of about SCAN_TASK_RECORDS / _BYTES. */
static int batch_launch(struct scan_thread *t)
{
	struct scan_batch *b = t->cur;
	size_t i, lo, bytes, n_tasks = 0;

	t->cur = NULL;
	if (!b)
		return 0;
	if (b->n == 0) {
		iox_release(t->iox, &b->ch);
		b->has_chunk = false;
		return 0;
	}
	for (i = 0; i < b->n; i++)
		if (b->copy_off[i] != SIZE_MAX)
			b->recs[i].data = b->arena + b->copy_off[i];
	/* Size the task array first: tasks are spawned with pointers into it. */
	if (grow((void **)&b->tasks, &b->tasks_cap, b->n, sizeof(*b->tasks)) < 0)
		return -ENOMEM;
	for (lo = 0, bytes = 0, i = 0; i < b->n; i++) {
		bytes += b->recs[i].len;
		if (i + 1 == b->n || i + 1 - lo == SCAN_TASK_RECORDS || bytes >= SCAN_TASK_BYTES) {
			b->tasks[n_tasks].b = b;
			b->tasks[n_tasks].lo = lo;
			b->tasks[n_tasks].hi = i + 1;
			n_tasks++;
			lo = i + 1;
			bytes = 0;
		}
	}
	sched_group_init(&b->g, t->sh->q);
	t->b_count++;
	for (i = 0; i < n_tasks; i++) {
		int rc = sched_spawn(&b->g, scan_task_run, &b->tasks[i]);

		if (rc < 0)
			return rc; /* the tasks already spawned finish; batch_retire waits */
	}
	return 0;
}

/*
 * Pull records out of a slot's reader until it wants input or the file ends. Returns 1 when
 * the file is done (end or sticky error), 0 when it needs the next chunk, or a negative errno
 * to stop the scan (callback failure).
 */
static int drain(struct scan_thread *t, struct scan_slot *s)
{
	const struct scan_opts *o = t->sh->opts;
	struct tfr_record rec;
	struct io_error ioe;
	int rc;

	for (;;) {
		ioe.msg[0] = '\0';
		rc = tfr_reader_next(s->rd, &rec, &ioe);
		if (rc == TFR_RECORD) {
			t->counts.records++;
			t->counts.record_bytes += rec.len;
			s->next_offset = rec.offset + TFR_HEADER_LEN + rec.len + TFR_FOOTER_LEN;
			s->next_index = rec.index + 1;
			if (t->cur) {
				rc = batch_add(t->cur, &rec);
				if (rc < 0) {
					io_error_set(&ioe, "scan: out of memory");
					set_fail(t->sh, rc, &ioe);
					return rc;
				}
			} else if (o->fn) {
				rc = o->fn(t->ctx, &s->file, &rec, &ioe);
				if (rc < 0) {
					set_fail(t->sh, rc, &ioe);
					return rc;
				}
			}
			if (atomic_load_explicit(&t->sh->stop, memory_order_relaxed))
				return -ECANCELED;
			continue;
		}
		if (rc == TFR_NEED_INPUT)
			return 0;
		if (rc == TFR_END)
			return 1;
		/*
		 * An error. A data-CRC mismatch is recoverable: the next call goes on past the
		 * record. Every other error is sticky: the rest of the file cannot be framed.
		 */
		add_error(t->sh, &s->file, rc, s->next_offset, s->next_index, &ioe, false);
		if (tfr_reader_failed(s->rd)) {
			pthread_mutex_lock(&t->sh->lock);
			t->sh->res->files_failed++;
			pthread_mutex_unlock(&t->sh->lock);
			s->dead = true;
			return 1;
		}
		/* The next record (if any) says where it starts; until then count this one. */
		s->next_index++;
	}
}

static void finish_slot(struct scan_thread *t, struct scan_slot *s)
{
	s->busy = false;
	t->counts.files++;
}

static void *scan_thread_main(void *arg)
{
	struct scan_thread *t = arg;
	struct scan_shared *sh = t->sh;
	unsigned queued = sh->opts->files_queued, active = 0, i;
	double cpu0 = scan_thread_cpu_s();
	int rc = 0;

	for (;;) {
		struct iox_chunk ch;
		struct io_error ioe;
		struct scan_slot *s;

		/* Keep `queued` files in the iox while there are files left. */
		while (active < queued && !atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
			size_t idx =
				atomic_fetch_add_explicit(&sh->next_file, 1, memory_order_relaxed);

			if (idx >= sh->ds->n_files)
				break;
			for (i = 0; i < queued && t->slots[i].busy; i++)
				;
			rc = start_file(t, &t->slots[i], idx);
			if (rc < 0) {
				set_fail(sh, rc, NULL);
				goto out;
			}
			active++;
		}
		if (!active || atomic_load_explicit(&sh->stop, memory_order_relaxed))
			break;

		ioe.msg[0] = '\0';
		rc = iox_next(t->iox, -1, &ch, &ioe);
		if (rc < 0) {
			set_fail(sh, rc, &ioe);
			goto out;
		}
		if (rc == 0) {
			/* Cannot happen while files are active: the engine lost one. */
			rc = -EIO;
			io_error_set(&ioe, "scan: the read engine ended with %u files open",
				     active);
			set_fail(sh, rc, &ioe);
			goto out;
		}
		rc = 0;
		s = ch.user;
		t->counts.file_bytes += ch.len;
		if (ch.error) {
			if (!s->dead)
				add_error(t->sh, &s->file, ch.error, ch.offset, s->next_index, &ioe,
					  true);
			iox_release(t->iox, &ch);
			finish_slot(t, s);
			active--;
			continue;
		}
		if (s->dead) {
			iox_release(t->iox, &ch);
			if (ch.last) {
				finish_slot(t, s);
				active--;
			}
			continue;
		}
		if (pool_mode(t))
			batch_open(t, s, &ch);
		tfr_reader_feed(s->rd, ch.data, ch.len);
		rc = drain(t, s);
		/*
		 * The reader no longer points into the chunk once it asked for more (or failed);
		 * in pool mode the batch holds it until its records are done.
		 */
		if (!pool_mode(t))
			iox_release(t->iox, &ch);
		if (rc < 0)
			goto out;
		if (rc == 0 && ch.last) {
			tfr_reader_finish(s->rd);
			rc = drain(t, s);
			if (rc < 0)
				goto out;
			if (rc == 0) {
				/* A reader that wants input after finish(): treat as truncated. */
				rc = -EBADMSG;
				io_error_set(&ioe, "%s: the reader wanted input after the end",
					     s->file.path);
				add_error(t->sh, &s->file, rc, s->next_offset, s->next_index, &ioe,
					  true);
			}
			rc = 1;
		}
		if (pool_mode(t)) {
			int lrc = batch_launch(t);

			if (lrc < 0) {
				io_error_set(&ioe, "scan: cannot hand records to the pool: %s",
					     strerror(-lrc));
				set_fail(sh, lrc, &ioe);
				rc = lrc;
				goto out;
			}
		}
		if (rc == 1) {
			/* The file ended (or died) before its last chunk: drop the rest. */
			if (!ch.last)
				s->dead = true;
			else {
				finish_slot(t, s);
				active--;
			}
		}
		rc = 0;
	}
out:
	if (t->cur) {
		/* Stopped while collecting: nothing of this batch was spawned. */
		iox_release(t->iox, &t->cur->ch);
		t->cur->has_chunk = false;
		t->cur = NULL;
	}
	while (t->b_count)
		batch_retire(t);
	t->rc = rc;
	t->counts.cpu_s = scan_thread_cpu_s() - cpu0;
	return NULL;
}

static int thread_init(struct scan_thread *t, struct scan_shared *sh, unsigned id,
		       struct io_error *err)
{
	const struct scan_opts *o = sh->opts;
	struct tfr_reader_opts ro;
	struct iox_opts xo;
	const char *why;
	unsigned i;
	int rc;

	t->sh = sh;
	t->id = id;
	t->ctx = o->thread_ctx ? o->thread_ctx[id] : NULL;

	iox_opts_init(&xo);
	xo.engine = o->engine;
	xo.max_open_files = o->files_queued;
	xo.queue_depth = 4 * o->files_queued;
	if (o->chunk_len)
		xo.chunk_len = o->chunk_len;
	xo.num_buffers = xo.queue_depth + xo.max_open_files;
	xo.pread_threads = 2;
	rc = iox_create(&xo, &t->iox, err);
	if (rc < 0)
		return rc;
	t->engine = iox_engine_used(t->iox);
	why = iox_fallback_reason(t->iox);
	snprintf(t->fallback, sizeof(t->fallback), "%s", why ? why : "");

	tfr_reader_opts_init(&ro);
	ro.compression = sh->ds->manifest ? sh->ds->manifest->compression : TFR_COMPRESSION_NONE;
	ro.verify_crc = o->verify_crc;
	ro.defer_data_crc = o->pool != NULL; /* checked by the worker that decodes the record */
	for (i = 0; i < o->files_queued; i++) {
		t->slots[i].rd = tfr_reader_create(&ro);
		if (!t->slots[i].rd) {
			io_error_set(err, "scan: out of memory");
			return -ENOMEM;
		}
	}
	return 0;
}

static void thread_fini(struct scan_thread *t)
{
	unsigned i;

	iox_destroy(t->iox);
	for (i = 0; i < SCAN_MAX_QUEUED; i++)
		tfr_reader_destroy(t->slots[i].rd);
	for (i = 0; i < SCAN_INFLIGHT; i++) {
		free(t->batches[i].recs);
		free(t->batches[i].copy_off);
		free(t->batches[i].arena);
		free(t->batches[i].tasks);
	}
}

int scan_dataset(const struct dataset *ds, const struct scan_opts *opts, struct scan_result *ret,
		 struct io_error *err)
{
	struct scan_opts o = *opts;
	struct scan_shared sh;
	struct scan_thread *th;
	unsigned n, i, started = 0;
	double t0, c0;
	int rc = 0;

	memset(ret, 0, sizeof(*ret));
	n = scan_opts_threads(&o, ds);
	if (!o.files_queued)
		o.files_queued = 1;
	if (o.files_queued > SCAN_MAX_QUEUED)
		o.files_queued = SCAN_MAX_QUEUED;

	memset(&sh, 0, sizeof(sh));
	sh.ds = ds;
	sh.opts = &o;
	atomic_init(&sh.next_file, 0);
	atomic_init(&sh.stop, false);
	pthread_mutex_init(&sh.lock, NULL);
	sh.res = ret;
	atomic_init(&sh.bad_crc, 0);
	atomic_init(&sh.bad_crc_bytes, 0);
	if (o.pool) {
		rc = sched_queue_create(o.pool, 1, -1, &sh.q);
		if (rc < 0) {
			io_error_set(err, "scan: cannot make a pool queue: %s", strerror(-rc));
			pthread_mutex_destroy(&sh.lock);
			return rc;
		}
	}

	ret->threads = n;
	ret->per_thread = calloc(n, sizeof(*ret->per_thread));
	ret->errors = calloc(o.max_errors ? o.max_errors : 1, sizeof(*ret->errors));
	th = calloc(n, sizeof(*th));
	if (!ret->per_thread || !ret->errors || !th) {
		io_error_set(err, "scan: out of memory");
		rc = -ENOMEM;
		goto out;
	}
	for (i = 0; i < n; i++) {
		rc = thread_init(&th[i], &sh, i, err);
		if (rc < 0)
			goto out;
	}
	ret->engine = th[0].engine;
	snprintf(ret->fallback_reason, sizeof(ret->fallback_reason), "%s", th[0].fallback);

	t0 = scan_now_s();
	c0 = scan_process_cpu_s();
	for (i = 0; i < n; i++) {
		rc = -pthread_create(&th[i].tid, NULL, scan_thread_main, &th[i]);
		if (rc < 0) {
			set_fail(&sh, rc, NULL);
			break;
		}
		started++;
	}
	for (i = 0; i < started; i++)
		pthread_join(th[i].tid, NULL);
	ret->wall_s = scan_now_s() - t0;
	ret->process_cpu_s = scan_process_cpu_s() - c0;

	for (i = 0; i < n; i++) {
		struct scan_counts *c = &ret->per_thread[i];

		*c = th[i].counts;
		ret->total.files += c->files;
		ret->total.records += c->records;
		ret->total.file_bytes += c->file_bytes;
		ret->total.record_bytes += c->record_bytes;
		ret->total.cpu_s += c->cpu_s;
	}
	/* Pool mode: records the workers rejected (data CRC) were counted when framed. */
	ret->total.records -= atomic_load_explicit(&sh.bad_crc, memory_order_relaxed);
	ret->total.record_bytes -= atomic_load_explicit(&sh.bad_crc_bytes, memory_order_relaxed);
	if (sh.fail) {
		rc = sh.fail;
		if (err)
			*err = sh.fail_err;
	}
out:
	if (th) {
		for (i = 0; i < n; i++)
			thread_fini(&th[i]);
		free(th);
	}
	sched_queue_destroy(sh.q);
	pthread_mutex_destroy(&sh.lock);
	return rc;
}

void scan_result_fini(struct scan_result *r)
{
	if (!r)
		return;
	free(r->per_thread);
	free(r->errors);
	memset(r, 0, sizeof(*r));
}
