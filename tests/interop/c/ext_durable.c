/* ext_durable.c - the receiving side of the durable extension (see ext_durable.h), written from
 * docs/PROTOCOL.md "### durable": judging copies bound to our name, the ledger, receipts. */
#define _GNU_SOURCE
#include "ext_durable.h"
#include "node_parts.h"
#include "registry.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <sodium.h>

#define TMPFS_MAGIC 0x01021994L
#define RAMFS_MAGIC 0x858458F6L
#define MAX_INSTANCES 1024
#define ID_MAX 9223372036854775807ull /* 2^63 - 1 */

static const char *const STATUS_NAMES[] = {"", "handled", "failed", "expired"};

typedef durable_receipt dreceipt;

/* What we know of one (sender, stream): the chain's head, the floor, receipts above it, claims. */
typedef struct {
    char stream[33];
    uint64_t index, floor;
    uint8_t mac[32];
    dreceipt *rc;
    size_t nrc;
    uint64_t *claims;
    size_t nclaims;
} dstream;

typedef struct {
    char name[NAME_MAX_LEN + 1];
    int fd; /* the ledger log, O_APPEND */
    dstream *streams;
    size_t nstreams;
} dsender;

struct durable_state {
    int ledger_fd;
    uint8_t rkey[32];
    uint8_t (*instances)[16];
    size_t ninstances;
    dsender *senders;
    size_t nsenders;
};

/* ---------- receipts ---------- */

