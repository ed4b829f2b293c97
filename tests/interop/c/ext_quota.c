/* ext_quota.c - see ext_quota.h. Written from docs/PROTOCOL.md ("Extensions (§9)", `quota`):
 *
 * - limits come from the target's registry entry, field "quota", only when its "features" has
 *   "quota"; "pending" and "pendingBytes" must both be valid or there are none;
 * - a ledger per target name (not per instance) holds the envelopes this node delivered there
 *   while the target published limits; a file no longer in ROOT/TARGET/inbox (fstatat says
 *   ENOENT) was consumed and leaves the ledger;
 * - a MESSAGE or SPC_REQUEST is delivered only when n + 1 <= pending and (n == 0 or
 *   b + size <= pendingBytes) and, with a rate, the bucket has a token; answers never wait. */
#define _GNU_SOURCE
#include "ext_quota.h"
#include "registry.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---------- reading an entry ---------- */

/* An entry's integer of at least 1, clamped to cap. */
static int valid_integer(const jval *v, double cap, uint64_t *out)
{
    double d;
    if (json_entry_integer(v, &d) != 0 || d < 1)
        return 0;
    *out = (uint64_t)(d > cap ? cap : d);
    return 1;
}

static int valid_rate(const jval *v, double *out)
{
    double d;
    if (json_entry_number(v, &d) != 0 || d <= 0)
        return 0;
    *out = d > QUOTA_CAP_RATE ? QUOTA_CAP_RATE : d;
    return 1;
}

static int advertises_quota(const jval *entry)
{
    const jval *features = json_get(entry, "features");
    if (!features || features->type != J_ARR)
        return 0;
    for (size_t i = 0; i < features->n; i++) {
        const jval *f = features->items[i];
        if (f->type == J_STR && f->len == 5 && memcmp(f->str, "quota", 5) == 0)
            return 1;
    }
    return 0;
}

int quota_limits_for(const jval *entry, const char *sender, quota_limits *out)
{
    if (!entry || entry->type != J_OBJ || !advertises_quota(entry))
        return 0;
    const jval *q = json_get(entry, "quota");
    if (!q || q->type != J_OBJ)
        return 0;
    quota_limits l = {0};
    if (!valid_integer(json_get(q, "pending"), QUOTA_CAP_PENDING, &l.pending) ||
        !valid_integer(json_get(q, "pendingBytes"), QUOTA_CAP_BYTES, &l.pending_bytes))
        return 0;
    double rate = 0;
    uint64_t burst = 0;
    valid_rate(json_get(q, "rate"), &rate);
    valid_integer(json_get(q, "burst"), QUOTA_CAP_BURST, &burst);
    const jval *senders = json_get(q, "senders");
    const jval *o = senders && senders->type == J_OBJ ? json_get(senders, sender) : NULL;
    if (o && o->type == J_OBJ) { /* each valid field replaces the node-wide one */
        valid_integer(json_get(o, "pending"), QUOTA_CAP_PENDING, &l.pending);
        valid_integer(json_get(o, "pendingBytes"), QUOTA_CAP_BYTES, &l.pending_bytes);
        valid_rate(json_get(o, "rate"), &rate);
        valid_integer(json_get(o, "burst"), QUOTA_CAP_BURST, &burst);
    }
    if (rate > 0) {
        l.rate = rate;
        if (burst)
            l.burst = burst;
        else /* one second's worth, at least one */
            l.burst = (uint64_t)fmax(1.0, fmin(QUOTA_CAP_BURST, floor(rate)));
    }
    *out = l;
    return 1;
}

quota_block quota_check(uint64_t n, uint64_t b, uint64_t size, const quota_limits *lim)
{
    if (n + 1 > lim->pending)
        return QUOTA_PENDING;
    if (n > 0 && b + size > lim->pending_bytes)
        return QUOTA_PENDING_BYTES;
    return QUOTA_OK;
}

const char *quota_limit_name(quota_block b)
{
    return b == QUOTA_PENDING ? "pending" : b == QUOTA_PENDING_BYTES ? "pendingBytes" : "rate";
}

/* ---------- the token bucket ---------- */

