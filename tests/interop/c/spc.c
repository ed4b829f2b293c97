/* spc.c - demo services and SPC (sections 5.6, 6), waits for responses and ACKs, and the
 * dispatch of accepted envelopes (section 5.5 step 6). */
#include "node.h"
#include "node_parts.h"

#include <stdlib.h>
#include <string.h>

#include <sodium.h>

jval *node_base_payload(const node_t *n, const char *to)
{
    jval *p = json_obj();
    json_set(p, "from", json_str(n->name));
    json_set(p, "to", json_str(to));
    return p;
}

/* ---------- the callee (section 5.6) ---------- */

static int has_service(const node_t *n, const char *s)
{
    for (size_t i = 0; i < n->nservices; i++)
        if (strcmp(n->services[i], s) == 0)
            return 1;
    return 0;
}

/* 1 when the request carries a deadline (timestamp + timeoutMs) that has passed. */
static int deadline_passed(const env_header *h, const jval *p, uint64_t *deadline)
{
    const jval *t = json_get(p, "timeoutMs");
    if (!t || t->type != J_NUM || !(t->num > 0))
        return 0; /* no usable timeoutMs (missing, 0, negative, not a number): no deadline */
    *deadline = h->timestamp_ms + (uint64_t)(t->num < 9007199254740992.0 ? t->num : 9007199254740992.0);
    return now_wall_ms() > *deadline;
}

/* Runs a demo service inline; the result, or NULL with *code and *msg set. */
static jval *run_service(const char *service, const jval *args, const char **code, char **msg)
{
    if (strcmp(service, "echo") == 0)
        return json_clone(args);
    const jval *amount = json_get(args, "amount");
    if (!amount || amount->type != J_NUM) {
        *code = "INVALID_ARGUMENTS";
        *msg = xasprintf("calculateTax needs a numeric 'amount'");
        return NULL;
    }
    jval *result = json_obj();
    json_set(result, "tax", json_num(amount->num * 0.18));
    return result;
}

static void handle_spc_request(node_t *n, const env_header *h, const char *from, const jval *p)
{
    const char *rid = json_get_str(p, "requestId");
    const char *service = json_get_str(p, "service");
    const jval *args = json_get(p, "arguments");
    jval *result = NULL;
    const char *code = NULL;
    char *msg = NULL;
    uint64_t deadline = 0;
    /* the sender is authorized (step 1); no service has an own access policy */
    if (!has_service(n, service)) {
        code = "SERVICE_NOT_FOUND";
        msg = xasprintf("service '%s' is not registered on node '%s'", service, n->name);
    } else if (!args || args->type != J_OBJ) {
        code = "INVALID_ARGUMENTS";
        msg = xasprintf("arguments of '%s' must be a JSON object", service);
    } else if (deadline_passed(h, p, &deadline)) { /* never run after the deadline */
        code = "TIMEOUT";
        msg = xasprintf("the request's deadline passed %llu ms before '%s' could start",
                        (unsigned long long)(now_wall_ms() - deadline), service);
    } else {
        result = run_service(service, args, &code, &msg);
        jval *l = json_obj();
        json_set(l, "event", json_str("served"));
        json_set(l, "from", json_str(from));
        json_set(l, "service", json_str(service));
        json_set(l, "requestId", json_str(rid));
        node_emit(n->events, l);
    }
    node_respond(n, from, rid, code, msg, result);
    free(msg);
}

void node_respond(node_t *n, const char *to, const char *rid, const char *code, const char *msg,
                  jval *result)
{
    jval *resp = node_base_payload(n, to);
    json_set(resp, "requestId", json_str(rid));
    if (code) {
        json_set(resp, "status", json_str("ERROR"));
        json_set(resp, "errorCode", json_str(code));
        json_set(resp, "errorMessage", json_str(msg));
    } else {
        json_set(resp, "status", json_str("SUCCESS"));
        json_set(resp, "result", result);
    }
    char err[512] = "";
    if (node_deliver(n, to, ENV_SPC_RESPONSE, 0, resp, NULL, err, sizeof err) != DELIVER_OK) {
        jval *l = json_obj();
        json_set(l, "event", json_str("response_not_delivered"));
        json_set(l, "to", json_str(to));
        json_set(l, "error", json_str(err));
        node_report_info(l);
    }
    json_free(resp);
}

