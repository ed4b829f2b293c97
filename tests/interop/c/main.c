/* main.c - command line of speed_c_node, a SPEED-WIRE-V1 node written in C.
 *
 *   speed_c_node node --dir ROOT --key KEYFILE --name NAME [--allow N]... [--service S]...
 *                     [settings]
 *   speed_c_node call --dir ROOT --key KEYFILE --name NAME TARGET SERVICE ARGS_JSON [settings]
 *   speed_c_node send --dir ROOT --key KEYFILE --name NAME TARGET DATA_JSON [--confirm]
 *                     [settings]
 *   speed_c_node kat VECTORFILE
 *   speed_c_node kat-control VECTORFILE    (tests/vectors/control_vectors.json)
 *   speed_c_node kat-chunks VECTORFILE     (the chunks and reliable extensions' vectors)
 *   speed_c_node kat-quota VECTORFILE      (tests/vectors/quota_vectors.json)
 *   speed_c_node kat-durable VECTORFILE    (tests/vectors/durable_vectors.json)
 *
 * node also takes --operator PUBKEY (repeatable): the control extension (ext_control.c)
 * --feature chunks|reliable (repeatable) enables an extension of section 9 (ext_chunks.c,
 * ext_reliable.c): the entry advertises it and the node receives (and sends) its layouts.
 * --feature quota: honour the limits targets publish (ext_quota.c; not advertised).
 * node --durable [--durable-on-tmpfs]: the receiving side of durable (ext_durable.c).
 *
 * settings (contract defaults in brackets): --lease S [30] --heartbeat S [5]
 *   --lock-timeout S [10] --max-gap N [65536] --replay-window-ms N [60000]
 *   --nonce-cache N [65536] --drain-quiet-ms N [500] --drain-max S [30] --linger S [10]
 *   --timeout-ms N [10000] (calls and confirmed sends)
 *   --feature quota: honour the limits targets publish (ext_quota.c), waiting at most
 *   --quota-wait-ms N [10000] for room
 *
 * The node command also reads commands on stdin (commands.c) so that tests can drive a
 * long-running C node.
 */
#define _GNU_SOURCE
#include "commands.h"
#include "ext_control.h"
#include "ext_durable.h"
#include "ext_quota.h"
#include "json.h"
#include "kat.h"
#include "node.h"
#include "registry.h"
#include "util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#define MAX_ITEMS 64

typedef struct {
    const char *dir, *key, *name;
    const char *allow[MAX_ITEMS];
    int nallow;
    const char *service[MAX_ITEMS];
    int nservice;
    const char *operators[MAX_ITEMS];
    int noperators;
    const char *pos[MAX_ITEMS];
    int npos;
    int confirm;
    unsigned features; /* --feature chunks|reliable (section 9) */
    int durable, durable_on_tmpfs; /* --durable, --durable-on-tmpfs (ext_durable.c) */
    node_settings cfg;
} options;

static void usage(void)
{
    fprintf(stderr,
            "usage:\n"
            "  speed_c_node node --dir ROOT --key KEYFILE --name NAME [--allow N]... "
            "[--service echo|calculateTax]... [settings]\n"
            "  speed_c_node call --dir ROOT --key KEYFILE --name NAME TARGET SERVICE ARGS_JSON "
            "[settings]\n"
            "  speed_c_node send --dir ROOT --key KEYFILE --name NAME TARGET DATA_JSON "
            "[--confirm] [settings]\n"
            "  speed_c_node kat VECTORFILE\n"
            "  speed_c_node kat-control VECTORFILE  (tests/vectors/control_vectors.json)\n"
            "  speed_c_node kat-chunks VECTORFILE   (tests/vectors/chunks_vectors.json)\n"
            "  speed_c_node kat-quota VECTORFILE    (tests/vectors/quota_vectors.json)\n"
            "  speed_c_node kat-durable VECTORFILE  (tests/vectors/durable_vectors.json)\n"
            "node also takes --operator PUBKEY (repeatable): control requests signed by it\n"
            "node, call, send: --feature chunks|reliable|quota enables an extension (repeatable)\n"
            "node: --durable [--durable-on-tmpfs] receives durable messages (ext_durable.c)\n"
            "settings: --lease S --heartbeat S --lock-timeout S --max-gap N "
            "--replay-window-ms N --nonce-cache N --drain-quiet-ms N --drain-max S --linger S "
            "--timeout-ms N --quota-wait-ms N\n");
}

