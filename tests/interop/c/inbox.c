/* inbox.c - reception (section 5.5): reading the inbox in bounded batches, the checks of
 * steps 1-5 in the order of docs/PROTOCOL.md ("Order of checks"), and rejection reports. */
#define _GNU_SOURCE
#include "node.h"
#include "node_parts.h"
#include "registry.h"
#include "ext_durable.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ID_REFRESH_MS 1000
/* Files taken per sender and scan: the inbox is the queue, memory does not grow with it. */
#define BATCH_PER_SENDER 64
/* A file with a second link that is younger than this is taken to be mid-delivery by a
 * link()-then-unlink() sender and is looked at again later, not rejected (step 2). */
#define LINK_GRACE_SECONDS 2.0

/* Markers returned by check_file besides NULL (accepted) and a reason (node_parts.h). */
const char DEFER[] = "defer";     /* mid-delivery: look again soon, keep order */
const char VANISHED[] = "gone";   /* removed between listing and open */
const char IGNORED[] = "ignored"; /* a directory: not ours to remove */

/* ---------- reports ---------- */

void node_emit(FILE *f, jval *line)
{
    char *text = json_dump(line, NULL);
    fprintf(f, "%s\n", text);
    fflush(f);
    free(text);
    json_free(line);
}

void node_report_info(jval *line) { node_emit(stderr, line); }

/* One line per rejected file, with what is known of it (section 8: the header's type
 * whenever the header could be read, the size whenever known). */
static void report_rejected(node_t *n, const inbox_file *f, const char *reason)
{
    jval *l = json_obj();
    json_set(l, "event", json_str("rejected"));
    json_set(l, "file", json_str(f->name));
    json_set(l, "reason", json_str(reason));
    if (f->sender[0])
        json_set(l, "peer", json_str(f->sender));
    if (f->header_read) {
        json_set(l, "type", json_str(env_type_name(f->h.type)));
        json_set(l, "seq", json_int((int64_t)f->h.sequence));
    }
    if (f->size >= 0)
        json_set(l, "size", json_int(f->size));
    node_emit(n->events, l);
}

/* ---------- the ids of allowed peers (step 4) ---------- */

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

void node_refresh_peer_ids(node_t *n)
{
    int64_t now = now_mono_ms();
    if (now < n->next_id_refresh_ms)
        return;
    n->next_id_refresh_ms = now + ID_REFRESH_MS;
    for (size_t i = 0; i < n->nallow; i++)
        id_cache_refresh(n, n->allow[i]);
}

/* 1 if src is the id of from's registry entry (cached; re-read when the cache disagrees). */
int node_sender_id_matches(node_t *n, const char *from, const uint8_t src[16])
{
    id_cache_entry *c = id_cache_find(n, from);
    if (c && memcmp(c->id, src, 16) == 0)
        return 1;
    c = id_cache_refresh(n, from);
    return c && memcmp(c->id, src, 16) == 0;
}

/* ---------- checks of one file ---------- */

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

/* Reads the whole (already size-checked) file; NULL on a read error. */
static uint8_t *read_all(int fd, size_t size, size_t *len)
{
    /* one byte more than fstat said: a file that grew is caught by the size check */
    size_t cap = size + 1;
    uint8_t *data = xmalloc(cap);
    *len = 0;
    for (;;) {
        ssize_t r = read(fd, data + *len, cap - *len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(data);
            return NULL;
        }
        if (r == 0)
            break;
        *len += (size_t)r;
        if (*len == cap)
            break;
    }
    return data;
}

/* Steps 2-3: open, file checks, read, framing and tag. NULL with *pt set, a marker, or a
 * reason. Files larger than ENV_OVERHEAD + max_payload are too_large and never read. */
