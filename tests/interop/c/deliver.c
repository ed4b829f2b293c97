/* deliver.c - delivery of one envelope to another node's inbox (section 5.4). */
#define _GNU_SOURCE
#include "node.h"
#include "ext_durable.h"
#include "ext_quota.h"
#include "registry.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#define MAX_RESEAL_ATTEMPTS 16

const char *deliver_error_code(deliver_result r)
{
    return r == DELIVER_ACCESS_DENIED ? "ACCESS_DENIED"
           : r == DELIVER_UNAVAILABLE ? "UNAVAILABLE"
           : r == DELIVER_QUOTA       ? "QUOTA_EXCEEDED"
                                      : "DELIVERY_FAILED";
}

/* The link to target's instance target_id. Section 5.3 counts per (sender instance,
 * receiver name); we read it as starting again at 1 for a new receiver instance: the new
 * instance has no replay state for us, and with bounded gaps (step 5) a long-lived sender
 * would otherwise be refused as bad_sequence by it. */
static link_state *link_for(node_t *n, const char *target, const uint8_t target_id[16])
{
    link_state *l = NULL;
    for (size_t i = 0; i < n->nlinks && !l; i++)
        if (strcmp(n->links[i].name, target) == 0)
            l = &n->links[i];
    if (!l) {
        n->links = xrealloc(n->links, (n->nlinks + 1) * sizeof *n->links);
        l = &n->links[n->nlinks++];
        memset(l, 0, sizeof *l);
        snprintf(l->name, sizeof l->name, "%s", target);
    }
    if (l->next_seq == 0 || memcmp(l->target_id, target_id, 16) != 0) {
        memcpy(l->target_id, target_id, 16);
        l->next_seq = 1;
        l->last_file[0] = '\0';
    }
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

/* Steps 1 and 2: the target's entry as its file holds it now. DELIVER_OK with its id. */
static deliver_result check_target(node_t *n, const char *target, uint8_t target_id[16],
                                   char *err, size_t errlen)
{
    int exists = 0;
    jval *entry = registry_read(n->root, target, &exists);
    deliver_result r = DELIVER_OK;
    reg_state st = registry_state(entry);
    if (st == REG_LEAVING) {
        snprintf(err, errlen, "node %s is leaving", target);
        r = DELIVER_UNAVAILABLE;
    } else if (st != REG_ONLINE) {
        snprintf(err, errlen, "node %s is not available", target);
        r = DELIVER_UNAVAILABLE;
    } else if (!registry_allows(entry, n->name)) {
        snprintf(err, errlen, "ACCESS_DENIED: node %s does not allow %s", target, n->name);
        r = DELIVER_ACCESS_DENIED;
    } else if (uuid_parse(json_get_str(entry, "id"), target_id) != 0) {
        snprintf(err, errlen, "node %s is not available (registry entry has a bad id)", target);
        r = DELIVER_UNAVAILABLE;
    }
    json_free(entry);
    return r;
}

/* Steps 3 and 4 for one sealed header: tmp file, then into the inbox. DELIVER_OK, or
 * DELIVER_FAILED with err set, or -1 for a name collision (reseal). */
static int write_and_move(node_t *n, const char *target, int tmpfd, int inboxfd,
                          const uint8_t *env, size_t env_len, const char *fname, char *err,
                          size_t errlen)
{
    int fd = openat(tmpfd, fname, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (errno == EEXIST)
            return -1;
        snprintf(err, errlen, "cannot create %s/%s/tmp/%s: %s", n->root, target, fname,
                 strerror(errno));
        return DELIVER_FAILED;
    }
    int werr = 0;
    if (write_all(fd, env, env_len) != 0)
        werr = errno;
    if (close(fd) != 0 && !werr)
        werr = errno;
    if (werr) {
        unlinkat(tmpfd, fname, 0);
        snprintf(err, errlen, "writing envelope for %s failed, nothing was delivered: %s",
                 target, strerror(werr));
        return DELIVER_FAILED;
    }
    int e = move_no_replace(tmpfd, inboxfd, fname);
    if (e) {
        unlinkat(tmpfd, fname, 0);
        if (e == EEXIST)
            return -1;
        snprintf(err, errlen, "moving envelope into %s/inbox failed: %s", target, strerror(e));
        return DELIVER_FAILED;
    }
    return DELIVER_OK;
}

deliver_result node_deliver(node_t *n, const char *target, int type, uint16_t flags,
                            const jval *payload, deliver_info *info, char *err, size_t errlen)
{
    int ext_res; /* section 9: a value too large for one envelope, to a node that speaks chunks */
    if (ext_chunks_outbound(n, target, type, flags, payload, info, &ext_res, err, errlen))
        return (deliver_result)ext_res;
    size_t text_len = 0;
    char *text = json_dump(payload, &text_len);
    deliver_result r = node_deliver_raw(n, target, type, flags, (const uint8_t *)text, text_len, NULL, info,
                                        err, errlen);
    free(text);
    return r;
}

deliver_result node_deliver_raw(node_t *n, const char *target, int type, uint16_t flags,
                                const uint8_t *text, size_t text_len, const uint8_t *expect_id,
                                deliver_info *info, char *err, size_t errlen)
{
    uint8_t target_id[16];
    deliver_result res = check_target(n, target, target_id, err, errlen);
    if (res != DELIVER_OK)
        return res;
    if (expect_id && memcmp(expect_id, target_id, 16) != 0) { /* the rest of a message: same instance */
        snprintf(err, errlen, "node %s restarted during the message", target);
        return DELIVER_UNAVAILABLE;
    }

    res = DELIVER_FAILED;
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

    link_state *link = link_for(n, target, target_id);
    /* quota: every envelope (each chunk of a chunked value too) may wait for room in the
     * target's inbox (ext_quota.c) */
    if (n->cfg.quota) {
        deliver_result q = quota_admit(n, target, type, ENV_OVERHEAD + text_len, err, errlen);
        if (q != DELIVER_OK) {
            res = q;
            goto out;
        }
    }
    env_header h = {0};
    h.version = ENV_VERSION;
    h.type = (uint8_t)type;
    /* bit 0, or extension bits towards a node that advertises them (section 9): chunks' layouts,
     * reliable, the durable receipt; bits 5 (quota, no flag) and 6 (control) and up are 0 */
    h.flags = flags & (ENV_FLAG_ACK | ENV_FLAG_BINARY | ENV_FLAG_CHUNK | ENV_FLAG_RELIABLE |
                       ENV_FLAG_DURABLE);
    h.header_length = ENV_HEADER_LEN;
    h.sequence = link->next_seq;
    memcpy(h.source_id, n->id_bytes, 16);
    memcpy(h.target_id, target_id, 16);
    err[0] = '\0';
    for (int attempt = 0; attempt < MAX_RESEAL_ATTEMPTS; attempt++) {
        uint8_t nonce[ENV_NONCE_LEN];
        randombytes_buf(nonce, sizeof nonce); /* a new nonce and timestamp on every reseal */
        h.timestamp_ms = now_wall_ms();
        size_t env_len = 0;
        uint8_t *env = env_seal(n->key, &h, nonce, (const uint8_t *)text, text_len, &env_len);
        n->sealed++;
        char fname[ENV_FILENAME_MAX];
        env_filename(fname, sizeof fname, n->name, n->id_bytes, h.sequence, nonce);
        int r = write_and_move(n, target, tmpfd, inboxfd, env, env_len, fname, err, errlen);
        uint8_t tag[ENV_TAG_LEN];
        memcpy(tag, env + env_len - ENV_TAG_LEN, ENV_TAG_LEN);
        free(env);
        if (r == -1)
            continue; /* a name collision: reseal */
        if (r == DELIVER_OK) {
            if (info) {
                info->seq = h.sequence;
                memcpy(info->target_id, target_id, 16);
                memcpy(info->tag, tag, ENV_TAG_LEN);
            }
            snprintf(link->last_file, sizeof link->last_file, "%s", fname);
            if (n->cfg.quota)
                quota_delivered(n, target, fname, env_len);
            link->next_seq++; /* a failed delivery consumes no sequence number */
            res = DELIVER_OK;
        }
        break;
    }
    if (res != DELIVER_OK && !err[0])
        snprintf(err, errlen, "could not deliver to %s: file name collisions", target);
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
