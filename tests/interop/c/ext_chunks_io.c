/* ext_chunks_io.c - the chunks extension on the node (docs/PROTOCOL.md "### chunks"): chunk
 * envelopes fed to the reassembly and the whole message dispatched once; values that do not fit
 * one envelope of a target that speaks chunks sent in the binary layout or as chained chunks;
 * the entry fields of section 9. Events (stdout): {"event":"chunk",...} per accepted chunk,
 * {"event":"voided",...} per voided message. */
#include "ext_chunks.h"
#include "node.h"
#include "node_parts.h"
#include "registry.h"

#include <stdlib.h>
#include <string.h>

#include <sodium.h>

static void emit_voided(node_t *n, const char *from, const char *id, const char *reason, const char *detail)
{
    jval *l = json_obj();
    json_set(l, "event", json_str("voided"));
    json_set(l, "from", json_str(from));
    json_set(l, "messageId", json_str(id));
    json_set(l, "reason", json_str(reason));
    if (detail && detail[0])
        json_set(l, "detail", json_str(detail));
    node_emit(n->events, l);
}

static void superseded(void *ctx, const partial_t *p)
{
    emit_voided(ctx, p->sender, p->message_id, "chunk_missing",
                "an earlier instance of its sender: it gave its room to the instance registered now");
}

const char *ext_chunks_dispatch(node_t *n, const void *header, const char *from, const jval *p)
{
    const env_header *h = header;
    chunk_piece *piece = n->piece;
    n->piece = NULL;
    uint64_t index = 0, count = 0;
    json_get_u64(p, "chunkIndex", &index);
    json_get_u64(p, "chunkCount", &count);
    const char *id = json_get_str(p, "messageId");
    if (!piece)
        return "bad_payload";
    if (h->type == ENV_SPC_RESPONSE && index == 0 &&
        !node_expects_response(n, from, h->source_id, json_get_str(p, "requestId"))) {
        chunk_piece_free(piece);
        return "unexpected_response"; /* only the instance asked may answer (section 5.6) */
    }
    reasm_step st;
    uint64_t size = 0;
    if (index == 0 && json_get_u64(p, "messageSize", &size) == 0)
        reasm_make_room(&n->reasm, from, h->source_id, size, superseded, n); /* from is its registered instance (step 4) */
    reasm_feed(&n->reasm, from, h->source_id, h->type, h->flags, p, piece, now_mono_ms(), &st);
    if (st.voided)
        emit_voided(n, from, st.voided_id, st.voided_reason, st.detail);
    if (st.kind == REASM_REFUSED && st.voided && index == 0 && h->type == ENV_SPC_REQUEST &&
        strcmp(st.voided_reason, "message_too_large") == 0 && json_get_str(p, "requestId")) {
        /* no retry can make it fit: the caller hears it now, not at its timeout */
        char *msg = xasprintf("the request was refused (message_too_large): %s", st.detail);
        node_respond(n, from, json_get_str(p, "requestId"), "INVALID_ARGUMENTS", msg, NULL);
        free(msg);
    }
    if (st.kind == REASM_REFUSED)
        return st.reason;
    jval *l = json_obj();
    json_set(l, "event", json_str("chunk"));
    json_set(l, "from", json_str(from));
    json_set(l, "messageId", json_str(id));
    json_set(l, "index", json_int((int64_t)index));
    json_set(l, "count", json_int((int64_t)count));
    json_set(l, "seq", json_int((int64_t)h->sequence));
    node_emit(n->events, l);
    if (st.kind != REASM_COMPLETE)
        return NULL;
    env_header whole = *h; /* the message as one envelope of its type */
    whole.flags &= (uint16_t)~(ENV_FLAG_BINARY | ENV_FLAG_CHUNK);
    const char *reason = node_dispatch(n, &whole, from, st.payload);
    reasm_release(&n->reasm, st.size); /* handled inline: its bytes are free again */
    json_free(st.payload);
    return reason;
}

static void expired(void *ctx, const partial_t *p)
{
    emit_voided(ctx, p->sender, p->message_id, "chunk_expired", "no chunk of the message came within 30 s");
}

static void stopped(void *ctx, const partial_t *p)
{
    emit_voided(ctx, p->sender, p->message_id, "chunk_missing", "the node stopped before the message was complete");
}

void ext_chunks_tick(node_t *n)
{
    if (n->features & FEATURE_CHUNKS)
        reasm_expire(&n->reasm, now_mono_ms(), expired, n);
}

void ext_chunks_stop(node_t *n)
{
    if (n->features & FEATURE_CHUNKS)
        reasm_void_all(&n->reasm, stopped, n);
}