const char *node_open_file(node_t *n, int dirfd, inbox_file *f, uint64_t max_payload,
                           uint8_t **pt, size_t *pt_len, uint8_t nonce[ENV_NONCE_LEN])
{
    int fd = openat(dirfd, f->name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? VANISHED : "bad_file";
    struct stat st;
    const char *reason = NULL;
    if (fstat(fd, &st) != 0) {
        reason = "bad_file";
    } else if (S_ISDIR(st.st_mode)) {
        reason = IGNORED;
    } else if (!S_ISREG(st.st_mode)) {
        reason = "bad_file";
    } else {
        f->size = (int64_t)st.st_size;
        double ctime_s = (double)st.st_ctim.tv_sec + (double)st.st_ctim.tv_nsec / 1e9;
        f->arrived_ms = (int64_t)st.st_ctim.tv_sec * 1000 + st.st_ctim.tv_nsec / 1000000;
        if (st.st_uid != geteuid())
            reason = "bad_file";
        else if (st.st_nlink == 2 && now_wall() - ctime_s < LINK_GRACE_SECONDS)
            reason = DEFER; /* a link()-then-unlink() delivery in progress */
        else if (st.st_nlink != 1)
            reason = "bad_file";
    }
    if (reason) {
        close(fd);
        return reason;
    }
    uint8_t head[ENV_HEADER_LEN];
    if ((uint64_t)st.st_size > ENV_OVERHEAD + max_payload) {
        /* never read the body; the header alone names the type for the record */
        if (pread(fd, head, sizeof head, 0) == (ssize_t)sizeof head) {
            env_header_decode(head, &f->h);
            f->header_read = 1;
        }
        close(fd);
        return "too_large";
    }
    size_t len = 0;
    uint8_t *data = read_all(fd, (size_t)st.st_size, &len);
    close(fd);
    if (!data)
        return "bad_file";
    f->size = (int64_t)len;
    if (len >= ENV_HEADER_LEN) {
        env_header_decode(data, &f->h);
        f->header_read = 1;
    }
    env_header h;
    reason = env_open(n->key, data, len, max_payload, &h, pt, pt_len);
    if (!reason) {
        memcpy(nonce, data + ENV_HEADER_LEN, ENV_NONCE_LEN);
        memcpy(f->tag, data + len - ENV_TAG_LEN, ENV_TAG_LEN);
    }
    free(data);
    return reason;
}

/* Steps 2-5 for a file whose sender is in our Access Registry. Returns NULL with
 * *payload_out set when accepted, a marker, or a rejection reason. */
static const char *check_file(node_t *n, int dirfd, inbox_file *f, jval **payload_out)
{
    uint8_t *pt = NULL, nonce[ENV_NONCE_LEN];
    size_t pt_len = 0;
    const char *reason = node_open_file(n, dirfd, f, n->max_payload, &pt, &pt_len, nonce);
    if (reason)
        return reason;
    const env_header *h = &f->h;
    int durable = 0;
    uint64_t skipped = 0;
    jval *p = NULL;
    /* section 9: a layout of the chunks extension, when this node speaks it; else v1 JSON */
    int layout = (n->features & FEATURE_CHUNKS) && (h->flags & (ENV_FLAG_BINARY | ENV_FLAG_CHUNK));
    const char *ext_reason = layout ? chunks_decode(h->type, h->flags, pt, pt_len, &p, &n->piece) : NULL;
    if (n->piece)
        memcpy(n->piece->chain, f->tag, ENV_TAG_LEN);
    if (!layout)
        p = json_parse((const char *)pt, pt_len, NULL, 0);
    free(pt);
    const char *from = p ? json_get_str(p, "from") : NULL;
    const char *to = p ? json_get_str(p, "to") : NULL;
    if (ext_reason)
        reason = ext_reason;
    else if (layout && durable_applies(n, h))
        reason = "bad_payload"; /* a durable MESSAGE is a v1 JSON payload plus its fields */
    else if (!p || p->type != J_OBJ || !from || !to)
        reason = "bad_payload";
    else if (!n->piece && (reason = check_payload_fields(h->type, p)) != NULL)
        ; /* step 3: the payload is not of its type's shape */
    /* 4. identities */
    else if (strcmp(from, f->sender) != 0)
        reason = "unknown_sender";
    else if ((durable = durable_applies(n, h)) != 0) /* bound to our name: steps 4-5 there */
        reason = durable_judge(n, h, nonce, to, p, f->arrived_ms, &skipped);
    else if (strcmp(to, n->name) != 0 || memcmp(h->target_id, n->id_bytes, 16) != 0)
        reason = "wrong_target";
    else if (!node_sender_id_matches(n, from, h->source_id))
        reason = "unknown_sender";
    /* 5. replay protection */
    if (!reason && !durable)
        reason = replay_check(&n->replay, from, h->source_id, h->sequence, h->timestamp_ms,
                              nonce, now_wall_ms(), &skipped);
    if (reason) {
        json_free(p);
        chunk_piece_free(n->piece);
        n->piece = NULL;
        return reason;
    }
    if (skipped) {
        jval *l = json_obj();
        json_set(l, "event", json_str("sequence_gap"));
        json_set(l, "from", json_str(from));
        json_set(l, "skipped", json_int((int64_t)skipped));
        json_set(l, "got", json_int((int64_t)h->sequence));
        node_report_info(l);
    }
    *payload_out = p;
    return NULL;
}

/* ---------- bounded batches ---------- */

typedef char fname_t[ENV_FILENAME_MAX];

/* Each sender's bucket is a max-heap of its smallest names: it keeps the next files of
 * every instance in sequence order, however many files wait. */
static void heap_swap(fname_t *h, size_t a, size_t b)
{
    fname_t t;
    memcpy(t, h[a], sizeof t);
    memcpy(h[a], h[b], sizeof t);
    memcpy(h[b], t, sizeof t);
}

/* Envelope names (env_parse_filename accepted them) always fit a fname_t. */
static void set_name(fname_t dst, const char *name)
{
    size_t len = strnlen(name, ENV_FILENAME_MAX - 1);
    memcpy(dst, name, len);
    dst[len] = '\0';
}

static void heap_add(fname_t *h, size_t *count, const char *name, int *overflow)
{
    size_t i;
    if (*count < BATCH_PER_SENDER) {
        i = (*count)++;
        set_name(h[i], name);
        while (i > 0 && strcmp(h[(i - 1) / 2], h[i]) < 0) {
            heap_swap(h, (i - 1) / 2, i);
            i = (i - 1) / 2;
        }
        return;
    }
    *overflow = 1;
    if (strcmp(name, h[0]) >= 0)
        return; /* a later file: the next scan takes it */
    set_name(h[0], name);
    for (i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < *count && strcmp(h[l], h[m]) > 0)
            m = l;
        if (r < *count && strcmp(h[r], h[m]) > 0)
            m = r;
        if (m == i)
            break;
        heap_swap(h, i, m);
        i = m;
    }
}