/* A finite number in [lo, hi] (lo excluded when open_lo). */
static int parse_number(const char *opt, const char *s, double lo, int open_lo, double hi,
                        double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < lo || (open_lo && v == lo) || v > hi) {
        fprintf(stderr, "error: %s must be a number %s %g and at most %g, not '%s'\n", opt,
                open_lo ? "above" : "from", lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* One setting option; 1 when a is one (its value parsed into o->cfg), 0 when not, -1 bad. */
static int parse_setting(const char *a, const char *v, options *o)
{
    node_settings *c = &o->cfg;
    double d;
    const double day = REGISTRY_MAX_LEASE_SECONDS;
    if (strcmp(a, "--lease") == 0)
        return parse_number(a, v, 0, 1, day, &c->lease_seconds) ? -1 : 1;
    if (strcmp(a, "--heartbeat") == 0)
        return parse_number(a, v, 0, 1, day, &c->heartbeat_seconds) ? -1 : 1;
    if (strcmp(a, "--lock-timeout") == 0 || strcmp(a, "--drain-max") == 0 ||
        strcmp(a, "--linger") == 0) {
        if (parse_number(a, v, 0, strcmp(a, "--lock-timeout") == 0, day, &d))
            return -1;
        int ms = (int)(d * 1000);
        *(strcmp(a, "--lock-timeout") == 0 ? &c->lock_timeout_ms
          : strcmp(a, "--drain-max") == 0  ? &c->drain_max_ms
                                           : &c->linger_ms) = ms;
        return 1;
    }
    if (strcmp(a, "--drain-quiet-ms") == 0) {
        if (parse_number(a, v, 0, 0, day * 1000, &d))
            return -1;
        c->drain_quiet_ms = (int)d;
        return 1;
    }
    if (strcmp(a, "--timeout-ms") == 0 || strcmp(a, "--replay-window-ms") == 0) {
        if (parse_number(a, v, 0, 1, day * 1000, &d))
            return -1;
        if (strcmp(a, "--timeout-ms") == 0)
            c->wait_timeout_ms = (long)d;
        else
            c->replay_window_ms = (uint64_t)d;
        return 1;
    }
    if (strcmp(a, "--max-gap") == 0) {
        if (parse_number(a, v, 0, 0, 9007199254740992.0, &d) || d != floor(d))
            return -1;
        c->max_gap = (uint64_t)d;
        return 1;
    }
    if (strcmp(a, "--quota-wait-ms") == 0) {
        if (parse_number(a, v, 0, 0, day * 1000, &d))
            return -1;
        c->quota_wait_ms = (long)d;
        return 1;
    }
    if (strcmp(a, "--nonce-cache") == 0) {
        if (parse_number(a, v, 1, 0, 1 << 24, &d))
            return -1;
        c->nonce_capacity = (size_t)d;
        return 1;
    }
    return 0;
}

static int parse_options(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    node_default_settings(&o->cfg);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--confirm") == 0) {
            o->confirm = 1;
            continue;
        }
        if (strcmp(a, "--durable") == 0 || strcmp(a, "--durable-on-tmpfs") == 0) {
            o->durable = 1;
            o->durable_on_tmpfs |= strcmp(a, "--durable-on-tmpfs") == 0;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            if (o->npos == MAX_ITEMS)
                return -1;
            o->pos[o->npos++] = a;
            continue;
        }
        if (!v) {
            fprintf(stderr, "error: %s needs a value\n", a);
            return -1;
        }
        i++;
        if (strcmp(a, "--feature") == 0) {
            if (strcmp(v, "quota") == 0) {
                o->cfg.quota = 1; /* the sender side of quota (ext_quota.c) */
                continue;
            }
            if (strcmp(v, "chunks") != 0 && strcmp(v, "reliable") != 0) {
                fprintf(stderr, "error: unknown feature '%s' (this node speaks chunks, reliable "
                                "and the sender side of quota)\n", v);
                return -1;
            }
            o->features |= strcmp(v, "chunks") == 0 ? FEATURE_CHUNKS : FEATURE_RELIABLE;
        } else if (strcmp(a, "--dir") == 0)
            o->dir = v;
        else if (strcmp(a, "--key") == 0)
            o->key = v;
        else if (strcmp(a, "--name") == 0)
            o->name = v;
        else if (strcmp(a, "--allow") == 0 && o->nallow < MAX_ITEMS)
            o->allow[o->nallow++] = v;
        else if (strcmp(a, "--service") == 0 && o->nservice < MAX_ITEMS)
            o->service[o->nservice++] = v;
        else if (strcmp(a, "--operator") == 0 && o->noperators < MAX_ITEMS)
            o->operators[o->noperators++] = v;
        else {
            int r = parse_setting(a, v, o);
            if (r == 0)
                fprintf(stderr, "error: unknown option %s\n", a);
            if (r <= 0)
                return -1;
        }
    }
    if (!o->dir || !o->key || !o->name) {
        fprintf(stderr, "error: --dir, --key and --name are required\n");
        return -1;
    }
    return 0;
}