void ext_entry_fields(const node_t *n, jval *entry, jval *features)
{
    if (n->features & FEATURE_CHUNKS)
        json_push(features, json_str("chunks"));
    if (n->features & FEATURE_RELIABLE)
        json_push(features, json_str("reliable"));
    if (n->features & FEATURE_CHUNKS) {
        jval *c = json_obj();
        json_set(c, "maxMessage", json_int((int64_t)CHUNKS_MAX_MESSAGE));
        json_set(c, "maxEnvelopePayload", json_int((int64_t)n->max_payload));
        json_set(entry, "chunks", c);
    }
}

/* ---------- sending ---------- */

int chunks_target_limits(const jval *e, uint64_t own_payload, uint64_t own_max, uint64_t *limit, uint64_t *most)
{
    int speaks = 0;
    const jval *f = e ? json_get(e, "features") : NULL;
    for (size_t i = 0; f && f->type == J_ARR && i < f->n; i++)
        if (f->items[i]->type == J_STR && strcmp(f->items[i]->str, "chunks") == 0)
            speaks = 1;
    const jval *c = e ? json_get(e, "chunks") : NULL;
    *limit = ENV_DEFAULT_MAX_PAYLOAD;
    *most = own_max;
    double v; /* the entry's rule for numbers: 65536.0 is an integer, 1e400 is missing */
    if (c && c->type == J_OBJ && json_entry_integer(json_get(c, "maxEnvelopePayload"), &v) == 0 && v >= 1)
        *limit = v < (double)UINT64_MAX ? (uint64_t)v : UINT64_MAX;
    if (c && c->type == J_OBJ && json_entry_integer(json_get(c, "maxMessage"), &v) == 0 && v >= 1 &&
        v < (double)*most)
        *most = (uint64_t)v;
    if (*limit > own_payload)
        *limit = own_payload;
    return speaks;
}

/* 1 when target's entry advertises chunks; its limits (defaults when absent or unusable). */
static int target_speaks_chunks(node_t *n, const char *target, uint64_t *limit, uint64_t *most)
{
    int exists = 0;
    jval *e = registry_read(n->root, target, &exists);
    int speaks = chunks_target_limits(e, n->max_payload, CHUNKS_MAX_MESSAGE, limit, most);
    json_free(e);
    return speaks;
}

/* header ‖ 0x00 ‖ piece, malloc'd */
static uint8_t *join(const jval *header, const uint8_t *piece, size_t plen, size_t *len)
{
    size_t hlen = 0;
    char *h = json_dump(header, &hlen);
    uint8_t *pt = xmalloc(hlen + 1 + plen);
    memcpy(pt, h, hlen);
    pt[hlen] = 0;
    if (plen)
        memcpy(pt + hlen + 1, piece, plen);
    free(h);
    *len = hlen + 1 + plen;
    return pt;
}

static jval *chunk_header(const jval *first, const char *id, uint64_t index, uint64_t count, uint64_t size,
                          const uint8_t *prev /* the tag of the envelope of the chunk before */)
{
    jval *h;
    if (index == 0) {
        h = json_clone(first);
    } else {
        h = json_obj();
        json_set(h, "from", json_str(json_get_str(first, "from")));
        json_set(h, "to", json_str(json_get_str(first, "to")));
    }
    json_set(h, "messageId", json_str(id));
    json_set(h, "chunkIndex", json_int((int64_t)index));
    json_set(h, "chunkCount", json_int((int64_t)count));
    json_set(h, "messageSize", json_int((int64_t)size));
    if (prev) {
        char hex[2 * ENV_TAG_LEN + 1];
        hex_encode(prev, ENV_TAG_LEN, hex);
        json_set(h, "chunkPrev", json_str(hex));
    }
    return h;
}

/* The longest chunk header a body of size bytes can have (the first, or a late one). */
static size_t header_room(const jval *first, const char *id, uint64_t size)
{
    uint8_t zero[ENV_TAG_LEN] = {0};
    size_t a = 0, b = 0;
    jval *h0 = chunk_header(first, id, 0, CHUNKS_MAX_COUNT, size, NULL);
    jval *h1 = chunk_header(first, id, CHUNKS_MAX_COUNT - 1, CHUNKS_MAX_COUNT, size, zero);
    free(json_dump(h0, &a));
    free(json_dump(h1, &b));
    json_free(h0);
    json_free(h1);
    return a > b ? a : b;
}

/* body with the header fields `first` (from, to, the type's fields, body): one binary
 * envelope when it fits the target's limit, else chained chunks to one target instance. */
