/* replay.h - replay protection of wire contract section 5.5 step 5, without I/O: the caller
 * passes the clock. Memory is bounded: one sequence state per sender name and a nonce cache
 * of fixed capacity. */
#ifndef SPEED_REPLAY_H
#define SPEED_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "envelope.h"
#include "util.h"

#define REPLAY_DEFAULT_WINDOW_MS 60000u
#define REPLAY_DEFAULT_MAX_GAP 65536u
#define REPLAY_DEFAULT_NONCE_CAPACITY 65536u

typedef struct {
    uint8_t nonce[ENV_NONCE_LEN];
    uint64_t expire_ms;
} nonce_slot;

/* The last sequence accepted from the sender `name`, and from which of its instances. Only
 * the instance in the sender's current registry entry passes step 4, so one state per name
 * is enough: a new instance replaces the old one's state. */
typedef struct {
    char name[NAME_MAX_LEN + 1];
    uint8_t id[16];
    uint64_t last_seq;
} seq_state;

typedef struct {
    uint64_t window_ms; /* |timestamp - now| beyond this is stale_timestamp */
    uint64_t max_gap;   /* most sequence numbers that may be skipped at once */
    /* nonces accepted within the window, oldest first (a ring) with a hash index */
    nonce_slot *ring;
    size_t cap, head, count;
    uint32_t *index; /* open addressing: 0 = empty, else ring position + 1 */
    size_t index_mask;
    seq_state *peers;
    size_t npeers;
} replay_guard;

void replay_init(replay_guard *g, uint64_t window_ms, uint64_t max_gap, size_t nonce_capacity);
void replay_free(replay_guard *g);

/* Judges an authentic envelope of sender `name`, instance `id`, at now_ms. Accepted: returns
 * NULL, records the nonce and the sequence, and sets *skipped to the number of sequence
 * numbers jumped over (0 when it is the next one). Otherwise returns stale_timestamp,
 * replayed_nonce, replayed_sequence or bad_sequence and records nothing.
 * A sender instance not seen before counts as having had sequence 0 accepted. */
const char *replay_check(replay_guard *g, const char *name, const uint8_t id[16], uint64_t seq,
                         uint64_t ts_ms, const uint8_t nonce[ENV_NONCE_LEN], uint64_t now_ms,
                         uint64_t *skipped);

/* The timestamp and nonce checks alone (and the nonce remembered when they pass), for a durable
 * copy numbered for an earlier instance of this node (ext_durable.c). */
const char *replay_check_window(replay_guard *g, uint64_t ts_ms, const uint8_t nonce[ENV_NONCE_LEN],
                                uint64_t now_ms);

/* Forgets the nonces whose window ended before now_ms (replay_check does it too). */
void replay_prune(replay_guard *g, uint64_t now_ms);
/* Nonces currently remembered (for the node's stats). */
size_t replay_nonce_count(const replay_guard *g);

#endif
