/* node.c - setup, registration and lease of a node, and its wait loop (see node.h). */
#define _GNU_SOURCE
#include "node.h"
#include "ext_control.h"
#include "ext_durable.h"
#include "ext_quota.h"
#include "keyfile.h"
#include "node_parts.h"
#include "registry.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#define RESCAN_INTERVAL_MS 1000
#define RETRY_SOON_MS 20

void node_default_settings(node_settings *s)
{
    memset(s, 0, sizeof *s);
    s->lease_seconds = 30;
    s->heartbeat_seconds = 5;
    s->lock_timeout_ms = REGISTRY_DEFAULT_LOCK_TIMEOUT_MS;
    s->max_gap = REPLAY_DEFAULT_MAX_GAP;
    s->replay_window_ms = REPLAY_DEFAULT_WINDOW_MS;
    s->nonce_capacity = REPLAY_DEFAULT_NONCE_CAPACITY;
    s->drain_quiet_ms = 500;
    s->drain_max_ms = 30000;
    s->linger_ms = 10000;
    s->wait_timeout_ms = 10000;
    s->quota_wait_ms = 10000;
}

/* ---------- setup ---------- */

/* Creates dir (0700) if missing; refuses symlinks, non-directories and foreign owners. */
static int ensure_dir(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno != ENOENT || mkdir(path, 0700) != 0) {
            if (errno == EEXIST)
                return ensure_dir(path);
            fprintf(stderr, "error: cannot create directory %s: %s\n", path, strerror(errno));
            return -1;
        }
        return 0;
    }
    if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "error: %s is a symbolic link or not a directory\n", path);
        return -1;
    }
    if (st.st_uid != geteuid()) {
        fprintf(stderr, "error: %s is owned by another user (uid %u)\n", path,
                (unsigned)st.st_uid);
        return -1;
    }
    return 0;
}

static int check_root(const char *root)
{
    struct stat st;
    if (lstat(root, &st) != 0) {
        if (errno == ENOENT && mkdir(root, 0700) == 0)
            return 0;
        fprintf(stderr, "error: communication directory %s: %s\n", root, strerror(errno));
        return -1;
    }
    if (S_ISLNK(st.st_mode)) {
        fprintf(stderr, "error: communication directory %s is a symbolic link\n", root);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "error: communication directory %s is not a directory\n", root);
        return -1;
    }
    if (st.st_uid != geteuid()) {
        fprintf(stderr, "error: communication directory %s is owned by another user\n", root);
        return -1;
    }
    if (st.st_mode & 022) {
        fprintf(stderr,
                "error: communication directory %s is writable by group or others "
                "(mode %03o); run: chmod 700 %s\n",
                root, (unsigned)(st.st_mode & 0777), root);
        return -1;
    }
    return 0;
}

int node_init(node_t *n, const char *root, const char *keyfile, const char *name,
              const node_settings *cfg)
{
    memset(n, 0, sizeof *n);
    n->inotify_fd = -1;
    n->extra_fd = -1;
    n->quota_wait_ms = -1;
    n->cfg = *cfg;
    n->status = "online";
    n->max_payload = ENV_DEFAULT_MAX_PAYLOAD;
    n->events = stdout;
    replay_init(&n->replay, cfg->replay_window_ms, cfg->max_gap, cfg->nonce_capacity);
    if (!name_valid(name)) {
        fprintf(stderr, "error: invalid node name '%s': %s\n", name, NAME_RULE);
        return -1;
    }
    char err[256];
    if (keyfile_load(keyfile, n->key, err, sizeof err) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return -1;
    }
    n->root = xstrdup(root);
    n->name = xstrdup(name);
    if (check_root(root) != 0)
        return -1;
    char *reg = xasprintf("%s/speed_registry", root);
    char *home = xasprintf("%s/%s", root, name);
    char *tmp = xasprintf("%s/%s/tmp", root, name);
    n->inbox_path = xasprintf("%s/%s/inbox", root, name);
    int rc = (ensure_dir(reg) || ensure_dir(home) || ensure_dir(n->inbox_path) ||
              ensure_dir(tmp))
                 ? -1
                 : 0;
    free(reg);
    free(home);
    free(tmp);
    if (rc)
        return -1;
    n->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (n->inotify_fd >= 0 &&
        inotify_add_watch(n->inotify_fd, n->inbox_path, IN_CREATE | IN_MOVED_TO) < 0) {
        close(n->inotify_fd); /* rescans alone still deliver everything */
        n->inotify_fd = -1;
    }
    uuid_v4(n->id);
    uuid_parse(n->id, n->id_bytes);
    return 0;
}

static int in_list(char **list, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i], s) == 0)
            return 1;
    return 0;
}

