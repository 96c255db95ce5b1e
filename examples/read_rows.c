/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The smallest C reader: attach to a pipeline of sluiced by name and count its rows.
 *
 *   cc read_rows.c $(pkg-config --cflags --libs sluice) -o read_rows
 *   ./read_rows NAME [SOCKET]
 *
 * Prints "rows N batches M". Exit 0 at the end of the stream, 1 on an error (said on stderr).
 */
#include <inttypes.h>
#include <stdio.h>

#include <sluice/sluice.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s NAME [SOCKET]\n", argv[0]);
		return 2;
	}
	struct sluice_error err = { 0 };
	struct sluice_client *c;
	if (sluice_connect(argc > 2 ? argv[2] : NULL, &c, &err) < 0) {
		fprintf(stderr, "connect: %s\n", err.msg);
		return 1;
	}
	struct sluice_attach_opts o;
	sluice_attach_opts_init(&o);
	o.name = argv[1];
	struct sluice_reader *r;
	if (sluice_attach(c, &o, &r, &err) < 0) {
		fprintf(stderr, "attach: %s\n", err.msg);
		sluice_disconnect(c);
		return 1;
	}
	uint64_t rows = 0, batches = 0;
	struct sluice_batch *b;
	int rc;
	while ((rc = sluice_next(r, -1, &b, &err)) == 1) {
		rows += sluice_batch_rows(b);
		batches++;
		sluice_batch_release(b);
	}
	if (rc < 0)
		fprintf(stderr, "next: %s\n", err.msg);
	else
		printf("rows %" PRIu64 " batches %" PRIu64 "\n", rows, batches);
	sluice_detach(r);
	sluice_disconnect(c);
	return rc < 0;
}
