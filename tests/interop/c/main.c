/* main.c - command line of speed_c_node, a SPEED-WIRE-V1 node written in C.
 *
 *   speed_c_node node --dir ROOT --key KEYFILE --name NAME [--allow N]... [--service S]...
 *                     [--lease S] [--heartbeat S]
 *   speed_c_node call --dir ROOT --key KEYFILE --name NAME TARGET SERVICE ARGS_JSON
 *                     [--timeout-ms N]
 *   speed_c_node send --dir ROOT --key KEYFILE --name NAME TARGET DATA_JSON [--confirm]
 *                     [--timeout-ms N]
 *   speed_c_node kat VECTORFILE
 *
 * The node command also reads commands on stdin (send, send-confirm, call, probe; see
 * run_command) so that tests can drive a long-running C node.
 */
#define _GNU_SOURCE
#include "json.h"
#include "kat.h"
#include "node.h"
#include "util.h"

#include <errno.h>
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
    const char *pos[MAX_ITEMS];
    int npos;
    double lease, heartbeat;
    long timeout_ms;
    int confirm;
} options;

static void usage(void)
{
    fprintf(stderr,
            "usage:\n"
            "  speed_c_node node --dir ROOT --key KEYFILE --name NAME [--allow N]... "
            "[--service echo|calculateTax]... [--lease S] [--heartbeat S]\n"
            "  speed_c_node call --dir ROOT --key KEYFILE --name NAME TARGET SERVICE ARGS_JSON "
            "[--timeout-ms N]\n"
            "  speed_c_node send --dir ROOT --key KEYFILE --name NAME TARGET DATA_JSON "
            "[--confirm] [--timeout-ms N]\n"
            "  speed_c_node kat VECTORFILE\n");
}

static int parse_double(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || !(v > 0))
        return -1;
    *out = v;
    return 0;
}

static int parse_options(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->lease = 30;
    o->heartbeat = 5;
    o->timeout_ms = 10000;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;
        if (strcmp(a, "--confirm") == 0) {
            o->confirm = 1;
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
        if (strcmp(a, "--dir") == 0)
            o->dir = v;
        else if (strcmp(a, "--key") == 0)
            o->key = v;
        else if (strcmp(a, "--name") == 0)
            o->name = v;
        else if (strcmp(a, "--allow") == 0 && o->nallow < MAX_ITEMS)
            o->allow[o->nallow++] = v;
        else if (strcmp(a, "--service") == 0 && o->nservice < MAX_ITEMS)
            o->service[o->nservice++] = v;
        else if (strcmp(a, "--lease") == 0) {
            if (parse_double(v, &o->lease))
                return -1;
        } else if (strcmp(a, "--heartbeat") == 0) {
            if (parse_double(v, &o->heartbeat))
                return -1;
        } else if (strcmp(a, "--timeout-ms") == 0) {
            char *end;
            o->timeout_ms = strtol(v, &end, 10);
            if (*end || o->timeout_ms <= 0)
                return -1;
        } else {
            fprintf(stderr, "error: unknown option %s\n", a);
            takes = 0;
            return -1;
        }
        i += takes;
    }
    if (!o->dir || !o->key || !o->name) {
        fprintf(stderr, "error: --dir, --key and --name are required\n");
        return -1;
    }
    return 0;
}

static int start_node(node_t *n, const options *o, FILE *events)
{
    if (node_init(n, o->dir, o->key, o->name) != 0)
        return -1;
    n->lease_seconds = o->lease;
    n->heartbeat_seconds = o->heartbeat;
    n->events = events;
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
    return node_register(n);
}

/* ---------- stdin commands of the node command ----------
 * One command per line; JSON is the rest of the line:
 *   send TARGET JSON            MESSAGE          -> {"event":"sent","to":T,"seq":N}
 *   send-confirm TARGET JSON    MESSAGE with ACK -> sent, later {"event":"ack",...}
 *   call TAG TARGET SERVICE JSON                 -> later {"event":"result","id":TAG,...}
 *                                                   or {"event":"call_error","id":TAG,...}
 *   probe TARGET                HEARTBEAT probe  -> later {"event":"heartbeat_reply",...}
 * Errors of a command are reported as {"event":"command_error","error":"..."}. */

static char stdin_buf[4u << 20];
static size_t stdin_len;

static void command_error(node_t *n, const char *fmt, const char *arg)
{
    char *msg = xasprintf(fmt, arg);
    jval *l = json_obj();
    json_set(l, "event", json_str("command_error"));
    json_set(l, "error", json_str(msg));
    node_emit(n->events, l);
    free(msg);
}