void durable_receipt_key(const uint8_t key[32], uint8_t out[32])
{
    static const char ctx[] = "SPEED-DURABLE-RECEIPT-KEY-V1";
    crypto_generichash(out, 32, (const uint8_t *)ctx, sizeof ctx - 1, key, 32);
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

/* The MAC input of the spec's table; returns its length (out holds at least 228 bytes). */
static size_t receipt_input(uint8_t *out, const char *receiver, const char *sender,
                            const char *stream, const durable_receipt *r)
{
    size_t k = 0, a = strlen(receiver), b = strlen(sender);
    memcpy(out, "SPEED-RECEIPT-V1", 16);
    k = 16;
    out[k++] = (uint8_t)a;
    memcpy(out + k, receiver, a);
    k += a;
    out[k++] = (uint8_t)b;
    memcpy(out + k, sender, b);
    k += b;
    hex_decode(stream, out + k, 16);
    k += 16;
    put_u64(out + k, r->index);
    put_u64(out + k + 8, r->id);
    out[k + 16] = (uint8_t)r->status;
    put_u64(out + k + 17, r->time);
    memcpy(out + k + 25, r->prev, 32);
    return k + 57;
}

size_t durable_receipt_mac(const uint8_t rkey[32], const char *receiver, const char *sender,
                           const char *stream, durable_receipt *r, uint8_t input[DURABLE_INPUT_MAX])
{
    size_t len = receipt_input(input, receiver, sender, stream, r);
    crypto_generichash(r->mac, 32, input, len, rkey, 32);
    return len;
}

static void receipt_mac(const uint8_t rkey[32], const char *receiver, const char *sender,
                        const char *stream, dreceipt *r)
{
    uint8_t in[DURABLE_INPUT_MAX];
    durable_receipt_mac(rkey, receiver, sender, stream, r, in);
}

static jval *receipt_json(const char *stream, const dreceipt *r)
{
    char prev[65], mac[65];
    hex_encode(r->prev, 32, prev);
    hex_encode(r->mac, 32, mac);
    jval *o = json_obj();
    json_set(o, "stream", json_str(stream));
    json_set(o, "index", json_int((int64_t)r->index));
    json_set(o, "id", json_int((int64_t)r->id));
    json_set(o, "status", json_str(STATUS_NAMES[r->status]));
    json_set(o, "time", json_int((int64_t)r->time));
    json_set(o, "prev", json_str(prev));
    json_set(o, "mac", json_str(mac));
    return o;
}

/* ---------- the durable fields ---------- */

static int is_stream(const char *s)
{
    if (!s || strlen(s) != 32)
        return 0;
    for (int i = 0; i < 32; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

/* An integer field in [lo, 2^63-1]; 0 on success. */
static int field_u63(const jval *o, const char *key, uint64_t lo, uint64_t *out)
{
    return (json_get_u64(o, key, out) == 0 && *out >= lo && *out <= ID_MAX) ? 0 : -1;
}

typedef durable_fields dfields;
#define parse_fields durable_parse_fields

int durable_parse_fields(const jval *p, durable_fields *f)
{
    const jval *d = json_get(p, "durable");
    if (!d || d->type != J_OBJ)
        return -1;
    f->stream = json_get_str(d, "stream");
    if (!is_stream(f->stream) || field_u63(d, "id", 1, &f->id) || field_u63(d, "base", 1, &f->base) ||
        field_u63(d, "expiresAt", 0, &f->expires) || f->base > f->id)
        return -1;
    return 0;
}

/* ---------- setup ---------- */

static int open_dir_in(int parent, const char *name)
{
    if (mkdirat(parent, name, 0700) == 0)
        fsync(parent); /* a new directory's entry survives a power loss */
    return openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* Opens an append-only log in dir, creating it if needed; a new log's name is made durable
 * with an fsync of the directory (its records are fdatasync'd as they are appended). */
static int open_log_in(int dir, const char *name)
{
    int fd = openat(dir, name, O_RDWR | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
        fsync(dir);
        return fd;
    }
    return errno == EEXIST ? openat(dir, name, O_RDWR | O_APPEND | O_NOFOLLOW | O_CLOEXEC) : -1;
}

int durable_init(node_t *n, int on_tmpfs)
{
    struct statfs sf;
    if (statfs(n->root, &sf) == 0 && (sf.f_type == TMPFS_MAGIC || sf.f_type == RAMFS_MAGIC)) {
        if (!on_tmpfs) {
            fprintf(stderr, "error: the communication directory %s is on tmpfs (memory): durable "
                            "delivery needs a persistent file system; pass --durable-on-tmpfs to "
                            "run anyway\n", n->root);
            return -1;
        }
        fprintf(stderr, "WARNING: %s is on tmpfs: durable messages are lost at a reboot\n", n->root);
    }
    struct durable_state *d = calloc(1, sizeof *d);
    if (!d)
        abort();
    n->durable = d;
    durable_receipt_key(n->key, d->rkey);
    char *home_path = xasprintf("%s/%s", n->root, n->name);
    int home = open(home_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    free(home_path);
    int dur = home >= 0 ? open_dir_in(home, "durable") : -1;
    d->ledger_fd = dur >= 0 ? open_dir_in(dur, "ledger") : -1;
    int fd = dur >= 0 ? open_log_in(dur, "instances") : -1;
    if (home >= 0)
        close(home);
    if (dur >= 0)
        close(dur);
    if (d->ledger_fd < 0 || fd < 0) {
        fprintf(stderr, "error: cannot open %s/%s/durable: %s\n", n->root, n->name, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    d->instances = xmalloc((MAX_INSTANCES + 1) * sizeof *d->instances);
    char line[40];
    FILE *f = fdopen(dup(fd), "r");
    while (f && fgets(line, sizeof line, f)) /* the last MAX_INSTANCES earlier instances */
        if (strlen(line) == 33 && hex_decode(line, d->instances[d->ninstances % MAX_INSTANCES], 16) == 0)
            d->ninstances++;
    if (f)
        fclose(f);
    if (d->ninstances > MAX_INSTANCES)
        d->ninstances = MAX_INSTANCES;
    memcpy(d->instances[d->ninstances++], n->id_bytes, 16);
    char hex[33];
    hex_encode(n->id_bytes, 16, hex);
    hex[32] = '\n';
    int ok = write_all(fd, hex, 33) == 0 && fdatasync(fd) == 0;
    close(fd);
    if (!ok) {
        fprintf(stderr, "error: cannot record this instance in durable/instances: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

void durable_free(node_t *n)
{
    struct durable_state *d = n->durable;
    if (!d)
        return;
    for (size_t i = 0; i < d->nsenders; i++) {
        for (size_t j = 0; j < d->senders[i].nstreams; j++) {
            free(d->senders[i].streams[j].rc);
            free(d->senders[i].streams[j].claims);
        }
        free(d->senders[i].streams);
        close(d->senders[i].fd);
    }
    free(d->senders);
    free(d->instances);
    if (d->ledger_fd >= 0)
        close(d->ledger_fd);
    free(d);
    n->durable = NULL;
}

void durable_entry_fields(const node_t *n, jval *entry, jval *features)
{
    (void)entry; /* no registry field besides the name (docs/PROTOCOL.md "### durable") */
    if (n->durable)
        json_push(features, json_str("durable"));
}

int durable_applies(const node_t *n, const env_header *h)
{
    return n->durable && h->type == ENV_MESSAGE && (h->flags & ENV_FLAG_DURABLE);
}

const char *durable_judge(node_t *n, const env_header *h, const uint8_t nonce[ENV_NONCE_LEN],
                          const char *to, const jval *p, uint64_t *skipped)
{
    dfields f;
    if (parse_fields(p, &f) != 0)
        return "bad_payload";
    if (strcmp(to, n->name) != 0)
        return "wrong_target";
    if (memcmp(h->target_id, n->id_bytes, 16) == 0) /* numbered on this instance's link */
        return replay_check(&n->replay, json_get_str(p, "from"), h->source_id, h->sequence,
                            h->timestamp_ms, nonce, now_wall_ms(), skipped);
    for (size_t i = 0; i < n->durable->ninstances; i++)
        if (memcmp(h->target_id, n->durable->instances[i], 16) == 0) /* an earlier instance */
            return replay_check_window(&n->replay, h->timestamp_ms, nonce, now_wall_ms());
    return "wrong_target";
}

/* ---------- the ledger ---------- */

static dstream *stream_of(dsender *s, const char *stream)
{
    for (size_t i = 0; i < s->nstreams; i++)
        if (strcmp(s->streams[i].stream, stream) == 0)
            return &s->streams[i];
    s->streams = xrealloc(s->streams, (s->nstreams + 1) * sizeof *s->streams);
    dstream *st = &s->streams[s->nstreams++];
    memset(st, 0, sizeof *st);
    snprintf(st->stream, sizeof st->stream, "%s", stream);
    return st;
}

static void advance(dstream *st, uint64_t base)
{
    if (base == 0 || base - 1 <= st->floor)
        return;
    st->floor = base - 1;
    size_t k = 0;
    for (size_t i = 0; i < st->nrc; i++)
        if (st->rc[i].id > st->floor)
            st->rc[k++] = st->rc[i];
    st->nrc = k;
    k = 0;
    for (size_t i = 0; i < st->nclaims; i++)
        if (st->claims[i] > st->floor)
            st->claims[k++] = st->claims[i];
    st->nclaims = k;
}

static void record(dstream *st, const dreceipt *r)
{
    if (r->index > st->index) { /* a checkpoint's head is never moved back by older lines */
        st->index = r->index;
        memcpy(st->mac, r->mac, 32);
    }
    for (size_t i = 0; i < st->nclaims; i++)
        if (st->claims[i] == r->id)
            st->claims[i--] = st->claims[--st->nclaims];
    if (r->id > st->floor) {
        st->rc = xrealloc(st->rc, (st->nrc + 1) * sizeof *st->rc);
        st->rc[st->nrc++] = *r;
    }
}

static int claimed(const dstream *st, uint64_t id)
{
    for (size_t i = 0; i < st->nclaims; i++)
        if (st->claims[i] == id)
            return 1;
    return 0;
}

static const dreceipt *receipt_for(const dstream *st, uint64_t id)
{
    for (size_t i = 0; i < st->nrc; i++)
        if (st->rc[i].id == id)
            return &st->rc[i];
    return NULL;
}

static int parse_receipt(const jval *o, dreceipt *r)
{
    const char *status = json_get_str(o, "status"), *prev = json_get_str(o, "prev");
    const char *mac = json_get_str(o, "mac");
    r->status = 0;
    for (int i = 1; i <= 3 && status; i++)
        if (strcmp(status, STATUS_NAMES[i]) == 0)
            r->status = i;
    return (r->status && prev && mac && json_get_u64(o, "index", &r->index) == 0 &&
            json_get_u64(o, "id", &r->id) == 0 && json_get_u64(o, "time", &r->time) == 0 &&
            strlen(prev) == 64 && strlen(mac) == 64 && hex_decode(prev, r->prev, 32) == 0 &&
            hex_decode(mac, r->mac, 32) == 0)
               ? 0
               : -1;
}

/* Replays one ledger line (a claim, a receipt, a checkpoint); anything else is skipped. */
static void replay_line(dsender *s, const char *line, size_t len)
{
    jval *rec = json_parse(line, len, NULL, 0);
    const jval *o = NULL;
    const char *stream = NULL;
    uint64_t v = 0;
    if (rec && rec->type == J_OBJ && rec->n == 1 && (o = rec->items[0])->type == J_OBJ &&
        is_stream(stream = json_get_str(o, "stream"))) {
        dstream *st = stream_of(s, stream);
        dreceipt r;
        if (strcmp(rec->keys[0], "receipt") == 0 && parse_receipt(o, &r) == 0) {
            record(st, &r);
            if (json_get_u64(o, "base", &v) == 0)
                advance(st, v);
        } else if (strcmp(rec->keys[0], "claim") == 0 && json_get_u64(o, "id", &v) == 0 &&
                   v > st->floor) {
            st->claims = xrealloc(st->claims, (st->nclaims + 1) * sizeof *st->claims);
            st->claims[st->nclaims++] = v;
        } else if (strcmp(rec->keys[0], "checkpoint") == 0) {
            const char *mac = json_get_str(o, "mac");
            json_get_u64(o, "index", &st->index);
            json_get_u64(o, "floor", &st->floor);
            if (mac && strlen(mac) == 64)
                hex_decode(mac, st->mac, 32);
        }
    }
    json_free(rec);
}

/* The ledger of sender `name`: its log opened (a torn last line cut off) and replayed. */
static dsender *sender_of(node_t *n, const char *name)
{
    struct durable_state *d = n->durable;
    for (size_t i = 0; i < d->nsenders; i++)
        if (strcmp(d->senders[i].name, name) == 0)
            return &d->senders[i];
    char *file = xasprintf("%s.log", name);
    int fd = open_log_in(d->ledger_fd, file);
    free(file);
    if (fd < 0)
        return NULL;
    d->senders = xrealloc(d->senders, (d->nsenders + 1) * sizeof *d->senders);
    dsender *s = &d->senders[d->nsenders++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->fd = fd;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
        char *data = xmalloc((size_t)st.st_size + 1);
        ssize_t got = pread(fd, data, (size_t)st.st_size, 0);
        size_t end = 0;
        for (ssize_t i = 0; i < got; i++)
            if (data[i] == '\n') {
                replay_line(s, data + end, (size_t)i - end);
                end = (size_t)i + 1;
            }
        if ((off_t)end != st.st_size && ftruncate(fd, (off_t)end) != 0)
            fprintf(stderr, "warning: cannot cut the torn end of the ledger of %s\n", name);
        free(data);
    }
    return s;
}

/* Appends one {"kind": obj} line; with sync, fdatasync before returning. 0 on success. */
static int append(dsender *s, const char *kind, jval *obj, int sync)
{
    jval *line = json_obj();
    json_set(line, kind, obj);
    size_t len = 0;
    char *text = json_dump(line, &len);
    json_free(line);
    text = xrealloc(text, len + 2);
    text[len++] = '\n';
    int rc = write_all(s->fd, text, len);
    free(text);
    if (rc == 0 && sync)
        rc = fdatasync(s->fd);
    return rc;
}

/* ---------- handling ---------- */

static void send_receipt(node_t *n, const char *to, const char *stream, const dreceipt *r,
                         uint64_t seq)
{
    int exists = 0;
    jval *entry = registry_read(n->root, to, &exists);
    const jval *features = entry ? json_get(entry, "features") : NULL;
    int speaks = 0;
    for (size_t i = 0; features && features->type == J_ARR && i < features->n; i++)
        speaks |= features->items[i]->type == J_STR && strcmp(features->items[i]->str, "durable") == 0;
    json_free(entry);
    if (!speaks) /* a v1-only node never receives a receipt */
        return;
    jval *p = node_base_payload(n, to);
    json_set(p, "ackSeq", json_int((int64_t)seq));
    json_set(p, "receipt", receipt_json(stream, r));
    char err[512];
    deliver_result res = node_deliver(n, to, ENV_ACK, ENV_FLAG_DURABLE, p, NULL, err, sizeof err);
    json_free(p);
    jval *l = json_obj();
    json_set(l, "event", json_str(res == DELIVER_OK ? "durable_receipt" : "durable_receipt_not_sent"));
    json_set(l, "to", json_str(to));
    json_set(l, "id", json_int((int64_t)r->id));
    json_set(l, "index", json_int((int64_t)r->index));
    json_set(l, "status", json_str(STATUS_NAMES[r->status]));
    node_emit(n->events, l);
}

void durable_handle(node_t *n, int dirfd, const char *file, const env_header *h, const char *from,
                    const jval *p, int64_t size)
{
    dfields f;
    dsender *s = sender_of(n, from);
    if (!s || parse_fields(p, &f) != 0)
        return; /* the file stays: looked at again by the next scan */
    dstream *st = stream_of(s, f.stream);
    advance(st, f.base);
    const dreceipt *seen = receipt_for(st, f.id);
    if (seen || f.id <= st->floor) { /* a copy of what is finished: removed, its receipt again */
        unlinkat(dirfd, file, 0);
        jval *l = json_obj();
        json_set(l, "event", json_str("rejected"));
        json_set(l, "file", json_str(file));
        json_set(l, "reason", json_str("durable_duplicate"));
        json_set(l, "peer", json_str(from));
        json_set(l, "type", json_str("MESSAGE"));
        json_set(l, "seq", json_int((int64_t)h->sequence));
        json_set(l, "size", json_int(size));
        node_emit(n->events, l);
        if (seen) {
            dreceipt again = *seen;
            send_receipt(n, from, f.stream, &again, h->sequence);
        }
        return;
    }
    dreceipt r = {.id = f.id, .index = st->index + 1};
    memcpy(r.prev, st->mac, 32);
    if (now_wall_ms() > f.expires) {
        r.status = 3; /* expired: no handler starts after the time-to-live */
    } else {
        int redelivered = claimed(st, f.id);
        jval *c = json_obj();
        json_set(c, "stream", json_str(f.stream));
        json_set(c, "id", json_int((int64_t)f.id));
        append(s, "claim", c, 0);
        /* the handler: the message line */
        jval *l = json_obj();
        json_set(l, "event", json_str("message"));
        json_set(l, "from", json_str(from));
        json_set(l, "seq", json_int((int64_t)h->sequence));
        json_set(l, "data", json_clone(json_get(p, "data")));
        json_set(l, "durableId", json_int((int64_t)f.id));
        json_set(l, "redelivered", json_bool(redelivered));
        node_emit(n->events, l);
        r.status = 1;
    }
    r.time = now_wall_ms();
    receipt_mac(n->durable->rkey, n->name, from, f.stream, &r);
    jval *rec = receipt_json(f.stream, &r);
    json_set(rec, "base", json_int((int64_t)f.base));
    if (append(s, "receipt", rec, 1) != 0) { /* not committed: the file stays for another try */
        fprintf(stderr, "error: cannot write the ledger of %s: %s\n", from, strerror(errno));
        return;
    }
    record(st, &r);
    unlinkat(dirfd, file, 0); /* only after the receipt is on disk */
    send_receipt(n, from, f.stream, &r, h->sequence);
}
