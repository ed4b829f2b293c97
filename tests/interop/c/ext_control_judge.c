/* ext_control_judge.c - the `control` extension without the node (see ext_control.h): keys and
 * fingerprints, the judgement of a control payload (steps 6-17 of docs/PROTOCOL.md "### control",
 * each marked with its number), the envelope's control checks (steps 4-5), and `kat-control`. */
#define _GNU_SOURCE
#include "ext_control.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#define FLAG_CONTROL 0x0040u
#define MAX_MS 9007199254740992ull /* 2^53 */

/* Both strings are followed by one 0x00 byte: sizeof counts it. */
static const char SIGNING_DOMAIN[] = "SPEED-CONTROL-V1";
static const char FINGERPRINT_DOMAIN[] = "SPEED-OPERATOR-FINGERPRINT";

/* ---------- keys ---------- */

static void fingerprint(const uint8_t key[32], char out[CONTROL_FP_LEN + 1])
{
    crypto_hash_sha256_state st;
    uint8_t h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_init(&st);
    crypto_hash_sha256_update(&st, (const uint8_t *)FINGERPRINT_DOMAIN, sizeof FINGERPRINT_DOMAIN);
    crypto_hash_sha256_update(&st, key, 32);
    crypto_hash_sha256_final(&st, h);
    hex_encode(h, CONTROL_FP_LEN / 2, out);
}

/* Exactly `size` bytes of canonical standard base64 (padding, zero unused bits). */
static int b64_exact(const char *s, uint8_t *out, size_t size)
{
    size_t bin_len = 0;
    if (!s || strlen(s) > 4 * ((size + 2) / 3))
        return -1;
    if (sodium_base642bin(out, size, s, strlen(s), NULL, &bin_len, NULL,
                          sodium_base64_VARIANT_ORIGINAL) != 0)
        return -1;
    return bin_len == size ? 0 : -1;
}

control_state *control_state_new(void)
{
    control_state *c = xmalloc(sizeof *c);
    memset(c, 0, sizeof *c);
    c->seen = xmalloc(CONTROL_MAX_REMEMBERED * sizeof *c->seen);
    return c;
}

int control_trust(control_state *c, const char *public_key_b64)
{
    uint8_t key[32];
    if (b64_exact(public_key_b64, key, sizeof key) != 0)
        return -1;
    c->keys = xrealloc(c->keys, (c->nkeys + 1) * sizeof *c->keys);
    memcpy(c->keys[c->nkeys].key, key, sizeof key);
    fingerprint(key, c->keys[c->nkeys].fp);
    c->nkeys++;
    return 0;
}

void control_state_free(control_state *c)
{
    if (!c)
        return;
    free(c->keys);
    free(c->seen);
    free(c->dir);
    free(c);
}

/* ---------- the judgement (steps 6-17) ---------- */

static int request_id_valid(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > CONTROL_REQUEST_ID_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-'))
            return 0;
    }
    return 1;
}

static void refuse(control_verdict *v, const char *reason, const char *detail)
{
    v->reason = reason;
    snprintf(v->detail, sizeof v->detail, "%s", detail);
}

/* Arguments exactly as the command takes them; NULL when they fit. allow and revoke take
 * {"peer": NAME}, lift takes {"sender": NAME}, stop and status take {}. */
static const char *arguments_problem(const char *command, const jval *args)
{
    int peer_command = strcmp(command, "allow") == 0 || strcmp(command, "revoke") == 0;
    int lift = strcmp(command, "lift") == 0;
    if (!peer_command && !lift && strcmp(command, "stop") != 0 && strcmp(command, "status") != 0)
        return "unknown command";
    if (!args || args->type != J_OBJ)
        return "arguments must be a JSON object";
    if (!peer_command && !lift)
        return args->n == 0 ? NULL : "this command takes no arguments";
    const char *field = lift ? "sender" : "peer";
    const char *usage = lift ? "lift takes exactly {\"sender\": NODE_NAME}"
                             : "allow and revoke take exactly {\"peer\": NODE_NAME}";
    for (size_t i = 0; i < args->n; i++) /* duplicates of the field are allowed: the last counts */
        if (strcmp(args->keys[i], field) != 0)
            return usage;
    const char *name = json_get_str(args, field);
    return name && name_valid(name) ? NULL : usage;
}

