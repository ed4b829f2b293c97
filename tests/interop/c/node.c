/* node.c - see node.h */
#define _GNU_SOURCE
#include "node.h"
#include "keyfile.h"
#include "registry.h"

#include <dirent.h>
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
#define MAX_RESEAL_ATTEMPTS 16
/* A file with a second link that is younger than this is taken to be mid-delivery by a
 * link()-then-unlink() sender and is looked at again later, not rejected. */
#define LINK_GRACE_SECONDS 2.0

/* Marker returned by check_file for "not now": the file vanished or is mid-delivery. */
static const char DEFER[] = "";

volatile sig_atomic_t g_stop;
static sigset_t g_wait_mask; /* mask used while waiting in ppoll: signals unblocked */

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

void node_install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* Block them outside ppoll so that a signal cannot slip in between a check of
     * g_stop and the wait. */
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigprocmask(SIG_BLOCK, &block, &g_wait_mask);
    sigdelset(&g_wait_mask, SIGINT);
    sigdelset(&g_wait_mask, SIGTERM);
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

int node_init(node_t *n, const char *root, const char *keyfile, const char *name)
{
    memset(n, 0, sizeof *n);
    n->inotify_fd = -1;
    n->extra_fd = -1;
    n->lease_seconds = 30;
    n->heartbeat_seconds = 5;
    n->max_payload = ENV_DEFAULT_MAX_PAYLOAD;
    n->replay_window_ms = 60000;
    n->events = stdout;
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
    free(n->peers);
    free(n->nonces);
    free(n->ids);
    for (size_t i = 0; i < n->ncalls; i++)
        free(n->calls[i].tag);
    free(n->calls);
    free(n->root);
    free(n->name);
    free(n->inbox_path);
    json_free(n->response);
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

static jval *build_entry(const node_t *n, const char *status)
{
    jval *e = json_obj();
    json_set(e, "name", json_str(n->name));
    json_set(e, "id", json_str(n->id));
    json_set(e, "pid", json_int(getpid()));
    json_set(e, "host", json_str(host_name()));
    json_set(e, "status", json_str(status));
    json_set(e, "startupTimestamp", json_num(n->startup));
    json_set(e, "lastHeartbeat", json_num(now_wall()));
    json_set(e, "leaseSeconds", json_num(n->lease_seconds));
    json_set(e, "heartbeatSeconds", json_num(n->heartbeat_seconds));
    json_set(e, "protocol", json_int(1));
    json_set(e, "groups", json_arr());
    json_set(e, "allow", str_array(n->allow, n->nallow));
    json_set(e, "services", str_array(n->services, n->nservices));
    json_set(e, "runtime", json_str(RUNTIME_NAME));
    if (host_boot_id()[0])
        json_set(e, "bootId", json_str(host_boot_id()));
    json_set(e, "bootTimeHeartbeat", json_num(now_boottime()));
    json_set(e, "envelopesSealed", json_int((int64_t)n->sealed));
    return e;
}

static char *node_path(const node_t *n) { return xasprintf("%s/speed_registry/%s.node", n->root, n->name); }

int node_register(node_t *n)
{
    int lock = registry_lock(n->root);
    if (lock < 0) {
        fprintf(stderr, "error: cannot lock %s/speed_registry/.lock: %s\n", n->root,
                strerror(errno));
        return -1;
    }
    int exists = 0, rc = -1;
    jval *old = registry_read(n->root, n->name, &exists);
    if (old && !registry_is_stale(old)) {
        uint64_t pid = 0;
        json_get_u64(old, "pid", &pid);
        const char *host = json_get_str(old, "host");
        fprintf(stderr, "error: name in use: node '%s' is registered by pid %llu on host %s\n",
                n->name, (unsigned long long)pid, host ? host : "?");
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
    jval *e = build_entry(n, "online");
    if (registry_write(n->root, n->name, e) != 0) {
        fprintf(stderr, "error: cannot write registry entry: %s\n", strerror(errno));
    } else {
        n->registered = 1;
        n->next_heartbeat_ms = now_mono_ms() + (int64_t)(n->heartbeat_seconds * 1000);
        rc = 0;
    }
    json_free(e);
out:
    json_free(old);
    registry_unlock(lock);
    return rc;
}

/* Rewrites our entry with the given status if it is still ours; sets lost otherwise. */
static int rewrite_entry(node_t *n, const char *status)
{
    int lock = registry_lock(n->root);
    if (lock < 0) {
        fprintf(stderr, "warning: cannot lock registry: %s\n", strerror(errno));
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
        jval *e = build_entry(n, status);
        rc = registry_write(n->root, n->name, e);
        if (rc != 0)
            fprintf(stderr, "warning: cannot renew registry entry: %s\n", strerror(errno));
        json_free(e);
    }
    json_free(cur);
    registry_unlock(lock);
    return rc;
}

int node_renew(node_t *n)
{
    n->next_heartbeat_ms = now_mono_ms() + (int64_t)(n->heartbeat_seconds * 1000);
    return rewrite_entry(n, "online");
}

static void deregister(node_t *n)
{
    int lock = registry_lock(n->root);
    if (lock < 0)
        return;
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

static jval *base_payload(const node_t *n, const char *to)
{
    jval *p = json_obj();
    json_set(p, "from", json_str(n->name));
    json_set(p, "to", json_str(to));
    return p;
}

void node_shutdown(node_t *n)
{
    if (!n->registered)
        return;
    if (rewrite_entry(n, "leaving") == 0) {
        for (size_t i = 0; i < n->nallow; i++) {
            int exists = 0;
            jval *e = registry_read(n->root, n->allow[i], &exists);
            int ok = e && registry_is_online(e) && registry_allows(e, n->name);
            json_free(e);
            if (!ok)
                continue;
            jval *p = base_payload(n, n->allow[i]);
            json_set(p, "event", json_str("leave"));
            char err[256];
            node_deliver(n, n->allow[i], ENV_EVENT, 0, p, NULL, err, sizeof err);
            json_free(p);
        }
    }
    if (!n->lost)
        deregister(n);
}

/* ---------- delivery (section 5.4) ---------- */

static link_state *link_for(node_t *n, const char *target)
{
    for (size_t i = 0; i < n->nlinks; i++)
        if (strcmp(n->links[i].name, target) == 0)
            return &n->links[i];
    n->links = xrealloc(n->links, (n->nlinks + 1) * sizeof *n->links);
    link_state *l = &n->links[n->nlinks++];
    snprintf(l->name, sizeof l->name, "%s", target);
    l->next_seq = 1;
    return l;
}

static int open_dir_at(int dirfd, const char *path)
{
    return openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* Moves tmp/<fname> to inbox/<fname>, never replacing a file. renameat2(RENAME_NOREPLACE)
 * is atomic, so a receiver never sees the file with two links; where the file system lacks
 * it (or SPEED_C_NODE_DELIVERY=link), link() then unlink() of the temporary. 0 or errno. */
static int move_no_replace(int tmpfd, int inboxfd, const char *fname)
{
    const char *mode = getenv("SPEED_C_NODE_DELIVERY");
    if (!mode || strcmp(mode, "link") != 0) {
        if (renameat2(tmpfd, fname, inboxfd, fname, RENAME_NOREPLACE) == 0)
            return 0;
        if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
            return errno;
    }
    if (linkat(tmpfd, fname, inboxfd, fname, 0) != 0)
        return errno;
    unlinkat(tmpfd, fname, 0);
    return 0;
}

deliver_result node_deliver(node_t *n, const char *target, int type, uint16_t flags,
                            const jval *payload, uint64_t *seq_out, char *err, size_t errlen)
{
    /* 1. target entry, live */
    int exists = 0;
    jval *entry = registry_read(n->root, target, &exists);
    if (!entry || registry_is_stale(entry)) {
        snprintf(err, errlen, "node %s is not available", target);
        json_free(entry);
        return DELIVER_UNAVAILABLE;
    }
    /* 2. outbound authorization */
    if (!registry_allows(entry, n->name)) {
        snprintf(err, errlen, "ACCESS_DENIED: node %s does not allow %s", target, n->name);
        json_free(entry);
        return DELIVER_ACCESS_DENIED;
    }
    uint8_t target_id[16];
    if (uuid_parse(json_get_str(entry, "id"), target_id) != 0) {
        snprintf(err, errlen, "node %s is not available (registry entry has a bad id)", target);
        json_free(entry);
        return DELIVER_UNAVAILABLE;
    }
    json_free(entry);

    deliver_result res = DELIVER_FAILED;
    int rootfd = -1, homefd = -1, tmpfd = -1, inboxfd = -1;
    rootfd = open(n->root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (rootfd >= 0)
        homefd = open_dir_at(rootfd, target);
    if (homefd >= 0) {
        tmpfd = open_dir_at(homefd, "tmp");
        inboxfd = open_dir_at(homefd, "inbox");
    }
    if (tmpfd < 0 || inboxfd < 0) {
        snprintf(err, errlen, "cannot open %s/%s/{tmp,inbox}: %s", n->root, target,
                 strerror(errno));
        goto out;
    }

    link_state *link = link_for(n, target);
    size_t text_len = 0;
    char *text = json_dump(payload, &text_len);
    env_header h = {0};
    h.version = ENV_VERSION;
    h.type = (uint8_t)type;
    h.flags = flags;
    h.header_length = ENV_HEADER_LEN;
    h.sequence = link->next_seq;
    memcpy(h.source_id, n->id_bytes, 16);
    memcpy(h.target_id, target_id, 16);

    for (int attempt = 0; attempt < MAX_RESEAL_ATTEMPTS; attempt++) {
        uint8_t nonce[ENV_NONCE_LEN];
        randombytes_buf(nonce, sizeof nonce);
        h.timestamp_ms = now_wall_ms();
        size_t env_len = 0;
        uint8_t *env = env_seal(n->key, &h, nonce, (const uint8_t *)text, text_len, &env_len);
        n->sealed++;
        char fname[ENV_FILENAME_MAX];
        env_filename(fname, sizeof fname, n->name, n->id_bytes, h.sequence, nonce);

        /* 3. write the temporary file */
        int fd = openat(tmpfd, fname, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                        0600);
        if (fd < 0) {
            free(env);
            if (errno == EEXIST)
                continue; /* reseal with a new nonce */
            snprintf(err, errlen, "cannot create %s/%s/tmp/%s: %s", n->root, target, fname,
                     strerror(errno));
            break;
        }
        int werr = 0;
        if (write_all(fd, env, env_len) != 0)
            werr = errno;
        if (close(fd) != 0 && !werr)
            werr = errno;
        free(env);
        if (werr) {
            unlinkat(tmpfd, fname, 0);
            snprintf(err, errlen, "writing envelope for %s failed: %s", target, strerror(werr));
            break;
        }
        /* 4. move into the inbox without ever replacing a file */
        int e = move_no_replace(tmpfd, inboxfd, fname);
        if (e) {
            unlinkat(tmpfd, fname, 0);
            if (e == EEXIST)
                continue; /* reseal with a new nonce */
            snprintf(err, errlen, "moving envelope into %s/inbox failed: %s", target,
                     strerror(e));
            break;
        }
        if (seq_out)
            *seq_out = h.sequence;
        link->next_seq++;
        res = DELIVER_OK;
        break;
    }
    if (res != DELIVER_OK && !err[0])
        snprintf(err, errlen, "could not deliver to %s: file name collisions", target);
    free(text);
out:
    if (inboxfd >= 0)
        close(inboxfd);
    if (tmpfd >= 0)
        close(tmpfd);
    if (homefd >= 0)
        close(homefd);
    if (rootfd >= 0)
        close(rootfd);
    return res;
}

/* ---------- reception (section 5.5) ---------- */

void node_emit(FILE *f, jval *line)
{
    char *text = json_dump(line, NULL);
    fprintf(f, "%s\n", text);
    fflush(f);
    free(text);
    json_free(line);
}

static void report_rejected(node_t *n, const char *file, const char *reason)
{
    jval *l = json_obj();
    json_set(l, "event", json_str("rejected"));
    json_set(l, "file", json_str(file));
    json_set(l, "reason", json_str(reason));
    node_emit(n->events, l);
}

/* Diagnostics that are not part of the stdout contract go to stderr as JSON lines. */
static void report_info(jval *line) { node_emit(stderr, line); }

static id_cache_entry *id_cache_find(node_t *n, const char *name)
{
    for (size_t i = 0; i < n->nids; i++)
        if (strcmp(n->ids[i].name, name) == 0)
            return &n->ids[i];
    return NULL;
}

/* Reads name's registry entry into the id cache; a missing entry leaves the cache as is,
 * so that a peer's last envelopes (its leave EVENT) still verify after it deregistered. */
static id_cache_entry *id_cache_refresh(node_t *n, const char *name)
{
    int exists = 0;
    jval *e = registry_read(n->root, name, &exists);
    uint8_t id[16];
    int ok = e && uuid_parse(json_get_str(e, "id"), id) == 0;
    json_free(e);
    if (!ok)
        return NULL;
    id_cache_entry *c = id_cache_find(n, name);
    if (!c) {
        n->ids = xrealloc(n->ids, (n->nids + 1) * sizeof *n->ids);
        c = &n->ids[n->nids++];
        snprintf(c->name, sizeof c->name, "%s", name);
    }
    memcpy(c->id, id, 16);
    return c;
}

/* Called about once a second: learn the current ids of the peers we accept files from. */
static void refresh_peer_ids(node_t *n)
{
    int64_t now = now_mono_ms();
    if (now < n->next_id_refresh_ms)
        return;
    n->next_id_refresh_ms = now + RESCAN_INTERVAL_MS;
    for (size_t i = 0; i < n->nallow; i++)
        id_cache_refresh(n, n->allow[i]);
}

/* 1 if src is the id of from's registry entry (cached; re-read when the cache disagrees). */
static int sender_id_matches(node_t *n, const char *from, const uint8_t src[16])
{
    id_cache_entry *c = id_cache_find(n, from);
    if (c && memcmp(c->id, src, 16) == 0)
        return 1;
    c = id_cache_refresh(n, from);
    return c && memcmp(c->id, src, 16) == 0;
}

static peer_state *peer_for(node_t *n, const uint8_t id[16], int create)
{
    for (size_t i = 0; i < n->npeers; i++)
        if (memcmp(n->peers[i].id, id, 16) == 0)
            return &n->peers[i];
    if (!create)
        return NULL;
    n->peers = xrealloc(n->peers, (n->npeers + 1) * sizeof *n->peers);
    peer_state *p = &n->peers[n->npeers++];
    memcpy(p->id, id, 16);
    p->last_seq = 0;
    return p;
}

static void prune_nonces(node_t *n, uint64_t now_ms)
{
    size_t j = 0;
    for (size_t i = 0; i < n->nnonces; i++)
        if (n->nonces[i].expire_ms >= now_ms)
            n->nonces[j++] = n->nonces[i];
    n->nnonces = j;
}

static int nonce_seen(const node_t *n, const uint8_t nonce[ENV_NONCE_LEN])
{
    for (size_t i = 0; i < n->nnonces; i++)
        if (memcmp(n->nonces[i].nonce, nonce, ENV_NONCE_LEN) == 0)
            return 1;
    return 0;
}

/* Replay checks of step 5; records the envelope when it passes. NULL or a reason. */
static const char *check_replay(node_t *n, const env_header *h, const uint8_t *nonce)
{
    uint64_t now = now_wall_ms();
    uint64_t diff = now > h->timestamp_ms ? now - h->timestamp_ms : h->timestamp_ms - now;
    if (diff > n->replay_window_ms)
        return "stale_timestamp";
    prune_nonces(n, now);
    if (nonce_seen(n, nonce))
        return "replayed_nonce";
    peer_state *p = peer_for(n, h->source_id, 0);
    if (h->sequence <= (p ? p->last_seq : 0))
        return "replayed_sequence";
    if (!p)
        p = peer_for(n, h->source_id, 1);
    if (p->last_seq && h->sequence > p->last_seq + 1) {
        jval *l = json_obj();
        json_set(l, "event", json_str("sequence_gap"));
        json_set(l, "expected", json_int((int64_t)(p->last_seq + 1)));
        json_set(l, "got", json_int((int64_t)h->sequence));
        report_info(l);
    }
    p->last_seq = h->sequence;
    n->nonces = xrealloc(n->nonces, (n->nnonces + 1) * sizeof *n->nonces);
    memcpy(n->nonces[n->nnonces].nonce, nonce, ENV_NONCE_LEN);
    n->nonces[n->nnonces].expire_ms = h->timestamp_ms + n->replay_window_ms;
    n->nnonces++;
    return NULL;
}

/* Per-type required fields; NULL when the payload is usable. */
static const char *check_payload_fields(int type, const jval *p)
{
    uint64_t u;
    jval *v;
    switch (type) {
    case ENV_MESSAGE:
        return json_get(p, "data") ? NULL : "bad_payload";
    case ENV_SPC_REQUEST:
        return (json_get_str(p, "requestId") && json_get_str(p, "service")) ? NULL
                                                                              : "bad_payload";
    case ENV_SPC_RESPONSE: {
        const char *st = json_get_str(p, "status");
        return (json_get_str(p, "requestId") && st &&
                (strcmp(st, "SUCCESS") == 0 || strcmp(st, "ERROR") == 0))
                   ? NULL
                   : "bad_payload";
    }
    case ENV_ACK:
        return json_get_u64(p, "ackSeq", &u) == 0 ? NULL : "bad_payload";
    case ENV_EVENT:
        return json_get_str(p, "event") ? NULL : "bad_payload";
    case ENV_HEARTBEAT:
        v = json_get(p, "reply");
        return (v && v->type == J_BOOL) ? NULL : "bad_payload";
    case ENV_ERROR:
        return json_get_str(p, "errorCode") ? NULL : "bad_payload";
    case ENV_DISCOVERY:
        return NULL;
    default:
        return "bad_payload"; /* unknown envelope type */
    }
}

/* ---------- services (section 5.6, 6) ---------- */

static int has_service(const node_t *n, const char *s) { return in_list(n->services, n->nservices, s); }

static void handle_spc_request(node_t *n, const char *from, const jval *p)
{
    const char *rid = json_get_str(p, "requestId");
    const char *service = json_get_str(p, "service");
    const jval *args = json_get(p, "arguments");
    jval *resp = base_payload(n, from);
    json_set(resp, "requestId", json_str(rid));
    jval *result = NULL;
    const char *code = NULL;
    char *msg = NULL;
    if (!has_service(n, service)) {
        code = "SERVICE_NOT_FOUND";
        msg = xasprintf("service '%s' is not registered on node '%s'", service, n->name);
    } else if (!args || args->type != J_OBJ) {
        code = "INVALID_ARGUMENTS";
        msg = xasprintf("arguments of '%s' must be a JSON object", service);
    } else if (strcmp(service, "echo") == 0) {
        result = json_clone(args);
    } else if (strcmp(service, "calculateTax") == 0) {
        const jval *amount = json_get(args, "amount");
        if (!amount || amount->type != J_NUM) {
            code = "INVALID_ARGUMENTS";
            msg = xasprintf("calculateTax needs a numeric 'amount'");
        } else {
            result = json_obj();
            json_set(result, "tax", json_num(amount->num * 0.18));
        }
    } else {
        code = "SERVICE_NOT_FOUND";
        msg = xasprintf("service '%s' is not implemented by this node", service);
    }
    if (code) {
        json_set(resp, "status", json_str("ERROR"));
        json_set(resp, "errorCode", json_str(code));
        json_set(resp, "errorMessage", json_str(msg));
    } else {
        json_set(resp, "status", json_str("SUCCESS"));
        json_set(resp, "result", result);
    }
    char err[512] = "";
    if (node_deliver(n, from, ENV_SPC_RESPONSE, 0, resp, NULL, err, sizeof err) != DELIVER_OK) {
        jval *l = json_obj();
        json_set(l, "event", json_str("response_not_delivered"));
        json_set(l, "to", json_str(from));
        json_set(l, "error", json_str(err));
        report_info(l);
    }
    free(msg);
    json_free(resp);
}

/* ---------- asynchronous calls ---------- */

static void call_finished(node_t *n, size_t i, const jval *resp, const char *code,
                          const char *msg)
{
    jval *l = json_obj();
    const char *status = resp ? json_get_str(resp, "status") : NULL;
    if (status && strcmp(status, "SUCCESS") == 0) {
        const jval *result = json_get(resp, "result");
        json_set(l, "event", json_str("result"));
        json_set(l, "id", json_str(n->calls[i].tag));
        json_set(l, "result", result ? json_clone(result) : json_null());
    } else {
        if (resp) {
            code = json_get_str(resp, "errorCode");
            msg = json_get_str(resp, "errorMessage");
        }
        json_set(l, "event", json_str("call_error"));
        json_set(l, "id", json_str(n->calls[i].tag));
        json_set(l, "errorCode", json_str(code ? code : "INTERNAL_ERROR"));
        json_set(l, "errorMessage", json_str(msg ? msg : ""));
    }
    node_emit(n->events, l);
    free(n->calls[i].tag);
    n->calls[i] = n->calls[--n->ncalls];
}

void node_call_async(node_t *n, const char *tag, const char *target, const char *service,
                     const jval *args, long timeout_ms)
{
    n->calls = xrealloc(n->calls, (n->ncalls + 1) * sizeof *n->calls);
    pending_call *c = &n->calls[n->ncalls++];
    uuid_v4(c->request_id);
    c->tag = xstrdup(tag);
    c->deadline_ms = now_mono_ms() + timeout_ms;
    jval *req = base_payload(n, target);
    json_set(req, "requestId", json_str(c->request_id));
    json_set(req, "service", json_str(service));
    json_set(req, "arguments", json_clone(args));
    json_set(req, "callerNode", json_str(n->name));
    json_set(req, "timeoutMs", json_int(timeout_ms));
    char err[512] = "";
    deliver_result r;
    if (!node_allows(n, target)) { /* the response could never come back */
        r = DELIVER_ACCESS_DENIED;
        snprintf(err, sizeof err, "ACCESS_DENIED: %s does not allow %s, so the response "
                 "could not be delivered; grant it first", n->name, target);
    } else {
        r = node_deliver(n, target, ENV_SPC_REQUEST, 0, req, NULL, err, sizeof err);
    }
    json_free(req);
    if (r != DELIVER_OK)
        call_finished(n, n->ncalls - 1, NULL,
                      r == DELIVER_ACCESS_DENIED ? "ACCESS_DENIED"
                      : r == DELIVER_UNAVAILABLE ? "UNAVAILABLE"
                                                 : "DELIVERY_FAILED",
                      err);
}

static void expire_calls(node_t *n)
{
    int64_t now = now_mono_ms();
    for (size_t i = n->ncalls; i-- > 0;)
        if (now >= n->calls[i].deadline_ms)
            call_finished(n, i, NULL, "TIMEOUT", "no response within the timeout");
}

/* ---------- dispatch ---------- */

static void dispatch(node_t *n, const env_header *h, const char *from, jval *p)
{
    char err[512] = "";
    switch (h->type) {
    case ENV_MESSAGE: {
        jval *l = json_obj();
        json_set(l, "event", json_str("message"));
        json_set(l, "from", json_str(from));
        json_set(l, "seq", json_int((int64_t)h->sequence));
        json_set(l, "data", json_clone(json_get(p, "data")));
        const char *enc = json_get_str(p, "encoding");
        if (enc)
            json_set(l, "encoding", json_str(enc));
        node_emit(n->events, l);
        if (h->flags & ENV_FLAG_ACK) {
            jval *ack = base_payload(n, from);
            json_set(ack, "ackSeq", json_int((int64_t)h->sequence));
            node_deliver(n, from, ENV_ACK, 0, ack, NULL, err, sizeof err);
            json_free(ack);
        }
        break;
    }
    case ENV_SPC_REQUEST:
        handle_spc_request(n, from, p);
        break;
    case ENV_SPC_RESPONSE: {
        const char *rid = json_get_str(p, "requestId");
        size_t i = 0;
        while (i < n->ncalls && strcmp(n->calls[i].request_id, rid) != 0)
            i++;
        if (n->wait_request_id && !n->response && strcmp(rid, n->wait_request_id) == 0) {
            n->response = json_clone(p);
        } else if (i < n->ncalls) {
            call_finished(n, i, p, NULL, NULL);
        } else {
            jval *l = json_obj();
            json_set(l, "event", json_str("late_response"));
            json_set(l, "from", json_str(from));
            json_set(l, "requestId", json_str(rid));
            report_info(l);
        }
        break;
    }
    case ENV_ACK: {
        uint64_t ack = 0;
        json_get_u64(p, "ackSeq", &ack);
        if (n->wait_ack_from && strcmp(from, n->wait_ack_from) == 0 && ack == n->wait_ack_seq)
            n->got_ack = 1;
        jval *l = json_obj();
        json_set(l, "event", json_str("ack"));
        json_set(l, "from", json_str(from));
        json_set(l, "ackSeq", json_int((int64_t)ack));
        node_emit(n->events, l);
        break;
    }
    case ENV_HEARTBEAT: {
        jval *reply = json_get(p, "reply");
        if (!reply->boolean) { /* a probe: answer when we may write back */
            jval *r = base_payload(n, from);
            json_set(r, "reply", json_bool(1));
            node_deliver(n, from, ENV_HEARTBEAT, 0, r, NULL, err, sizeof err);
            json_free(r);
        } else {
            jval *l = json_obj();
            json_set(l, "event", json_str("heartbeat_reply"));
            json_set(l, "from", json_str(from));
            node_emit(n->events, l);
        }
        break;
    }
    default: { /* EVENT, ERROR, DISCOVERY: reported, nothing else to do */
        jval *l = json_obj();
        json_set(l, "event", json_str("received"));
        json_set(l, "type", json_str(env_type_name(h->type)));
        json_set(l, "from", json_str(from));
        json_set(l, "payload", json_clone(p));
        report_info(l);
        break;
    }
    }
}

/* Checks one inbox file; returns NULL and fills h/payload when accepted, else a reason. */
static const char *check_file(node_t *n, int dirfd, const char *fname, env_header *h,
                              jval **payload_out, char *sender)
{
    uint64_t name_seq = 0;
    /* 1. inbound authorization from the file name */
    if (env_parse_filename(fname, sender, &name_seq) != 0 || !node_allows(n, sender))
        return "unauthorized";
    /* 2. open without following links; regular, one link, our uid, not too large */
    int fd = openat(dirfd, fname, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? DEFER : "bad_file";
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
        close(fd);
        return "bad_file";
    }
    if (st.st_nlink != 1) {
        double ctime_s = (double)st.st_ctim.tv_sec + (double)st.st_ctim.tv_nsec / 1e9;
        close(fd);
        if (st.st_nlink == 2 && now_wall() - ctime_s < LINK_GRACE_SECONDS)
            return DEFER; /* a link()-then-unlink() delivery in progress */
        return "bad_file";
    }
    uint64_t max_file = ENV_OVERHEAD + n->max_payload;
    if ((uint64_t)st.st_size > max_file) {
        close(fd);
        return "too_large";
    }
    /* read at most max_file + 1 bytes: a file that grew is still caught by the size check */
    size_t cap = (size_t)st.st_size + 1, len = 0;
    uint8_t *data = xmalloc(cap);
    for (;;) {
        ssize_t r = read(fd, data + len, cap - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
        if (len == cap)
            break;
    }
    close(fd);
    /* 3. size, version, header length, tag */
    uint8_t *pt = NULL;
    size_t pt_len = 0;
    const char *reason = env_open(n->key, data, len, n->max_payload, h, &pt, &pt_len);
    uint8_t nonce[ENV_NONCE_LEN];
    if (!reason)
        memcpy(nonce, data + ENV_HEADER_LEN, ENV_NONCE_LEN);
    free(data);
    if (reason)
        return reason;
    jval *p = json_parse((const char *)pt, pt_len, NULL, 0);
    free(pt);
    const char *from = p ? json_get_str(p, "from") : NULL;
    const char *to = p ? json_get_str(p, "to") : NULL;
    if (!p || p->type != J_OBJ || !from || !to)
        reason = "bad_payload";
    /* 4. identities */
    else if (strcmp(from, sender) != 0)
        reason = "unknown_sender";
    else if (strcmp(to, n->name) != 0 || memcmp(h->target_id, n->id_bytes, 16) != 0)
        reason = "wrong_target";
    else if (!sender_id_matches(n, from, h->source_id))
        reason = "unknown_sender";
    else
        reason = check_payload_fields(h->type, p);
    /* 5. replay protection */
    if (!reason)
        reason = check_replay(n, h, nonce);
    if (reason) {
        json_free(p);
        return reason;
    }
    *payload_out = p;
    return NULL;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void node_scan_inbox(node_t *n)
{
    if (n->lost)
        return;
    DIR *d = opendir(n->inbox_path);
    if (!d)
        return;
    n->retry_soon = 0;
    int dirfd_ = dirfd(d);
    char **names = NULL;
    size_t count = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        names = xrealloc(names, (count + 1) * sizeof *names);
        names[count++] = xstrdup(de->d_name);
    }
    /* file names sort by sender, sender id and zero-padded sequence: in order per sender */
    if (count > 1)
        qsort(names, count, sizeof *names, cmp_names);
    char deferred[ENV_FILENAME_MAX] = ""; /* "<sender>.<id8>." of a deferred file */
    for (size_t i = 0; i < count; i++) {
        if (deferred[0] && strncmp(names[i], deferred, strlen(deferred)) == 0) {
            free(names[i]); /* keep this sender in order: wait for the deferred file */
            continue;
        }
        struct stat st;
        if (fstatat(dirfd_, names[i], &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
            free(names[i]); /* not a regular file and cannot be unlinked: ignored */
            continue;
        }
        env_header h;
        jval *payload = NULL;
        char sender[NAME_MAX_LEN + 1] = "";
        const char *reason = check_file(n, dirfd_, names[i], &h, &payload, sender);
        if (reason == DEFER) {
            const char *seq_dot = strchr(names[i], '.');
            seq_dot = seq_dot ? strchr(seq_dot + 1, '.') : NULL;
            if (seq_dot && (size_t)(seq_dot - names[i]) + 2 < sizeof deferred)
                snprintf(deferred, sizeof deferred, "%.*s", (int)(seq_dot - names[i] + 1),
                         names[i]);
            n->retry_soon = 1;
            free(names[i]);
            continue;
        }
        /* 6. remove, then dispatch (rejected files are removed and reported) */
        unlinkat(dirfd_, names[i], 0);
        if (reason)
            report_rejected(n, names[i], reason);
        else
            dispatch(n, &h, sender, payload);
        json_free(payload);
        free(names[i]);
        if (n->lost) { /* stop accepting: leftovers stay in the inbox */
            for (size_t j = i + 1; j < count; j++)
                free(names[j]);
            break;
        }
    }
    free(names);
    closedir(d);
}

void node_step(node_t *n, int wait_ms)
{
    int64_t now = now_mono_ms();
    if (n->registered && now >= n->next_heartbeat_ms)
        node_renew(n);
    if (n->lost)
        return;
    int64_t until_hb = n->next_heartbeat_ms - now;
    int timeout = wait_ms;
    if (timeout > RESCAN_INTERVAL_MS)
        timeout = RESCAN_INTERVAL_MS;
    if (n->retry_soon && timeout > RETRY_SOON_MS)
        timeout = RETRY_SOON_MS;
    if (n->registered && until_hb < timeout)
        timeout = until_hb < 0 ? 0 : (int)until_hb;
    if (timeout < 0)
        timeout = 0;
    struct pollfd pfd[2] = {{n->inotify_fd, POLLIN, 0}, {n->extra_fd, POLLIN, 0}};
    struct timespec ts = {timeout / 1000, (long)(timeout % 1000) * 1000000L};
    if (!g_stop) {
        int r = ppoll(pfd, 2, &ts, &g_wait_mask); /* negative fds are ignored */
        if (r > 0 && (pfd[0].revents & POLLIN)) {
            char buf[8192]; /* events are only hints: drain them, then rescan */
            while (read(n->inotify_fd, buf, sizeof buf) > 0) {
            }
        }
        if (r > 0 && pfd[1].revents && n->on_extra)
            n->on_extra(n);
    }
    expire_calls(n);
    refresh_peer_ids(n);
    if (n->registered && now_mono_ms() >= n->next_heartbeat_ms)
        node_renew(n);
    node_scan_inbox(n);
}
