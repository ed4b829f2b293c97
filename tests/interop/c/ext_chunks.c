/* ext_chunks.c - the layouts of the chunks extension and the reassembly state machine, without
 * I/O (see ext_chunks.h and docs/PROTOCOL.md "### chunks"). */
#include "ext_chunks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void chunk_piece_free(chunk_piece *p)
{
    if (p) {
        free(p->data);
        free(p);
    }
}

const char *chunks_value_field(int type)
{
    return type == ENV_MESSAGE ? "data" : type == ENV_SPC_REQUEST ? "arguments"
                                        : type == ENV_SPC_RESPONSE ? "result" : NULL;
}

int chunks_valid_id(const char *s)
{
    size_t len = s ? strlen(s) : 0;
    if (len < 1 || len > CHUNKS_ID_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '-'))
            return 0;
    }
    return 1;
}

static int u64_at_most(const jval *h, const char *key, uint64_t most, uint64_t *out)
{
    return json_get_u64(h, key, out) == 0 && *out <= most;
}

static int is_hex32(const char *s)
{
    if (!s || strlen(s) != 2 * ENV_TAG_LEN)
        return 0;
    for (int i = 0; i < 2 * ENV_TAG_LEN; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

/* The type's fields, on a binary envelope or a first chunk. */
static int first_fields_ok(int type, const jval *h)
{
    const char *body = json_get_str(h, "body");
    if (!body || (strcmp(body, "json") != 0 && (type == ENV_SPC_REQUEST || strcmp(body, "bytes") != 0)))
        return 0;
    if (type == ENV_SPC_REQUEST) {
        const char *caller = json_get_str(h, "callerNode");
        return json_get_str(h, "requestId") && json_get_str(h, "service") && caller &&
               strcmp(caller, json_get_str(h, "from")) == 0;
    }
    if (type == ENV_SPC_RESPONSE) {
        const char *status = json_get_str(h, "status");
        return json_get_str(h, "requestId") && status && strcmp(status, "SUCCESS") == 0;
    }
    return 1;
}

/* The value of a body: raw bytes as a string node that owns `data` (NUL-terminated, length
 * kept), or the parsed JSON text. NULL when the JSON does not parse. */
static jval *body_value(const char *kind, uint8_t *data, size_t len)
{
    if (strcmp(kind, "bytes") == 0) {
        jval *v = json_strn("", 0);
        free(v->str);
        v->str = (char *)data;
        v->len = len;
        return v;
    }
    jval *v = json_parse((const char *)data, len, NULL, 0);
    free(data);
    return v;
}

const char *chunks_decode(int type, uint16_t flags, const uint8_t *pt, size_t len, jval **payload,
                          chunk_piece **piece)
{
    *payload = NULL;
    *piece = NULL;
    const char *field = chunks_value_field(type);
    if (!(flags & ENV_FLAG_BINARY) || !field)
        return "bad_payload"; /* a chunk needs the binary layout; only these types have one */
    const uint8_t *sep = memchr(pt, 0, len < CHUNKS_MAX_HEADER + 1 ? len : CHUNKS_MAX_HEADER + 1);
    if (!sep)
        return "bad_payload";
    size_t hlen = (size_t)(sep - pt), blen = len - hlen - 1;
    jval *h = json_parse((const char *)pt, hlen, NULL, 0);
    if (!h || h->type != J_OBJ || !json_get_str(h, "from") || !json_get_str(h, "to")) {
        json_free(h);
        return "bad_payload";
    }
    const uint8_t *body = sep + 1;
    if (!(flags & ENV_FLAG_CHUNK)) {
        uint8_t *copy = xmalloc(blen + 1);
        memcpy(copy, body, blen);
        copy[blen] = '\0';
        jval *value = first_fields_ok(type, h) ? body_value(json_get_str(h, "body"), copy, blen) : (free(copy), NULL);
        if (!value) {
            json_free(h);
            return "bad_payload";
        }
        json_set(h, field, value);
        *payload = h;
        return NULL;
    }
    uint64_t index, count, size;
    const char *prev = json_get_str(h, "chunkPrev");
    int ok = chunks_valid_id(json_get_str(h, "messageId")) && u64_at_most(h, "chunkCount", CHUNKS_MAX_COUNT, &count) &&
             u64_at_most(h, "chunkIndex", CHUNKS_MAX_COUNT - 1, &index) &&
             u64_at_most(h, "messageSize", 1ull << 53, &size) && index < count &&
             (index == 0 ? (!json_get(h, "chunkPrev") && first_fields_ok(type, h)) : is_hex32(prev));
    if (!ok) {
        json_free(h);
        return "bad_payload";
    }
    chunk_piece *p = xmalloc(sizeof *p);
    p->len = blen;
    p->data = xmalloc(blen + 1);
    memcpy(p->data, body, blen);
    memset(p->chain, 0, sizeof p->chain);
    *payload = h;
    *piece = p;
    return NULL;
}

/* ---------- reassembly ---------- */

void reasm_init(reasm_t *r, uint64_t max_message, uint64_t budget_total, uint64_t budget_sender,
                int64_t timeout_ms)
{
    memset(r, 0, sizeof *r);
    r->max_message = max_message;
    r->budget_total = budget_total;
    r->budget_sender = budget_sender;
    r->timeout_ms = timeout_ms;
    r->voids = calloc(CHUNKS_REMEMBERED_VOIDS, sizeof *r->voids);
    if (!r->voids)
        abort();
}

static void partial_clear(partial_t *p)
{
    free(p->buf);
    json_free(p->first);
    p->buf = NULL;
    p->first = NULL;
}

void reasm_free(reasm_t *r)
{
    for (size_t i = 0; i < r->npartials; i++)
        partial_clear(&r->partials[i]);
    free(r->partials);
    free(r->voids);
}

static partial_t *find_partial(reasm_t *r, const uint8_t instance[16])
{
    for (size_t i = 0; i < r->npartials; i++)
        if (memcmp(r->partials[i].instance, instance, 16) == 0)
            return &r->partials[i];
    return NULL;
}

static uint64_t reserved_by(const reasm_t *r, const char *sender)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < r->npartials; i++)
        if (strcmp(r->partials[i].sender, sender) == 0)
            sum += r->partials[i].size;
    return sum;
}

