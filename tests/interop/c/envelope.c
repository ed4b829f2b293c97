/* envelope.c - see envelope.h */
#include "util.h"
#include "envelope.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

static const char *const TYPE_NAMES[] = {"UNKNOWN",     "MESSAGE",   "SPC_REQUEST",
                                         "SPC_RESPONSE", "EVENT",     "DISCOVERY",
                                         "HEARTBEAT",   "ERROR",     "ACK"};

const char *env_type_name(int type)
{
    return (type >= 1 && type <= 8) ? TYPE_NAMES[type] : TYPE_NAMES[0];
}

static void put_be(uint8_t *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        p[i] = (uint8_t)(v & 0xff);
        v >>= 8;
    }
}

static uint64_t get_be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

void env_header_encode(const env_header *h, uint8_t out[ENV_HEADER_LEN])
{
    out[0] = h->version;
    out[1] = h->type;
    put_be(out + 2, h->flags, 2);
    put_be(out + 4, h->header_length, 4);
    put_be(out + 8, h->sequence, 8);
    put_be(out + 16, h->timestamp_ms, 8);
    put_be(out + 24, h->payload_size, 8);
    memcpy(out + 32, h->source_id, 16);
    memcpy(out + 48, h->target_id, 16);
}

void env_header_decode(const uint8_t in[ENV_HEADER_LEN], env_header *h)
{
    h->version = in[0];
    h->type = in[1];
    h->flags = (uint16_t)get_be(in + 2, 2);
    h->header_length = (uint32_t)get_be(in + 4, 4);
    h->sequence = get_be(in + 8, 8);
    h->timestamp_ms = get_be(in + 16, 8);
    h->payload_size = get_be(in + 24, 8);
    memcpy(h->source_id, in + 32, 16);
    memcpy(h->target_id, in + 48, 16);
}

uint8_t *env_seal(const uint8_t key[ENV_KEY_LEN], env_header *h,
                  const uint8_t nonce[ENV_NONCE_LEN], const uint8_t *payload,
                  size_t payload_len, size_t *out_len)
{
    size_t total = ENV_OVERHEAD + payload_len;
    uint8_t *out = xmalloc(total);
    h->payload_size = payload_len;
    env_header_encode(h, out);
    memcpy(out + ENV_HEADER_LEN, nonce, ENV_NONCE_LEN);
    unsigned long long clen = 0;
    crypto_aead_chacha20poly1305_ietf_encrypt(out + ENV_HEADER_LEN + ENV_NONCE_LEN, &clen,
                                              payload, payload_len, out, ENV_HEADER_LEN, NULL,
                                              nonce, key);
    *out_len = total;
    return out;
}

const char *env_open(const uint8_t key[ENV_KEY_LEN], const uint8_t *data, size_t len,
                     uint64_t max_payload, env_header *h, uint8_t **payload,
                     size_t *payload_len)
{
    if (len > ENV_OVERHEAD + max_payload)
        return "too_large";
    if (len < ENV_OVERHEAD)
        return "bad_size";
    env_header_decode(data, h);
    if (h->payload_size > max_payload)
        return "too_large";
    if (len != ENV_OVERHEAD + h->payload_size)
        return "bad_size";
    if (h->version != ENV_VERSION || h->header_length != ENV_HEADER_LEN)
        return "bad_version";
    size_t plen = (size_t)h->payload_size;
    uint8_t *pt = xmalloc(plen + 1);
    unsigned long long mlen = 0;
    if (crypto_aead_chacha20poly1305_ietf_decrypt(
            pt, &mlen, NULL, data + ENV_HEADER_LEN + ENV_NONCE_LEN, plen + ENV_TAG_LEN, data,
            ENV_HEADER_LEN, data + ENV_HEADER_LEN, key) != 0) {
        free(pt);
        return "bad_tag";
    }
    pt[plen] = '\0';
    *payload = pt;
    *payload_len = plen;
    return NULL;
}

void env_filename(char *out, size_t outlen, const char *sender, const uint8_t source_id[16],
                  uint64_t seq, const uint8_t nonce[ENV_NONCE_LEN])
{
    char id_hex[9], nonce_hex[9];
    hex_encode(source_id, 4, id_hex);
    hex_encode(nonce, 4, nonce_hex);
    snprintf(out, outlen, "%s.%s.%020llu.%s.env", sender, id_hex, (unsigned long long)seq,
             nonce_hex);
}

static int is_hex8(const char *s, size_t n)
{
    if (n != 8)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr("0123456789abcdefABCDEF", s[i]) || !s[i])
            return 0;
    return 1;
}

int env_parse_filename(const char *fn, char *sender, uint64_t *seq)
{
    const char *part[5];
    size_t plen[5];
    const char *p = fn;
    for (int i = 0; i < 5; i++) {
        const char *dot = strchr(p, '.');
        if (i < 4 && !dot)
            return -1;
        if (i == 4 && dot)
            return -1;
        part[i] = p;
        plen[i] = dot ? (size_t)(dot - p) : strlen(p);
        p = dot ? dot + 1 : p + plen[i];
    }
    if (plen[0] < 1 || plen[0] > NAME_MAX_LEN || !is_hex8(part[1], plen[1]) ||
        plen[2] != 20 || !is_hex8(part[3], plen[3]) || plen[4] != 3 ||
        memcmp(part[4], "env", 3) != 0)
        return -1;
    memcpy(sender, part[0], plen[0]);
    sender[plen[0]] = '\0';
    if (!name_valid(sender))
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < 20; i++) {
        char c = part[2][i];
        if (c < '0' || c > '9')
            return -1;
        unsigned d = (unsigned)(c - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *seq = v;
    return 0;
}