static int send_body(node_t *n, const char *target, int type, uint16_t flags, const jval *first,
                     const uint8_t *body, size_t len, uint64_t limit, uint64_t most, deliver_info *info,
                     char *err, size_t errlen)
{
    if (len > most) {
        snprintf(err, errlen, "a body of %zu bytes exceeds the limit of %llu bytes; nothing was sent", len,
                 (unsigned long long)most);
        return DELIVER_FAILED;
    }
    size_t pt_len = 0;
    uint8_t *pt = join(first, body, len, &pt_len);
    if (pt_len <= limit) {
        int r = node_deliver_raw(n, target, type, flags | ENV_FLAG_BINARY, pt, pt_len, NULL, info, err, errlen);
        free(pt);
        return r;
    }
    free(pt);
    char uuid[UUID_TEXT_LEN + 1], id[33];
    uuid_v4(uuid);
    for (size_t i = 0, j = 0; uuid[i]; i++)
        if (uuid[i] != '-')
            id[j++] = uuid[i], id[j] = '\0';
    size_t room = header_room(first, id, len);
    if (limit <= room + 1) {
        snprintf(err, errlen, "node %s's envelope limit leaves no room for a chunk", target);
        return DELIVER_FAILED;
    }
    size_t piece = (size_t)limit - room - 1;
    uint64_t count = len ? (len + piece - 1) / piece : 1;
    if (count > CHUNKS_MAX_COUNT) {
        snprintf(err, errlen, "%zu bytes would need %llu chunks; nothing was sent", len, (unsigned long long)count);
        return DELIVER_FAILED;
    }
    uint8_t instance[16];
    deliver_info di = {0};
    for (uint64_t i = 0; i < count; i++) { /* chunk i names the tag of the envelope of chunk i - 1 */
        size_t off = (size_t)(i * piece), plen = len - off < piece ? len - off : piece;
        jval *h = chunk_header(first, id, i, count, len, i ? di.tag : NULL);
        pt = join(h, body + off, plen, &pt_len);
        json_free(h);
        int r = node_deliver_raw(n, target, type, flags | ENV_FLAG_BINARY | ENV_FLAG_CHUNK, pt, pt_len,
                                 i ? instance : NULL, &di, err, errlen);
        free(pt);
        if (r != DELIVER_OK) {
            size_t used = strlen(err);
            snprintf(err + used, errlen - used, " (%llu of the %llu chunks of message %s were delivered, the rest "
                     "was not sent)", (unsigned long long)i, (unsigned long long)count, id);
            return r;
        }
        if (i == 0)
            memcpy(instance, di.target_id, 16);
    }
    if (info)
        *info = di;
    return DELIVER_OK;
}

int ext_chunks_outbound(node_t *n, const char *target, int type, uint16_t flags, const jval *payload,
                        deliver_info *info, int *res, char *err, size_t errlen)
{
    const char *field = chunks_value_field(type);
    const jval *value = field ? json_get(payload, field) : NULL;
    uint64_t limit, most;
    if (!(n->features & FEATURE_CHUNKS) || !value || !target_speaks_chunks(n, target, &limit, &most))
        return 0;
    size_t total = 0;
    free(json_dump(payload, &total));
    if (total <= limit)
        return 0; /* it fits one envelope: v1 */
    jval *first = json_obj();
    for (size_t i = 0; i < payload->n; i++)
        if (strcmp(payload->keys[i], field) != 0)
            json_set(first, payload->keys[i], json_clone(payload->items[i]));
    json_set(first, "body", json_str("json"));
    size_t blen = 0;
    char *body = json_dump(value, &blen);
    *res = send_body(n, target, type, flags, first, (const uint8_t *)body, blen, limit, most, info, err, errlen);
    free(body);
    json_free(first);
    return 1;
}

int ext_chunks_send_bytes(node_t *n, const char *target, uint64_t size, deliver_info *info, char *err,
                          size_t errlen)
{
    uint8_t *body = xmalloc(size + 1);
    for (uint64_t i = 0; i < size; i++)
        body[i] = (uint8_t)((i * 7 + 3) & 0xFF);
    uint64_t limit, most;
    int r;
    jval *p = node_base_payload(n, target);
    if ((n->features & FEATURE_CHUNKS) && target_speaks_chunks(n, target, &limit, &most)) {
        json_set(p, "body", json_str("bytes"));
        r = send_body(n, target, ENV_MESSAGE, 0, p, body, size, limit, most, info, err, errlen);
    } else { /* v1: base64 in a JSON string (section 5.2) */
        size_t b64len = sodium_base64_encoded_len(size, sodium_base64_VARIANT_ORIGINAL);
        char *b64 = xmalloc(b64len);
        sodium_bin2base64(b64, b64len, body, size, sodium_base64_VARIANT_ORIGINAL);
        json_set(p, "data", json_str(b64));
        json_set(p, "encoding", json_str("base64"));
        free(b64);
        r = node_deliver(n, target, ENV_MESSAGE, 0, p, info, err, errlen);
    }
    json_free(p);
    free(body);
    return r;
}