/* Step 11: the signed text's fields and types. NULL when usable. */
static const char *request_problem(const jval *r, uint8_t instance[16])
{
    static const char *const strings[] = {"target", "instance", "requestId", "requester", "command"};
    uint64_t t;
    if (!r || r->type != J_OBJ)
        return "the signed request is not a JSON object";
    for (size_t i = 0; i < sizeof strings / sizeof *strings; i++)
        if (!json_get_str(r, strings[i]))
            return "the signed request lacks a string field";
    if (json_get_u64(r, "issuedAt", &t) != 0 || t >= MAX_MS || json_get_u64(r, "expiresAt", &t) != 0 ||
        t >= MAX_MS)
        return "the signed request lacks integer issuedAt/expiresAt (Unix milliseconds)";
    if (uuid_parse(json_get_str(r, "instance"), instance) != 0)
        return "the signed instance is not a UUID";
    return arguments_problem(json_get_str(r, "command"), json_get(r, "arguments"));
}

static void prune(control_state *c, uint64_t now_ms)
{
    if (now_ms < c->next_prune_ms && c->nseen < CONTROL_MAX_REMEMBERED)
        return;
    c->next_prune_ms = now_ms + 1000;
    size_t kept = 0;
    for (size_t i = 0; i < c->nseen; i++)
        if (c->seen[i].until_ms >= now_ms)
            c->seen[kept++] = c->seen[i];
    c->nseen = kept;
}

void control_judge(control_state *c, const char *name, const uint8_t id[16], const char *from,
                   const jval *p, uint64_t now_ms, control_verdict *v)
{
    memset(v, 0, sizeof *v);
    const char *rid = json_get_str(p, "requestId"); /* 6 */
    if (!rid || !request_id_valid(rid)) {
        refuse(v, "control_malformed", "the payload has no valid requestId");
        return;
    }
    snprintf(v->request_id, sizeof v->request_id, "%s", rid);
    const jval *text = json_get(p, "request"); /* 7 */
    if (!text || text->type != J_STR || text->len > CONTROL_MAX_TEXT || memchr(text->str, 0, text->len)) {
        refuse(v, "control_malformed", "the payload has no request text of at most 4096 bytes");
        return;
    }
    uint8_t key[32], sig[crypto_sign_BYTES];
    if (b64_exact(json_get_str(p, "operator"), key, sizeof key) != 0 || /* 8 */
        b64_exact(json_get_str(p, "signature"), sig, sizeof sig) != 0) {
        refuse(v, "control_unsigned", "the request carries no operator key and signature");
        return;
    }
    fingerprint(key, v->operator_fp);
    int trusted = 0; /* 9: the whole key is compared */
    for (size_t i = 0; i < c->nkeys && !trusted; i++)
        trusted = memcmp(c->keys[i].key, key, sizeof key) == 0;
    if (!trusted) {
        refuse(v, "control_untrusted", "this operator is not trusted by the node");
        return;
    }
    size_t mlen = sizeof SIGNING_DOMAIN + text->len; /* 10: domain, 0x00, the text's bytes */
    uint8_t *m = xmalloc(mlen);
    memcpy(m, SIGNING_DOMAIN, sizeof SIGNING_DOMAIN);
    memcpy(m + sizeof SIGNING_DOMAIN, text->str, text->len);
    int good = crypto_sign_verify_detached(sig, m, mlen, key) == 0;
    free(m);
    if (!good) {
        refuse(v, "control_bad_signature", "the signature does not verify under the operator's key");
        return;
    }
    jval *r = json_parse(text->str, text->len, NULL, 0); /* 11: parsed only now, never re-written */
    uint8_t instance[16];
    const char *problem = request_problem(r, instance);
    if (problem) {
        refuse(v, "control_malformed", problem);
        json_free(r);
        return;
    }
    uint64_t issued = 0, expires = 0;
    json_get_u64(r, "issuedAt", &issued);
    json_get_u64(r, "expiresAt", &expires);
    if (strcmp(json_get_str(r, "target"), name) != 0 || memcmp(instance, id, 16) != 0) /* 12 */
        refuse(v, "control_wrong_target", "the request was signed for another node or another instance of it");
    else if (strcmp(json_get_str(r, "requester"), from) != 0) /* 13 */
        refuse(v, "control_wrong_requester", "the request was signed for another requester");
    else if (strcmp(json_get_str(r, "requestId"), rid) != 0) /* 14 */
        refuse(v, "control_malformed", "the signed requestId differs");
    else if (expires < issued || expires - issued > CONTROL_MAX_LIFETIME_MS)
        refuse(v, "control_malformed", "a request may live at most 300 s");
    else if (issued > now_ms + CONTROL_SKEW_MS || now_ms > expires + CONTROL_SKEW_MS) /* 15 */
        refuse(v, "control_expired", now_ms > expires ? "the request expired by this node's clock"
                                                      : "the request was issued in the future by this node's clock");
    if (v->reason) {
        json_free(r);
        return;
    }
    prune(c, now_ms);
    for (size_t i = 0; i < c->nseen; i++) /* 16 */
        if (strcmp(c->seen[i].id, rid) == 0) {
            refuse(v, "control_replayed", "this request id was already applied");
            json_free(r);
            return;
        }
    if (c->nseen >= CONTROL_MAX_REMEMBERED) { /* 17 */
        refuse(v, "control_refused", "too many unexpired requests are remembered; try again later");
        json_free(r);
        return;
    }
    snprintf(c->seen[c->nseen].id, sizeof c->seen[c->nseen].id, "%s", rid);
    c->seen[c->nseen++].until_ms = expires + CONTROL_SKEW_MS;
    v->request = r;
}

