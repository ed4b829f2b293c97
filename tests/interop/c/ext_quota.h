/* ext_quota.h - the sender side of the `quota` extension (docs/PROTOCOL.md, "Extensions (§9)",
 * `quota`): a node started with --feature quota never has more of its envelopes in a target's
 * inbox than the target's registry entry allows, and paces its deliveries to the rate the target
 * publishes. This node publishes no limits itself (it does not advertise `quota`). */
#ifndef SPEED_EXT_QUOTA_H
#define SPEED_EXT_QUOTA_H

#include <stddef.h>
#include <stdint.h>

#include "json.h"
#include "node.h"

#define QUOTA_CAP_PENDING 65536.0
#define QUOTA_CAP_BYTES 9007199254740992.0 /* 2^53 */
#define QUOTA_CAP_RATE 1000000.0
#define QUOTA_CAP_BURST 65536.0

/* The limits one sender must honour towards one target. rate is 0 when none is published. */
typedef struct {
    uint64_t pending, pending_bytes;
    double rate;
    uint64_t burst;
} quota_limits;

typedef enum { QUOTA_OK = 0, QUOTA_PENDING, QUOTA_PENDING_BYTES, QUOTA_RATE } quota_block;

/* The reading rules: 1 and *out set when the entry (a parsed registry entry) advertises
 * "quota" in its features and its "quota" field sets limits for sender; 0 when it sets none. */
int quota_limits_for(const jval *entry, const char *sender, quota_limits *out);

/* The admission rule for a MESSAGE or SPC_REQUEST of size bytes, with n envelopes holding b
 * bytes still in the inbox: QUOTA_OK, QUOTA_PENDING or QUOTA_PENDING_BYTES. */
quota_block quota_check(uint64_t n, uint64_t b, uint64_t size, const quota_limits *lim);

/* A token bucket: full at first use; times in milliseconds of a monotonic clock. */
typedef struct {
    double rate, tokens, last_ms;
    uint64_t burst;
    int started;
} quota_bucket;

void quota_bucket_tune(quota_bucket *q, double rate, uint64_t burst);
/* 0 when a token is there now (it is not taken), else the milliseconds until one is. */
double quota_bucket_delay_ms(quota_bucket *q, double now_ms);
void quota_bucket_take(quota_bucket *q);

const char *quota_limit_name(quota_block b); /* "pending", "pendingBytes", "rate" */

/* The node's part (deliver.c calls these when n->cfg.quota is set). Before delivering an envelope
 * of size bytes to target: a MESSAGE or SPC_REQUEST waits for room (n->quota_wait_ms, -1 for
 * the --quota-wait-ms setting; 0 refuses at once) and takes a token; answers never wait. Returns
 * DELIVER_OK, DELIVER_QUOTA with err naming the limit, or DELIVER_UNAVAILABLE when the target
 * left, died or restarted meanwhile. */
deliver_result quota_admit(node_t *n, const char *target, int type, uint64_t size, char *err,
                           size_t errlen);
/* After a delivery: the file is in target's inbox until the target consumes it. */
void quota_delivered(node_t *n, const char *target, const char *fname, uint64_t size);
void quota_free(node_t *n);

/* Checks tests/vectors/quota_vectors.json; prints "N passed, M failed"; 0 when all pass. */
int quota_kat_run(const char *path);

#endif