static int cmp_names(const void *a, const void *b) { return strcmp(a, b); }

static int allow_index(const node_t *n, const char *name)
{
    for (size_t i = 0; i < n->nallow; i++)
        if (strcmp(n->allow[i], name) == 0)
            return (int)i;
    return -1;
}

/* Step 1 for a name that no allowed sender can have written: removed unread. */
static void discard_unauthorized(node_t *n, int dirfd, const char *name, const char *sender)
{
    struct stat st;
    int known = fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (known && S_ISDIR(st.st_mode))
        return; /* not a regular file and cannot be unlinked: ignored */
    if (unlinkat(dirfd, name, 0) != 0)
        return; /* vanished */
    inbox_file f = {.name = name, .size = (known && S_ISREG(st.st_mode)) ? st.st_size : -1};
    snprintf(f.sender, sizeof f.sender, "%s", sender);
    report_rejected(n, &f, "unauthorized");
}

/* Handles one file of an allowed sender; returns 1 when it counts as activity. */
static int handle_file(node_t *n, int dirfd, const char *name, char *deferred, size_t dlen)
{
    inbox_file f = {.name = name, .size = -1};
    uint64_t seq = 0;
    env_parse_filename(name, f.sender, &seq);
    jval *payload = NULL;
    const char *reason = check_file(n, dirfd, &f, &payload);
    if (reason == VANISHED || reason == IGNORED)
        return 0;
    if (reason == DEFER) { /* keep this instance in order: its later files wait too */
        const char *dot = strchr(strchr(name, '.') + 1, '.');
        snprintf(deferred, dlen, "%.*s", (int)(dot - name + 1), name);
        n->retry_soon = 1;
        if (strcmp(n->last_deferred, name) != 0) {
            snprintf(n->last_deferred, sizeof n->last_deferred, "%s", name);
            jval *l = json_obj();
            json_set(l, "event", json_str("deferred"));
            json_set(l, "file", json_str(name));
            node_emit(n->events, l);
        }
        return 1;
    }
    if (!reason && durable_applies(n, &f.h)) { /* removed only once its receipt is on disk */
        durable_handle(n, dirfd, name, &f.h, f.sender, payload, f.size);
        json_free(payload);
        return 1;
    }
    /* 6. remove, then dispatch (rejected files are removed and reported) */
    unlinkat(dirfd, name, 0);
    if (!reason)
        reason = node_dispatch(n, &f.h, f.sender, payload);
    if (reason)
        report_rejected(n, &f, reason);
    json_free(payload);
    return 1;
}

size_t node_scan_inbox(node_t *n)
{
    if (n->lost)
        return 0;
    DIR *d = opendir(n->inbox_path);
    if (!d)
        return 0;
    n->retry_soon = 0;
    n->more = 0;
    int dirfd_ = dirfd(d);
    size_t seen = 0;
    fname_t *batch = xmalloc((n->nallow ? n->nallow : 1) * BATCH_PER_SENDER * sizeof *batch);
    size_t *counts = calloc(n->nallow ? n->nallow : 1, sizeof *counts);
    if (!counts)
        abort();
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char sender[NAME_MAX_LEN + 1] = "";
        uint64_t seq = 0;
        int k = env_parse_filename(de->d_name, sender, &seq) == 0 ? allow_index(n, sender) : -1;
        if (k < 0) {
            discard_unauthorized(n, dirfd_, de->d_name, sender);
            seen++;
            continue;
        }
        heap_add(batch + (size_t)k * BATCH_PER_SENDER, &counts[k], de->d_name, &n->more);
    }
    /* file names sort by sender, sender id and zero-padded sequence: in order per sender */
    for (size_t k = 0; k < n->nallow && !n->lost; k++) {
        fname_t *b = batch + k * BATCH_PER_SENDER;
        qsort(b, counts[k], sizeof *b, cmp_names);
        char deferred[ENV_FILENAME_MAX] = ""; /* "<sender>.<id8>." of a deferred file */
        for (size_t i = 0; i < counts[k] && !n->lost; i++) {
            if (deferred[0] && strncmp(b[i], deferred, strlen(deferred)) == 0)
                continue;
            seen += (size_t)handle_file(n, dirfd_, b[i], deferred, sizeof deferred);
        }
    }
    free(counts);
    free(batch);
    closedir(d);
    return seen;
}