/* ---------- the envelope (steps 4-5) ---------- */

const char *control_check_envelope(const env_header *h, const char *sender, const uint8_t *pt,
                                   size_t pt_len, const char *name, const uint8_t id[16],
                                   control_source_check source_ok, void *ctx, uint64_t now_ms,
                                   uint64_t window_ms, jval **out)
{
    if (h->type != ENV_SPC_REQUEST || !(h->flags & FLAG_CONTROL))
        return "control_malformed";
    jval *p = json_parse((const char *)pt, pt_len, NULL, 0);
    const char *from = p ? json_get_str(p, "from") : NULL, *to = p ? json_get_str(p, "to") : NULL;
    const char *reason = NULL;
    if (!p || p->type != J_OBJ || !from || !to)
        reason = "bad_payload";
    else if (strcmp(from, sender) != 0)
        reason = "unknown_sender";
    else if (strcmp(to, name) != 0 || memcmp(h->target_id, id, 16) != 0)
        reason = "wrong_target";
    else if (!source_ok(ctx, from, h->source_id))
        reason = "unknown_sender";
    else if ((now_ms > h->timestamp_ms ? now_ms - h->timestamp_ms : h->timestamp_ms - now_ms) > window_ms)
        reason = "stale_timestamp";
    if (reason) {
        json_free(p);
        return reason;
    }
    *out = p;
    return NULL;
}

jval *control_operators_json(const control_state *c)
{
    jval *a = json_arr();
    char **fps = xmalloc((c->nkeys ? c->nkeys : 1) * sizeof *fps);
    for (size_t i = 0; i < c->nkeys; i++)
        fps[i] = (char *)c->keys[i].fp;
    for (size_t i = 1; i < c->nkeys; i++) /* sorted, as advertised */
        for (size_t j = i; j > 0 && strcmp(fps[j - 1], fps[j]) > 0; j--) {
            char *t = fps[j];
            fps[j] = fps[j - 1];
            fps[j - 1] = t;
        }
    for (size_t i = 0; i < c->nkeys; i++)
        if (i == 0 || strcmp(fps[i], fps[i - 1]) != 0)
            json_push(a, json_str(fps[i]));
    free(fps);
    return a;
}

