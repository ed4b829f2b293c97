/* ext_control.c - the `control` extension in the node (see ext_control.h): the control
 * directory, one file's checks in order (steps 1-3 with the inbox's own file checks, then
 * ext_control_judge.c), removal, applying, publishing, reporting and answering. */
#define _GNU_SOURCE
#include "ext_control.h"
#include "node.h"
#include "node_parts.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------- the node ---------- */

static int node_source_ok(void *ctx, const char *from, const uint8_t src[16])
{
    return node_sender_id_matches(ctx, from, src);
}

int control_init(node_t *n, const char *const *operators, int count)
{
    if (count == 0)
        return 0;
    control_state *c = control_state_new();
    n->control = c;
    for (int i = 0; i < count; i++)
        if (control_trust(c, operators[i]) != 0) {
            fprintf(stderr, "error: '%.60s' is not an operator public key (standard base64 of 32 "
                            "bytes)\n", operators[i]);
            return -1;
        }
    c->dir = xasprintf("%s/%s/control", n->root, n->name);
    struct stat st;
    if (mkdir(c->dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "error: cannot create %s: %s\n", c->dir, strerror(errno));
        return -1;
    }
    if (lstat(c->dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022)) {
        fprintf(stderr, "error: %s is not a private directory of ours\n", c->dir);
        return -1;
    }
    if (n->inotify_fd >= 0) /* hints only: every step lists the directory anyway */
        inotify_add_watch(n->inotify_fd, c->dir, IN_CREATE | IN_MOVED_TO);
    return 0;
}

void control_free(node_t *n)
{
    control_state_free(n->control);
    n->control = NULL;
}

static jval *allow_array(const node_t *n)
{
    jval *a = json_arr();
    for (size_t i = 0; i < n->nallow; i++)
        json_push(a, json_str(n->allow[i]));
    return a;
}

void control_entry_fields(const node_t *n, jval *entry, jval *features)
{
    if (!n->control)
        return;
    json_push(features, json_str("control"));
    json_set(entry, "operators", control_operators_json(n->control));
}

static int revoke_allow(node_t *n, const char *name)
{
    for (size_t i = 0; i < n->nallow; i++)
        if (strcmp(n->allow[i], name) == 0) {
            free(n->allow[i]);
            memmove(&n->allow[i], &n->allow[i + 1], (n->nallow - i - 1) * sizeof *n->allow);
            n->nallow--;
            return 1;
        }
    return 0;
}

/* One {"event":"control",...} line per control file (the C node's journal). */
static void report(node_t *n, const char *file, const char *peer, const control_verdict *v,
                   const char *command)
{
    jval *l = json_obj();
    json_set(l, "event", json_str("control"));
    json_set(l, "file", json_str(file));
    json_set(l, "peer", json_str(peer[0] ? peer : "?"));
    json_set(l, "requestId", v->request_id[0] ? json_str(v->request_id) : json_null());
    json_set(l, "command", command ? json_str(command) : json_null());
    json_set(l, "outcome", json_str(v->reason ? "rejected" : "applied"));
    json_set(l, "reason", v->reason ? json_str(v->reason) : json_null());
    json_set(l, "operator", v->operator_fp[0] ? json_str(v->operator_fp) : json_null());
    node_emit(n->events, l);
}

/* An ordinary SPC_RESPONSE (section 5.4): only to a requester that allows us. */
static void answer_refusal(node_t *n, const char *requester, const control_verdict *v)
{
    const char *r = v->reason;
    const char *code = strcmp(r, "control_malformed") == 0 ? "INVALID_ARGUMENTS"
                       : strcmp(r, "control_expired") == 0 ? "TIMEOUT"
                       : strcmp(r, "control_refused") == 0 ? "EXECUTION_FAILED"
                                                           : "ACCESS_DENIED";
    char *msg = xasprintf("%s: %s", r, v->detail);
    node_respond(n, requester, v->request_id, code, msg, NULL);
    free(msg);
}