/* ---------- waits for responses and ACKs ---------- */

static pending_t *add_wait(node_t *n, wait_kind kind, const char *tag, const char *target,
                           long timeout_ms)
{
    n->pending = xrealloc(n->pending, (n->npending + 1) * sizeof *n->pending);
    pending_t *w = &n->pending[n->npending++];
    memset(w, 0, sizeof *w);
    w->kind = kind;
    w->tag = tag ? xstrdup(tag) : NULL;
    snprintf(w->target, sizeof w->target, "%s", target);
    w->deadline_ms = now_mono_ms() + timeout_ms;
    return w;
}

static void drop_wait(node_t *n, size_t i)
{
    free(n->pending[i].tag);
    n->pending[i] = n->pending[--n->npending];
}

/* The wait of this kind for the instance `id` of `from` that key (request id or sequence)
 * answers; responses from any other node or instance match nothing (section 5.6). */
static long find_wait(const node_t *n, wait_kind kind, const char *from, const uint8_t id[16],
                      const char *rid, uint64_t seq)
{
    for (size_t i = 0; i < n->npending; i++) {
        const pending_t *w = &n->pending[i];
        if (w->kind == kind && strcmp(w->target, from) == 0 && memcmp(w->target_id, id, 16) == 0 &&
            (kind == WAIT_RESPONSE ? strcmp(w->request_id, rid) == 0 : w->seq == seq))
            return (long)i;
    }
    return -1;
}

/* Ends wait i: answer is the SPC_RESPONSE, the ACK, an ERROR about the MESSAGE, or NULL for
 * a timeout. */
static void finish_wait(node_t *n, size_t i, int type, const jval *answer)
{
    pending_t *w = &n->pending[i];
    if (!w->tag) { /* the one-shot command reads it */
        n->oneshot_done = 1;
        json_free(n->response);
        n->response = (answer && type != ENV_ACK) ? json_clone(answer) : NULL;
        n->oneshot_acked = answer && type == ENV_ACK;
        drop_wait(n, i);
        return;
    }
    jval *l = json_obj();
    const char *status = answer ? json_get_str(answer, "status") : NULL;
    if (w->kind == WAIT_ACK) {
        json_set(l, "event", json_str(!answer ? "ack_timeout" : type == ENV_ACK ? "ack" : "ack_error"));
        json_set(l, answer ? "from" : "to", json_str(w->target));
        json_set(l, type == ENV_ACK ? "ackSeq" : "seq", json_int((int64_t)w->seq));
        if (answer && type == ENV_ERROR)
            json_set(l, "errorCode", json_clone(json_get(answer, "errorCode")));
    } else if (status && strcmp(status, "SUCCESS") == 0) {
        const jval *result = json_get(answer, "result");
        json_set(l, "event", json_str("result"));
        json_set(l, "id", json_str(w->tag));
        json_set(l, "result", result ? json_clone(result) : json_null());
    } else {
        const char *code = answer ? json_get_str(answer, "errorCode") : "TIMEOUT";
        const char *msg = answer ? json_get_str(answer, "errorMessage")
                                 : "no response within the timeout";
        json_set(l, "event", json_str("call_error"));
        json_set(l, "id", json_str(w->tag));
        json_set(l, "errorCode", json_str(code ? code : "INTERNAL_ERROR"));
        json_set(l, "errorMessage", json_str(msg ? msg : ""));
    }
    node_emit(n->events, l);
    drop_wait(n, i);
}

void node_expire_waits(node_t *n)
{
    int64_t now = now_mono_ms();
    for (size_t i = n->npending; i-- > 0;)
        if (now >= n->pending[i].deadline_ms)
            finish_wait(n, i, 0, NULL);
}

