/* util.c - see util.h */
#define _GNU_SOURCE
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

const char *const NAME_RULE =
    "node names must match ^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$ and must not be "
    "'speed_registry' or 'speed_traces'";

volatile sig_atomic_t g_stop;
volatile sig_atomic_t g_signals;
static sigset_t g_wait_mask; /* the mask inside wait_events: SIGINT/SIGTERM unblocked */
static int g_mask_set;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
    g_signals++;
}

void signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigprocmask(SIG_BLOCK, &block, &g_wait_mask);
    sigdelset(&g_wait_mask, SIGINT);
    sigdelset(&g_wait_mask, SIGTERM);
    g_mask_set = 1;
}

int wait_events(struct pollfd *fds, nfds_t n, int timeout_ms)
{
    if (timeout_ms < 0)
        timeout_ms = 0;
    struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
    return ppoll(fds, n, &ts, g_mask_set ? &g_wait_mask : NULL);
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        abort();
    }
    return p;
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "out of memory\n");
        abort();
    }
    return q;
}

char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = xmalloc(n);
    memcpy(p, s, n);
    return p;
}

char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        abort();
    char *p = xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

static double clock_seconds(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double now_wall(void) { return clock_seconds(CLOCK_REALTIME); }
double now_boottime(void) { return clock_seconds(CLOCK_BOOTTIME); }

uint64_t now_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int64_t now_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void hex_encode(const uint8_t *in, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * len] = '\0';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int hex_decode(const char *in, uint8_t *out, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        int hi = hexval(in[2 * i]);
        if (hi < 0)
            return -1;
        int lo = hexval(in[2 * i + 1]);
        if (lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return in[2 * len] == '\0' ? 0 : -1;
}

void uuid_format(const uint8_t in[16], char out[UUID_TEXT_LEN + 1])
{
    char hex[33];
    hex_encode(in, 16, hex);
    snprintf(out, UUID_TEXT_LEN + 1, "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12,
             hex + 16, hex + 20);
}

int uuid_parse(const char *text, uint8_t out[16])
{
    if (strlen(text) != UUID_TEXT_LEN)
        return -1;
    char hex[33];
    size_t j = 0;
    for (size_t i = 0; i < UUID_TEXT_LEN; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (text[i] != '-')
                return -1;
            continue;
        }
        hex[j++] = text[i];
    }
    hex[32] = '\0';
    return hex_decode(hex, out, 16);
}

void uuid_v4(char out[UUID_TEXT_LEN + 1])
{
    uint8_t b[16];
    randombytes_buf(b, sizeof b);
    b[6] = (uint8_t)((b[6] & 0x0f) | 0x40); /* version 4 */
    b[8] = (uint8_t)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    uuid_format(b, out);
}

int name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n < 1 || n > NAME_MAX_LEN)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        int ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                 c == '_' || (c == '-' && i > 0);
        if (!ok)
            return 0;
    }
    return strcmp(name, "speed_registry") != 0 && strcmp(name, "speed_traces") != 0;
}

const char *host_name(void)
{
    static char host[256];
    if (!host[0]) {
        if (gethostname(host, sizeof host - 1) != 0)
            strcpy(host, "localhost");
        host[sizeof host - 1] = '\0';
    }
    return host;
}

const char *host_boot_id(void)
{
    static char boot[64];
    static int done;
    if (!done) {
        done = 1;
        FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
        if (f) {
            if (fgets(boot, sizeof boot, f)) {
                boot[strcspn(boot, "\r\n")] = '\0';
            } else {
                boot[0] = '\0';
            }
            fclose(f);
        }
    }
    return boot;
}

int write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

char *read_file_nofollow(const char *path, size_t max, size_t *len)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return NULL;
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        errno = EFBIG;
        return NULL;
    }
    size_t cap = (size_t)st.st_size + 1, n = 0;
    char *buf = xmalloc(cap + 1);
    for (;;) {
        if (n == cap) { /* the file grew: allow up to max */
            if (cap > max) {
                free(buf);
                close(fd);
                errno = EFBIG;
                return NULL;
            }
            cap *= 2;
            buf = xrealloc(buf, cap + 1);
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            free(buf);
            close(fd);
            errno = e;
            return NULL;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (n > max) {
        free(buf);
        errno = EFBIG;
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}
