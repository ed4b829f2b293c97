/* kat_chunks.c - the known answers of the chunks and reliable extensions
 * (tests/vectors/chunks_vectors.json, written by an independent generator from
 * docs/PROTOCOL.md): every envelope seals and opens to its plaintext and decodes as stated
 * (value, chain value = the envelope tag, messageId), every message reassembles or is voided with its reason,
 * every invalid payload is refused as bad_payload, and every target's advertisement reads as stated
 * (chunks_target_limits: the entry's rule for numbers). */
#include "envelope.h"
#include "ext_chunks.h"
#include "json.h"
#include "kat.h"
#include "keyfile.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

static int failures;

static void check(int ok, const char *name, const char *what)
{
    if (!ok) {
        fprintf(stderr, "FAIL %s: %s\n", name, what);
        failures++;
    }
}

static int same_json(const jval *a, const jval *b)
{
    if (!a || !b)
        return 0;
    char *x = json_dump(a, NULL), *y = json_dump(b, NULL);
    int same = strcmp(x, y) == 0;
    free(x);
    free(y);
    return same;
}

static int sha_is(const jval *data, const char *hex)
{
    uint8_t d[32];
    char got[65];
    crypto_hash_sha256(d, (const uint8_t *)data->str, data->len);
    hex_encode(d, 32, got);
    return hex && strcmp(got, hex) == 0;
}

/* Opens the envelope of v (checking that sealing its fields gives it) into its plaintext. */
static uint8_t *open_vector(const jval *v, const uint8_t key[32], env_header *h, size_t *pt_len)
{
    const char *name = json_get_str(v, "name");
    size_t nonce_len = 0, plain_len = 0, env_len = 0;
    uint8_t *nonce = kat_hex_field(v, "nonce_hex", &nonce_len), *plain = kat_hex_field(v, "plaintext_hex", &plain_len);
    uint8_t *env = kat_hex_field(v, "envelope_hex", &env_len);
    uint64_t type = 0, flags = 0, seq = 0, ts = 0;
    env_header built = {.version = ENV_VERSION, .header_length = ENV_HEADER_LEN};
    int fields = nonce && nonce_len == ENV_NONCE_LEN && plain && env && json_get_u64(v, "type", &type) == 0 &&
                 json_get_u64(v, "flags", &flags) == 0 && json_get_u64(v, "sequence", &seq) == 0 &&
                 json_get_u64(v, "timestamp_ms", &ts) == 0 &&
                 uuid_parse(json_get_str(v, "source_id"), built.source_id) == 0 &&
                 uuid_parse(json_get_str(v, "target_id"), built.target_id) == 0;
    uint8_t *pt = NULL;
    check(fields, name, "malformed vector");
    if (fields) {
        built.type = (uint8_t)type;
        built.flags = (uint16_t)flags;
        built.sequence = seq;
        built.timestamp_ms = ts;
        size_t sealed_len = 0;
        uint8_t *sealed = env_seal(key, &built, nonce, plain, plain_len, &sealed_len);
        check(sealed_len == env_len && memcmp(sealed, env, env_len) == 0, name, "sealing differs from envelope_hex");
        free(sealed);
        const char *reason = env_open(key, env, env_len, ENV_DEFAULT_MAX_PAYLOAD, h, &pt, pt_len);
        check(!reason && *pt_len == plain_len && memcmp(pt, plain, plain_len) == 0, name, "opening differs");
        if (reason) {
            free(pt);
            pt = NULL;
        }
    }
    free(nonce);
    free(plain);
    free(env);
    return pt;
}