void quota_bucket_tune(quota_bucket *q, double rate, uint64_t burst)
{
    if (!q->started) {
        q->tokens = (double)burst; /* full at first use */
    } else if (q->tokens > (double)burst) {
        q->tokens = (double)burst;
    }
    q->rate = rate;
    q->burst = burst;
}

double quota_bucket_delay_ms(quota_bucket *q, double now_ms)
{
    if (!q->started) {
        q->started = 1;
        q->last_ms = now_ms;
    } else if (now_ms > q->last_ms) {
        q->tokens = fmin((double)q->burst, q->tokens + (now_ms - q->last_ms) * q->rate / 1000.0);
        q->last_ms = now_ms;
    }
    return q->tokens >= 1.0 ? 0.0 : ceil((1.0 - q->tokens) * 1000.0 / q->rate);
}

void quota_bucket_take(quota_bucket *q)
{
    q->tokens -= 1.0;
}

/* ---------- per target: the ledger and the bucket ---------- */

typedef struct {
    char name[ENV_FILENAME_MAX];
    uint64_t size;
} ledger_file;

typedef struct {
    char target[NAME_MAX_LEN + 1];
    ledger_file *files;
    size_t n, cap;
    uint64_t bytes;
    int tracking; /* the target published limits at the last look */
    quota_bucket bucket;
} target_state;

struct quota_state {
    target_state *targets;
    size_t n;
};

static target_state *state_for(node_t *n, const char *target)
{
    if (!n->quota) {
        n->quota = xmalloc(sizeof *n->quota);
        memset(n->quota, 0, sizeof *n->quota);
    }
    struct quota_state *q = n->quota;
    for (size_t i = 0; i < q->n; i++)
        if (strcmp(q->targets[i].target, target) == 0)
            return &q->targets[i];
    q->targets = xrealloc(q->targets, (q->n + 1) * sizeof *q->targets);
    target_state *t = &q->targets[q->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->target, sizeof t->target, "%s", target);
    return t;
}

