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
/* docs/PROTOCOL.md, durable, "The receiver": the bounds of what one sender's copies can move */
#define FLOOR_STEP 16     /* one copy's base raises a stream's floor by at most this */
#define RECEIPTS_KEPT 256 /* receipts kept per stream above its floor (the newest) */
#define MAX_RUNS 256      /* runs of receipted ids kept per stream above its floor */
#define MAX_STREAMS 8     /* streams kept per sender */
#define MAX_LOG_BYTES (16u << 20)
/* "Files and the order of writes": a ledger log is rewritten (compacted) when it exceeds this after
 * a commit; SPEED_C_NODE_DURABLE_COMPACT_BYTES lowers it (tests), see README.md */
#define COMPACT_BYTES (4u << 20)
#define COMPACT_ENV "SPEED_C_NODE_DURABLE_COMPACT_BYTES"
#define LINEAGE_MAX_BYTES (64u << 10)

static const char *const STATUS_NAMES[] = {"", "handled", "failed", "expired"};

typedef durable_receipt dreceipt;

typedef struct {
    uint64_t lo, hi;
} drun;

/* What we know of one (sender, stream): the chain's head, the floor, the highest id receipted,
 * the runs of receipted ids above the floor and the newest of their receipts, claims, and a
 * status whose receipt could not be stored yet (its handler is not run again). */
typedef struct {
    char stream[33];
    uint64_t index, floor, high;
    uint64_t handled; /* how many receipts of the whole chain (1..index) are `handled` */
    uint8_t mac[32];
    dreceipt *rc; /* in chain order */
    size_t nrc;
    drun *runs; /* sorted, disjoint */
    size_t nruns;
    uint64_t *claims;
    size_t nclaims;
    uint64_t unstored_id;
    int unstored_status;
} dstream;

/* One sender's ledger: its log is opened for each append and closed again (no descriptor is
 * kept per sender); at most MAX_STREAMS streams. */
typedef struct {
    char name[NAME_MAX_LEN + 1];
    dstream *streams;
    size_t nstreams;
} dsender;

struct durable_state {
    int ledger_fd;
    uint64_t started_ms; /* copies sealed for an earlier instance count if they arrived before */
    uint64_t compact_bytes; /* a ledger log beyond this after a commit is compacted */
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
    if (errno != EEXIST)
        return -1;
    fd = openat(dir, name, O_RDWR | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
                    st.st_nlink != 1 || (uint64_t)st.st_size > MAX_LOG_BYTES)) {
        close(fd); /* a FIFO, another owner's file, a hard link, a huge file: never ours */
        errno = EPERM;
        return -1;
    }
    return fd;
}

/* Reads durable/instances (fd, a log of ours of at most MAX_LOG_BYTES) as the Python writer does:
 * a torn last line (a crash mid-append) is cut off; of its lines those of exactly 32 lowercase hex
 * digits and 0x0A count (any other line is skipped), the last MAX_INSTANCES of them are loaded
 * into d->instances in file order. *lines gets the number of lines. 0, or -1 with errno. */
static int load_instances(struct durable_state *d, int fd, size_t *lines)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -1;
    size_t size = (size_t)st.st_size, got = 0;
    char *text = xmalloc(size + 1);
    while (got < size) {
        ssize_t r = pread(fd, text + got, size - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = EIO;
            free(text);
            return -1;
        }
        got += (size_t)r;
    }
    size_t end = size;
    while (end > 0 && text[end - 1] != '\n')
        end--;
    if (end != size && ftruncate(fd, (off_t)end) != 0) { /* the next line starts on its own */
        free(text);
        return -1;
    }
    uint8_t(*ring)[16] = xmalloc(MAX_INSTANCES * sizeof *ring);
    size_t nvalid = 0, start = 0;
    *lines = 0;
    for (size_t i = 0; i < end; i++) {
        if (text[i] != '\n')
            continue;
        ++*lines;
        text[i] = '\0'; /* the line without its 0x0A: exactly 32 lowercase hex digits count */
        if (is_stream(text + start) && hex_decode(text + start, ring[nvalid % MAX_INSTANCES], 16) == 0)
            nvalid++;
        start = i + 1;
    }
    size_t keep = nvalid < MAX_INSTANCES ? nvalid : MAX_INSTANCES;
    for (size_t k = 0; k < keep; k++)
        memcpy(d->instances[k], ring[(nvalid - keep + k) % MAX_INSTANCES], 16);
    d->ninstances = keep;
    free(ring);
    free(text);
    return 0;
}