static void check_envelope(const jval *v, const uint8_t key[32])
{
    const char *name = json_get_str(v, "name"), *layout = json_get_str(v, "layout");
    env_header h;
    size_t len = 0;
    uint8_t *pt = open_vector(v, key, &h, &len);
    if (!pt || !layout)
        return;
    jval *p = NULL;
    chunk_piece *piece = NULL;
    if (strcmp(layout, "v1") == 0) {
        p = json_parse((const char *)pt, len, NULL, 0);
        const char *id = p ? json_get_str(p, "messageId") : NULL;
        check(chunks_valid_id(id) && strcmp(id, json_get_str(v, "messageId")) == 0 && (h.flags & ENV_FLAG_RELIABLE),
              name, "reliable messageId");
    } else {
        const char *reason = chunks_decode(h.type, h.flags, pt, len, &p, &piece);
        check(!reason, name, "the extension layout does not decode");
        if (!reason && strcmp(layout, "binary") == 0) {
            const jval *data = json_get(p, "data");
            const char *kind = json_get_str(v, "value_kind");
            if (kind && strcmp(kind, "bytes") == 0) {
                size_t want_len = 0;
                uint8_t *want = kat_hex_field(v, "value_hex", &want_len);
                check(data && data->type == J_STR && want && data->len == want_len &&
                          memcmp(data->str, want, want_len) == 0, name, "raw bytes differ");
                free(want);
            } else {
                check(same_json(data, json_get(v, "value")), name, "JSON value differs");
            }
        } else if (!reason) { /* the chain value is the envelope's tag: its last 16 bytes */
            const char *env = json_get_str(v, "envelope_hex"), *chain = json_get_str(v, "chain");
            check(env && chain && strlen(env) >= 32 && strcmp(env + strlen(env) - 32, chain) == 0, name,
                  "the chain value is not the envelope's tag");
        }
    }
    chunk_piece_free(piece);
    json_free(p);
    free(pt);
}

static const jval *by_name(const jval *envelopes, const char *name)
{
    for (size_t i = 0; i < envelopes->n; i++)
        if (strcmp(json_get_str(envelopes->items[i], "name"), name) == 0)
            return envelopes->items[i];
    return NULL;
}

static void check_message(const jval *m, const jval *envelopes, const uint8_t key[32])
{
    const char *name = json_get_str(m, "name"), *outcome = json_get_str(m, "outcome");
    const jval *list = json_get(m, "envelopes");
    reasm_t r;
    reasm_init(&r, CHUNKS_MAX_MESSAGE, CHUNKS_BUDGET_TOTAL, CHUNKS_BUDGET_SENDER, CHUNKS_TIMEOUT_MS);
    reasm_step st = {0}, first_refusal = {0};
    int completes = 0, refusals = 0, type = 0;
    for (size_t i = 0; list && i < list->n; i++) {
        const jval *v = by_name(envelopes, list->items[i]->str);
        env_header h;
        size_t len = 0;
        uint8_t *pt = v ? open_vector(v, key, &h, &len) : NULL;
        jval *p = NULL;
        chunk_piece *piece = NULL;
        size_t chain_len = 0;
        uint8_t *chain = v ? kat_hex_field(v, "chain", &chain_len) : NULL;
        if (pt && chain && chain_len == ENV_TAG_LEN && !chunks_decode(h.type, h.flags, pt, len, &p, &piece)) {
            memcpy(piece->chain, chain, ENV_TAG_LEN);
            type = h.type;
            json_free(st.payload);
            reasm_feed(&r, "billing", h.source_id, h.type, h.flags, p, piece, 0, &st);
            completes += st.kind == REASM_COMPLETE;
            if (st.kind == REASM_REFUSED && !refusals++)
                first_refusal = st;
        } else {
            check(0, name, "a chunk of the message does not open or decode");
        }
        json_free(p);
        free(pt);
        free(chain);
    }
    if (outcome && strcmp(outcome, "delivered") == 0) {
        check(completes == 1 && st.kind == REASM_COMPLETE, name, "not delivered whole exactly once");
        const jval *value = st.payload ? json_get(st.payload, chunks_value_field(type)) : NULL;
        const char *kind = json_get_str(m, "value_kind");
        uint64_t size = 0, count = 0;
        json_get_u64(m, "size", &size);
        json_get_u64(m, "chunks", &count);
        if (kind && strcmp(kind, "bytes") == 0)
            check(value && value->type == J_STR && sha_is(value, json_get_str(m, "value_sha256")), name, "bytes");
        else
            check(same_json(value, json_get(m, "value")), name, "JSON value differs");
        check(st.size == size && st.count == count, name, "size or chunk count");
        check(st.payload && strcmp(json_get_str(st.payload, "messageId"), json_get_str(m, "messageId")) == 0, name,
              "messageId");
    } else {
        const char *want = json_get_str(m, "reason");
        check(completes == 0, name, "a voided message was delivered");
        check(refusals && want && strcmp(first_refusal.reason, want) == 0, name, "not voided with the stated reason");
    }
    json_free(st.payload);
    reasm_free(&r);
}

