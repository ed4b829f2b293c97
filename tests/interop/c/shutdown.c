/* shutdown.c - the graceful stop of section 4.2 and the linger of section 5.4. */
#define _GNU_SOURCE
#include "node.h"
#include "node_parts.h"
#include "registry.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHUTDOWN_POLL_MS 20

/* One round of a stopping node: wait a little (inotify wakes it), keep the lease and the
 * waits going, process a batch of the inbox. Returns how many files the scan looked at. */
static size_t shutdown_round(node_t *n)
{
    node_wait(n, n->more ? 0 : SHUTDOWN_POLL_MS);
    node_tick(n);
    return node_scan_inbox(n);
}

static size_t inbox_count(const node_t *n)
{
    DIR *d = opendir(n->inbox_path);
    if (!d)
        return 0;
    size_t count = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            count++;
    closedir(d);
    return count;
}

/* With "leaving" published, every envelope in the inbox is processed, including those of
 * senders that read our entry just before it changed: until the inbox has stayed empty for
 * drain_quiet_ms. A sender that ignores "leaving" cannot hold us for ever: drain_max_ms. */
static void drain(node_t *n, sig_atomic_t signals_before)
{
    int64_t start = now_mono_ms(), quiet_since = start;
    while (!n->lost) {
        if (shutdown_round(n) || n->retry_soon || n->more)
            quiet_since = now_mono_ms();
        int64_t now = now_mono_ms();
        if (now - quiet_since >= n->cfg.drain_quiet_ms)
            return;
        if (g_signals != signals_before) {
            fprintf(stderr, "warning: stopped at once by a second signal; %zu files left in "
                    "the inbox\n", inbox_count(n));
            return;
        }
        if (now - start >= n->cfg.drain_max_ms) {
            fprintf(stderr, "warning: stopped draining the inbox after %.1f s; %zu files left "
                    "(senders kept writing after 'leaving' was published)\n",
                    (double)(now - start) / 1000, inbox_count(n));
            return;
        }
    }
}

static void send_leave_events(node_t *n)
{
    for (size_t i = 0; i < n->nallow; i++) {
        int exists = 0;
        jval *e = registry_read(n->root, n->allow[i], &exists);
        int ok = registry_state(e) == REG_ONLINE && registry_allows(e, n->name);
        json_free(e);
        if (!ok)
            continue;
        char err[512];
        jval *p = node_base_payload(n, n->allow[i]);
        json_set(p, "event", json_str("leave"));
        node_deliver(n, n->allow[i], ENV_EVENT, 0, p, NULL, err, sizeof err);
        json_free(p);
    }
}

/* 1 while the newest envelope of some link still waits in the inbox of a live receiver: it
 * will check our id against our entry (section 5.5 step 4). Receivers read a link in order,
 * so the newest file is enough. */
static int envelopes_unread(node_t *n)
{
    for (size_t i = 0; i < n->nlinks; i++) {
        const link_state *l = &n->links[i];
        if (!l->last_file[0])
            continue;
        int exists = 0;
        jval *e = registry_read(n->root, l->name, &exists);
        uint8_t id[16];
        int same = registry_state(e) != REG_UNAVAILABLE &&
                   uuid_parse(json_get_str(e, "id"), id) == 0 && memcmp(id, l->target_id, 16) == 0;
        json_free(e);
        if (!same)
            continue; /* nobody will read it as addressed to them */
        char *path = xasprintf("%s/%s/inbox/%s", n->root, l->name, l->last_file);
        struct stat st;
        int there = lstat(path, &st) == 0;
        free(path);
        if (there)
            return 1;
    }
    return 0;
}

static void linger(node_t *n, sig_atomic_t signals_before)
{
    int64_t start = now_mono_ms();
    while (!n->lost && envelopes_unread(n)) {
        if (g_signals != signals_before)
            return;
        if (now_mono_ms() - start >= n->cfg.linger_ms) {
            fprintf(stderr, "warning: deregistering after %.1f s although a receiver has not "
                    "read our last envelopes yet\n", (double)n->cfg.linger_ms / 1000);
            return;
        }
        shutdown_round(n);
    }
}

void node_shutdown(node_t *n)
{
    if (!n->registered)
        return;
    n->extra_fd = -1; /* no new commands while stopping */
    sig_atomic_t signals_before = g_signals;
    n->status = "leaving"; /* senders refuse us from now on (section 5.4 step 1) */
    node_renew(n);
    if (n->lost)
        return;
    drain(n, signals_before);
    ext_chunks_stop(n); /* messages still incomplete are voided */
    if (!n->lost && g_signals == signals_before) {
        send_leave_events(n);
        linger(n, signals_before);
    }
    if (!n->lost)
        node_deregister(n);
}
