/* ext_control.h - the target side of the `control` extension (docs/PROTOCOL.md "### control"),
 * written from that text: a node started with --operator PUBKEY watches ROOT/NAME/control/ and
 * applies allow, revoke, stop and status requests signed by a trusted Ed25519 key, for its
 * name and instance, unexpired and not applied before; everything else there is removed and
 * reported with its reason. */
#ifndef SPEED_EXT_CONTROL_H
#define SPEED_EXT_CONTROL_H

#include <stdint.h>

#include "envelope.h"
#include "json.h"

#define CONTROL_MAX_PAYLOAD 8192u
#define CONTROL_MAX_TEXT 4096u
#define CONTROL_MAX_LIFETIME_MS 300000u
#define CONTROL_SKEW_MS 30000u
#define CONTROL_MAX_REMEMBERED 4096u
#define CONTROL_BATCH 32u
#define CONTROL_REQUEST_ID_MAX 64u
#define CONTROL_FP_LEN 16u

typedef struct node node_t;

typedef struct {
    uint8_t key[32];
    char fp[CONTROL_FP_LEN + 1];
} control_trusted_key;

typedef struct {
    char id[CONTROL_REQUEST_ID_MAX + 1];
    uint64_t until_ms;
} control_remembered_id;

typedef struct control_state {
    control_trusted_key *keys;
    size_t nkeys;
    control_remembered_id *seen; /* applied request ids, each until expiresAt + skew */
    size_t nseen;
    uint64_t next_prune_ms;
    char *dir; /* ROOT/NAME/control (the node only) */
} control_state;

/* The verdict on one opened control payload (steps 6-17 of the checks). */
typedef struct {
    const char *reason;                         /* NULL: apply */
    char request_id[CONTROL_REQUEST_ID_MAX + 1]; /* "" when the requester cannot be answered */
    char operator_fp[CONTROL_FP_LEN + 1];       /* "" when no key was presented */
    char detail[160];
    jval *request;                              /* the verified signed request (owned) */
} control_verdict;

/* Trusts the given public keys (standard base64 of 32 bytes), creates and watches the control
 * directory. 0, or -1 with a message on stderr. Call after node_init, before node_register. */
int control_init(node_t *n, const char *const *operators, int count);
void control_free(node_t *n);
/* Appends "control" to features (the entry's one "features" array, node.c) and adds "operators"
 * to an entry being built (nothing when not enabled). */
void control_entry_fields(const node_t *n, jval *entry, jval *features);
/* Judges, removes and applies at most CONTROL_BATCH files of the control directory.
 * Returns 1 when more are waiting. */
int control_scan(node_t *n);

/* Judges one opened payload of requester `from` for target (name, id) at now_ms; on
 * acceptance remembers the request id. Used by control_scan and the known-answer check. */
void control_judge(control_state *c, const char *name, const uint8_t id[16], const char *from,
                   const jval *payload, uint64_t now_ms, control_verdict *v);
control_state *control_state_new(void);
int control_trust(control_state *c, const char *public_key_b64);
void control_state_free(control_state *c);
/* The trusted fingerprints, sorted and unique, as a JSON array. */
jval *control_operators_json(const control_state *c);

/* Steps 4-5 for an opened envelope (header h, plaintext pt) of `sender` to target (name, id):
 * NULL with *out the payload, or a reason. source_ok says whether src is from's instance. */
typedef int (*control_source_check)(void *ctx, const char *from, const uint8_t src[16]);
const char *control_check_envelope(const env_header *h, const char *sender, const uint8_t *pt,
                                   size_t pt_len, const char *name, const uint8_t id[16],
                                   control_source_check source_ok, void *ctx, uint64_t now_ms,
                                   uint64_t window_ms, jval **out);

/* `speed_c_node kat-control FILE`: tests/vectors/control_vectors.json. 0 when all pass. */
int control_kat(const char *path);

#endif