/* Rewrites durable/instances in dir to ids (one line each), as the Python writer compacts a log:
 * .instances.tmp, write, fsync, rename over instances, fsync(dir) (after a crash the file is the
 * old one or the new one, whole). Returns the new log opened for appending, or -1 with errno
 * (the temporary file removed unless it was renamed). */
/* Writes `file` in `dir` whole or not at all: .<file>.tmp (mode 0600; a leftover of a crash
 * replaced), fsync, rename over `file`, fsync of the directory. 0, or -1 with errno (no .tmp left). */
static int write_whole(int dir, const char *file, const char *data, size_t len)
{
    char *tmp = xasprintf(".%s.tmp", file);
    unlinkat(dir, tmp, 0);
    int fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    int ok = fd >= 0, renamed = 0, e = 0;
    if (ok) {
        ok = write_all(fd, data, len) == 0 && fsync(fd) == 0;
        e = errno;
        if (close(fd) != 0 && ok) {
            ok = 0;
            e = errno;
        }
        errno = e;
    }
    if (ok && renameat(dir, tmp, dir, file) != 0)
        ok = 0;
    else if (ok)
        renamed = 1;
    if (ok && fsync(dir) != 0)
        ok = 0;
    e = errno;
    if (!renamed && fd >= 0)
        unlinkat(dir, tmp, 0);
    free(tmp);
    errno = e;
    return ok ? 0 : -1;
}