static void call_failed(node_t *n, const char *tag, deliver_result r, const char *err)
{
    if (!tag)
        return; /* the one-shot command reports err itself */
    jval *l = json_obj();
    json_set(l, "event", json_str("call_error"));
    json_set(l, "id", json_str(tag));
    json_set(l, "errorCode", json_str(deliver_error_code(r)));
    json_set(l, "errorMessage", json_str(err));
    node_emit(n->events, l);
}

deliver_result node_call_async(node_t *n, const char *tag, const char *target,
                               const char *service, const jval *args, long timeout_ms, char *err,
                               size_t errlen)
{
    if (!node_allows(n, target)) { /* the response could never come back */
        snprintf(err, errlen, "ACCESS_DENIED: %s does not allow %s, so the response could not "
                 "be delivered; grant it first", n->name, target);
        call_failed(n, tag, DELIVER_ACCESS_DENIED, err);
        return DELIVER_ACCESS_DENIED;
    }
    char rid[UUID_TEXT_LEN + 1];
    uuid_v4(rid);
    jval *req = node_base_payload(n, target);
    json_set(req, "requestId", json_str(rid));
    json_set(req, "service", json_str(service));
    json_set(req, "arguments", json_clone(args));
    json_set(req, "callerNode", json_str(n->name));
    json_set(req, "timeoutMs", json_int(timeout_ms));
    deliver_info info;
    deliver_result r = node_deliver(n, target, ENV_SPC_REQUEST, 0, req, &info, err, errlen);
    json_free(req);
    if (r != DELIVER_OK) {
        call_failed(n, tag, r, err);
        return r;
    }
    pending_t *w = add_wait(n, WAIT_RESPONSE, tag, target, timeout_ms);
    memcpy(w->request_id, rid, sizeof rid);
    memcpy(w->target_id, info.target_id, 16);
    return DELIVER_OK;
}

deliver_result node_send_message(node_t *n, const char *tag, const char *target, jval *data,
                                 int confirm, long timeout_ms, uint64_t *seq, char *err,
                                 size_t errlen)
{
    jval *p = node_base_payload(n, target);
    json_set(p, "data", data);
    deliver_info info;
    deliver_result r = node_deliver(n, target, ENV_MESSAGE, confirm ? ENV_FLAG_ACK : 0, p,
                                    &info, err, errlen);
    json_free(p);
    if (r == DELIVER_OK) {
        *seq = info.seq;
        if (confirm) {
            pending_t *w = add_wait(n, WAIT_ACK, tag, target, timeout_ms);
            w->seq = info.seq;
            memcpy(w->target_id, info.target_id, 16);
        }
    }
    return r;
}

/* ---------- dispatch (section 5.5 step 6) ---------- */

static void report_received(const env_header *h, const char *from, const jval *p)
{
    jval *l = json_obj();
    json_set(l, "event", json_str("received"));
    json_set(l, "type", json_str(env_type_name(h->type)));
    json_set(l, "from", json_str(from));
    json_set(l, "payload", json_clone(p));
    node_report_info(l);
}

/* Raw bytes of the binary layout (section 9, chunks): their size, SHA-256 and, when short,
 * their base64, instead of JSON data. */
static void describe_bytes(jval *l, const jval *data)
{
    uint8_t digest[32];
    char hex[65];
    crypto_hash_sha256(digest, (const uint8_t *)data->str, data->len);
    hex_encode(digest, 32, hex);
    json_set(l, "body", json_str("bytes"));
    json_set(l, "size", json_int((int64_t)data->len));
    json_set(l, "sha256", json_str(hex));
    if (data->len <= 4096) {
        size_t b64len = sodium_base64_encoded_len(data->len, sodium_base64_VARIANT_ORIGINAL);
        char *b64 = xmalloc(b64len);
        sodium_bin2base64(b64, b64len, (const uint8_t *)data->str, data->len, sodium_base64_VARIANT_ORIGINAL);
        json_set(l, "base64", json_str(b64));
        free(b64);
    }
}

