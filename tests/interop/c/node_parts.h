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

/* inbox.c: re-reads the ids of allowed peers, about once a second. */
void node_refresh_peer_ids(node_t *n);

/* node.c: removes our entry if it is still ours (under the lock). */
void node_deregister(node_t *n);

#endif