/* Forgets every file that has left the target's inbox (looked up by name, never listed). */
static void prune(node_t *n, target_state *t)
{
    size_t kept = 0;
    t->bytes = 0;
    for (size_t i = 0; i < t->n; i++) {
        char *path = xasprintf("%s/%s/inbox/%s", n->root, t->target, t->files[i].name);
        struct stat st;
        int gone = fstatat(AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT;
        free(path);
        if (!gone) {
            t->files[kept++] = t->files[i];
            t->bytes += t->files[i].size;
        }
    }
    t->n = kept;
}

static void wait_a_little(int ms)
{
    wait_events(NULL, 0, ms); /* a sleep that SIGINT/SIGTERM ends */
}

deliver_result quota_admit(node_t *n, const char *target, int type, uint64_t size, char *err,
                           size_t errlen)
{
    int gated = type == ENV_MESSAGE || type == ENV_SPC_REQUEST;
    long wait_ms = n->quota_wait_ms >= 0 ? n->quota_wait_ms : n->cfg.quota_wait_ms;
    int64_t deadline = now_mono_ms() + wait_ms;
    char first_id[UUID_TEXT_LEN + 1] = "";
    int pause_ms = 1;
    for (;;) {
        int exists = 0;
        jval *entry = registry_read(n->root, target, &exists);
        reg_state st = registry_state(entry);
        const char *id = entry ? json_get_str(entry, "id") : NULL;
        if (st != REG_ONLINE || !id || (first_id[0] && strcmp(first_id, id) != 0)) {
            snprintf(err, errlen, "node %s %s", target,
                     st == REG_LEAVING ? "is leaving"
                     : st != REG_ONLINE ? "is not available"
                                        : "restarted while this send waited for room in its "
                                          "inbox; nothing was sent");
            json_free(entry);
            return DELIVER_UNAVAILABLE;
        }
        snprintf(first_id, sizeof first_id, "%s", id);
        quota_limits lim;
        target_state *t = state_for(n, target);
        t->tracking = quota_limits_for(entry, n->name, &lim);
        json_free(entry);
        if (!gated || !t->tracking)
            return DELIVER_OK; /* answers never wait; a target without limits: v1 */
        quota_block b = quota_check(t->n, t->bytes, size, &lim);
        if (b != QUOTA_OK) {
            prune(n, t);
            b = quota_check(t->n, t->bytes, size, &lim);
        }
        double delay = 0;
        if (b == QUOTA_OK && lim.rate > 0) {
            quota_bucket_tune(&t->bucket, lim.rate, lim.burst);
            delay = quota_bucket_delay_ms(&t->bucket, (double)now_mono_ms());
            if (delay > 0)
                b = QUOTA_RATE;
        }
        if (b == QUOTA_OK) {
            if (lim.rate > 0)
                quota_bucket_take(&t->bucket);
            return DELIVER_OK;
        }
        int64_t left = deadline - now_mono_ms();
        if (left <= 0 || g_stop) {
            snprintf(err, errlen,
                     "cannot send to %s now: %llu envelopes of %s holding %llu "
                     "bytes are in its inbox; %s allows %llu envelopes, %llu bytes%s (quota limit "
                     "'%s'); nothing was sent",
                     target, (unsigned long long)t->n, n->name, (unsigned long long)t->bytes,
                     target, (unsigned long long)lim.pending,
                     (unsigned long long)lim.pending_bytes,
                     lim.rate > 0 ? " and a rate" : "", quota_limit_name(b));
            return DELIVER_QUOTA;
        }
        int ms = b == QUOTA_RATE && delay > pause_ms ? (int)delay : pause_ms;
        wait_a_little(ms < left ? ms : (int)left);
        if (pause_ms < 10)
            pause_ms *= 2;
    }
}

void quota_delivered(node_t *n, const char *target, const char *fname, uint64_t size)
{
    target_state *t = state_for(n, target);
    if (!t->tracking)
        return;
    if (t->n == t->cap) {
        if (t->n >= (size_t)QUOTA_CAP_PENDING) /* answers alone: forget what was consumed first */
            prune(n, t);
        if (t->n == t->cap) {
            t->cap = t->cap ? 2 * t->cap : 16;
            t->files = xrealloc(t->files, t->cap * sizeof *t->files);
        }
    }
    snprintf(t->files[t->n].name, sizeof t->files[t->n].name, "%s", fname);
    t->files[t->n++].size = size;
    t->bytes += size;
}

void quota_free(node_t *n)
{
    struct quota_state *q = n->quota;
    if (!q)
        return;
    for (size_t i = 0; i < q->n; i++)
        free(q->targets[i].files);
    free(q->targets);
    free(q);
    n->quota = NULL;
}

/* ---------- known-answer vectors ---------- */

static int kat_failures;

static void kat_check(int ok, const char *name, const char *what)
{
    if (!ok) {
        fprintf(stderr, "FAIL %s: %s\n", name, what);
        kat_failures++;
    }
}

static int num_equals(const jval *v, double want_or_nan)
{
    if (isnan(want_or_nan))
        return v && v->type == J_NULL;
    return v && v->type == J_NUM && v->num == want_or_nan;
}

static void kat_limits(const jval *c, const char *name)
{
    const jval *text = json_get(c, "entry");
    const char *sender = json_get_str(c, "sender");
    const jval *expect = json_get(c, "expect");
    if (!text || text->type != J_STR || !sender || !expect) {
        kat_check(0, name, "malformed case");
        return;
    }
    jval *entry = json_parse(text->str, text->len, NULL, 0);
    quota_limits l;
    int has = entry && quota_limits_for(entry, sender, &l);
    json_free(entry);
    if (expect->type == J_NULL) {
        kat_check(!has, name, "expected no limits");
        return;
    }
    kat_check(has, name, "expected limits");
    if (!has)
        return;
    kat_check(num_equals(json_get(expect, "pending"), (double)l.pending), name, "pending");
    kat_check(num_equals(json_get(expect, "pendingBytes"), (double)l.pending_bytes), name,
              "pendingBytes");
    kat_check(num_equals(json_get(expect, "rate"), l.rate > 0 ? l.rate : NAN), name, "rate");
    kat_check(num_equals(json_get(expect, "burst"), l.rate > 0 ? (double)l.burst : NAN), name,
              "burst");
}

static void kat_admission(const jval *c, const char *name)
{
    const jval *lim = json_get(c, "limits"), *steps = json_get(c, "steps");
    const jval *expect = json_get(c, "expect");
    quota_limits l = {0};
    if (!lim || !steps || steps->type != J_ARR || !expect || expect->type != J_ARR ||
        json_get_u64(lim, "pending", &l.pending) || json_get_u64(lim, "pendingBytes", &l.pending_bytes)) {
        kat_check(0, name, "malformed case");
        return;
    }
    uint64_t sizes[64];
    int gone[64] = {0};
    size_t delivered = 0, verdict = 0;
    for (size_t i = 0; i < steps->n; i++) {
        const jval *step = steps->items[i], *g = json_get(step, "gone");
        if (g && g->type == J_ARR) {
            for (size_t k = 0; k < g->n; k++)
                if (g->items[k]->type == J_NUM && g->items[k]->num >= 0 && g->items[k]->num < 64)
                    gone[(size_t)g->items[k]->num] = 1;
            continue;
        }
        uint64_t size = 0, n = 0, b = 0;
        json_get_u64(step, "send", &size);
        for (size_t k = 0; k < delivered; k++)
            if (!gone[k]) {
                n++;
                b += sizes[k];
            }
        const jval *answer = json_get(step, "answer");
        quota_block r = answer && answer->type == J_BOOL && answer->boolean
                            ? QUOTA_OK
                            : quota_check(n, b, size, &l);
        const char *got = r == QUOTA_OK ? "ok" : quota_limit_name(r);
        const char *want = verdict < expect->n ? expect->items[verdict]->str : NULL;
        kat_check(want && strcmp(want, got) == 0, name, got);
        verdict++;
        if (r == QUOTA_OK && delivered < 64)
            sizes[delivered++] = size;
    }
    kat_check(verdict == expect->n, name, "number of verdicts");
}

static void kat_bucket(const jval *c, const char *name)
{
    const jval *rate = json_get(c, "rate"), *times = json_get(c, "times_ms");
    const jval *expect = json_get(c, "expect_delay_ms");
    uint64_t burst = 0;
    if (!rate || rate->type != J_NUM || !times || times->type != J_ARR || !expect ||
        expect->type != J_ARR || expect->n != times->n || json_get_u64(c, "burst", &burst)) {
        kat_check(0, name, "malformed case");
        return;
    }
    quota_bucket q = {0};
    quota_bucket_tune(&q, rate->num, burst);
    for (size_t i = 0; i < times->n; i++) {
        double delay = quota_bucket_delay_ms(&q, times->items[i]->num);
        if (delay == 0)
            quota_bucket_take(&q);
        kat_check(expect->items[i]->type == J_NUM && expect->items[i]->num == delay, name, "delay");
    }
}

int quota_kat_run(const char *path)
{
    size_t len = 0;
    char *text = read_file_nofollow(path, 16u << 20, &len);
    if (!text) {
        fprintf(stderr, "error: cannot read %s: %s\n", path, strerror(errno));
        return 2;
    }
    char err[256] = "";
    jval *doc = json_parse(text, len, err, sizeof err);
    free(text);
    if (!doc || doc->type != J_OBJ) {
        fprintf(stderr, "error: %s is not a JSON object: %s\n", path, err);
        json_free(doc);
        return 2;
    }
    static const char *const kinds[] = {"limits", "admission", "bucket"};
    void (*const checks[])(const jval *, const char *) = {kat_limits, kat_admission, kat_bucket};
    int passed = 0, failed = 0;
    for (int k = 0; k < 3; k++) {
        const jval *cases = json_get(doc, kinds[k]);
        for (size_t i = 0; cases && cases->type == J_ARR && i < cases->n; i++) {
            const char *name = json_get_str(cases->items[i], "name");
            kat_failures = 0;
            checks[k](cases->items[i], name ? name : "(unnamed)");
            kat_failures ? failed++ : passed++;
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    json_free(doc);
    return (failed == 0 && passed > 0) ? 0 : 1;
}
