/* SPDX-License-Identifier: Apache-2.0 */
/* SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104): what authenticates sluiced's kept records. */
#ifndef SLUICE_DAEMON_MAC_H
#define SLUICE_DAEMON_MAC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DMN_SHA256_LEN	32
#define DMN_MAC_KEY_LEN 32

struct dmn_sha256 {
	uint32_t h[8];
	uint64_t len; /* bytes hashed so far */
	uint8_t buf[64];
	size_t n; /* bytes in buf */
};

void dmn_sha256_init(struct dmn_sha256 *s);
void dmn_sha256_update(struct dmn_sha256 *s, const void *data, size_t len);
void dmn_sha256_final(struct dmn_sha256 *s, uint8_t out[DMN_SHA256_LEN]);

/* HMAC-SHA256 of data under key (any length). */
void dmn_hmac_sha256(const uint8_t *key, size_t key_len, const void *data, size_t len,
		     uint8_t out[DMN_SHA256_LEN]);

/* a == b over n bytes, in time that does not depend on where they differ. */
bool dmn_mac_equal(const uint8_t *a, const uint8_t *b, size_t n);

#endif