static void_mark *find_mark(reasm_t *r, const uint8_t instance[16])
{
    for (size_t i = 0; i < r->nvoids; i++)
        if (memcmp(r->voids[i].instance, instance, 16) == 0)
            return &r->voids[i];
    return NULL;
}

/* Remembers that this instance's message was voided with reason (later chunks get it too). */
static void mark(reasm_t *r, const uint8_t instance[16], const char *id, const char *reason)
{
    void_mark *m = find_mark(r, instance);
    if (!m) {
        if (r->nvoids < CHUNKS_REMEMBERED_VOIDS) {
            m = &r->voids[r->nvoids++];
        } else { /* bounded: the oldest is forgotten */
            m = &r->voids[r->void_head];
            r->void_head = (r->void_head + 1) % CHUNKS_REMEMBERED_VOIDS;
        }
    }
    memcpy(m->instance, instance, 16);
    snprintf(m->message_id, sizeof m->message_id, "%s", id);
    m->reason = reason;
}

static void drop_partial(reasm_t *r, partial_t *p)
{
    r->reserved_total -= p->size;
    partial_clear(p);
    *p = r->partials[--r->npartials];
}

/* Voids the message in progress p with reason: recorded in out, remembered, dropped. */
static void void_partial(reasm_t *r, partial_t *p, const char *reason, reasm_step *out)
{
    out->voided = 1;
    snprintf(out->voided_id, sizeof out->voided_id, "%s", p->message_id);
    out->voided_reason = reason;
    mark(r, p->instance, p->message_id, reason);
    drop_partial(r, p);
}

static void refuse(reasm_step *out, const char *reason)
{
    out->kind = REASM_REFUSED;
    out->reason = reason;
}

