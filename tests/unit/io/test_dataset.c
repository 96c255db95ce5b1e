/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for io/dataset.c: the "dir" walker and the "list" reader, in temporary dirs. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/unit/skip.h"
#include <zlib.h>

#include "io/crc32c.h"
#include "io/dataset.h"

#define MANIFEST_JSON                                                                         \
	"{\"compression\": null, \"allow_var_len\": false, \"features\": [{\"name\": \"x\", " \
	"\"dtype\": \"int64\", \"shape\": [], \"deserialize_type\": \"int\"}]}\n"

/* The per-test temporary directory (its realpath), removed by the teardown. */
struct tmp {
	char dir[1024];
};

static int setup(void **state)
{
	const char *t = getenv("TMPDIR");
	char tmpl[PATH_MAX], *real = NULL;
	struct tmp *tmp = calloc(1, sizeof(*tmp));

	if (!tmp)
		return -1;
	snprintf(tmpl, sizeof(tmpl), "%s/test_dataset.XXXXXX", t && *t ? t : "/tmp");
	if (mkdtemp(tmpl))
		real = realpath(tmpl, NULL);
	if (!real || strlen(real) >= sizeof(tmp->dir)) {
		free(real);
		free(tmp);
		return -1;
	}
	memcpy(tmp->dir, real, strlen(real) + 1);
	free(real);
	*state = tmp;
	return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	if (flag == FTW_DP || flag == FTW_D)
		chmod(path, 0700);
	return remove(path);
}

static int teardown(void **state)
{
	struct tmp *tmp = *state;
	int r = nftw(tmp->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);

	free(tmp);
	return r;
}

/* DIR/rel (built into out). */
static const char *at(void **state, const char *rel, char *out)
{
	struct tmp *tmp = *state;

	snprintf(out, PATH_MAX, "%s/%s", tmp->dir, rel);
	return out;
}

/* Write content to DIR/rel, creating parent directories. */
static void put(void **state, const char *rel, const char *content)
{
	char p[PATH_MAX];
	char *s;
	FILE *f;

	at(state, rel, p);
	for (s = strchr(p + strlen(((struct tmp *)*state)->dir) + 1, '/'); s;
	     s = strchr(s + 1, '/')) {
		*s = '\0';
		if (mkdir(p, 0755) < 0)
			assert_int_equal(errno, EEXIST);
		*s = '/';
	}
	f = fopen(p, "w");
	assert_non_null(f);
	assert_true(fputs(content, f) >= 0);
	assert_int_equal(fclose(f), 0);
}

/* A TFRecord file of n records ("rec0", "rec1", ...): plain, or gzip/zlib compressed. */
static void put_framed(void **state, const char *rel, enum tfr_compression c, int n)
{
	uint8_t buf[4096], out[8192];
	size_t len = 0;
	char p[PATH_MAX];

	for (int i = 0; i < n; i++) {
		char data[16];
		uint64_t dl = (uint64_t)snprintf(data, sizeof(data), "rec%d", i);
		uint32_t hc, dc;
		memcpy(buf + len, &dl, 8); /* little-endian hosts only, as the test machines are */
		hc = crc32c_mask(crc32c(buf + len, 8));
		memcpy(buf + len + 8, &hc, 4);
		memcpy(buf + len + 12, data, dl);
		dc = crc32c_mask(crc32c(data, dl));
		memcpy(buf + len + 12 + dl, &dc, 4);
		len += 16 + dl;
	}
	const uint8_t *w = buf;
	uLongf wl = len;
	if (c != TFR_COMPRESSION_NONE) {
		z_stream z;
		memset(&z, 0, sizeof(z));
		assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED,
					      c == TFR_COMPRESSION_GZIP ? 16 + MAX_WBITS
									: MAX_WBITS,
					      8, Z_DEFAULT_STRATEGY),
				 Z_OK);
		z.next_in = buf;
		z.avail_in = (uInt)len;
		z.next_out = out;
		z.avail_out = sizeof(out);
		assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
		wl = sizeof(out) - z.avail_out;
		deflateEnd(&z);
		w = out;
	}
	put(state, rel, "");
	FILE *f = fopen(at(state, rel, p), "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(w, 1, wl, f), wl);
	assert_int_equal(fclose(f), 0);
}

static void mkdirs(void **state, const char *rel)
{
	char p[PATH_MAX];

	assert_int_equal(mkdir(at(state, rel, p), 0755), 0);
}

