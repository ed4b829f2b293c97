/* kat.c - see kat.h
 *
 * For every vector: the header built from the fields equals header_hex, sealing the payload
 * with the given key and nonce equals envelope_hex, opening envelope_hex gives the payload
 * and the same header fields, and the file name matches. Every `invalid` entry must be
 * rejected with the stated reason. */
#include "kat.h"
#include "envelope.h"
#include "json.h"
#include "keyfile.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures_in_vector;

static void check(int ok, const char *vector, const char *what)
{
    if (!ok) {
        fprintf(stderr, "FAIL %s: %s\n", vector, what);
        failures_in_vector++;
    }
}

uint8_t *kat_hex_field(const jval *o, const char *key, size_t *len)
{
    const char *h = json_get_str(o, key);
    if (!h || strlen(h) % 2)
        return NULL;
    *len = strlen(h) / 2;
    uint8_t *out = xmalloc(*len + 1);
    if (hex_decode(h, out, *len) != 0) {
        free(out);
        return NULL;
    }
    return out;
}

static int u64_field(const jval *o, const char *key, uint64_t *out)
{
    return json_get_u64(o, key, out) == 0;
}

static void check_vector(const jval *v, const uint8_t file_key[32])
{
    const char *name = json_get_str(v, "name");
    if (!name)
        name = "(unnamed)";
    size_t key_len = 0, nonce_len = 0, hdr_len = 0, env_len = 0;
    uint8_t *key = kat_hex_field(v, "key_hex", &key_len);
    uint8_t *nonce = kat_hex_field(v, "nonce_hex", &nonce_len);
    uint8_t *hdr = kat_hex_field(v, "header_hex", &hdr_len);
    uint8_t *env = kat_hex_field(v, "envelope_hex", &env_len);
    const jval *payload = json_get(v, "payload_utf8");
    const char *filename = json_get_str(v, "filename");
    const char *type_name = json_get_str(v, "type_name");
    const char *src = json_get_str(v, "source_id"), *dst = json_get_str(v, "target_id");
    env_header h = {0};
    uint64_t version = 0, type = 0, flags = 0, hlen = 0, seq = 0, ts = 0;
    int fields_ok = key && key_len == 32 && nonce && nonce_len == ENV_NONCE_LEN && hdr &&
                    hdr_len == ENV_HEADER_LEN && env && payload && payload->type == J_STR &&
                    filename && type_name && src && dst && u64_field(v, "version", &version) &&
                    u64_field(v, "type", &type) && u64_field(v, "flags", &flags) &&
                    u64_field(v, "header_length", &hlen) && u64_field(v, "sequence", &seq) &&
                    u64_field(v, "timestamp_ms", &ts) && uuid_parse(src, h.source_id) == 0 &&
                    uuid_parse(dst, h.target_id) == 0;
    check(fields_ok, name, "vector is missing or has malformed fields");
    if (!fields_ok)
        goto out;
    check(memcmp(key, file_key, 32) == 0, name, "key_hex differs from key_file");
    check(strcmp(type_name, env_type_name((int)type)) == 0, name, "type_name");
    h.version = (uint8_t)version;
    h.type = (uint8_t)type;
    h.flags = (uint16_t)flags;
    h.header_length = (uint32_t)hlen;
    h.sequence = seq;
    h.timestamp_ms = ts;
    h.payload_size = payload->len;

    uint8_t built[ENV_HEADER_LEN];
    env_header_encode(&h, built);
    check(memcmp(built, hdr, ENV_HEADER_LEN) == 0, name, "header bytes differ from header_hex");

    size_t sealed_len = 0;
    uint8_t *sealed =
        env_seal(key, &h, nonce, (const uint8_t *)payload->str, payload->len, &sealed_len);
    check(sealed_len == env_len && memcmp(sealed, env, env_len) == 0, name,
          "sealing does not reproduce envelope_hex");
    free(sealed);

    env_header got;
    uint8_t *pt = NULL;
    size_t pt_len = 0;
    const char *reason = env_open(key, env, env_len, ENV_DEFAULT_MAX_PAYLOAD, &got, &pt, &pt_len);
    check(reason == NULL, name, reason ? reason : "open");
    if (!reason) {
        check(pt_len == payload->len && memcmp(pt, payload->str, pt_len) == 0, name,
              "opened payload differs from payload_utf8");
        check(got.version == h.version && got.type == h.type && got.flags == h.flags &&
                  got.header_length == h.header_length && got.sequence == h.sequence &&
                  got.timestamp_ms == h.timestamp_ms && got.payload_size == h.payload_size &&
                  memcmp(got.source_id, h.source_id, 16) == 0 &&
                  memcmp(got.target_id, h.target_id, 16) == 0,
              name, "decoded header fields differ");
        jval *p = json_parse((const char *)pt, pt_len, NULL, 0);
        const char *from = p ? json_get_str(p, "from") : NULL;
        check(p && p->type == J_OBJ && from && json_get_str(p, "to"), name,
              "payload is not a JSON object with from and to");
        if (from) {
            char fn[ENV_FILENAME_MAX];
            env_filename(fn, sizeof fn, from, h.source_id, h.sequence, nonce);
            check(strcmp(fn, filename) == 0, name, "file name differs");
            char sender[NAME_MAX_LEN + 1];
            uint64_t fseq = 0;
            check(env_parse_filename(filename, sender, &fseq) == 0 &&
                      strcmp(sender, from) == 0 && fseq == h.sequence,
                  name, "file name does not parse back");
        }
        json_free(p);
        free(pt);
    }
out:
    free(key);
    free(nonce);
    free(hdr);
    free(env);
}