/* A copy of the first chunk's header without the chunk fields. */
static jval *first_fields(const jval *h)
{
    jval *o = json_obj();
    for (size_t i = 0; i < h->n; i++) {
        const char *k = h->keys[i];
        if (strcmp(k, "messageId") && strcmp(k, "chunkIndex") && strcmp(k, "chunkCount") && strcmp(k, "messageSize"))
            json_set(o, k, json_clone(h->items[i]));
    }
    return o;
}

static void start(reasm_t *r, const char *sender, const uint8_t instance[16], int type, uint16_t flags,
                  const jval *h, reasm_step *out, partial_t **started)
{
    const char *id = json_get_str(h, "messageId");
    uint64_t size = 0, count = 0;
    json_get_u64(h, "messageSize", &size);
    json_get_u64(h, "chunkCount", &count);
    uint64_t mine = reserved_by(r, sender);
    const char *reason = NULL;
    if (size > r->max_message)
        reason = "message_too_large";
    else if (count > (size > 1 ? size : 1))
        reason = "chunk_invalid";
    else if (mine + size > r->budget_sender || r->reserved_total + size > r->budget_total)
        reason = "reassembly_full";
    if (reason) { /* refused at its first chunk: voided before it began */
        mark(r, instance, id, reason);
        refuse(out, reason);
        out->voided = 1;
        snprintf(out->voided_id, sizeof out->voided_id, "%s", id);
        out->voided_reason = reason;
        snprintf(out->detail, sizeof out->detail, "message %s of %llu bytes refused", id,
                 (unsigned long long)size);
        return;
    }
    r->partials = xrealloc(r->partials, (r->npartials + 1) * sizeof *r->partials);
    partial_t *p = &r->partials[r->npartials++];
    memset(p, 0, sizeof *p);
    snprintf(p->sender, sizeof p->sender, "%s", sender);
    memcpy(p->instance, instance, 16);
    snprintf(p->message_id, sizeof p->message_id, "%s", id);
    p->type = type;
    p->flags = flags;
    p->count = (uint32_t)count;
    p->size = size;
    p->buf = xmalloc(size + 1);
    p->first = first_fields(h);
    r->reserved_total += size;
    *started = p;
}