static void link_to(void **state, const char *target, const char *rel)
{
	char p[PATH_MAX];

	assert_int_equal(symlink(target, at(state, rel, p)), 0);
}

static void set_mtime(void **state, const char *rel, time_t sec, long nsec)
{
	struct timespec ts[2] = { { sec, nsec }, { sec, nsec } };
	char p[PATH_MAX];

	assert_int_equal(utimensat(AT_FDCWD, at(state, rel, p), ts, 0), 0);
}

static struct dataset *open_dir_ok(void **state)
{
	struct io_error err = { .msg = "untouched" };
	struct dataset *ds = NULL;
	int r = dataset_open_dir(((struct tmp *)*state)->dir, NULL, &ds, &err);

	if (r)
		print_message("error %d: %s\n", r, err.msg);
	assert_int_equal(r, 0);
	assert_string_equal(err.msg, "untouched");
	return ds;
}

static void open_dir_err(void **state, int want, const char *want_msg)
{
	struct io_error err = { { 0 } };
	struct dataset *ds = (struct dataset *)&err;
	int r = dataset_open_dir(((struct tmp *)*state)->dir, NULL, &ds, &err);

	if (r != want || !strstr(err.msg, want_msg))
		print_message("got %d \"%s\"\nwant %d \"%s\"\n", r, err.msg, want, want_msg);
	assert_int_equal(r, want);
	assert_non_null(strstr(err.msg, want_msg));
	assert_ptr_equal(ds, (struct dataset *)&err);
}

/* File i of ds is DIR/rel. */
static void assert_file(void **state, const struct dataset *ds, size_t i, const char *rel)
{
	char p[PATH_MAX];

	assert_true(i < ds->n_files);
	assert_string_equal(ds->files[i].path, at(state, rel, p));
}

/* ---- dir ---- */

static void test_dir_recursive_sorted(void **state)
{
	struct dataset *ds;

	put(state, "__manifest__.json", MANIFEST_JSON);
	put(state, "b.tfrecords", "12345");
	put(state, "a/x.tfrecords", "1");
	put(state, "a.tfrecords", "");
	put(state, "B.tfrecords", "22");
	put(state, "a/deep/er/c.TFRecords", "333");
	put(state, "notes.txt", "not data");
	put(state, "a/x.tfrecords.gz", "not data either");
	put(state, "a/tfrecords", "no dot");
	set_mtime(state, "b.tfrecords", 1600000000, 123456789);
	ds = open_dir_ok(state);
	assert_int_equal(ds->n_files, 5);
	/* Byte order: 'B' < 'a', and "a.tfrecords" < "a/..." because '.' < '/'. */
	assert_file(state, ds, 0, "B.tfrecords");
	assert_file(state, ds, 1, "a.tfrecords");
	assert_file(state, ds, 2, "a/deep/er/c.TFRecords");
	assert_file(state, ds, 3, "a/x.tfrecords");
	assert_file(state, ds, 4, "b.tfrecords");
	assert_int_equal(ds->files[0].size, 2);
	assert_int_equal(ds->files[1].size, 0);
	assert_int_equal(ds->files[2].size, 3);
	assert_int_equal(ds->files[4].size, 5);
	assert_int_equal(ds->files[4].mtime_ns, 1600000000123456789LL);
	assert_non_null(ds->manifest);
	assert_int_equal(ds->manifest->n_features, 1);
	assert_string_equal(ds->manifest->features[0].name, "x");
	dataset_destroy(ds);
}

static void test_dir_hidden_skipped(void **state)
{
	struct dataset *ds;

	put(state, "__manifest__.json", MANIFEST_JSON);
	put(state, ".hidden.tfrecords", "h");
	put(state, ".git/objects.tfrecords", "h");
	put(state, "sub/.tmp.tfrecords", "h");
	put(state, "sub/ok.tfrecords", "ok");
	ds = open_dir_ok(state);
	assert_int_equal(ds->n_files, 1);
	assert_file(state, ds, 0, "sub/ok.tfrecords");
	dataset_destroy(ds);
}

static void test_dir_path_given_with_slashes(void **state)
{
	struct io_error err = { { 0 } };
	struct dataset *ds = NULL;
	char p[PATH_MAX];

	put(state, "__manifest__.json", MANIFEST_JSON);
	put(state, "d/a.tfrecords", "a");
	snprintf(p, sizeof(p), "%s//d/..//", ((struct tmp *)*state)->dir);
	assert_int_equal(dataset_open_dir(p, NULL, &ds, &err), 0);
	assert_int_equal(ds->n_files, 1);
	/* Paths are under the realpath of DIR. */
	assert_file(state, ds, 0, "d/a.tfrecords");
	dataset_destroy(ds);
}

