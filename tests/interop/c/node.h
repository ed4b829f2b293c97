/* node.h - one SPEED node instance: registration and lease (node.c), delivery (deliver.c,
 * section 5.4), reception (inbox.c, section 5.5, with replay.c), demo services, SPC and
 * dispatch (spc.c, sections 5.6 and 6), graceful stop (shutdown.c, section 4.2).
 * Single-threaded: everything runs from node_step() and node_shutdown(). */
#ifndef SPEED_NODE_H
#define SPEED_NODE_H

#include <stdint.h>
#include <stdio.h>

#include "envelope.h"
#include "ext_chunks.h"
#include "ext_reliable.h"
#include "json.h"
#include "replay.h"
#include "util.h"

#define RUNTIME_NAME "speed_c_node-c/0.1"

/* One outbound link (section 5.3): numbered per receiver instance, so the sequence starts
 * again at 1 when the receiver's entry shows a new instance ID. */
typedef struct {
    char name[NAME_MAX_LEN + 1];
    uint8_t target_id[16];
    uint64_t next_seq;
    char last_file[ENV_FILENAME_MAX]; /* the newest envelope delivered on this link */
} link_state;

typedef struct {
    char name[NAME_MAX_LEN + 1];
    uint8_t id[16];
} id_cache_entry;

/* What the node waits for from one peer instance: an SPC_RESPONSE or an ACK (section 5.5
 * step 6). Anything that matches none is unexpected_response. */
typedef enum { WAIT_RESPONSE, WAIT_ACK } wait_kind;
typedef struct {
    wait_kind kind;
    char target[NAME_MAX_LEN + 1];
    uint8_t target_id[16];
    char request_id[UUID_TEXT_LEN + 1]; /* WAIT_RESPONSE */
    uint64_t seq;                       /* WAIT_ACK: the MESSAGE's sequence */
    char *tag;                          /* the stdin command's label; NULL for call/send */
    int64_t deadline_ms;                /* CLOCK_MONOTONIC */
} pending_t;

/* Settings of the command line that have contract defaults. */
typedef struct {
    double lease_seconds, heartbeat_seconds;
    int lock_timeout_ms;      /* bounded registry-lock wait (section 4.2), 10 s */
    uint64_t max_gap;         /* section 5.5 step 5, 65,536 */
    uint64_t replay_window_ms;
    size_t nonce_capacity;
    int drain_quiet_ms;       /* a stopping node's inbox must stay empty this long */
    int drain_max_ms;         /* ... but it stops waiting for that after this long */
    int linger_ms;            /* section 5.4: keep the entry until our last envelopes are read */
    long wait_timeout_ms;     /* for calls and confirmed sends of stdin commands */
    int quota;                /* --feature quota: honour the limits targets publish (ext_quota.c) */
    long quota_wait_ms;       /* how long a send waits for room (--quota-wait-ms, 10,000) */
} node_settings;

void node_default_settings(node_settings *s);

typedef struct node node_t;

struct node {
    /* configuration */
    char *root, *name;
    uint8_t key[ENV_KEY_LEN];
    char **allow;
    size_t nallow;
    char **services;
    size_t nservices;
    node_settings cfg;
    uint64_t max_payload;
    FILE *events; /* where the JSON event lines go */

    /* identity and lease */
    char id[UUID_TEXT_LEN + 1];
    uint8_t id_bytes[16];
    double startup;
    int registered, lost;
    const char *status; /* "online", then "leaving" */
    int64_t next_heartbeat_ms;
    uint64_t sealed;

    /* inbox */
    char *inbox_path;
    int inotify_fd;
    int retry_soon; /* a file was deferred: rescan shortly */
    int more;       /* the last scan left files for the next batch: rescan at once */
    char last_deferred[ENV_FILENAME_MAX]; /* reported once, not at every retry */
    int64_t next_id_refresh_ms;

    /* protocol state */
    link_state *links;
    size_t nlinks;
    replay_guard replay;
    id_cache_entry *ids;
    size_t nids;
    pending_t *pending;
    size_t npending;

    /* the one-shot call/send commands: their untagged wait ended (answer or timeout) */
    int oneshot_done;
    int oneshot_acked;
    jval *response; /* the SPC_RESPONSE of a one-shot call, or the ERROR about its MESSAGE */

    /* the control extension (ext_control.c); NULL when started without --operator */
    struct control_state *control;

    /* the quota extension's ledgers and buckets (ext_quota.c); a wait that overrides the
     * setting for one command (-1: none, 0: refuse at once) */
    struct quota_state *quota;
    long quota_wait_ms;

    /* the durable extension's state (ext_durable.c); NULL when it is off */
    struct durable_state *durable;