/* Apply, publish, report, answer (then stop, for stop). */
static void apply(node_t *n, const char *file, const char *requester, control_verdict *v)
{
    const char *command = json_get_str(v->request, "command");
    const char *peer = json_get_str(json_get(v->request, "arguments"), "peer");
    jval *result = json_obj();
    json_set(result, "command", json_str(command));
    if (peer) {
        int changed = strcmp(command, "allow") == 0 ? !node_allows(n, peer) : node_allows(n, peer);
        if (strcmp(command, "allow") == 0)
            node_add_allow(n, peer);
        else
            revoke_allow(n, peer);
        int published = changed ? node_renew(n) == 0 : 1;
        json_set(result, "peer", json_str(peer));
        json_set(result, "changed", json_bool(changed));
        json_set(result, "published", json_bool(published));
        json_set(result, "allow", allow_array(n));
    } else if (strcmp(command, "lift") == 0) {
        /* this node keeps no threat scores (its quota side is the sender's): nothing to lift */
        json_set(result, "sender", json_str(json_get_str(json_get(v->request, "arguments"), "sender")));
        json_set(result, "lifted", json_bool(0));
        json_set(result, "scores", json_bool(0));
    } else if (strcmp(command, "stop") == 0) {
        json_set(result, "stopping", json_bool(1));
    } else {
        jval *services = json_arr(), *features = node_features_json(n); /* every extension */
        for (size_t i = 0; i < n->nservices; i++)
            json_push(services, json_str(n->services[i]));
        json_set(result, "name", json_str(n->name));
        json_set(result, "id", json_str(n->id));
        json_set(result, "status", json_str(n->status));
        json_set(result, "allow", allow_array(n));
        json_set(result, "services", services);
        json_set(result, "groups", json_arr());
        json_set(result, "operators", control_operators_json(n->control));
        json_set(result, "features", features);
        json_set(result, "pid", json_int(getpid()));
    }
    report(n, file, requester, v, command);
    node_respond(n, requester, v->request_id, NULL, NULL, result);
    if (strcmp(command, "stop") == 0)
        g_stop = 1; /* the graceful stop of section 4.2, as after SIGTERM */
}

/* One file: 1 when it was judged, 2 when it must be looked at again soon, 0 when gone. */
static int handle(node_t *n, int dfd, const char *name)
{
    inbox_file f = {.name = name, .size = -1};
    control_verdict v;
    memset(&v, 0, sizeof v);
    uint64_t seq = 0;
    uint8_t *pt = NULL, nonce[ENV_NONCE_LEN];
    size_t pt_len = 0;
    jval *p = NULL;
    const char *reason; /* 1 */
    if (env_parse_filename(name, f.sender, &seq) != 0) {
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
            return 0; /* a directory: not ours to remove (as in the inbox) */
        reason = "control_malformed";
    } else {
        reason = node_open_file(n, dfd, &f, CONTROL_MAX_PAYLOAD, &pt, &pt_len, nonce); /* 2-3 */
        if (reason == VANISHED || reason == IGNORED)
            return 0;
        if (reason == DEFER)
            return 2;
        if (!reason) /* 4-5 */
            reason = control_check_envelope(&f.h, f.sender, pt, pt_len, n->name, n->id_bytes, node_source_ok,
                                    n, now_wall_ms(), n->cfg.replay_window_ms, &p);
        free(pt);
        if (!reason) { /* 6-17; the request's expiry on the clock of now */
            control_judge(n->control, n->name, n->id_bytes, f.sender, p, now_wall_ms(), &v);
            reason = v.reason;
        }
    }
    v.reason = reason;
    if (unlinkat(dfd, name, 0) != 0) { /* withdrawn by its requester first: nothing happens */
        json_free(p);
        json_free(v.request);
        return 1;
    }
    if (!reason)
        apply(n, name, f.sender, &v);
    else {
        report(n, name, f.sender, &v, NULL);
        if (v.request_id[0] && p) /* the envelope is authentic: tell the requester why */
            answer_refusal(n, f.sender, &v);
    }
    json_free(p);
    json_free(v.request);
    return 1;
}

int control_scan(node_t *n)
{
    control_state *c = n->control;
    if (!c || n->lost)
        return 0;
    DIR *d = opendir(c->dir);
    if (!d)
        return 0;
    int flags = 0;
    unsigned judged = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && !n->lost) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (judged == CONTROL_BATCH) { /* the inbox is never starved by a flood */
            flags |= 1;
            break;
        }
        int r = handle(n, dirfd(d), de->d_name);
        if (r == 2)
            flags |= 2;
        judged += r == 1;
    }
    closedir(d);
    return flags;
}