static void test_dir_symlink_loop(void **state)
{
	struct dataset *ds;

	put(state, "__manifest__.json", MANIFEST_JSON);
	put(state, "sub/a.tfrecords", "a");
	link_to(state, "..", "sub/up");	  /* a loop back to the root */
	link_to(state, ".", "sub/self");  /* a loop onto itself */
	link_to(state, "sub", "z-alias"); /* a second way into sub, later in byte order */
	link_to(state, "loop2", "loop1"); /* links that never resolve */
	link_to(state, "loop1", "loop2");
	ds = open_dir_ok(state);
	assert_int_equal(ds->n_files, 1);
	assert_file(state, ds, 0, "sub/a.tfrecords");
	dataset_destroy(ds);
}

static void test_dir_symlink_followed(void **state)
{
	struct tmp *tmp = *state;
	char other[PATH_MAX + 16], target[PATH_MAX + 32];
	struct dataset *ds;
	FILE *f;

	/* A directory outside DIR, linked in: its files appear under the link's path. */
	snprintf(other, sizeof(other), "%s.outside", tmp->dir);
	assert_int_equal(mkdir(other, 0755), 0);
	snprintf(target, sizeof(target), "%s/o.tfrecords", other);
	f = fopen(target, "w");
	assert_non_null(f);
	fputs("outside", f);
	fclose(f);
	put(state, "__manifest__.json", MANIFEST_JSON);
	link_to(state, other, "ext");
	link_to(state, target, "file-link.tfrecords");
	ds = open_dir_ok(state);
	assert_int_equal(ds->n_files, 2);
	assert_file(state, ds, 0, "ext/o.tfrecords");
	assert_file(state, ds, 1, "file-link.tfrecords");
	assert_int_equal(ds->files[0].size, 7);
	assert_int_equal(ds->files[1].size, 7);
	dataset_destroy(ds);
	assert_int_equal(unlink(target), 0);
	assert_int_equal(rmdir(other), 0);
}

