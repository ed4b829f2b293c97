/* ext_durable_kat.c - `kat-durable FILE`: tests/vectors/durable_vectors.json against this node's
 * reading of docs/PROTOCOL.md "### durable": the receipt key, each receipt's MAC input and MAC,
 * the durable envelopes sealed byte for byte, and the durable fields that must be refused. */
#include "ext_durable.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

static int failed_checks;

static void check(int ok, const char *what, const char *name)
{
    if (!ok) {
        fprintf(stderr, "FAIL %s: %s\n", name, what);
        failed_checks++;
    }
}

static int hex_is(const uint8_t *bytes, size_t len, const char *hex)
{
    char *mine = xmalloc(2 * len + 1);
    hex_encode(bytes, len, mine);
    int same = hex && strcmp(mine, hex) == 0;
    free(mine);
    return same;
}

static void check_receipt(const jval *v, const uint8_t rkey[32])
{
    static const char *const names[] = {"", "handled", "failed", "expired"};
    durable_receipt r = {0};
    const char *status = json_get_str(v, "status"), *prev = json_get_str(v, "prev");
    for (int i = 1; i <= 3 && status; i++)
        if (strcmp(status, names[i]) == 0)
            r.status = i;
    int ok = r.status && prev && hex_decode(prev, r.prev, 32) == 0 &&
             json_get_u64(v, "index", &r.index) == 0 && json_get_u64(v, "id", &r.id) == 0 &&
             json_get_u64(v, "time", &r.time) == 0;
    check(ok, "malformed receipt vector", "receipt");
    if (!ok)
        return;
    uint8_t input[DURABLE_INPUT_MAX];
    size_t len = durable_receipt_mac(rkey, json_get_str(v, "receiver"), json_get_str(v, "sender"),
                                     json_get_str(v, "stream"), &r, input);
    check(hex_is(input, len, json_get_str(v, "input_hex")), "MAC input differs", "receipt");
    check(hex_is(r.mac, 32, json_get_str(v, "mac")), "MAC differs", "receipt");
}

static void check_envelope(const jval *v, const uint8_t key[32])
{
    const char *name = json_get_str(v, "name"), *nonce_hex = json_get_str(v, "nonce_hex");
    const jval *text = json_get(v, "payload_utf8");
    env_header h = {.version = ENV_VERSION, .header_length = ENV_HEADER_LEN};
    uint64_t type = 0, flags = 0;
    uint8_t nonce[ENV_NONCE_LEN];
    int ok = name && text && text->type == J_STR && nonce_hex && hex_decode(nonce_hex, nonce, 12) == 0 &&
             json_get_u64(v, "type", &type) == 0 && json_get_u64(v, "flags", &flags) == 0 &&
             json_get_u64(v, "sequence", &h.sequence) == 0 &&
             json_get_u64(v, "timestamp_ms", &h.timestamp_ms) == 0 &&
             uuid_parse(json_get_str(v, "source_id"), h.source_id) == 0 &&
             uuid_parse(json_get_str(v, "target_id"), h.target_id) == 0;
    check(ok, "malformed envelope vector", name ? name : "?");
    if (!ok)
        return;
    h.type = (uint8_t)type;
    h.flags = (uint16_t)flags;
    size_t len = 0;
    uint8_t *env = env_seal(key, &h, nonce, (const uint8_t *)text->str, text->len, &len);
    check(hex_is(env, len, json_get_str(v, "envelope_hex")), "sealed envelope differs", name);
    free(env);
    check((flags & ENV_FLAG_DURABLE) != 0, "the durable flag is not set", name);
    jval *p = json_parse(text->str, text->len, NULL, 0);
    const jval *want = json_get(v, "durable");
    if (want) {
        durable_fields f;
        uint64_t id = 0, base = 0, exp = 0;
        json_get_u64(want, "id", &id);
        json_get_u64(want, "base", &base);
        json_get_u64(want, "expiresAt", &exp);
        check(durable_parse_fields(p, &f) == 0 && f.id == id && f.base == base && f.expires == exp &&
                  strcmp(f.stream, json_get_str(want, "stream")) == 0,
              "durable fields differ", name);
    }
    json_free(p);
}

/* One copy of the vectors' ledger_steps: its outcome and the floor after it. */
static void check_ledger_step(durable_ledger_kat *k, const jval *v)
{
    uint64_t number = 0, id = 0, base = 0, want_floor = 0, floor = 0;
    const char *want = json_get_str(v, "outcome");
    int ok = want && json_get_u64(v, "stream", &number) == 0 && json_get_u64(v, "id", &id) == 0 &&
             json_get_u64(v, "base", &base) == 0;
    check(ok, "malformed ledger step", "ledger_step");
    if (!ok)
        return;
    char stream[33];
    snprintf(stream, sizeof stream, "%032llx", (unsigned long long)number);
    const char *got = durable_ledger_step(k, stream, id, base, &floor);
    check(strcmp(got, want) == 0, "outcome differs", "ledger_step");
    if (json_get_u64(v, "floor", &want_floor) == 0)
        check(floor == want_floor, "floor differs", "ledger_step");
}

int durable_kat_run(const char *path)
{
    size_t len = 0;
    char *text = read_file_nofollow(path, 16u << 20, &len);
    if (!text) {
        fprintf(stderr, "error: cannot read %s: %s\n", path, strerror(errno));
        return 2;
    }
    jval *doc = json_parse(text, len, NULL, 0);
    free(text);
    uint8_t key[32], rkey[32];
    const char *key_hex = doc ? json_get_str(doc, "key_hex") : NULL;
    const jval *receipts = doc ? json_get(doc, "receipts") : NULL, *envs = doc ? json_get(doc, "envelopes") : NULL;
    const jval *bad = doc ? json_get(doc, "invalid_durable_fields") : NULL;
    if (!key_hex || hex_decode(key_hex, key, 32) != 0 || !receipts || receipts->type != J_ARR || !envs ||
        envs->type != J_ARR || !bad || bad->type != J_ARR) {
        fprintf(stderr, "error: %s is not a durable vector file\n", path);
        json_free(doc);
        return 2;
    }
    int passed = 0, failed = 0;
#define COUNT(stmt)                                \
    do {                                           \
        failed_checks = 0;                         \
        stmt;                                      \
        failed_checks ? failed++ : passed++;       \
    } while (0)
    durable_receipt_key(key, rkey);
    COUNT(check(hex_is(rkey, 32, json_get_str(doc, "receipt_key_hex")), "receipt key differs", "receipt_key"));
    for (size_t i = 0; i < receipts->n; i++)
        COUNT(check_receipt(receipts->items[i], rkey));
    for (size_t i = 0; i < envs->n; i++)
        COUNT(check_envelope(envs->items[i], key));
    for (size_t i = 0; i < bad->n; i++) {
        durable_fields f;
        const char *name = json_get_str(bad->items[i], "name");
        COUNT(check(durable_parse_fields(json_get(bad->items[i], "payload"), &f) != 0,
                    "accepted bad durable fields", name ? name : "?"));
    }
    const jval *steps = json_get(doc, "ledger_steps");
    durable_ledger_kat ledger = {0};
    for (size_t i = 0; steps && steps->type == J_ARR && i < steps->n; i++)
        COUNT(check_ledger_step(&ledger, steps->items[i]));
    durable_ledger_free(&ledger);
    COUNT(check(steps && steps->type == J_ARR && steps->n > 0, "no ledger steps", "ledger_steps"));
    printf("%d passed, %d failed\n", passed, failed);
    json_free(doc);
    sodium_memzero(key, sizeof key);
    return failed == 0 && passed > 0 ? 0 : 1;
}
