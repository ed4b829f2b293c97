/* node_parts.h - what the parts of one node (node.c, deliver.c, inbox.c, spc.c, shutdown.c)
 * call of each other; not used outside them. */
#ifndef SPEED_NODE_PARTS_H
#define SPEED_NODE_PARTS_H

#include "node.h"

/* spc.c: step 6 of section 5.5 for an accepted envelope (already removed from the inbox).
 * Returns NULL, or "unexpected_response" for an SPC_RESPONSE/ACK that no wait of ours
 * matches (wrong responder, or late). */
const char *node_dispatch(node_t *n, const env_header *h, const char *from, const jval *p);
/* spc.c: a MESSAGE handed to the application (its event line; the ACK when bit 0 asks). */
void node_on_message(node_t *n, const env_header *h, const char *from, const jval *p);
/* spc.c: 1 if a call to from's instance id with request id rid waits for its response. */
int node_expects_response(node_t *n, const char *from, const uint8_t id[16], const char *rid);
/* spc.c: ends the waits whose deadline passed (TIMEOUT). */
void node_expire_waits(node_t *n);
/* spc.c: {"from": our name, "to": to} */
jval *node_base_payload(const node_t *n, const char *to);
/* spc.c: delivers the SPC_RESPONSE requestId rid to `to`: ERROR with code and msg when code is
 * set, else SUCCESS with result (taken over); a failed delivery is reported on stderr. */
void node_respond(node_t *n, const char *to, const char *rid, const char *code, const char *msg,
                  jval *result);

/* inbox.c: re-reads the ids of allowed peers, about once a second. */
void node_refresh_peer_ids(node_t *n);

/* inbox.c: one file being judged (section 5.5), and the markers node_open_file returns
 * besides NULL (read and opened) and a rejection reason. */
typedef struct {
    const char *name;
    char sender[NAME_MAX_LEN + 1];
    int64_t size;       /* -1 while unknown */
    int64_t arrived_ms; /* its change time (its delivery), Unix ms */
    int header_read;
    env_header h;
    uint8_t tag[ENV_TAG_LEN]; /* its authentication tag (a chunk's chain value) */
} inbox_file;
extern const char DEFER[], VANISHED[], IGNORED[];
/* inbox.c: steps 2-3 for f->name in dirfd: open without following, file checks, read, framing
 * and tag; *pt is the malloc'd plaintext. Larger than ENV_OVERHEAD + max_payload: too_large,
 * never read. */
const char *node_open_file(node_t *n, int dirfd, inbox_file *f, uint64_t max_payload,
                           uint8_t **pt, size_t *pt_len, uint8_t nonce[ENV_NONCE_LEN]);
/* inbox.c: 1 if src is the id of from's registry entry (re-read when the cache disagrees). */
int node_sender_id_matches(node_t *n, const char *from, const uint8_t src[16]);

/* node.c: removes our entry if it is still ours (under the lock). */
void node_deregister(node_t *n);

#endif
