/* envelope.h - SPEED-WIRE-V1 envelope file (section 5): header, seal/open, file name. */
#ifndef SPEED_ENVELOPE_H
#define SPEED_ENVELOPE_H

#include <stddef.h>
#include <stdint.h>

#define ENV_VERSION 1
#define ENV_HEADER_LEN 64
#define ENV_NONCE_LEN 12
#define ENV_TAG_LEN 16
#define ENV_OVERHEAD (ENV_HEADER_LEN + ENV_NONCE_LEN + ENV_TAG_LEN)
#define ENV_KEY_LEN 32
#define ENV_FLAG_ACK 0x0001u
#define ENV_DEFAULT_MAX_PAYLOAD (1024u * 1024u)

enum env_type {
    ENV_MESSAGE = 1,
    ENV_SPC_REQUEST = 2,
    ENV_SPC_RESPONSE = 3,
    ENV_EVENT = 4,
    ENV_DISCOVERY = 5,
    ENV_HEARTBEAT = 6,
    ENV_ERROR = 7,
    ENV_ACK = 8,
};

typedef struct {
    uint8_t version;
    uint8_t type;
    uint16_t flags;
    uint32_t header_length;
    uint64_t sequence;
    uint64_t timestamp_ms;
    uint64_t payload_size;
    uint8_t source_id[16];
    uint8_t target_id[16];
} env_header;

const char *env_type_name(int type); /* "MESSAGE" ... or "UNKNOWN" */

void env_header_encode(const env_header *h, uint8_t out[ENV_HEADER_LEN]);
void env_header_decode(const uint8_t in[ENV_HEADER_LEN], env_header *h);

/* Seals payload under key with the given nonce. h->payload_size is set from payload_len,
 * version and header_length are taken from h as given (normally 1 and 64).
 * Returns a malloc'd envelope of ENV_OVERHEAD + payload_len bytes. */
uint8_t *env_seal(const uint8_t key[ENV_KEY_LEN], env_header *h,
                  const uint8_t nonce[ENV_NONCE_LEN], const uint8_t *payload,
                  size_t payload_len, size_t *out_len);

/* Checks size, version and header length, verifies the tag and decrypts (section 5 / 5.5
 * step 3). Returns NULL on success (payload malloc'd, NUL-terminated) or a rejection reason
 * of section 8: "too_large", "bad_size", "bad_version" or "bad_tag". */
const char *env_open(const uint8_t key[ENV_KEY_LEN], const uint8_t *data, size_t len,
                     uint64_t max_payload, env_header *h, uint8_t **payload,
                     size_t *payload_len);

/* <sender>.<8 hex of source id>.<20-digit seq>.<8 hex of nonce>.env */
#define ENV_FILENAME_MAX (NAME_MAX_LEN + 1 + 8 + 1 + 20 + 1 + 8 + 4 + 1)
void env_filename(char *out, size_t outlen, const char *sender, const uint8_t source_id[16],
                  uint64_t seq, const uint8_t nonce[ENV_NONCE_LEN]);
/* Parses a file name; sender must hold NAME_MAX_LEN+1 bytes. 0 on success. */
int env_parse_filename(const char *fn, char *sender, uint64_t *seq);

#endif