/* Splits the next space-separated word off *line. */
static char *next_word(char **line)
{
    char *w = *line;
    if (!w || !*w)
        return NULL;
    char *sp = strchr(w, ' ');
    if (sp) {
        *sp = '\0';
        *line = sp + 1;
    } else {
        *line = w + strlen(w);
    }
    return w;
}

static void run_command(node_t *n, char *line)
{
    char *rest = line;
    char *cmd = next_word(&rest);
    if (!cmd)
        return;
    if (strcmp(cmd, "send") == 0 || strcmp(cmd, "send-confirm") == 0 ||
        strcmp(cmd, "probe") == 0) {
        char *target = next_word(&rest);
        int probe = strcmp(cmd, "probe") == 0;
        jval *data = probe ? json_bool(0) : json_parse(rest, strlen(rest), NULL, 0);
        if (!target || !data) {
            command_error(n, "usage: %s TARGET JSON", cmd);
            json_free(data);
            return;
        }
        jval *p = json_obj();
        json_set(p, "from", json_str(n->name));
        json_set(p, "to", json_str(target));
        json_set(p, probe ? "reply" : "data", data);
        char err[512] = "";
        uint64_t seq = 0;
        int ack = strcmp(cmd, "send-confirm") == 0;
        deliver_result r = node_deliver(n, target, probe ? ENV_HEARTBEAT : ENV_MESSAGE,
                                        ack ? ENV_FLAG_ACK : 0, p, &seq, err, sizeof err);
        json_free(p);
        jval *l = json_obj();
        if (r == DELIVER_OK) {
            json_set(l, "event", json_str("sent"));
            json_set(l, "to", json_str(target));
            json_set(l, "seq", json_int((int64_t)seq));
        } else {
            json_set(l, "event", json_str("send_error"));
            json_set(l, "to", json_str(target));
            json_set(l, "errorCode", json_str(r == DELIVER_ACCESS_DENIED ? "ACCESS_DENIED"
                                              : r == DELIVER_UNAVAILABLE ? "UNAVAILABLE"
                                                                          : "DELIVERY_FAILED"));
            json_set(l, "errorMessage", json_str(err));
        }
        node_emit(n->events, l);
    } else if (strcmp(cmd, "call") == 0) {
        char *tag = next_word(&rest), *target = next_word(&rest), *service = next_word(&rest);
        jval *args = rest ? json_parse(rest, strlen(rest), NULL, 0) : NULL;
        if (!tag || !target || !service || !args)
            command_error(n, "usage: %s TAG TARGET SERVICE JSON", cmd);
        else
            node_call_async(n, tag, target, service, args, 10000);
        json_free(args);
    } else {
        command_error(n, "unknown command '%s'", cmd);
    }
}

static void on_stdin(node_t *n)
{
    ssize_t r = read(n->extra_fd, stdin_buf + stdin_len, sizeof stdin_buf - 1 - stdin_len);
    if (r <= 0) {
        if (r == 0 || (errno != EINTR && errno != EAGAIN))
            n->extra_fd = -1; /* EOF: keep running until a signal */
        return;
    }
    stdin_len += (size_t)r;
    char *start = stdin_buf, *nl;
    while ((nl = memchr(start, '\n', stdin_len - (size_t)(start - stdin_buf))) != NULL) {
        *nl = '\0';
        run_command(n, start);
        start = nl + 1;
    }
    stdin_len -= (size_t)(start - stdin_buf);
    memmove(stdin_buf, start, stdin_len);
    if (stdin_len == sizeof stdin_buf - 1) /* an over-long line: drop it */
        stdin_len = 0;
}

static int cmd_node(const options *o)
{
    node_t n;
    if (start_node(&n, o, stdout) != 0) {
        node_free(&n);
        return 1;
    }
    n.extra_fd = STDIN_FILENO;
    n.on_extra = on_stdin;
    printf("ready %s id=%s\n", n.name, n.id);
    fflush(stdout);
    while (!g_stop && !n.lost)
        node_step(&n, 1000);
    int rc = n.lost ? 3 : 0;
    node_shutdown(&n);
    node_free(&n);
    return rc;
}