void node_add_allow(node_t *n, const char *name)
{
    if (in_list(n->allow, n->nallow, name))
        return;
    n->allow = xrealloc(n->allow, (n->nallow + 1) * sizeof *n->allow);
    n->allow[n->nallow++] = xstrdup(name);
}

void node_add_service(node_t *n, const char *service)
{
    if (in_list(n->services, n->nservices, service))
        return;
    n->services = xrealloc(n->services, (n->nservices + 1) * sizeof *n->services);
    n->services[n->nservices++] = xstrdup(service);
}

int node_allows(const node_t *n, const char *name) { return in_list(n->allow, n->nallow, name); }

void node_free(node_t *n)
{
    for (size_t i = 0; i < n->nallow; i++)
        free(n->allow[i]);
    for (size_t i = 0; i < n->nservices; i++)
        free(n->services[i]);
    free(n->allow);
    free(n->services);
    free(n->links);
    replay_free(&n->replay);
    if (n->features & FEATURE_CHUNKS)
        reasm_free(&n->reasm);
    if (n->features & FEATURE_RELIABLE)
        reliable_free(&n->reliable);
    chunk_piece_free(n->piece);
    free(n->ids);
    for (size_t i = 0; i < n->npending; i++)
        free(n->pending[i].tag);
    free(n->pending);
    free(n->root);
    free(n->name);
    free(n->inbox_path);
    json_free(n->response);
    control_free(n);
    quota_free(n);
    durable_free(n);
    if (n->inotify_fd >= 0)
        close(n->inotify_fd);
    sodium_memzero(n->key, sizeof n->key);
}

/* ---------- registry ---------- */

static jval *str_array(char **list, size_t n)
{
    jval *a = json_arr();
    for (size_t i = 0; i < n; i++)
        json_push(a, json_str(list[i]));
    return a;
}

/* The registry fields of the extensions this node speaks (section 9): one "features" array
 * that each extension appends its name to, plus each extension's own fields. */
static void extension_fields(const node_t *n, jval *entry)
{
    jval *features = json_arr();
    ext_entry_fields(n, entry, features);     /* chunks, reliable */
    durable_entry_fields(n, entry, features); /* durable */
    control_entry_fields(n, entry, features); /* control */
    if (features->n)
        json_set(entry, "features", features);
    else
        json_free(features); /* a v1-only node: no "features" (section 9) */
}

jval *node_features_json(const node_t *n)
{
    jval *scratch = json_obj();
    extension_fields(n, scratch);
    const jval *f = json_get(scratch, "features");
    jval *out = f ? json_clone(f) : json_arr();
    json_free(scratch);
    return out;
}

/* The entry of section 4; "features" (and their fields) only when extensions are on (section 9). */
static jval *build_entry(const node_t *n)
{
    jval *e = json_obj();
    json_set(e, "name", json_str(n->name));
    json_set(e, "id", json_str(n->id));
    json_set(e, "pid", json_int(getpid()));
    json_set(e, "host", json_str(host_name()));
    json_set(e, "status", json_str(n->status));
    json_set(e, "startupTimestamp", json_num(n->startup));
    json_set(e, "lastHeartbeat", json_num(now_wall()));
    json_set(e, "leaseSeconds", json_num(n->cfg.lease_seconds));
    json_set(e, "heartbeatSeconds", json_num(n->cfg.heartbeat_seconds));
    json_set(e, "protocol", json_int(1));
    json_set(e, "groups", json_arr());
    json_set(e, "allow", str_array(n->allow, n->nallow));
    json_set(e, "services", str_array(n->services, n->nservices));
    json_set(e, "runtime", json_str(RUNTIME_NAME));
    if (host_boot_id()[0])
        json_set(e, "bootId", json_str(host_boot_id()));
    json_set(e, "bootTimeHeartbeat", json_num(now_boottime()));
    json_set(e, "envelopesSealed", json_int((int64_t)n->sealed));
    extension_fields(n, e);
    return e;
}

static char *node_path(const node_t *n) { return xasprintf("%s/speed_registry/%s.node", n->root, n->name); }

static void schedule_heartbeat(node_t *n)
{
    n->next_heartbeat_ms = now_mono_ms() + (int64_t)(n->cfg.heartbeat_seconds * 1000);
}