/* ---------- the known-answer check ---------- */

typedef struct {
    const char *name;
    uint8_t id[16];
} kat_requester;

static int kat_source_ok(void *ctx, const char *from, const uint8_t src[16])
{
    const kat_requester *r = ctx;
    return strcmp(from, r->name) == 0 && memcmp(src, r->id, 16) == 0;
}

int control_kat(const char *path)
{
    size_t len = 0;
    char *text = read_file_nofollow(path, 4u << 20, &len);
    char err[128];
    jval *doc = text ? json_parse(text, len, err, sizeof err) : NULL;
    free(text);
    if (!doc) {
        fprintf(stderr, "error: cannot read %s\n", path);
        return 2;
    }
    uint8_t key[ENV_KEY_LEN], target_id[16];
    uint64_t now = 0, window = 0;
    kat_requester rq = {json_get_str(json_get(doc, "requester"), "name"), {0}};
    const char *target = json_get_str(json_get(doc, "target"), "name");
    const jval *op = json_get(doc, "operator"), *cases = json_get(doc, "cases");
    control_state *c = control_state_new();
    int failed = 0, passed = 0;
    if (hex_decode(json_get_str(doc, "key_hex"), key, sizeof key) != 0 || !target || !rq.name ||
        uuid_parse(json_get_str(json_get(doc, "target"), "id"), target_id) != 0 ||
        uuid_parse(json_get_str(json_get(doc, "requester"), "id"), rq.id) != 0 ||
        json_get_u64(doc, "now_ms", &now) != 0 || json_get_u64(doc, "window_ms", &window) != 0 ||
        control_trust(c, json_get_str(op, "public_key")) != 0 || !cases || cases->type != J_ARR) {
        fprintf(stderr, "error: %s is not a control vector file\n", path);
        failed++;
    } else if (strcmp(c->keys[0].fp, json_get_str(op, "fingerprint")) != 0) {
        fprintf(stderr, "FAIL operator: fingerprint %s\n", c->keys[0].fp);
        failed++;
    }
    for (size_t i = 0; !failed && i < cases->n; i++) {
        const jval *k = cases->items[i];
        const char *name = json_get_str(k, "name"), *want = json_get_str(k, "reason");
        const char *hex = json_get_str(k, "envelope_hex");
        size_t elen = hex ? strlen(hex) / 2 : 0;
        uint8_t *env = xmalloc(elen + 1), *pt = NULL;
        size_t pt_len = 0;
        env_header h;
        jval *p = NULL;
        char sender[NAME_MAX_LEN + 1] = "";
        uint64_t seq;
        control_verdict v;
        memset(&v, 0, sizeof v);
        const char *got = !hex || hex_decode(hex, env, elen) != 0 ? "bad_vector"
                          : env_parse_filename(json_get_str(k, "filename"), sender, &seq) != 0
                              ? "control_malformed"
                              : env_open(key, env, elen, CONTROL_MAX_PAYLOAD, &h, &pt, &pt_len);
        if (!got)
            got = control_check_envelope(&h, sender, pt, pt_len, target, target_id, kat_source_ok, &rq, now,
                                 window, &p);
        if (!got) {
            control_judge(c, target, target_id, sender, p, now, &v);
            got = v.reason;
        }
        int ok = (!want && !got) || (want && got && strcmp(want, got) == 0);
        if (ok && !got)
            ok = strcmp(v.request_id, json_get_str(k, "request_id")) == 0 &&
                 strcmp(v.operator_fp, json_get_str(op, "fingerprint")) == 0;
        if (!ok) {
            fprintf(stderr, "FAIL %s: expected %s, got %s\n", name, want ? want : "applied",
                    got ? got : "applied");
            failed++;
        } else {
            passed++;
        }
        json_free(v.request);
        json_free(p);
        free(pt);
        free(env);
    }
    printf("%d passed, %d failed\n", passed, failed);
    control_state_free(c);
    json_free(doc);
    return failed ? 1 : 0;
}