static void check_invalid(const jval *c, const uint8_t key[32])
{
    const char *name = json_get_str(c, "name");
    size_t env_len = 0, len = 0;
    uint8_t *env = kat_hex_field(c, "envelope_hex", &env_len), *pt = NULL;
    env_header h;
    const char *reason = env ? env_open(key, env, env_len, ENV_DEFAULT_MAX_PAYLOAD, &h, &pt, &len) : "no envelope";
    jval *p = NULL;
    chunk_piece *piece = NULL;
    if (!reason && (h.flags & (ENV_FLAG_BINARY | ENV_FLAG_CHUNK))) {
        reason = chunks_decode(h.type, h.flags, pt, len, &p, &piece);
    } else if (!reason) { /* a reliable message must carry a messageId */
        p = json_parse((const char *)pt, len, NULL, 0);
        reason = (h.flags & ENV_FLAG_RELIABLE) && !(p && chunks_valid_id(json_get_str(p, "messageId")))
                     ? "bad_payload" : NULL;
    }
    const char *want = json_get_str(c, "reason");
    check(reason && want && strcmp(reason, want) == 0, name, "not refused with the stated reason");
    chunk_piece_free(piece);
    json_free(p);
    free(pt);
    free(env);
}

/* A target's entry -> speaks chunks, the envelope payload limit and the largest message. */
static void check_advertisement(const jval *c)
{
    const char *name = json_get_str(c, "name"), *entry_text = json_get_str(c, "entry");
    const jval *want = json_get(c, "expect");
    uint64_t own_payload = 0, own_max = 0, want_limit = 0, want_most = 0, limit = 0, most = 0;
    jval *entry = entry_text ? json_parse(entry_text, strlen(entry_text), NULL, 0) : NULL;
    const jval *speaks = want ? json_get(want, "speaks") : NULL;
    int fields = entry && speaks && speaks->type == J_BOOL && json_get_u64(c, "own_max_payload", &own_payload) == 0 &&
                 json_get_u64(c, "own_max_message", &own_max) == 0 &&
                 json_get_u64(want, "envelopeLimit", &want_limit) == 0 && json_get_u64(want, "maxMessage", &want_most) == 0;
    check(fields, name, "malformed advertisement case");
    if (fields) {
        check(chunks_target_limits(entry, own_payload, own_max, &limit, &most) == speaks->boolean, name, "speaks");
        check(limit == want_limit, name, "envelope limit");
        check(most == want_most, name, "largest message");
    }
    json_free(entry);
}

int kat_chunks_run(const char *path)
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
    const jval *envelopes = doc ? json_get(doc, "envelopes") : NULL, *messages = doc ? json_get(doc, "messages") : NULL;
    const jval *invalid = doc ? json_get(doc, "invalid") : NULL, *key_file = doc ? json_get(doc, "key_file") : NULL;
    const jval *adverts = doc ? json_get(doc, "advertisement") : NULL;
    uint8_t key[32];
    if (!envelopes || envelopes->type != J_ARR || !messages || messages->type != J_ARR || !invalid ||
        invalid->type != J_ARR || !adverts || adverts->type != J_ARR || !key_file || key_file->type != J_STR ||
        keyfile_parse(key_file->str, key_file->len, key, err, sizeof err) != 0) {
        fprintf(stderr, "error: %s is not a chunks vector file (%s)\n", path, err);
        json_free(doc);
        return 2;
    }
    int passed = 0, failed = 0;
    for (size_t k = 0; k < 4; k++) {
        const jval *list = k == 0 ? envelopes : k == 1 ? messages : k == 2 ? invalid : adverts;
        for (size_t i = 0; i < list->n; i++) {
            failures = 0;
            if (k == 0)
                check_envelope(list->items[i], key);
            else if (k == 1)
                check_message(list->items[i], envelopes, key);
            else if (k == 2)
                check_invalid(list->items[i], key);
            else
                check_advertisement(list->items[i]);
            failures ? failed++ : passed++;
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    json_free(doc);
    return failed == 0 && passed > 0 ? 0 : 1;
}