static int start_node(node_t *n, const options *o, FILE *events)
{
    if (node_init(n, o->dir, o->key, o->name, &o->cfg) != 0)
        return -1;
    n->events = events;
    node_enable_features(n, o->features);
    for (int i = 0; i < o->nallow; i++) {
        if (!name_valid(o->allow[i])) {
            fprintf(stderr, "error: invalid node name '%s' in --allow: %s\n", o->allow[i],
                    NAME_RULE);
            return -1;
        }
        node_add_allow(n, o->allow[i]);
    }
    for (int i = 0; i < o->nservice; i++) {
        if (strcmp(o->service[i], "echo") != 0 && strcmp(o->service[i], "calculateTax") != 0) {
            fprintf(stderr, "error: unknown demo service '%s' (this node offers echo and "
                            "calculateTax)\n",
                    o->service[i]);
            return -1;
        }
        node_add_service(n, o->service[i]);
    }
    if (control_init(n, o->operators, o->noperators) != 0)
        return -1;
    if (o->durable && durable_init(n, o->durable_on_tmpfs) != 0)
        return -1;
    return node_register(n);
}

static int cmd_node(const options *o)
{
    node_t n;
    if (start_node(&n, o, stdout) != 0) {
        node_free(&n);
        return 1;
    }
    commands_attach(&n, STDIN_FILENO);
    printf("ready %s id=%s\n", n.name, n.id);
    fflush(stdout);
    while (!g_stop && !n.lost)
        node_step(&n, 1000);
    int rc = n.lost ? 3 : 0;
    node_shutdown(&n);
    node_free(&n);
    return rc;
}

/* Processes the inbox until the one-shot wait ended (answer or timeout) or a signal. */
static void wait_oneshot(node_t *n)
{
    while (!n->oneshot_done && !g_stop && !n->lost)
        node_step(n, 1000);
}

static void report_deliver_error(deliver_result r, const char *err)
{
    if (r == DELIVER_ACCESS_DENIED)
        fprintf(stderr, "ERROR %s\n", err); /* err starts with ACCESS_DENIED */
    else
        fprintf(stderr, "ERROR %s %s\n", deliver_error_code(r), err);
}

static jval *parse_arg_json(const char *text, const char *what)
{
    char err[128];
    jval *v = json_parse(text, strlen(text), err, sizeof err);
    if (!v)
        fprintf(stderr, "error: %s is not valid JSON: %s\n", what, err);
    return v;
}

/* Registers a short-lived node that allows target (answers come back from it). */
static int start_oneshot(node_t *n, options *o, const char *target)
{
    o->allow[0] = target;
    o->nallow = 1;
    return start_node(n, o, stderr);
}