static void check_invalid(const jval *v, const uint8_t file_key[32])
{
    const char *name = json_get_str(v, "name");
    const char *want = json_get_str(v, "reason");
    if (!name)
        name = "(unnamed invalid)";
    size_t env_len = 0, key_len = 0;
    uint8_t *env = kat_hex_field(v, "envelope_hex", &env_len);
    uint8_t *key = kat_hex_field(v, "key_hex", &key_len);
    check(env && want, name, "invalid entry lacks envelope_hex or reason");
    if (env && want) {
        env_header h;
        uint8_t *pt = NULL;
        size_t pt_len = 0;
        const char *got = env_open(key && key_len == 32 ? key : file_key, env, env_len,
                                   ENV_DEFAULT_MAX_PAYLOAD, &h, &pt, &pt_len);
        free(pt);
        if (!got || strcmp(got, want) != 0) {
            fprintf(stderr, "FAIL %s: expected %s, got %s\n", name, want, got ? got : "accepted");
            failures_in_vector++;
        }
    }
    free(env);
    free(key);
}

int kat_run(const char *path)
{
    size_t len = 0;
    char *text = read_file_nofollow(path, 64u << 20, &len);
    if (!text) {
        fprintf(stderr, "error: cannot read %s: %s\n", path, strerror(errno));
        return 2;
    }
    char err[256] = "";
    jval *doc = json_parse(text, len, err, sizeof err);
    free(text);
    if (!doc || doc->type != J_OBJ) {
        fprintf(stderr, "error: %s is not a JSON object: %s\n", path, err);
        json_free(doc);
        return 2;
    }
    const char *spec = json_get_str(doc, "spec");
    const jval *key_file = json_get(doc, "key_file");
    const jval *vectors = json_get(doc, "vectors");
    const jval *invalid = json_get(doc, "invalid");
    uint8_t file_key[32];
    if (!spec || strcmp(spec, "SPEED-WIRE-V1") != 0 || !key_file || key_file->type != J_STR ||
        keyfile_parse(key_file->str, key_file->len, file_key, err, sizeof err) != 0 ||
        !vectors || vectors->type != J_ARR || (invalid && invalid->type != J_ARR)) {
        fprintf(stderr, "error: %s: bad spec/key_file/vectors/invalid (%s)\n", path, err);
        json_free(doc);
        return 2;
    }
    int passed = 0, failed = 0;
    for (size_t i = 0; i < vectors->n; i++) {
        failures_in_vector = 0;
        check_vector(vectors->items[i], file_key);
        failures_in_vector ? failed++ : passed++;
    }
    for (size_t i = 0; invalid && i < invalid->n; i++) {
        failures_in_vector = 0;
        check_invalid(invalid->items[i], file_key);
        failures_in_vector ? failed++ : passed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    json_free(doc);
    return (failed == 0 && passed > 0) ? 0 : 1;
}