void node_on_message(node_t *n, const env_header *h, const char *from, const jval *p)
{
    jval *l = json_obj();
    json_set(l, "event", json_str("message"));
    json_set(l, "from", json_str(from));
    json_set(l, "seq", json_int((int64_t)h->sequence));
    const jval *data = json_get(p, "data");
    const char *body = json_get_str(p, "body");
    if (body && strcmp(body, "bytes") == 0 && data && data->type == J_STR)
        describe_bytes(l, data);
    else
        json_set(l, "data", json_clone(data));
    const char *enc = json_get_str(p, "encoding");
    if (enc)
        json_set(l, "encoding", json_str(enc));
    const char *id = json_get_str(p, "messageId");
    if (id)
        json_set(l, "messageId", json_str(id));
    node_emit(n->events, l);
    if (h->flags & ENV_FLAG_ACK) { /* unknown flag bits are ignored (section 9) */
        char err[512];
        jval *ack = node_base_payload(n, from);
        json_set(ack, "ackSeq", json_int((int64_t)h->sequence));
        node_deliver(n, from, ENV_ACK, 0, ack, NULL, err, sizeof err);
        json_free(ack);
    }
}

static void on_heartbeat(node_t *n, const char *from, const jval *p)
{
    if (!json_get(p, "reply")->boolean) { /* a probe: answer when we may write back */
        char err[512];
        jval *r = node_base_payload(n, from);
        json_set(r, "reply", json_bool(1));
        node_deliver(n, from, ENV_HEARTBEAT, 0, r, NULL, err, sizeof err);
        json_free(r);
    } else {
        jval *l = json_obj();
        json_set(l, "event", json_str("heartbeat_reply"));
        json_set(l, "from", json_str(from));
        node_emit(n->events, l);
    }
}

int node_expects_response(node_t *n, const char *from, const uint8_t id[16], const char *rid)
{
    return rid && find_wait(n, WAIT_RESPONSE, from, id, rid, 0) >= 0;
}

const char *node_dispatch(node_t *n, const env_header *h, const char *from, const jval *p)
{
    long i;
    uint64_t seq = 0;
    if ((n->features & FEATURE_CHUNKS) && (h->flags & ENV_FLAG_CHUNK)) /* section 9: chunks */
        return ext_chunks_dispatch(n, h, from, p);
    switch (h->type) {
    case ENV_MESSAGE:
        if ((n->features & FEATURE_RELIABLE) && (h->flags & ENV_FLAG_RELIABLE)) /* section 9: reliable */
            return ext_reliable_message(n, h, from, p);
        node_on_message(n, h, from, p);
        return NULL;
    case ENV_SPC_REQUEST:
        handle_spc_request(n, h, from, p);
        return NULL;
    case ENV_SPC_RESPONSE:
        i = find_wait(n, WAIT_RESPONSE, from, h->source_id, json_get_str(p, "requestId"), 0);
        if (i < 0)
            return "unexpected_response"; /* wrong responder, or late */
        finish_wait(n, (size_t)i, ENV_SPC_RESPONSE, p);
        return NULL;
    case ENV_ACK:
        json_get_u64(p, "ackSeq", &seq);
        i = find_wait(n, WAIT_ACK, from, h->source_id, NULL, seq);
        if (i < 0)
            return "unexpected_response";
        finish_wait(n, (size_t)i, ENV_ACK, p);
        return NULL;
    case ENV_HEARTBEAT:
        on_heartbeat(n, from, p);
        return NULL;
    case ENV_ERROR: /* an ERROR about a MESSAGE we wait an ACK for ends that wait */
        i = json_get_u64(p, "refSeq", &seq) == 0
                ? find_wait(n, WAIT_ACK, from, h->source_id, NULL, seq)
                : -1;
        if (i >= 0)
            finish_wait(n, (size_t)i, ENV_ERROR, p);
        report_received(h, from, p);
        return NULL;
    default: /* EVENT, DISCOVERY: reported, nothing else to do */
        report_received(h, from, p);
        return NULL;
    }
}