/* Waits, processing the inbox, until done() or the deadline; 1 when done. */
static int wait_for(node_t *n, int64_t deadline, int (*done)(const node_t *))
{
    while (!done(n) && !g_stop && !n->lost) {
        int64_t left = deadline - now_mono_ms();
        if (left <= 0)
            break;
        node_step(n, (int)(left > 1000 ? 1000 : left));
    }
    return done(n);
}

static int response_arrived(const node_t *n) { return n->response != NULL; }
static int ack_arrived(const node_t *n) { return n->got_ack; }

static void report_deliver_error(deliver_result r, const char *err)
{
    if (r == DELIVER_UNAVAILABLE)
        fprintf(stderr, "ERROR UNAVAILABLE %s\n", err);
    else if (r == DELIVER_ACCESS_DENIED)
        fprintf(stderr, "ERROR %s\n", err);
    else
        fprintf(stderr, "ERROR DELIVERY_FAILED %s\n", err);
}

static jval *parse_arg_json(const char *text, const char *what)
{
    char err[128];
    jval *v = json_parse(text, strlen(text), err, sizeof err);
    if (!v)
        fprintf(stderr, "error: %s is not valid JSON: %s\n", what, err);
    return v;
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
    o->allow[0] = target; /* the response comes back from the target */
    o->nallow = 1;
    node_t n;
    if (start_node(&n, o, stderr) != 0) {
        json_free(args);
        node_free(&n);
        return 1;
    }
    char rid[UUID_TEXT_LEN + 1];
    uuid_v4(rid);
    jval *req = json_obj();
    json_set(req, "from", json_str(n.name));
    json_set(req, "to", json_str(target));
    json_set(req, "requestId", json_str(rid));
    json_set(req, "service", json_str(service));
    json_set(req, "arguments", args);
    json_set(req, "callerNode", json_str(n.name));
    json_set(req, "timeoutMs", json_int(o->timeout_ms));
    n.wait_request_id = rid;
    char err[512] = "";
    int rc = 1;
    int64_t deadline = now_mono_ms() + o->timeout_ms;
    deliver_result r = node_deliver(&n, target, ENV_SPC_REQUEST, 0, req, NULL, err, sizeof err);
    if (r != DELIVER_OK) {
        report_deliver_error(r, err);
    } else if (!wait_for(&n, deadline, response_arrived)) {
        fprintf(stderr, "ERROR TIMEOUT no response from %s to %s within %ld ms\n", target,
                service, o->timeout_ms);
    } else {
        const char *status = json_get_str(n.response, "status");
        if (status && strcmp(status, "SUCCESS") == 0) {
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
    json_free(req);
    n.wait_request_id = NULL;
    node_shutdown(&n);
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
    o->allow[0] = target; /* ACKs and replies come back from the target */
    o->nallow = 1;
    node_t n;
    if (start_node(&n, o, stderr) != 0) {
        json_free(data);
        node_free(&n);
        return 1;
    }
    jval *msg = json_obj();
    json_set(msg, "from", json_str(n.name));
    json_set(msg, "to", json_str(target));
    json_set(msg, "data", data);
    char err[512] = "";
    uint64_t seq = 0;
    int rc = 1;
    int64_t deadline = now_mono_ms() + o->timeout_ms;
    deliver_result r = node_deliver(&n, target, ENV_MESSAGE, o->confirm ? ENV_FLAG_ACK : 0, msg,
                                    &seq, err, sizeof err);
    if (r != DELIVER_OK) {
        report_deliver_error(r, err);
    } else if (o->confirm) {
        n.wait_ack_from = target;
        n.wait_ack_seq = seq;
        if (wait_for(&n, deadline, ack_arrived)) {
            printf("acked seq=%llu\n", (unsigned long long)seq);
            rc = 0;
        } else {
            fprintf(stderr, "ERROR TIMEOUT no ACK from %s for seq %llu within %ld ms\n", target,
                    (unsigned long long)seq, o->timeout_ms);
        }
    } else {
        printf("sent seq=%llu\n", (unsigned long long)seq);
        rc = 0;
    }
    fflush(stdout);
    json_free(msg);
    n.wait_ack_from = NULL;
    node_shutdown(&n);
    node_free(&n);
    return rc;
}

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
    if (strcmp(cmd, "kat") == 0) {
        if (argc != 3) {
            usage();
            return 2;
        }
        return kat_run(argv[2]);
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
    node_install_signals();
    if (strcmp(cmd, "node") == 0)
        return cmd_node(&o);
    if (strcmp(cmd, "call") == 0)
        return cmd_call(&o);
    return cmd_send(&o);
}
