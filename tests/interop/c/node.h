/* node.h - one SPEED node instance: registration and lease, delivery (section 5.4),
 * reception (section 5.5), replay protection, demo services and SPC (section 5.6, 6).
 * Single-threaded: everything runs from node_step(). */
#ifndef SPEED_NODE_H
#define SPEED_NODE_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "envelope.h"
#include "json.h"
#include "util.h"

#define RUNTIME_NAME "speed_c_node-c/0.1"

/* Set by the SIGINT/SIGTERM handler installed by node_install_signals(). */
extern volatile sig_atomic_t g_stop;
void node_install_signals(void);

typedef struct {
    char name[NAME_MAX_LEN + 1];
    uint64_t next_seq;
} link_state;

typedef struct {
    uint8_t id[16];
    uint64_t last_seq;
} peer_state;

typedef struct {
    uint8_t nonce[ENV_NONCE_LEN];
    uint64_t expire_ms;
} nonce_entry;

typedef struct {
    char name[NAME_MAX_LEN + 1];
    uint8_t id[16];
} id_cache_entry;

typedef struct {
    char request_id[UUID_TEXT_LEN + 1];
    char *tag; /* the caller's label, echoed in the result line */
    int64_t deadline_ms;
} pending_call;

typedef struct node node_t;

struct node {
    /* configuration */
    char *root, *name;
    uint8_t key[ENV_KEY_LEN];
    char **allow;
    size_t nallow;
    char **services;
    size_t nservices;
    double lease_seconds, heartbeat_seconds;
    uint64_t max_payload;
    uint64_t replay_window_ms;
    FILE *events; /* where message/rejected JSON lines go */

    /* identity and lease */
    char id[UUID_TEXT_LEN + 1];
    uint8_t id_bytes[16];
    double startup;
    int registered, lost;
    int64_t next_heartbeat_ms;
    uint64_t sealed;

    /* inbox */
    char *inbox_path;
    int inotify_fd;
    int retry_soon; /* a file was deferred: rescan shortly */
    int64_t next_id_refresh_ms;

    /* protocol state */
    link_state *links;
    size_t nlinks;
    peer_state *peers;
    size_t npeers;
    nonce_entry *nonces;
    size_t nnonces;
    id_cache_entry *ids;
    size_t nids;

    /* what a call/send command waits for */
    const char *wait_request_id;
    jval *response; /* the SPC_RESPONSE payload once received */
    const char *wait_ack_from;
    uint64_t wait_ack_seq;
    int got_ack;

    /* asynchronous calls of the interactive node command */
    pending_call *calls;
    size_t ncalls;

    /* an extra descriptor polled by node_step (the node command's stdin), -1 if none */
    int extra_fd;
    void (*on_extra)(node_t *n);
};

typedef enum {
    DELIVER_OK = 0,
    DELIVER_UNAVAILABLE,   /* target missing or stale */
    DELIVER_ACCESS_DENIED, /* our name not in the target's allow */
    DELIVER_FAILED,        /* I/O error */
} deliver_result;

/* Checks ROOT, creates ROOT/NAME/{inbox,tmp} and speed_registry/, loads the key.
 * 0 on success, else prints the error to stderr and returns -1. */
int node_init(node_t *n, const char *root, const char *keyfile, const char *name);
void node_add_allow(node_t *n, const char *name);
void node_add_service(node_t *n, const char *service);
int node_allows(const node_t *n, const char *name);

/* Registers under the registry lock (section 4.2). -1 with message on stderr. */
int node_register(node_t *n);
/* Renewal with fencing by id; sets n->lost when the entry is not ours. */
int node_renew(node_t *n);
/* Graceful stop: status leaving, EVENT leave to online peers that allow us, deregister. */
void node_shutdown(node_t *n);
void node_free(node_t *n);

/* Delivers payload (a JSON object that already holds from/to) to target. */
deliver_result node_deliver(node_t *n, const char *target, int type, uint16_t flags,
                            const jval *payload, uint64_t *seq_out, char *err, size_t errlen);

/* Sends an SPC_REQUEST and returns at once; the outcome is printed later on n->events as
 * {"event":"result","id":TAG,"result":...} or {"event":"call_error","id":TAG,
 * "errorCode":...,"errorMessage":...} (TIMEOUT after timeout_ms). */
void node_call_async(node_t *n, const char *tag, const char *target, const char *service,
                     const jval *args, long timeout_ms);
/* Prints one JSON line on f and frees it. */
void node_emit(FILE *f, jval *line);

/* Waits up to wait_ms for inbox activity (or a signal), renews the lease when due, and
 * processes every file in the inbox. */
void node_step(node_t *n, int wait_ms);
/* Processes the inbox once, without waiting. */
void node_scan_inbox(node_t *n);

#endif