void reasm_feed(reasm_t *r, const char *sender, const uint8_t instance[16], int type,
                uint16_t flags, const jval *h, chunk_piece *piece, int64_t now_ms,
                reasm_step *out)
{
    memset(out, 0, sizeof *out);
    const char *id = json_get_str(h, "messageId");
    uint64_t index = 0, count = 0, size = 0;
    json_get_u64(h, "chunkIndex", &index);
    json_get_u64(h, "chunkCount", &count);
    json_get_u64(h, "messageSize", &size);
    partial_t *p = find_partial(r, instance);
    if (index == 0) {
        /* a first chunk always starts a new message, also under the id remembered as voided (a
           retransmission reuses it): the mark is forgotten (docs/PROTOCOL.md, chunks, step 1) */
        void_mark *forgotten = find_mark(r, instance);
        if (forgotten)
            forgotten->message_id[0] = '\0';
        if (p) { /* interrupted by a new message */
            void_partial(r, p, "chunk_missing", out);
            snprintf(out->detail, sizeof out->detail, "message %s was interrupted by message %s", out->voided_id, id);
        }
        p = NULL;
        reasm_step first;
        memset(&first, 0, sizeof first);
        start(r, sender, instance, type, flags, h, &first, &p);
        if (!p) { /* refused (the refusal is what is reported) */
            *out = first;
            goto done;
        }
    } else if (!p || strcmp(p->message_id, id) != 0) {
        void_mark *m = find_mark(r, instance);
        if (!p && m && strcmp(m->message_id, id) == 0) {
            refuse(out, m->reason);
            snprintf(out->detail, sizeof out->detail, "message %s was already voided", id);
            goto done;
        }
        if (p)
            void_partial(r, p, "chunk_missing", out);
        mark(r, instance, id, "chunk_missing");
        refuse(out, "chunk_missing");
        snprintf(out->detail, sizeof out->detail, "chunk %llu of message %s without the chunks before it",
                 (unsigned long long)index, id);
        goto done;
    } else if (type != p->type || flags != p->flags || count != p->count || size != p->size) {
        void_partial(r, p, "chunk_invalid", out);
        refuse(out, "chunk_invalid");
        goto done;
    } else if (index != p->next) {
        void_partial(r, p, "chunk_missing", out);
        refuse(out, "chunk_missing");
        snprintf(out->detail, sizeof out->detail, "chunk %llu arrived where chunk %u was expected",
                 (unsigned long long)index, p->next);
        goto done;
    } else {
        uint8_t want[ENV_TAG_LEN];
        if (hex_decode(json_get_str(h, "chunkPrev"), want, ENV_TAG_LEN) != 0 ||
            memcmp(want, p->prev, ENV_TAG_LEN) != 0) {
            void_partial(r, p, "chunk_chain", out);
            refuse(out, "chunk_chain");
            goto done;
        }
    }
    /* the piece */
    if (p->received + piece->len > p->size || (piece->len == 0 && p->size > 0)) {
        void_partial(r, p, "chunk_invalid", out);
        refuse(out, "chunk_invalid");
        goto done;
    }
    memcpy(p->buf + p->received, piece->data, piece->len);
    p->received += piece->len;
    memcpy(p->prev, piece->chain, ENV_TAG_LEN);
    p->last_ms = now_ms;
    p->next++;
    if (p->next < p->count) {
        out->kind = REASM_STORED;
        goto done;
    }
    if (p->received != p->size) {
        void_partial(r, p, "chunk_invalid", out);
        refuse(out, "chunk_invalid");
        goto done;
    }
    /* complete: the value in its field, the reservation kept until reasm_release */
    p->buf[p->size] = '\0';
    jval *payload = json_clone(p->first);
    const char *kind = json_get_str(payload, "body");
    jval *value = body_value(kind ? kind : "bytes", p->buf, p->size);
    p->buf = NULL;
    if (!value) {
        void_partial(r, p, "bad_payload", out);
        refuse(out, "bad_payload");
        json_free(payload);
        goto done;
    }
    json_set(payload, chunks_value_field(p->type), value);
    json_set(payload, "messageId", json_str(p->message_id));
    out->kind = REASM_COMPLETE;
    out->payload = payload;
    out->size = p->size;
    out->count = p->count;
    json_free(p->first);
    p->first = NULL;
    *p = r->partials[--r->npartials]; /* its bytes stay reserved */
done:
    chunk_piece_free(piece);
}

void reasm_release(reasm_t *r, uint64_t size)
{
    r->reserved_total -= size <= r->reserved_total ? size : r->reserved_total;
}

void reasm_expire(reasm_t *r, int64_t now_ms, void (*cb)(void *ctx, const partial_t *p), void *ctx)
{
    for (size_t i = r->npartials; i-- > 0;) {
        partial_t *p = &r->partials[i];
        if (now_ms - p->last_ms > r->timeout_ms) {
            cb(ctx, p);
            mark(r, p->instance, p->message_id, "chunk_expired");
            drop_partial(r, p);
        }
    }
}

void reasm_make_room(reasm_t *r, const char *sender, const uint8_t instance[16], uint64_t size,
                     void (*cb)(void *ctx, const partial_t *p), void *ctx)
{
    if (reserved_by(r, sender) + size <= r->budget_sender && r->reserved_total + size <= r->budget_total)
        return;
    for (size_t i = r->npartials; i-- > 0;) {
        partial_t *p = &r->partials[i];
        if (strcmp(p->sender, sender) == 0 && memcmp(p->instance, instance, 16) != 0) {
            cb(ctx, p);
            mark(r, p->instance, p->message_id, "chunk_missing");
            drop_partial(r, p);
        }
    }
}

void reasm_void_all(reasm_t *r, void (*cb)(void *ctx, const partial_t *p), void *ctx)
{
    while (r->npartials) {
        partial_t *p = &r->partials[r->npartials - 1];
        cb(ctx, p);
        drop_partial(r, p);
    }
}
