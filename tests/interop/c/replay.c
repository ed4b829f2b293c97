/* replay.c - see replay.h */
#include "replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void replay_init(replay_guard *g, uint64_t window_ms, uint64_t max_gap, size_t nonce_capacity)
{
    memset(g, 0, sizeof *g);
    g->window_ms = window_ms;
    g->max_gap = max_gap;
    g->cap = nonce_capacity ? nonce_capacity : 1;
    g->ring = xmalloc(g->cap * sizeof *g->ring);
    size_t slots = 2;
    while (slots < 2 * g->cap) /* at most half full: short probe sequences */
        slots *= 2;
    g->index = calloc(slots, sizeof *g->index);
    if (!g->index)
        abort();
    g->index_mask = slots - 1;
}

void replay_free(replay_guard *g)
{
    free(g->ring);
    free(g->index);
    free(g->peers);
    memset(g, 0, sizeof *g);
}

/* Nonces are random: their first bytes are a good hash. */
static size_t home_slot(const replay_guard *g, const uint8_t nonce[ENV_NONCE_LEN])
{
    uint64_t h;
    memcpy(&h, nonce, sizeof h);
    return (size_t)(h * 0x9E3779B97F4A7C15ull >> 17) & g->index_mask;
}

/* The index slot holding nonce (*found = 1), or the empty slot where it would go. */
static size_t find_slot(const replay_guard *g, const uint8_t nonce[ENV_NONCE_LEN], int *found)
{
    size_t i = home_slot(g, nonce);
    while (g->index[i]) {
        if (memcmp(g->ring[g->index[i] - 1].nonce, nonce, ENV_NONCE_LEN) == 0) {
            *found = 1;
            return i;
        }
        i = (i + 1) & g->index_mask;
    }
    *found = 0;
    return i;
}

/* Removes index slot i, shifting later members of its probe run back (linear probing). */
static void unindex(replay_guard *g, size_t i)
{
    size_t j = i;
    for (;;) {
        j = (j + 1) & g->index_mask;
        if (!g->index[j])
            break;
        size_t k = home_slot(g, g->ring[g->index[j] - 1].nonce);
        /* move j into the hole at i unless its home lies cyclically in (i, j] */
        int stays = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            g->index[i] = g->index[j];
            i = j;
        }
    }
    g->index[i] = 0;
}

static void drop_oldest(replay_guard *g)
{
    int found = 0;
    size_t slot = find_slot(g, g->ring[g->head].nonce, &found);
    if (found && g->index[slot] - 1 == g->head) /* not re-pointed at a newer copy */
        unindex(g, slot);
    g->head = (g->head + 1) % g->cap;
    g->count--;
}

/* Expired nonces leave from the oldest end. When the cache is full the oldest is forgotten
 * before its time: a replay of it is still caught by its sequence number. */
static void remember(replay_guard *g, const uint8_t nonce[ENV_NONCE_LEN], uint64_t expire_ms)
{
    if (g->count == g->cap)
        drop_oldest(g);
    size_t pos = (g->head + g->count) % g->cap;
    memcpy(g->ring[pos].nonce, nonce, ENV_NONCE_LEN);
    g->ring[pos].expire_ms = expire_ms;
    g->count++;
    int found = 0;
    size_t slot = find_slot(g, nonce, &found);
    g->index[slot] = (uint32_t)(pos + 1); /* an expired copy is superseded */
}

static seq_state *peer_named(replay_guard *g, const char *name)
{
    for (size_t i = 0; i < g->npeers; i++)
        if (strcmp(g->peers[i].name, name) == 0)
            return &g->peers[i];
    return NULL;
}

size_t replay_nonce_count(const replay_guard *g) { return g->count; }

void replay_prune(replay_guard *g, uint64_t now_ms)
{
    while (g->count && g->ring[g->head].expire_ms < now_ms)
        drop_oldest(g);
}

const char *replay_check_window(replay_guard *g, uint64_t ts_ms, const uint8_t nonce[ENV_NONCE_LEN],
                                uint64_t now_ms)
{
    uint64_t diff = now_ms > ts_ms ? now_ms - ts_ms : ts_ms - now_ms;
    if (diff > g->window_ms)
        return "stale_timestamp";
    replay_prune(g, now_ms);
    int found = 0;
    size_t slot = find_slot(g, nonce, &found);
    if (found && g->ring[g->index[slot] - 1].expire_ms >= now_ms)
        return "replayed_nonce";
    remember(g, nonce, (ts_ms > now_ms ? ts_ms : now_ms) + g->window_ms);
    return NULL;
}

const char *replay_check(replay_guard *g, const char *name, const uint8_t id[16], uint64_t seq,
                         uint64_t ts_ms, const uint8_t nonce[ENV_NONCE_LEN], uint64_t now_ms,
                         uint64_t *skipped)
{
    uint64_t diff = now_ms > ts_ms ? now_ms - ts_ms : ts_ms - now_ms;
    if (diff > g->window_ms)
        return "stale_timestamp";
    replay_prune(g, now_ms);
    int found = 0;
    size_t slot = find_slot(g, nonce, &found);
    if (found && g->ring[g->index[slot] - 1].expire_ms >= now_ms)
        return "replayed_nonce";
    seq_state *p = peer_named(g, name);
    uint64_t last = (p && memcmp(p->id, id, 16) == 0) ? p->last_seq : 0;
    if (seq <= last)
        return "replayed_sequence";
    if (seq - last - 1 > g->max_gap)
        return "bad_sequence"; /* one forged envelope must not block the link */
    if (!p) {
        g->peers = xrealloc(g->peers, (g->npeers + 1) * sizeof *g->peers);
        p = &g->peers[g->npeers++];
        snprintf(p->name, sizeof p->name, "%s", name);
    }
    memcpy(p->id, id, 16);
    p->last_seq = seq;
    *skipped = seq - last - 1;
    remember(g, nonce, (ts_ms > now_ms ? ts_ms : now_ms) + g->window_ms);
    return NULL;
}
