/* ext_reliable.h - the receiving side of the `reliable` extension (docs/PROTOCOL.md
 * "### reliable"), written from that text: a MESSAGE with flag 0x0008 and a messageId is handed
 * to the application once per (sender, messageId) within this instance and acknowledged with
 * an ACK carrying the same flag, ackSeq, messageId and status "handled"; a copy is not handed
 * over again and is acknowledged again. This node does not send reliable messages itself. */
#ifndef SPEED_EXT_RELIABLE_H
#define SPEED_EXT_RELIABLE_H

#include <stddef.h>
#include <stdint.h>

#include "json.h"
#include "util.h"

#define RELIABLE_REMEMBER 100000 /* delivered ids kept (the contract asks for at least this many) */

typedef struct {
    char sender[NAME_MAX_LEN + 1];
    char id[65];
} delivered_id;

/* The delivered ids: a ring (the oldest is forgotten first) with a hash index. */
typedef struct {
    delivered_id *ring;
    size_t cap, count, head;
    uint32_t *index; /* open addressing: 0 empty, else ring position + 1 */
    size_t index_mask;
} reliable_state;

typedef struct node node_t;

void reliable_init(reliable_state *s, size_t capacity);
void reliable_free(reliable_state *s);
/* 1 if (sender, id) was delivered; else records it and returns 0. */
int reliable_seen(reliable_state *s, const char *sender, const char *id);

/* A MESSAGE with the reliable flag (whole: after reassembly when it was chunked). NULL, or
 * "bad_payload" when it has no valid messageId. */
const char *ext_reliable_message(node_t *n, const void *header, const char *from, const jval *p);

#endif
