/* ext_reliable.c - see ext_reliable.h. */
#include "ext_reliable.h"
#include "node.h"
#include "node_parts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t hash_key(const char *sender, const char *id)
{
    uint32_t h = 2166136261u; /* FNV-1a over "sender\0id" */
    for (const char *s = sender; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    h = (h ^ 0u) * 16777619u;
    for (const char *s = id; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

void reliable_init(reliable_state *s, size_t capacity)
{
    memset(s, 0, sizeof *s);
    s->cap = capacity;
    size_t slots = 1;
    while (slots < capacity * 2)
        slots <<= 1;
    s->index_mask = slots - 1;
    s->ring = calloc(capacity, sizeof *s->ring);
    s->index = calloc(slots, sizeof *s->index);
    if (!s->ring || !s->index)
        abort();
}

void reliable_free(reliable_state *s)
{
    free(s->ring);
    free(s->index);
}

/* The index slot holding (sender, id), or the empty slot where it would go. */
static size_t slot_of(const reliable_state *s, const char *sender, const char *id)
{
    size_t i = hash_key(sender, id) & s->index_mask;
    while (s->index[i]) {
        const delivered_id *d = &s->ring[s->index[i] - 1];
        if (strcmp(d->sender, sender) == 0 && strcmp(d->id, id) == 0)
            return i;
        i = (i + 1) & s->index_mask;
    }
    return i;
}

/* Removes ring entry pos from the index (backward-shift deletion keeps probing intact). */
static void unindex(reliable_state *s, size_t pos)
{
    const delivered_id *d = &s->ring[pos];
    size_t i = slot_of(s, d->sender, d->id);
    s->index[i] = 0;
    for (size_t j = (i + 1) & s->index_mask; s->index[j]; j = (j + 1) & s->index_mask) {
        uint32_t v = s->index[j];
        s->index[j] = 0;
        const delivered_id *e = &s->ring[v - 1];
        s->index[slot_of(s, e->sender, e->id)] = v;
    }
}

int reliable_seen(reliable_state *s, const char *sender, const char *id)
{
    size_t i = slot_of(s, sender, id);
    if (s->index[i])
        return 1;
    size_t pos;
    if (s->count < s->cap) {
        pos = s->count++;
    } else { /* full: the oldest delivered id is forgotten */
        pos = s->head;
        s->head = (s->head + 1) % s->cap;
        unindex(s, pos);
        i = slot_of(s, sender, id);
    }
    snprintf(s->ring[pos].sender, sizeof s->ring[pos].sender, "%s", sender);
    snprintf(s->ring[pos].id, sizeof s->ring[pos].id, "%s", id);
    s->index[i] = (uint32_t)pos + 1;
    return 0;
}

const char *ext_reliable_message(node_t *n, const void *header, const char *from, const jval *p)
{
    const env_header *h = header;
    const char *id = json_get_str(p, "messageId");
    if (!chunks_valid_id(id))
        return "bad_payload";
    int copy = reliable_seen(&n->reliable, from, id);
    if (copy) { /* delivered by this instance already: not again; its ACK may have been lost */
        jval *l = json_obj();
        json_set(l, "event", json_str("duplicate"));
        json_set(l, "from", json_str(from));
        json_set(l, "messageId", json_str(id));
        json_set(l, "seq", json_int((int64_t)h->sequence));
        node_emit(n->events, l);
    } else {
        node_on_message(n, h, from, p);
    }
    jval *ack = node_base_payload(n, from);
    json_set(ack, "ackSeq", json_int((int64_t)h->sequence));
    json_set(ack, "messageId", json_str(id));
    json_set(ack, "status", json_str("handled"));
    char err[512];
    if (node_deliver(n, from, ENV_ACK, ENV_FLAG_RELIABLE, ack, NULL, err, sizeof err) != DELIVER_OK) {
        jval *l = json_obj();
        json_set(l, "event", json_str("ack_not_delivered"));
        json_set(l, "to", json_str(from));
        json_set(l, "error", json_str(err));
        node_report_info(l);
    }
    json_free(ack);
    return NULL;
}
