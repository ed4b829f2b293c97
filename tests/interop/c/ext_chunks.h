/* ext_chunks.h - the `chunks` extension (docs/PROTOCOL.md "### chunks"), written from that text:
 * the binary layout (flag 0x0002), chained chunks (flag 0x0004), the receiver's reassembly state
 * machine (no I/O: reasm_*), and the node glue that receives and sends chunked messages. */
#ifndef SPEED_EXT_CHUNKS_H
#define SPEED_EXT_CHUNKS_H

#include <stddef.h>
#include <stdint.h>

#include "envelope.h"
#include "json.h"
#include "util.h"

#define ENV_FLAG_BINARY 0x0002u
#define ENV_FLAG_CHUNK 0x0004u
#define ENV_FLAG_RELIABLE 0x0008u

#define CHUNKS_MAX_MESSAGE (64ull << 20)   /* maxMessage this node advertises and accepts */
#define CHUNKS_MAX_HEADER 65536            /* the 0x00 is looked for within this + 1 bytes */
#define CHUNKS_MAX_COUNT 65536
#define CHUNKS_TIMEOUT_MS 30000
#define CHUNKS_BUDGET_TOTAL (256ull << 20)
#define CHUNKS_BUDGET_SENDER (128ull << 20)
#define CHUNKS_ID_MAX 64
#define CHUNKS_REMEMBERED_VOIDS 4096

/* A decoded chunk: its piece (malloc'd copy) and its chain value: the authentication tag of the
 * envelope that carried it (the file's last 16 bytes; set by whoever read the file). */
typedef struct {
    uint8_t *data;
    size_t len;
    uint8_t chain[ENV_TAG_LEN];
} chunk_piece;

void chunk_piece_free(chunk_piece *p);

/* Decodes a plaintext whose flags select an extension layout (binary, or chunk). NULL on
 * success with *payload (the header object; for the binary layout with its value in
 * data/arguments/result) and, for a chunk, *piece; else "bad_payload". */
const char *chunks_decode(int type, uint16_t flags, const uint8_t *pt, size_t len, jval **payload,
                          chunk_piece **piece);
/* 1 if s is a valid messageId (1-64 of A-Z a-z 0-9 _ -). */
int chunks_valid_id(const char *s);
/* The field that holds a type's value: data, arguments or result; NULL for other types. */
const char *chunks_value_field(int type);

/* What a target's entry says to a sender whose own limits are own_payload and own_max: 1 when it
 * advertises chunks; *limit the envelope payload limit towards it and *most the largest message
 * both accept (an advertised number that is not an entry integer of at least 1 is as if missing). */
int chunks_target_limits(const jval *entry, uint64_t own_payload, uint64_t own_max, uint64_t *limit,
                         uint64_t *most);

/* ---------- the reassembly state machine (no I/O, time is an argument) ---------- */

typedef struct {
    char sender[NAME_MAX_LEN + 1];
    uint8_t instance[16];
    char message_id[CHUNKS_ID_MAX + 1];
    int type;
    uint16_t flags;
    uint32_t count, next;
    uint64_t size, received;
    uint8_t prev[ENV_TAG_LEN]; /* the tag of the envelope of the last chunk taken */
    uint8_t *buf; /* size + 1 bytes */
    jval *first;  /* the first chunk's header without the chunk fields */
    int64_t last_ms;
} partial_t;

typedef struct {
    uint8_t instance[16];
    char message_id[CHUNKS_ID_MAX + 1];
    const char *reason;
} void_mark;

typedef struct {
    uint64_t max_message, budget_total, budget_sender;
    int64_t timeout_ms;
    partial_t *partials;
    size_t npartials;
    void_mark *voids; /* a ring of the last voided message per instance */
    size_t nvoids, void_head;
    uint64_t reserved_total;
} reasm_t;

enum { REASM_STORED, REASM_COMPLETE, REASM_REFUSED };

typedef struct {
    int kind;
    const char *reason;  /* REFUSED */
    char detail[256];
    jval *payload;       /* COMPLETE: the first chunk's fields, the value, messageId (owned) */
    uint64_t size;       /* COMPLETE: bytes of the body */
    uint32_t count;
    /* a message this chunk voided (its own, or one it interrupted) */
    int voided;
    char voided_id[CHUNKS_ID_MAX + 1];
    const char *voided_reason;
} reasm_step;

void reasm_init(reasm_t *r, uint64_t max_message, uint64_t budget_total, uint64_t budget_sender,
                int64_t timeout_ms);
void reasm_free(reasm_t *r);
/* Judges one chunk (header checked by chunks_decode) of sender's instance; takes the piece. */
void reasm_feed(reasm_t *r, const char *sender, const uint8_t instance[16], int type,
                uint16_t flags, const jval *header, chunk_piece *piece, int64_t now_ms,
                reasm_step *out);
/* Gives back a completed message's bytes once it was handled. */
void reasm_release(reasm_t *r, uint64_t size);
/* Voids the messages whose next chunk is late; calls cb for each (reason chunk_expired). */
void reasm_expire(reasm_t *r, int64_t now_ms, void (*cb)(void *ctx, const partial_t *p), void *ctx);
/* Before the first chunk of a message of size bytes from sender's instance (its registered one):
   if the message does not fit the budgets, voids the sender's messages in progress from its other
   instances first (replaced instances: their messages can never complete); cb for each (reason
   chunk_missing). docs/PROTOCOL.md, chunks, Memory. */
void reasm_make_room(reasm_t *r, const char *sender, const uint8_t instance[16], uint64_t size,
                     void (*cb)(void *ctx, const partial_t *p), void *ctx);
/* Voids every message in progress (the node stops); cb as above (reason chunk_missing). */
void reasm_void_all(reasm_t *r, void (*cb)(void *ctx, const partial_t *p), void *ctx);

/* ---------- the node (ext_chunks_io.c) ---------- */

typedef struct node node_t;
typedef struct deliver_info deliver_info;

/* A chunk envelope of an accepted file (n->piece holds its piece): reassembly, and the whole
 * message's dispatch when it completes. NULL, or the reason the chunk is refused. */
const char *ext_chunks_dispatch(node_t *n, const void *header, const char *from, const jval *p);
/* Timers: messages whose next chunk is late are voided. */
void ext_chunks_tick(node_t *n);
/* The node stops: messages in progress are voided. */
void ext_chunks_stop(node_t *n);
/* Sends payload itself when target speaks chunks and the value does not fit one envelope.
 * Returns 1 with *res set when it did, 0 to leave it to v1. */
int ext_chunks_outbound(node_t *n, const char *target, int type, uint16_t flags, const jval *payload,
                        deliver_info *info, int *res, char *err, size_t errlen);
/* The stdin command `send-bytes TARGET N`: N bytes (byte i = (7i + 3) mod 256) as raw bytes. */
int ext_chunks_send_bytes(node_t *n, const char *target, uint64_t size, deliver_info *info, char *err,
                          size_t errlen);
/* The entry fields of section 9 for chunks and reliable: their names appended to features (the
 * entry's one "features" array, node.c), the "chunks" field. */
void ext_entry_fields(const node_t *n, jval *entry, jval *features);

#endif
