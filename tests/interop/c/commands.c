/* commands.c - see commands.h.
 *
 * One command per line; JSON is the rest of the line:
 *   send TARGET JSON            MESSAGE          -> {"event":"sent","to":T,"seq":N}
 *   send-nowait TARGET JSON     MESSAGE, refused at once (QUOTA_EXCEEDED) when the target's
 *                               published limits leave no room (--feature quota)
 *   send-confirm TARGET JSON    MESSAGE with ACK -> sent, later {"event":"ack",...}
 *                                                   or {"event":"ack_timeout",...}
 *   call TAG TARGET SERVICE JSON                 -> later {"event":"result","id":TAG,...}
 *                                                   or {"event":"call_error","id":TAG,...}
 *   probe TARGET                HEARTBEAT probe  -> later {"event":"heartbeat_reply",...}
 *   send-bytes TARGET N         N raw bytes, byte i = (7i+3) mod 256 (chunks extension, else v1
 *                               base64)      -> {"event":"sent","to":T,"seq":N,"size":N}
 *   stats                                        -> {"event":"stats","nonces":N,...}
 * Errors of a command are reported as {"event":"command_error","error":"..."}. */
#include "commands.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static void send_command(node_t *n, const char *cmd, char *rest)
{
    char *target = next_word(&rest);
    int probe = strcmp(cmd, "probe") == 0, confirm = strcmp(cmd, "send-confirm") == 0;
    n->quota_wait_ms = strcmp(cmd, "send-nowait") == 0 ? 0 : -1;
    jval *data = probe ? NULL : json_parse(rest, strlen(rest), NULL, 0);
    if (!target || (!probe && !data)) {
        command_error(n, "usage: %s TARGET JSON", cmd);
        json_free(data);
        return;
    }
    char err[512] = "";
    uint64_t seq = 0;
    deliver_result r;
    if (probe) {
        jval *p = json_obj();
        json_set(p, "from", json_str(n->name));
        json_set(p, "to", json_str(target));
        json_set(p, "reply", json_bool(0));
        deliver_info info = {0};
        r = node_deliver(n, target, ENV_HEARTBEAT, 0, p, &info, err, sizeof err);
        seq = info.seq;
        json_free(p);
    } else {
        r = node_send_message(n, cmd, target, data, confirm, n->cfg.wait_timeout_ms, &seq, err,
                              sizeof err);
    }
    jval *l = json_obj();
    json_set(l, "event", json_str(r == DELIVER_OK ? "sent" : "send_error"));
    json_set(l, "to", json_str(target));
    if (r == DELIVER_OK) {
        json_set(l, "seq", json_int((int64_t)seq));
    } else {
        json_set(l, "errorCode", json_str(deliver_error_code(r)));
        json_set(l, "errorMessage", json_str(err));
    }
    node_emit(n->events, l);
    n->quota_wait_ms = -1;
}

static void send_bytes_command(node_t *n, char *rest)
{
    char *target = next_word(&rest);
    char *end = NULL;
    unsigned long long size = rest ? strtoull(rest, &end, 10) : 0;
    if (!target || !rest || !*rest || *end || size > (1ull << 30)) {
        command_error(n, "usage: %s TARGET BYTES", "send-bytes");
        return;
    }
    char err[512] = "";
    deliver_info info = {0};
    deliver_result r = ext_chunks_send_bytes(n, target, size, &info, err, sizeof err);
    jval *l = json_obj();
    json_set(l, "event", json_str(r == DELIVER_OK ? "sent" : "send_error"));
    json_set(l, "to", json_str(target));
    if (r == DELIVER_OK) {
        json_set(l, "seq", json_int((int64_t)info.seq));
        json_set(l, "size", json_int((int64_t)size));
    } else {
        json_set(l, "errorCode", json_str(deliver_error_code(r)));
        json_set(l, "errorMessage", json_str(err));
    }
    node_emit(n->events, l);
}

static void run_command(node_t *n, char *line)
{
    char *rest = line;
    char *cmd = next_word(&rest);
    if (!cmd)
        return;
    if (strcmp(cmd, "send") == 0 || strcmp(cmd, "send-confirm") == 0 ||
        strcmp(cmd, "send-nowait") == 0 || strcmp(cmd, "probe") == 0) {
        send_command(n, cmd, rest);
    } else if (strcmp(cmd, "call") == 0) {
        char *tag = next_word(&rest), *target = next_word(&rest), *service = next_word(&rest);
        jval *args = rest ? json_parse(rest, strlen(rest), NULL, 0) : NULL;
        char err[512];
        if (!tag || !target || !service || !args)
            command_error(n, "usage: %s TAG TARGET SERVICE JSON", cmd);
        else
            node_call_async(n, tag, target, service, args, n->cfg.wait_timeout_ms, err,
                            sizeof err);
        json_free(args);
    } else if (strcmp(cmd, "send-bytes") == 0) {
        send_bytes_command(n, rest);
    } else if (strcmp(cmd, "stats") == 0) {
        replay_prune(&n->replay, now_wall_ms());
        jval *l = json_obj();
        json_set(l, "event", json_str("stats"));
        json_set(l, "nonces", json_int((int64_t)replay_nonce_count(&n->replay)));
        json_set(l, "senders", json_int((int64_t)n->replay.npeers));
        json_set(l, "links", json_int((int64_t)n->nlinks));
        json_set(l, "pending", json_int((int64_t)n->npending));
        node_emit(n->events, l);
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

void commands_attach(node_t *n, int fd)
{
    n->extra_fd = fd;
    n->on_extra = on_stdin;
}