int node_register(node_t *n)
{
    char err[512];
    int lock = registry_lock(n->root, n->cfg.lock_timeout_ms, err, sizeof err);
    if (lock < 0) {
        fprintf(stderr, "error: cannot register '%s': %s\n", n->name, err);
        return -1;
    }
    int exists = 0, rc = -1;
    jval *old = registry_read(n->root, n->name, &exists);
    if (old && !registry_is_stale(old)) {
        jval *pid = json_get(old, "pid");
        const char *host = json_get_str(old, "host");
        fprintf(stderr, "error: name in use: node '%s' is registered by pid %s on host %s\n",
                n->name, pid && pid->type == J_NUM ? pid->numtext : "?", host ? host : "?");
        goto out;
    }
    if (exists) { /* stale or unparseable: reclaim */
        char *path = node_path(n);
        if (unlink(path) != 0 && errno != ENOENT) {
            fprintf(stderr, "error: cannot reclaim stale entry %s: %s\n", path, strerror(errno));
            free(path);
            goto out;
        }
        fprintf(stderr, "info: reclaimed stale registry entry of '%s'\n", n->name);
        free(path);
    }
    n->startup = now_wall();
    jval *e = build_entry(n);
    if (registry_write(n->root, n->name, e) != 0) {
        fprintf(stderr, "error: cannot write registry entry: %s\n", strerror(errno));
    } else {
        n->registered = 1;
        schedule_heartbeat(n);
        rc = 0;
    }
    json_free(e);
out:
    json_free(old);
    registry_unlock(lock);
    return rc;
}

int node_renew(node_t *n)
{
    schedule_heartbeat(n);
    char err[512];
    int lock = registry_lock(n->root, n->cfg.lock_timeout_ms, err, sizeof err);
    if (lock < 0) {
        fprintf(stderr, "warning: registry entry of '%s' not renewed: %s\n", n->name, err);
        return -1;
    }
    int exists = 0, rc = -1;
    jval *cur = registry_read(n->root, n->name, &exists);
    const char *id = cur ? json_get_str(cur, "id") : NULL;
    if (!id || strcmp(id, n->id) != 0) {
        n->lost = 1;
        n->registered = 0;
        fprintf(stderr, "error: lease lost: registry entry of '%s' is no longer ours\n",
                n->name);
    } else {
        jval *e = build_entry(n);
        rc = registry_write(n->root, n->name, e);
        if (rc != 0)
            fprintf(stderr, "warning: cannot renew registry entry: %s\n", strerror(errno));
        json_free(e);
    }
    json_free(cur);
    registry_unlock(lock);
    return rc;
}

void node_deregister(node_t *n)
{
    char err[512];
    int lock = registry_lock(n->root, n->cfg.lock_timeout_ms, err, sizeof err);
    if (lock < 0) {
        fprintf(stderr, "warning: registry entry of '%s' left to expire: %s\n", n->name, err);
        return;
    }
    int exists = 0;
    jval *cur = registry_read(n->root, n->name, &exists);
    const char *id = cur ? json_get_str(cur, "id") : NULL;
    if (id && strcmp(id, n->id) == 0) {
        char *path = node_path(n);
        unlink(path);
        free(path);
    }
    json_free(cur);
    registry_unlock(lock);
    n->registered = 0;
}

/* ---------- the wait loop ---------- */

void node_wait(node_t *n, int wait_ms)
{
    struct pollfd pfd[2] = {{n->inotify_fd, POLLIN, 0}, {n->extra_fd, POLLIN, 0}};
    int r = wait_events(pfd, 2, wait_ms); /* negative fds are ignored */
    if (r > 0 && (pfd[0].revents & POLLIN)) {
        char buf[8192]; /* events are only hints: drain them, then rescan */
        while (read(n->inotify_fd, buf, sizeof buf) > 0) {
        }
    }
    if (r > 0 && pfd[1].revents && n->on_extra)
        n->on_extra(n);
}

void node_enable_features(node_t *n, unsigned features)
{
    n->features = features;
    if (features & FEATURE_CHUNKS)
        reasm_init(&n->reasm, CHUNKS_MAX_MESSAGE, CHUNKS_BUDGET_TOTAL, CHUNKS_BUDGET_SENDER, CHUNKS_TIMEOUT_MS);
    if (features & FEATURE_RELIABLE)
        reliable_init(&n->reliable, RELIABLE_REMEMBER);
}

void node_tick(node_t *n)
{
    node_expire_waits(n);
    ext_chunks_tick(n);
    node_refresh_peer_ids(n);
    if (n->registered && now_mono_ms() >= n->next_heartbeat_ms)
        node_renew(n);
}

void node_step(node_t *n, int wait_ms)
{
    node_tick(n);
    if (n->lost)
        return;
    int timeout = wait_ms;
    if (timeout > RESCAN_INTERVAL_MS)
        timeout = RESCAN_INTERVAL_MS;
    if (n->retry_soon && timeout > RETRY_SOON_MS)
        timeout = RETRY_SOON_MS;
    if (n->more)
        timeout = 0;
    int64_t until_hb = n->next_heartbeat_ms - now_mono_ms();
    if (n->registered && until_hb < timeout)
        timeout = until_hb < 0 ? 0 : (int)until_hb;
    node_wait(n, timeout);
    node_tick(n);
    int control = control_scan(n); /* first: a revoke found now is in force for the inbox */
    node_scan_inbox(n);
    n->more |= control & 1;
    n->retry_soon |= control >> 1;
}
