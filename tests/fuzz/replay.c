/* SPDX-License-Identifier: Apache-2.0 */
/* Plain driver for a fuzz target: runs LLVMFuzzerTestOneInput on every file of the given
 * directories or files, so that every build replays the fuzz corpora (suite fuzz-corpus). */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	size_t cap = 0, len = 0, n;

	if (!f) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	do {
		if (len == cap) {
			uint8_t *nb;

			cap = cap ? cap * 2 : 4096;
			nb = realloc(buf, cap);
			if (!nb) {
				free(buf);
				fclose(f);
				return -1;
			}
			buf = nb;
		}
		n = fread(buf + len, 1, cap - len, f);
		len += n;
	} while (n > 0);
	fclose(f);
	LLVMFuzzerTestOneInput(buf, len);
	free(buf);
	return 0;
}

static int run_path(const char *path, unsigned *count)
{
	struct stat st;
	struct dirent **ents;
	int n, i, rc = 0;

	if (stat(path, &st) < 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		(*count)++;
		return run_file(path);
	}
	n = scandir(path, &ents, NULL, alphasort);
	if (n < 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	for (i = 0; i < n; i++) {
		char sub[4096];

		if (ents[i]->d_name[0] != '.' && rc == 0) {
			snprintf(sub, sizeof(sub), "%s/%s", path, ents[i]->d_name);
			rc = run_path(sub, count);
		}
		free(ents[i]);
	}
	free(ents);
	return rc;
}

int main(int argc, char **argv)
{
	unsigned count = 0;
	int i;

	for (i = 1; i < argc; i++)
		if (run_path(argv[i], &count) < 0)
			return 1;
	printf("replayed %u inputs\n", count);
	if (count == 0) {
		/* a corpus that went missing or empty would otherwise pass: it checked nothing */
		fprintf(stderr, "replay: no input found in the corpus: nothing was checked\n");
		return 1;
	}
	return 0;
}