static void test_dir_real_tfrecord_linked(void **state)
{
	const char *dir = sl_testdata_dir();
	char target[PATH_MAX];
	struct dataset *ds;
	struct stat st;

	if (!dir)
		SL_SKIP("[testdata] no ../shared/testdata (SLUICE_SHARED_DIR)");
	/* A real TensorFlow-written file (SOURCES.md #11, 130 bytes), linked, never copied. */
	snprintf(target, sizeof(target), "%s/pwnall+tfrecord__testdata_singles.tfrecords", dir);
	if (stat(target, &st) < 0)
		SL_SKIP("[testdata] %s is missing", target);
	put(state, "__manifest__.json", MANIFEST_JSON);
	link_to(state, target, "singles.tfrecords");
	ds = open_dir_ok(state);
	assert_int_equal(ds->n_files, 1);
	assert_int_equal(ds->files[0].size, 130);
	assert_int_equal(ds->files[0].mtime_ns,
			 (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec);
	dataset_destroy(ds);
}

static void test_dir_broken_data_link(void **state)
{
	put(state, "__manifest__.json", MANIFEST_JSON);
	put(state, "a.tfrecords", "a");
	link_to(state, "gone", "other"); /* ignored: not data */
	link_to(state, "gone", "x.tfrecords");
	open_dir_err(state, -ENOENT, "/x.tfrecords: No such file or directory");
}

static void test_dir_data_not_regular(void **state)
{
	char p[PATH_MAX];

	put(state, "__manifest__.json", MANIFEST_JSON);
	put(state, "dir.tfrecords/inner.tfrecords", "i"); /* a directory is walked, not read */
	assert_int_equal(mkfifo(at(state, "pipe.tfrecords", p), 0644), 0);
	open_dir_err(state, -EINVAL, "/pipe.tfrecords: not a regular file");
	assert_int_equal(unlink(p), 0);
	{
		struct dataset *ds = open_dir_ok(state);

		assert_int_equal(ds->n_files, 1);
		assert_file(state, ds, 0, "dir.tfrecords/inner.tfrecords");
		dataset_destroy(ds);
	}
}

static void test_dir_no_files(void **state)
{
	struct tmp *tmp = *state;
	char want[PATH_MAX + 64];

	put(state, "__manifest__.json", MANIFEST_JSON);
	put(state, "data.tfrecord", "text, not framed");
	mkdirs(state, "empty");
	put_framed(state, "compressed.tfrecord.gz", TFR_COMPRESSION_GZIP, 2); /* not: none */
	snprintf(want, sizeof(want),
		 "%s: no TFRecord files found (searched recursively: *.tfrecords and files that "
		 "start with a TFRecord frame)",
		 tmp->dir);
	open_dir_err(state, -ENOENT, want);
}

/* The default rule: every file that starts with a TFRecord frame, whatever its name. */
static void test_dir_framed_files(void **state)
{
	char p[PATH_MAX];

	put(state, "__manifest__.json", MANIFEST_JSON);
	put_framed(state, "train.tfrecord", TFR_COMPRESSION_NONE, 3);
	put_framed(state, "sub/train-00000-of-00002", TFR_COMPRESSION_NONE, 1);
	put_framed(state, "part.data", TFR_COMPRESSION_NONE, 0); /* empty: a shard of none */
	put(state, "damaged.tfrecords", "named as data: read, and reported, not left out");
	put(state, "README.md", "# not data\n");
	put(state, "dataset_info.json", "{}");
	put(state, "short", "0123456789"); /* shorter than a header */
	put_framed(state, "other.tfrecord.gz", TFR_COMPRESSION_GZIP, 1);
	struct dataset *ds = open_dir_ok(state);
	assert_int_equal(ds->n_files, 4);
	assert_string_equal(ds->files[0].path, at(state, "damaged.tfrecords", p));
	assert_string_equal(ds->files[1].path, at(state, "part.data", p));
	assert_string_equal(ds->files[2].path, at(state, "sub/train-00000-of-00002", p));
	assert_string_equal(ds->files[3].path, at(state, "train.tfrecord", p));
	dataset_destroy(ds);
}

/* In a compressed dataset the framing is looked for after inflating the first bytes. */
static void test_dir_framed_compressed(void **state)
{
	char p[PATH_MAX];

	put(state, "__manifest__.json",
	    "{\"compression\": \"gzip\", \"allow_var_len\": false, \"features\": []}");
	put_framed(state, "a.tfrecord.gz", TFR_COMPRESSION_GZIP, 2);
	put_framed(state, "b-00001-of-00002", TFR_COMPRESSION_GZIP, 0);
	put_framed(state, "plain.tfrecord", TFR_COMPRESSION_NONE, 2); /* not gzip */
	put_framed(state, "z.tfrecord", TFR_COMPRESSION_ZLIB, 2);     /* not gzip */
	put(state, "notes.txt", "text");
	struct dataset *ds = open_dir_ok(state);
	assert_int_equal(ds->n_files, 2);
	assert_string_equal(ds->files[0].path, at(state, "a.tfrecord.gz", p));
	assert_string_equal(ds->files[1].path, at(state, "b-00001-of-00002", p));
	dataset_destroy(ds);
}

static void test_dir_pattern(void **state)
{
	struct tmp *tmp = *state;
	struct io_error err = { { 0 } };
	struct dataset *ds = NULL;
	char p[PATH_MAX], want[PATH_MAX + 64];

	put(state, "__manifest__.json", MANIFEST_JSON);
	put(state, "train-0", "anything the pattern names is data");
	put_framed(state, "train-1", TFR_COMPRESSION_NONE, 1);
	put_framed(state, "eval-0", TFR_COMPRESSION_NONE, 1);	   /* framed, not matched */
	put_framed(state, "sub/train-2", TFR_COMPRESSION_NONE, 1); /* '*' stops at '/' */
	put_framed(state, "x.tfrecords", TFR_COMPRESSION_NONE, 1);
	assert_int_equal(dataset_open_dir(tmp->dir, "train-*", &ds, &err), 0);
	assert_int_equal(ds->n_files, 2);
	assert_string_equal(ds->files[0].path, at(state, "train-0", p));
	assert_string_equal(ds->files[1].path, at(state, "train-1", p));
	dataset_destroy(ds);
	assert_int_equal(dataset_open_dir(tmp->dir, "*/train-*", &ds, &err), 0);
	assert_int_equal(ds->n_files, 1);
	assert_string_equal(ds->files[0].path, at(state, "sub/train-2", p));
	dataset_destroy(ds);
	ds = NULL;
	assert_int_equal(dataset_open_dir(tmp->dir, "test-*", &ds, &err), -ENOENT);
	snprintf(want, sizeof(want), "%s: no file matches the pattern \"test-*\"", tmp->dir);
	assert_string_equal(err.msg, want);
	assert_null(ds);
	/* a broken link the pattern names is an error, not skipped */
	link_to(state, "nowhere", "train-9");
	assert_int_equal(dataset_open_dir(tmp->dir, "train-*", &ds, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "/train-9: No such file or directory"));
}

static void test_dir_no_manifest(void **state)
{
	put(state, "a.tfrecords", "a");
	open_dir_err(state, -ENOENT, "/__manifest__.json: No such file or directory");
}

static void test_dir_bad_manifest(void **state)
{
	put(state, "__manifest__.json",
	    "{\"compression\": \"snappy\", \"allow_var_len\": false, "
	    "\"features\": []}");
	put(state, "a.tfrecords", "a");
	open_dir_err(state, -EINVAL,
		     "/__manifest__.json: compression: expected \"zlib\", \"gzip\" or null, got "
		     "\"snappy\"");
}

static void test_dir_missing(void **state)
{
	struct io_error err = { { 0 } };
	struct dataset *ds = NULL;
	char p[PATH_MAX];

	assert_int_equal(dataset_open_dir(at(state, "nope", p), NULL, &ds, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "/nope: No such file or directory"));
	assert_null(ds);
	put(state, "file", "x");
	assert_int_equal(dataset_open_dir(at(state, "file", p), NULL, &ds, &err), -ENOTDIR);
	assert_null(ds);
}

static void test_dir_unreadable_subdir(void **state)
{
	char p[PATH_MAX];

	if (geteuid() == 0)
		SL_SKIP("[nonroot] running as root: permissions are not enforced "
			"(meson's dataset_nonroot runs this as nobody)");
	put(state, "__manifest__.json", MANIFEST_JSON);
	put(state, "locked/a.tfrecords", "a");
	assert_int_equal(chmod(at(state, "locked", p), 0), 0);
	open_dir_err(state, -EACCES, "/locked: Permission denied");
	assert_int_equal(chmod(p, 0755), 0);
}

/* ---- list ---- */

static int open_list(void **state, const char *list_rel, struct dataset **ds, struct io_error *err)
{
	char m[PATH_MAX], l[PATH_MAX];

	return dataset_open_list(at(state, "m.json", m), at(state, list_rel, l), ds, err);
}

static void open_list_err(void **state, const char *list_rel, int want, const char *want_msg)
{
	struct io_error err = { { 0 } };
	struct dataset *ds = (struct dataset *)&err;
	int r = open_list(state, list_rel, &ds, &err);

	if (r != want || !strstr(err.msg, want_msg))
		print_message("got %d \"%s\"\nwant %d \"%s\"\n", r, err.msg, want, want_msg);
	assert_int_equal(r, want);
	assert_non_null(strstr(err.msg, want_msg));
	assert_ptr_equal(ds, (struct dataset *)&err);
}

static void test_list_basic(void **state)
{
	struct io_error err = { { 0 } };
	struct dataset *ds = NULL;
	char list[3 * PATH_MAX], abs_c[PATH_MAX];

	put(state, "m.json", MANIFEST_JSON);
	put(state, "lists/data/b.tfrecord", "bb");
	put(state, "lists/a.rec", "a");
	put(state, "c.data", "ccc");
	snprintf(list, sizeof(list),
		 "# training files\n"
		 "\n"
		 "  data/b.tfrecord  \r\n"
		 "a.rec\n"
		 "   # indented comment\n"
		 "\t%s\n"
		 "\n",
		 at(state, "c.data", abs_c));
	put(state, "lists/files.txt", list);
	assert_int_equal(open_list(state, "lists/files.txt", &ds, &err), 0);
	/* List order is kept; any file name is accepted. */
	assert_int_equal(ds->n_files, 3);
	assert_file(state, ds, 0, "lists/data/b.tfrecord");
	assert_file(state, ds, 1, "lists/a.rec");
	assert_file(state, ds, 2, "c.data");
	assert_int_equal(ds->files[0].size, 2);
	assert_int_equal(ds->files[2].size, 3);
	assert_string_equal(ds->manifest->features[0].name, "x");
	dataset_destroy(ds);
}

static void test_list_relative_list_path(void **state)
{
	struct io_error err = { { 0 } };
	struct dataset *ds = NULL;
	char cwd[PATH_MAX];
	int r;

	put(state, "m.json", MANIFEST_JSON);
	put(state, "sub/d.tfrecords", "d");
	put(state, "sub/l.txt", "d.tfrecords\n");
	put(state, "l2.txt", "sub/d.tfrecords"); /* no newline at the end */
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_int_equal(chdir(((struct tmp *)*state)->dir), 0);
	r = dataset_open_list("m.json", "sub/l.txt", &ds, &err);
	if (r == 0) {
		assert_int_equal(ds->n_files, 1);
		assert_file(state, ds, 0, "sub/d.tfrecords");
		dataset_destroy(ds);
		ds = NULL;
		r = dataset_open_list("m.json", "l2.txt", &ds, &err);
	}
	assert_int_equal(chdir(cwd), 0);
	assert_int_equal(r, 0);
	assert_file(state, ds, 0, "sub/d.tfrecords");
	dataset_destroy(ds);
}

static void test_list_missing_file_names_line(void **state)
{
	char want[2 * PATH_MAX + 64], l[PATH_MAX], d[PATH_MAX];

	put(state, "m.json", MANIFEST_JSON);
	put(state, "a.tfrecords", "a");
	put(state, "list.txt", "a.tfrecords\n# c\n\nmissing.tfrecords\n");
	snprintf(want, sizeof(want), "%s:4: %s: No such file or directory",
		 at(state, "list.txt", l), at(state, "missing.tfrecords", d));
	open_list_err(state, "list.txt", -ENOENT, want);
}

static void test_list_duplicate(void **state)
{
	char want[2 * PATH_MAX + 64], l[PATH_MAX], d[PATH_MAX];

	put(state, "m.json", MANIFEST_JSON);
	put(state, "a.tfrecords", "a");
	put(state, "b.tfrecords", "b");
	put(state, "list.txt", "a.tfrecords\nb.tfrecords\n\nb.tfrecords\n");
	snprintf(want, sizeof(want), "%s:4: %s: listed twice (first on line 2)",
		 at(state, "list.txt", l), at(state, "b.tfrecords", d));
	open_list_err(state, "list.txt", -EINVAL, want);
}

static void test_list_empty(void **state)
{
	put(state, "m.json", MANIFEST_JSON);
	put(state, "list.txt", "# nothing\n\n   \n");
	open_list_err(state, "list.txt", -ENOENT, "/list.txt: no data files listed");
}

static void test_list_url_rejected(void **state)
{
	put(state, "m.json", MANIFEST_JSON);
	put(state, "list.txt", "gs://bucket/a.tfrecords\n");
	open_list_err(state, "list.txt", -EINVAL,
		      "/list.txt:1: gs://bucket/a.tfrecords: URLs are not supported (local files "
		      "only)");
}

static void test_list_directory_entry(void **state)
{
	put(state, "m.json", MANIFEST_JSON);
	mkdirs(state, "d");
	put(state, "list.txt", "d\n");
	open_list_err(state, "list.txt", -EISDIR, "/list.txt:1: ");
	open_list_err(state, "list.txt", -EISDIR, "/d: not a regular file");
}

static void test_list_nul_byte(void **state)
{
	char p[PATH_MAX];
	FILE *f;

	put(state, "m.json", MANIFEST_JSON);
	f = fopen(at(state, "list.txt", p), "w");
	assert_non_null(f);
	assert_int_equal(fwrite("a\0b\n", 1, 4, f), 4);
	assert_int_equal(fclose(f), 0);
	open_list_err(state, "list.txt", -EINVAL, "/list.txt:1: contains a NUL byte");
}

static void test_list_missing_list_or_manifest(void **state)
{
	put(state, "a.tfrecords", "a");
	put(state, "list.txt", "a.tfrecords\n");
	open_list_err(state, "list.txt", -ENOENT, "/m.json: No such file or directory");
	put(state, "m.json", MANIFEST_JSON);
	open_list_err(state, "nolist.txt", -ENOENT, "/nolist.txt: No such file or directory");
	put(state, "m.json", "{}");
	open_list_err(state, "list.txt", -EINVAL, "/m.json: compression: required key is missing");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_dir_recursive_sorted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_hidden_skipped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_path_given_with_slashes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_symlink_loop, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_symlink_followed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_real_tfrecord_linked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_broken_data_link, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_data_not_regular, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_no_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_framed_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_framed_compressed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_pattern, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_no_manifest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_bad_manifest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_missing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_unreadable_subdir, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list_basic, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list_relative_list_path, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list_missing_file_names_line, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list_duplicate, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list_empty, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list_url_rejected, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list_directory_entry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list_nul_byte, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list_missing_list_or_manifest, setup,
						teardown),
	};

	return SL_RUN_GROUP(tests, NULL, NULL);
}
