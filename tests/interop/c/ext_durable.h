/* ext_durable.h - the receiving side of the `durable` extension (docs/PROTOCOL.md, "### durable"):
 * durable MESSAGEs bound to the receiver's name, the ledger (claims and receipts per sender,
 * durable before the envelope is removed), receipts chained with keyed BLAKE2b, sent back as ACK
 * envelopes with the durable flag. This node does not send durable messages. */
#ifndef SPEED_EXT_DURABLE_H
#define SPEED_EXT_DURABLE_H

#include "node.h"

#define ENV_FLAG_DURABLE 0x0010u

/* Enables the extension on n (after node_init, before registering): refuses a ROOT on tmpfs
 * unless on_tmpfs, appends n's instance id to durable/instances (fdatasync) and loads the earlier
 * ones. 0, or -1 with one sentence on stderr. */
int durable_init(node_t *n, int on_tmpfs);
void durable_free(node_t *n);
/* Appends "durable" to features (the entry's one "features" array, node.c) when the extension is
 * on; it adds no registry field of its own. */
void durable_entry_fields(const node_t *n, jval *entry, jval *features);

/* 1 when the extension is on and h is a durable MESSAGE. */
int durable_applies(const node_t *n, const env_header *h);

/* Steps 4-5 for a durable MESSAGE whose `from` was checked: the durable fields, `to`, the target
 * (this instance, or an earlier one of our name for a file that arrived, at arrived_ms, before
 * this instance started), the source (the sender's registered instance or one of its lineage,
 * ROOT/<sender>/durable/instances), the replay checks at the arrival. NULL or a reason. */
const char *durable_judge(node_t *n, const env_header *h, const uint8_t nonce[ENV_NONCE_LEN],
                          const char *to, const jval *p, int64_t arrived_ms, uint64_t *skipped);

/* Step 6 for an accepted durable MESSAGE still in the inbox (dirfd/file): ledger, claim, the
 * message line (the handler), the receipt appended and fdatasync'd, then the file removed and
 * the receipt sent. */
void durable_handle(node_t *n, int dirfd, const char *file, const env_header *h, const char *from,
                    const jval *p, int64_t size);

/* For the known-answer check (ext_durable_kat.c). */
typedef struct {
    uint64_t id, index, time;
    int status; /* 1 handled, 2 failed, 3 expired */
    uint8_t prev[32], mac[32];
} durable_receipt;
typedef struct {
    const char *stream;
    uint64_t id, base, expires;
} durable_fields;
#define DURABLE_INPUT_MAX (16 + 65 + 65 + 16 + 57)
void durable_receipt_key(const uint8_t key[32], uint8_t out[32]);
/* Sets r->mac; writes the MAC's input to input and returns its length. */
size_t durable_receipt_mac(const uint8_t rkey[32], const char *receiver, const char *sender,
                           const char *stream, durable_receipt *r, uint8_t input[DURABLE_INPUT_MAX]);
/* The durable fields of a MESSAGE payload: 0, or -1 when they are bad_payload. */
int durable_parse_fields(const jval *p, durable_fields *f);

/* For the known-answer check of the ledger: what a receiver does with one authentic copy of one
 * sender (stream, id, base), as durable_handle's ledger steps: "handled", "durable_duplicate" or
 * "durable_streams_full"; *floor is the stream's floor after it. */
typedef struct {
    void *sender;
} durable_ledger_kat;
const char *durable_ledger_step(durable_ledger_kat *k, const char *stream, uint64_t id, uint64_t base,
                                uint64_t *floor);
void durable_ledger_free(durable_ledger_kat *k);

/* The known-answer check of tests/vectors/durable_vectors.json: "N passed, M failed". */
int durable_kat_run(const char *path);

#endif