    /* an extra descriptor polled by node_step (the node command's stdin), -1 if none */
    int extra_fd;
    void (*on_extra)(node_t *n);

    /* extensions (section 9; ext_chunks.c, ext_reliable.c): FEATURE_* bits, their state */
    unsigned features;
    reasm_t reasm;
    chunk_piece *piece; /* the piece of the chunk being dispatched (inbox.c -> ext_chunks_dispatch) */
    reliable_state reliable;
};

#define FEATURE_CHUNKS 1u
#define FEATURE_RELIABLE 2u

typedef enum {
    DELIVER_OK = 0,
    DELIVER_UNAVAILABLE,   /* target missing, stale or leaving */
    DELIVER_ACCESS_DENIED, /* our name not in the target's allow */
    DELIVER_FAILED,        /* I/O error */
    DELIVER_QUOTA,         /* no room under the target's published limits in time */
} deliver_result;

/* What a delivery used: the sequence and the receiver instance it was sealed for. */
typedef struct deliver_info {
    uint64_t seq;
    uint8_t target_id[16];
    uint8_t tag[ENV_TAG_LEN]; /* the delivered envelope's authentication tag (what a next chunk names) */
} deliver_info;

/* Checks ROOT, creates ROOT/NAME/{inbox,tmp} and speed_registry/, loads the key.
 * 0 on success, else prints the error to stderr and returns -1. */
int node_init(node_t *n, const char *root, const char *keyfile, const char *name,
              const node_settings *cfg);
void node_add_allow(node_t *n, const char *name);
/* Enables the extensions (FEATURE_* bits) before registration. */
void node_enable_features(node_t *n, unsigned features);
void node_add_service(node_t *n, const char *service);
/* The "features" array of n's registry entry: every extension it speaks (empty when none). */
jval *node_features_json(const node_t *n);
int node_allows(const node_t *n, const char *name);

/* Registers under the registry lock (section 4.2). -1 with message on stderr. */
int node_register(node_t *n);
/* Rewrites the entry (status n->status, new heartbeat) if it is still ours; sets n->lost
 * when it is not. */
int node_renew(node_t *n);
/* Graceful stop (section 4.2): status leaving, process the inbox until it stays empty, EVENT
 * leave to online peers that allow us, linger until they read our last envelopes,
 * deregister. A signal during the stop cuts the waits short. */
void node_shutdown(node_t *n);
void node_free(node_t *n);

/* Delivers payload (a JSON object that already holds from/to) to target (section 5.4).
 * info may be NULL. */
deliver_result node_deliver(node_t *n, const char *target, int type, uint16_t flags,
                            const jval *payload, deliver_info *info, char *err, size_t errlen);
const char *deliver_error_code(deliver_result r);
/* The same for a plaintext already built (an extension's layout). With expect_id, only to that
 * target instance (DELIVER_UNAVAILABLE when the target restarted). */
deliver_result node_deliver_raw(node_t *n, const char *target, int type, uint16_t flags,
                                const uint8_t *text, size_t text_len, const uint8_t *expect_id,
                                deliver_info *info, char *err, size_t errlen);

/* Sends an SPC_REQUEST and returns at once. With a tag, the outcome is printed later on
 * n->events as {"event":"result","id":TAG,"result":...} or {"event":"call_error","id":TAG,
 * "errorCode":...,"errorMessage":...}; without (the one-shot call), n->oneshot_done is set and
 * n->response holds the answer (NULL on timeout). */
deliver_result node_call_async(node_t *n, const char *tag, const char *target, const char *service,
                    const jval *args, long timeout_ms, char *err, size_t errlen);
/* Sends a MESSAGE; with confirm, waits for its ACK like node_call_async waits for a response
 * ({"event":"ack",...} or {"event":"ack_timeout",...} for a tag). */
deliver_result node_send_message(node_t *n, const char *tag, const char *target, jval *data,
                                 int confirm, long timeout_ms, uint64_t *seq, char *err,
                                 size_t errlen);

/* Prints one JSON line on f and frees it. */
void node_emit(FILE *f, jval *line);
/* Diagnostics that are not part of the stdout contract: JSON lines on stderr. */
void node_report_info(jval *line);

/* Waits up to wait_ms for inbox activity (or a signal), renews the lease when due, and
 * processes the inbox. */
void node_step(node_t *n, int wait_ms);
/* Waits up to wait_ms for inotify or the extra descriptor (or a signal). */
void node_wait(node_t *n, int wait_ms);
/* Timers: the lease renewal, expired waits, the peers' ids. */
void node_tick(node_t *n);
/* Processes one bounded batch of the inbox without waiting. Returns how many files it looked
 * at (processed, rejected or deferred); sets n->more when more are waiting. */
size_t node_scan_inbox(node_t *n);

#endif
