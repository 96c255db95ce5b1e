/* SPDX-License-Identifier: Apache-2.0 */
/* Prints the example sluiced.conf that meson installs (every key of config.c's table). */
#include <stdio.h>

#include "config.h"

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: sluiced_conf_example PATH > sluiced.conf\n");
		return 2;
	}
	dmn_config_example(stdout, argv[1]);
	return ferror(stdout) ? 1 : 0;
}