static int rewrite_instances(int dir, const uint8_t (*ids)[16], size_t n)
{
    char *text = xmalloc(n * 33 + 1);
    for (size_t k = 0; k < n; k++) {
        hex_encode(ids[k], 16, text + 33 * k);
        text[33 * k + 32] = '\n';
    }
    int ok = write_whole(dir, "instances", text, n * 33) == 0;
    free(text);
    if (!ok)
        return -1;
    return openat(dir, "instances", O_RDWR | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
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
    d->compact_bytes = COMPACT_BYTES;
    const char *compact = getenv(COMPACT_ENV);
    if (compact && *compact) {
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(compact, &end, 10);
        if (errno || *end || compact[0] < '0' || compact[0] > '9' || v < 1 || v > COMPACT_BYTES) {
            fprintf(stderr, "error: %s must be a number of bytes from 1 to %u, not \"%s\"\n", COMPACT_ENV,
                    COMPACT_BYTES, compact);
            return -1;
        }
        d->compact_bytes = v;
    }
    char *home_path = xasprintf("%s/%s", n->root, n->name);
    int home = open(home_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    free(home_path);
    int dur = home >= 0 ? open_dir_in(home, "durable") : -1;
    d->ledger_fd = dur >= 0 ? open_dir_in(dur, "ledger") : -1;
    int fd = dur >= 0 ? open_log_in(dur, "instances") : -1;
    if (home >= 0)
        close(home);
    if (d->ledger_fd < 0 || fd < 0) {
        fprintf(stderr, "error: cannot open %s/%s/durable: %s\n", n->root, n->name, strerror(errno));
        if (fd >= 0)
            close(fd);
        if (dur >= 0)
            close(dur);
        return -1;
    }
    d->instances = xmalloc((MAX_INSTANCES + 1) * sizeof *d->instances);
    size_t lines = 0;
    int ok = load_instances(d, fd, &lines) == 0;
    if (ok && lines >= MAX_INSTANCES) { /* bounded: the last half of what is remembered stays */
        size_t keep = d->ninstances < MAX_INSTANCES / 2 ? d->ninstances : MAX_INSTANCES / 2;
        memmove(d->instances, d->instances + (d->ninstances - keep), keep * sizeof *d->instances);
        d->ninstances = keep;
        close(fd);
        fd = rewrite_instances(dur, (const uint8_t(*)[16])d->instances, keep);
        ok = fd >= 0;
    }
    int e = errno;
    close(dur);
    errno = e;
    if (!ok) {
        fprintf(stderr, "error: cannot read or rewrite %s/%s/durable/instances: %s\n", n->root, n->name,
                strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    memcpy(d->instances[d->ninstances++], n->id_bytes, 16);
    char hex[33];
    hex_encode(n->id_bytes, 16, hex);
    hex[32] = '\n';
    off_t before = lseek(fd, 0, SEEK_END);
    ok = before >= 0 && write_all(fd, hex, 33) == 0 && fdatasync(fd) == 0;
    if (!ok && before >= 0 && ftruncate(fd, before) != 0) /* whole or absent */
        fprintf(stderr, "warning: cannot cut a failed line off durable/instances\n");
    close(fd);
    if (!ok) {
        fprintf(stderr, "error: cannot record this instance in durable/instances: %s\n", strerror(errno));
        return -1;
    }
    d->started_ms = now_wall_ms();
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
            free(d->senders[i].streams[j].runs);
            free(d->senders[i].streams[j].claims);
        }
        free(d->senders[i].streams);
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

/* 1 when id is one of the instance ids `sender` recorded in ROOT/<sender>/durable/instances (its
 * lineage): each component opened without following a link, a small regular file of ours. */
static int in_lineage(const node_t *n, const char *sender, const uint8_t id[16])
{
    int fds[4] = {-1, -1, -1, -1};
    int found = 0;
    fds[0] = open(n->root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fds[0] >= 0)
        fds[1] = openat(fds[0], sender, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fds[1] >= 0)
        fds[2] = openat(fds[1], "durable", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fds[2] >= 0)
        fds[3] = openat(fds[2], "instances", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fds[3] >= 0 && fstat(fds[3], &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
        (uint64_t)st.st_size <= LINEAGE_MAX_BYTES) {
        char *text = xmalloc((size_t)st.st_size + 1);
        ssize_t got = pread(fds[3], text, (size_t)st.st_size, 0);
        size_t lines = 0;
        for (ssize_t i = 0; i < got; i++)
            lines += text[i] == '\n';
        size_t line = 0, start = 0; /* the last MAX_INSTANCES lines count */
        for (ssize_t i = 0; i < got && !found; i++) {
            if (text[i] != '\n')
                continue;
            uint8_t one[16];
            if (lines - line <= MAX_INSTANCES && (size_t)i - start == 32) {
                text[i] = '\0';
                found = is_stream(text + start) && hex_decode(text + start, one, 16) == 0 &&
                        memcmp(one, id, 16) == 0;
            }
            line++;
            start = (size_t)i + 1;
        }
        free(text);
    }
    for (int i = 3; i >= 0; i--)
        if (fds[i] >= 0)
            close(fds[i]);
    return found;
}

const char *durable_judge(node_t *n, const env_header *h, const uint8_t nonce[ENV_NONCE_LEN],
                          const char *to, const jval *p, int64_t arrived_ms, uint64_t *skipped)
{
    dfields f;
    if (parse_fields(p, &f) != 0)
        return "bad_payload";
    if (strcmp(to, n->name) != 0)
        return "wrong_target";
    int current = memcmp(h->target_id, n->id_bytes, 16) == 0, earlier = 0;
    for (size_t i = 0; !current && i < n->durable->ninstances; i++)
        earlier |= memcmp(h->target_id, n->durable->instances[i], 16) == 0;
    /* an earlier instance's copy counts only if it was delivered before this instance started */
    if (!current && (!earlier || arrived_ms >= (int64_t)n->durable->started_ms))
        return "wrong_target";
    const char *from = json_get_str(p, "from");
    if (!node_sender_id_matches(n, from, h->source_id) && !in_lineage(n, from, h->source_id))
        return "unknown_sender"; /* only an instance of the sender counts as the sender */
    /* judged at its arrival: a copy that waited in the inbox across our restart is not stale */
    if (current) /* numbered on this instance's link */
        return replay_check(&n->replay, from, h->source_id, h->sequence, h->timestamp_ms, nonce,
                            (uint64_t)arrived_ms, skipped);
    return replay_check_window(&n->replay, h->timestamp_ms, nonce, (uint64_t)arrived_ms);
}

/* ---------- the ledger ---------- */

/* The stream's ledger among the sender's, created when there is room; NULL beyond MAX_STREAMS. */
static dstream *stream_of(dsender *s, const char *stream)
{
    for (size_t i = 0; i < s->nstreams; i++)
        if (strcmp(s->streams[i].stream, stream) == 0)
            return &s->streams[i];
    if (s->nstreams == MAX_STREAMS)
        return NULL;
    s->streams = xrealloc(s->streams, (s->nstreams + 1) * sizeof *s->streams);
    dstream *st = &s->streams[s->nstreams++];
    memset(st, 0, sizeof *st);
    snprintf(st->stream, sizeof st->stream, "%s", stream);
    return st;
}

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* The sender says every id below base is finished: the floor rises to at most
 * min(base - 1, floor + FLOOR_STEP, high); what lies at or below it is forgotten. */
static void raise_floor(dstream *st, uint64_t floor);
static void advance(dstream *st, uint64_t base)
{
    raise_floor(st, base == 0 ? 0 : min_u64(base - 1, min_u64(st->floor + FLOOR_STEP, st->high)));
}

/* The floor rises to floor (never falls); what lies at or below it is forgotten. */
static void raise_floor(dstream *st, uint64_t floor)
{
    if (floor <= st->floor)
        return;
    st->floor = floor;
    size_t k = 0;
    for (size_t i = 0; i < st->nrc; i++)
        if (st->rc[i].id > floor)
            st->rc[k++] = st->rc[i];
    st->nrc = k;
    k = 0;
    for (size_t i = 0; i < st->nclaims; i++)
        if (st->claims[i] > floor)
            st->claims[k++] = st->claims[i];
    st->nclaims = k;
    k = 0;
    for (size_t i = 0; i < st->nruns; i++) {
        if (st->runs[i].hi <= floor)
            continue;
        st->runs[k] = st->runs[i];
        if (st->runs[k].lo <= floor)
            st->runs[k].lo = floor + 1;
        k++;
    }
    st->nruns = k;
}

static void forget_receipts(dstream *st, uint64_t lo, uint64_t hi)
{
    size_t k = 0;
    for (size_t i = 0; i < st->nrc; i++)
        if (st->rc[i].id < lo || st->rc[i].id > hi)
            st->rc[k++] = st->rc[i];
    st->nrc = k;
}

/* The ids lo..hi (above the floor) join the runs of receipted ids, merged with the runs they touch;
 * beyond MAX_RUNS the highest run is forgotten (and its receipts with it). */
static void add_range(dstream *st, uint64_t lo, uint64_t hi)
{
    if (hi < lo || hi <= st->floor)
        return;
    if (lo <= st->floor)
        lo = st->floor + 1;
    size_t i = 0;
    while (i < st->nruns && st->runs[i].hi + 1 < lo)
        i++; /* runs[i] is the first that ends at or after lo - 1 */
    size_t j = i;
    while (j < st->nruns && st->runs[j].lo <= hi + 1) { /* runs[i..j) touch lo..hi: one run */
        lo = min_u64(lo, st->runs[j].lo);
        hi = st->runs[j].hi > hi ? st->runs[j].hi : hi;
        j++;
    }
    if (j > i) {
        st->runs[i] = (drun){lo, hi};
        memmove(&st->runs[i + 1], &st->runs[j], (st->nruns - j) * sizeof *st->runs);
        st->nruns -= j - i - 1;
        return;
    }
    st->runs = xrealloc(st->runs, (st->nruns + 1) * sizeof *st->runs);
    memmove(&st->runs[i + 1], &st->runs[i], (st->nruns - i) * sizeof *st->runs);
    st->runs[i] = (drun){lo, hi};
    if (++st->nruns > MAX_RUNS) {
        drun last = st->runs[--st->nruns];
        forget_receipts(st, last.lo, last.hi);
    }
}

static void record(dstream *st, const dreceipt *r)
{
    if (r->index > st->index) { /* a checkpoint's head is never moved back by older lines */
        st->index = r->index;
        memcpy(st->mac, r->mac, 32);
        st->handled += r->status == 1; /* the receipts a checkpoint kept are counted in it */
    }
    for (size_t i = 0; i < st->nclaims; i++)
        if (st->claims[i] == r->id)
            st->claims[i--] = st->claims[--st->nclaims];
    if (r->id > st->high)
        st->high = r->id;
    if (r->id <= st->floor)
        return;
    if (st->nrc == RECEIPTS_KEPT) { /* the oldest goes */
        memmove(&st->rc[0], &st->rc[1], (st->nrc - 1) * sizeof *st->rc);
        st->nrc--;
    }
    st->rc = xrealloc(st->rc, (st->nrc + 1) * sizeof *st->rc);
    st->rc[st->nrc++] = *r;
    add_range(st, r->id, r->id);
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

/* 1 when id is finished: at or below the floor, or receipted (its receipt kept or not). */
static int finished(const dstream *st, uint64_t id)
{
    if (id <= st->floor)
        return 1;
    for (size_t i = 0; i < st->nruns && st->runs[i].lo <= id; i++)
        if (st->runs[i].hi >= id)
            return 1;
    return 0;
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

/* A checkpoint (docs/PROTOCOL.md, "The formats, byte for byte", ledger/<sender>.log) stands for
 * the stream's whole chain before the lines after it: its head (index, mac), the count of
 * `handled` receipts in it, the floor, the highest id receipted and the runs of receipted ids above
 * the floor. The receipts kept and the open claims follow it as ordinary lines. A head older than
 * the one already read is not taken (a checkpoint never moves the chain back). */
static void replay_checkpoint(dstream *st, const jval *o)
{
    const char *mac = json_get_str(o, "mac");
    uint64_t index = 0, v = 0;
    uint8_t head[32] = {0};
    if (json_get_u64(o, "index", &index) == 0 && index <= ID_MAX && index >= st->index &&
        (index == 0 || (mac && strlen(mac) == 64 && hex_decode(mac, head, 32) == 0))) {
        st->index = index;
        memcpy(st->mac, head, 32);
        st->handled = json_get_u64(o, "handled", &v) == 0 && v <= index ? v : 0;
    }
    if (json_get_u64(o, "high", &v) == 0 && v <= ID_MAX && v > st->high)
        st->high = v;
    if (json_get_u64(o, "floor", &v) == 0 && v <= ID_MAX) {
        raise_floor(st, v);
        if (st->floor > st->high)
            st->high = st->floor;
    }
    const jval *runs = json_get(o, "runs");
    for (size_t i = 0; runs && runs->type == J_ARR && i < runs->n; i++) {
        const jval *pair = runs->items[i];
        uint64_t lo, hi;
        if (pair->type == J_ARR && pair->n == 2 && json_num_u64(pair->items[0], &lo) == 0 &&
            json_num_u64(pair->items[1], &hi) == 0 && lo >= 1 && lo <= hi && hi <= ID_MAX) {
            add_range(st, lo, hi);
            if (hi > st->high)
                st->high = hi;
        }
    }
}

/* Replays one ledger line (a claim, a receipt, a checkpoint) as it was applied when written: a
 * receipt's base (of the copy it answered) first, then the receipt; anything else is skipped. */
static void replay_line(dsender *s, const char *line, size_t len)
{
    jval *rec = json_parse(line, len, NULL, 0);
    const jval *o = NULL;
    const char *stream = NULL;
    uint64_t v = 0;
    dstream *st = NULL;
    if (rec && rec->type == J_OBJ && rec->n == 1 && (o = rec->items[0])->type == J_OBJ &&
        is_stream(stream = json_get_str(o, "stream")) && (st = stream_of(s, stream)) != NULL) {
        dreceipt r;
        if (strcmp(rec->keys[0], "receipt") == 0 && parse_receipt(o, &r) == 0) {
            advance(st, json_get_u64(o, "base", &v) == 0 ? v : 1);
            record(st, &r);
        } else if (strcmp(rec->keys[0], "claim") == 0 && json_get_u64(o, "id", &v) == 0 &&
                   v > st->floor) {
            st->claims = xrealloc(st->claims, (st->nclaims + 1) * sizeof *st->claims);
            st->claims[st->nclaims++] = v;
        } else if (strcmp(rec->keys[0], "checkpoint") == 0) {
            replay_checkpoint(st, o);
        }
    }
    json_free(rec);
}

/* The ledger of sender `name`: on first use its log is opened (a torn last line cut off),
 * replayed and closed; NULL when it cannot be (then errno says why). */
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
    close(fd);
    return s;
}

/* Appends one {"kind": obj} line to the sender's log (opened for it and closed again); with
 * sync, fdatasync before returning. Whole or absent: a line that cannot be written whole (and
 * synced) is cut off again. 0 (*size, when given, the log's size after it), or -1 with errno. */
static int append(node_t *n, const dsender *s, const char *kind, jval *obj, int sync, off_t *size)
{
    jval *line = json_obj();
    json_set(line, kind, obj);
    size_t len = 0;
    char *text = json_dump(line, &len);
    json_free(line);
    text = xrealloc(text, len + 2);
    text[len++] = '\n';
    char *file = xasprintf("%s.log", s->name);
    int fd = open_log_in(n->durable->ledger_fd, file), rc = -1;
    free(file);
    off_t before = fd >= 0 ? lseek(fd, 0, SEEK_END) : -1;
    if (before >= 0) {
        rc = write_all(fd, text, len);
        if (rc == 0 && size)
            *size = before + (off_t)len;
        if (rc == 0 && sync)
            rc = fdatasync(fd);
        int err = errno;
        if (rc != 0 && ftruncate(fd, before) != 0)
            fprintf(stderr, "warning: cannot cut a failed record off the ledger of %s\n", s->name);
        errno = err;
    }
    if (fd >= 0) {
        int err = errno;
        close(fd);
        errno = err;
    }
    free(text);
    return rc;
}

/* ---------- compaction ---------- */

static int cmp_index(const void *a, const void *b)
{
    const dreceipt *x = a, *y = b;
    return x->index < y->index ? -1 : x->index > y->index;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void put_line(buf_t *b, const char *kind, jval *obj)
{
    jval *line = json_obj();
    json_set(line, kind, obj);
    json_write(b, line);
    json_free(line);
    buf_append(b, "\n", 1);
}

/* The compacted ledger of s (docs/PROTOCOL.md, "The formats, byte for byte", ledger/<sender>.log):
 * per stream its checkpoint {"stream","index","mac","floor","handled","high","runs"}, then the
 * receipts kept in index order, each with "base" = floor + 1 (which moves nothing when read
 * again), then the open claims by id. A stream that holds nothing (no receipt, floor 0, no claim)
 * is left out. */
static void compacted(const dsender *s, buf_t *b)
{
    for (size_t i = 0; i < s->nstreams; i++) {
        const dstream *st = &s->streams[i];
        uint64_t *open = xmalloc((st->nclaims + 1) * sizeof *open);
        size_t nopen = 0;
        for (size_t k = 0; k < st->nclaims; k++)
            if (!finished(st, st->claims[k]) && !receipt_for(st, st->claims[k]))
                open[nopen++] = st->claims[k];
        qsort(open, nopen, sizeof *open, cmp_u64);
        if (st->index == 0 && st->floor == 0 && st->high == 0 && st->nruns == 0 && nopen == 0) {
            free(open);
            continue;
        }
        char mac[65];
        hex_encode(st->mac, 32, mac);
        jval *cp = json_obj();
        json_set(cp, "stream", json_str(st->stream));
        json_set(cp, "index", json_int((int64_t)st->index));
        json_set(cp, "mac", json_str(mac));
        json_set(cp, "floor", json_int((int64_t)st->floor));
        json_set(cp, "handled", json_int((int64_t)st->handled));
        json_set(cp, "high", json_int((int64_t)st->high));
        jval *runs = json_arr();
        for (size_t k = 0; k < st->nruns; k++) {
            jval *pair = json_arr();
            json_push(pair, json_int((int64_t)st->runs[k].lo));
            json_push(pair, json_int((int64_t)st->runs[k].hi));
            json_push(runs, pair);
        }
        json_set(cp, "runs", runs);
        put_line(b, "checkpoint", cp);
        dreceipt *kept = xmalloc((st->nrc + 1) * sizeof *kept);
        memcpy(kept, st->rc, st->nrc * sizeof *kept);
        qsort(kept, st->nrc, sizeof *kept, cmp_index);
        for (size_t k = 0; k < st->nrc; k++) {
            jval *rec = receipt_json(st->stream, &kept[k]);
            json_set(rec, "base", json_int((int64_t)(st->floor + 1)));
            put_line(b, "receipt", rec);
        }
        free(kept);
        for (size_t k = 0; k < nopen; k++) {
            if (k > 0 && open[k] == open[k - 1])
                continue; /* a claim written twice (a crash in its handler) is one open claim */
            jval *c = json_obj();
            json_set(c, "stream", json_str(st->stream));
            json_set(c, "id", json_int((int64_t)open[k]));
            put_line(b, "claim", c);
        }
        free(open);
    }
}

/* Rewrites the sender's log as its compacted form: .<sender>.log.tmp in the ledger directory
 * (mode 0600), write, fsync, rename over <sender>.log, fsync of the directory; after a crash the
 * log is the old one or the new one, whole. 0, or -1 with errno (the old log left as it was). */
static int compact(node_t *n, const dsender *s)
{
    buf_t b = {0};
    compacted(s, &b);
    char *file = xasprintf("%s.log", s->name);
    int rc = write_whole(n->durable->ledger_fd, file, b.p ? b.p : "", b.len);
    int e = errno;
    free(file);
    free(b.p);
    errno = e;
    return rc;
}

/* A durable store failure: one line on stderr and a durable_store_failed event line. */
static void report_store_failed(node_t *n, const char *from, const char *detail)
{
    fprintf(stderr, "error: %s\n", detail);
    jval *l = json_obj();
    json_set(l, "event", json_str("durable_store_failed"));
    json_set(l, "peer", json_str(from));
    json_set(l, "detail", json_str(detail));
    node_emit(n->events, l);
}

/* A compaction that failed: reported; nothing else changes (the log keeps its records and grows
 * until a compaction succeeds). */
static void compact_failed(node_t *n, const char *from)
{
    char detail[512];
    snprintf(detail, sizeof detail, "cannot compact the durable ledger of %s: %s", from, strerror(errno));
    report_store_failed(n, from, detail);
}

const char *durable_ledger_step(durable_ledger_kat *k, const char *stream, uint64_t id, uint64_t base,
                                uint64_t *floor)
{
    if (!k->sender)
        k->sender = calloc(1, sizeof(dsender));
    dsender *s = k->sender;
    dstream *st = stream_of(s, stream);
    if (!st)
        return "durable_streams_full";
    advance(st, base);
    *floor = st->floor;
    if (receipt_for(st, id) || finished(st, id))
        return "durable_duplicate";
    dreceipt r = {.id = id, .index = st->index + 1, .status = 1};
    record(st, &r);
    return "handled";
}

void durable_ledger_free(durable_ledger_kat *k)
{
    dsender *s = k->sender;
    for (size_t j = 0; s && j < s->nstreams; j++) {
        free(s->streams[j].rc);
        free(s->streams[j].runs);
        free(s->streams[j].claims);
    }
    if (s)
        free(s->streams);
    free(s);
    k->sender = NULL;
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

/* A durable store that cannot be written: one line on stderr and an event line; the copy is
 * removed unanswered (the sender's outbox delivers it again). */
static void store_failed(node_t *n, int dirfd, const char *file, const char *from, const char *what)
{
    char detail[512];
    snprintf(detail, sizeof detail, "cannot store durable receipts for %s: %s: %s; its messages are not "
             "acknowledged until the ledger can be written", from, what, strerror(errno));
    report_store_failed(n, from, detail);
    unlinkat(dirfd, file, 0);
}

static void report_durable_rejected(node_t *n, const char *file, const char *reason, const char *from,
                                    const env_header *h, int64_t size)
{
    jval *l = json_obj();
    json_set(l, "event", json_str("rejected"));
    json_set(l, "file", json_str(file));
    json_set(l, "reason", json_str(reason));
    json_set(l, "peer", json_str(from));
    json_set(l, "type", json_str("MESSAGE"));
    json_set(l, "seq", json_int((int64_t)h->sequence));
    json_set(l, "size", json_int(size));
    node_emit(n->events, l);
}

void durable_handle(node_t *n, int dirfd, const char *file, const env_header *h, const char *from,
                    const jval *p, int64_t size)
{
    dfields f;
    if (parse_fields(p, &f) != 0)
        return; /* judged before: cannot happen */
    dsender *s = sender_of(n, from);
    if (!s) {
        store_failed(n, dirfd, file, from, "its ledger cannot be opened");
        return;
    }
    dstream *st = stream_of(s, f.stream);
    if (!st) { /* a sender's streams are bounded */
        unlinkat(dirfd, file, 0);
        report_durable_rejected(n, file, "durable_streams_full", from, h, size);
        return;
    }
    advance(st, f.base);
    const dreceipt *seen = receipt_for(st, f.id);
    if (seen || finished(st, f.id)) { /* a copy of what is finished: removed, its receipt again */
        unlinkat(dirfd, file, 0);
        report_durable_rejected(n, file, "durable_duplicate", from, h, size);
        if (seen) {
            dreceipt again = *seen;
            send_receipt(n, from, f.stream, &again, h->sequence);
        }
        return;
    }
    dreceipt r = {.id = f.id, .index = st->index + 1};
    memcpy(r.prev, st->mac, 32);
    if (st->unstored_id == f.id) {
        r.status = st->unstored_status; /* its handler ran: only the receipt is missing */
    } else if (st->unstored_id != 0) {
        errno = EAGAIN;
        store_failed(n, dirfd, file, from, "an earlier receipt is not stored yet");
        return;
    } else if (now_wall_ms() > f.expires) {
        r.status = 3; /* expired: no handler starts after the time-to-live */
    } else {
        int redelivered = claimed(st, f.id);
        jval *c = json_obj();
        json_set(c, "stream", json_str(f.stream));
        json_set(c, "id", json_int((int64_t)f.id));
        if (append(n, s, "claim", c, 0, NULL) != 0) {
            store_failed(n, dirfd, file, from, "the claim");
            return;
        }
        st->claims = xrealloc(st->claims, (st->nclaims + 1) * sizeof *st->claims);
        st->claims[st->nclaims++] = f.id;
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
    off_t logsize = 0;
    if (append(n, s, "receipt", rec, 1, &logsize) != 0) { /* not committed: nothing is acknowledged */
        st->unstored_id = f.id;
        st->unstored_status = r.status;
        store_failed(n, dirfd, file, from, "the receipt");
        return;
    }
    st->unstored_id = 0;
    record(st, &r);
    unlinkat(dirfd, file, 0); /* only after the receipt is on disk */
    send_receipt(n, from, f.stream, &r, h->sequence);
    if ((uint64_t)logsize > n->durable->compact_bytes && compact(n, s) != 0)
        compact_failed(n, from); /* the receipt is committed all the same: the next commit tries again */
}