static int cmd_call(options *o)
{
    if (o->npos != 3) {
        usage();
        return 2;
    }
    const char *target = o->pos[0], *service = o->pos[1];
    jval *args = parse_arg_json(o->pos[2], "ARGS_JSON");
    if (!args)
        return 2;
    node_t n;
    int rc = 1;
    if (start_oneshot(&n, o, target) != 0)
        goto out;
    char err[512] = "";
    deliver_result r = node_call_async(&n, NULL, target, service, args, o->cfg.wait_timeout_ms,
                                       err, sizeof err);
    if (r != DELIVER_OK) {
        report_deliver_error(r, err);
    } else {
        wait_oneshot(&n);
        const char *status = n.response ? json_get_str(n.response, "status") : NULL;
        if (!n.response) {
            fprintf(stderr, "ERROR TIMEOUT no response from %s to %s within %ld ms\n", target,
                    service, o->cfg.wait_timeout_ms);
        } else if (status && strcmp(status, "SUCCESS") == 0) {
            jval *result = json_get(n.response, "result");
            char *text = result ? json_dump(result, NULL) : xstrdup("null");
            printf("%s\n", text);
            free(text);
            rc = 0;
        } else {
            const char *code = json_get_str(n.response, "errorCode");
            const char *msg = json_get_str(n.response, "errorMessage");
            fprintf(stderr, "ERROR %s %s\n", code ? code : "INTERNAL_ERROR", msg ? msg : "");
        }
    }
    fflush(stdout);
    node_shutdown(&n);
out:
    json_free(args);
    node_free(&n);
    return rc;
}

static int cmd_send(options *o)
{
    if (o->npos != 2) {
        usage();
        return 2;
    }
    const char *target = o->pos[0];
    jval *data = parse_arg_json(o->pos[1], "DATA_JSON");
    if (!data)
        return 2;
    node_t n;
    if (start_oneshot(&n, o, target) != 0) {
        json_free(data);
        node_free(&n);
        return 1;
    }
    char err[512] = "";
    uint64_t seq = 0;
    int rc = 1;
    deliver_result r = node_send_message(&n, NULL, target, data, o->confirm,
                                         o->cfg.wait_timeout_ms, &seq, err, sizeof err);
    if (r != DELIVER_OK) {
        report_deliver_error(r, err);
    } else if (o->confirm) {
        wait_oneshot(&n);
        if (n.oneshot_acked) {
            printf("acked seq=%llu\n", (unsigned long long)seq);
            rc = 0;
        } else if (n.response) {
            const char *code = json_get_str(n.response, "errorCode");
            const char *msg = json_get_str(n.response, "errorMessage");
            fprintf(stderr, "ERROR %s %s\n", code ? code : "INTERNAL_ERROR", msg ? msg : "");
        } else {
            fprintf(stderr, "ERROR TIMEOUT no ACK from %s for seq %llu within %ld ms\n", target,
                    (unsigned long long)seq, o->cfg.wait_timeout_ms);
        }
    } else {
        printf("sent seq=%llu\n", (unsigned long long)seq);
        rc = 0;
    }
    fflush(stdout);
    node_shutdown(&n);
    node_free(&n);
    return rc;
}

/* The known-answer commands: the v1 envelope vectors and one per extension. */
static const struct {
    const char *cmd;
    int (*run)(const char *path);
} kats[] = {
    {"kat", kat_run},                 /* tests/vectors/envelope_vectors.json */
    {"kat-control", control_kat},     /* tests/vectors/control_vectors.json */
    {"kat-chunks", kat_chunks_run},   /* tests/vectors/chunks_vectors.json */
    {"kat-quota", quota_kat_run},     /* tests/vectors/quota_vectors.json */
    {"kat-durable", durable_kat_run}, /* tests/vectors/durable_vectors.json */
};

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (sodium_init() < 0) {
        fprintf(stderr, "error: libsodium initialisation failed\n");
        return 1;
    }
    if (argc < 2) {
        usage();
        return 2;
    }
    const char *cmd = argv[1];
    for (size_t i = 0; i < sizeof kats / sizeof kats[0]; i++)
        if (strcmp(cmd, kats[i].cmd) == 0) {
            if (argc != 3) {
                usage();
                return 2;
            }
            return kats[i].run(argv[2]);
        }
    options o;
    if (strcmp(cmd, "node") != 0 && strcmp(cmd, "call") != 0 && strcmp(cmd, "send") != 0) {
        usage();
        return 2;
    }
    if (parse_options(argc, argv, &o) != 0) {
        usage();
        return 2;
    }
    signals_install();
    if (strcmp(cmd, "node") == 0)
        return cmd_node(&o);
    if (strcmp(cmd, "call") == 0)
        return cmd_call(&o);
    return cmd_send(&o);
}
