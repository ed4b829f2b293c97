/* util.h - small helpers shared by the SPEED C node: time, UUIDs, hex, names, files. */
#ifndef SPEED_UTIL_H
#define SPEED_UTIL_H

#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#define UUID_TEXT_LEN 36
#define NAME_MAX_LEN 64

/* SIGINT/SIGTERM: g_stop is set by the first, g_signals counts them all (a wait that began
 * after a signal can tell whether another one came since). */
extern volatile sig_atomic_t g_stop;
extern volatile sig_atomic_t g_signals;
/* Installs the handlers and blocks both signals except inside wait_events(), so that a signal
 * cannot slip in between a check of g_stop and the wait. */
void signals_install(void);
/* ppoll() with SIGINT/SIGTERM unblocked: the one place where they are delivered. fds may be
 * NULL with n = 0 (a sleep that a signal ends). Returns what ppoll returns. */
int wait_events(struct pollfd *fds, nfds_t n, int timeout_ms);

/* Wall clock as Unix seconds with fractions, and in milliseconds. */
double now_wall(void);
uint64_t now_wall_ms(void);
/* CLOCK_BOOTTIME in seconds; monotonic including suspend. */
double now_boottime(void);
/* CLOCK_MONOTONIC in milliseconds, for local timeouts. */
int64_t now_mono_ms(void);

/* Random version-4 UUID, canonical lowercase text (37 bytes incl. NUL). */
void uuid_v4(char out[UUID_TEXT_LEN + 1]);
/* Canonical text -> 16 raw bytes in text order (RFC 4122 network order). 0 on success. */
int uuid_parse(const char *text, uint8_t out[16]);
void uuid_format(const uint8_t in[16], char out[UUID_TEXT_LEN + 1]);

void hex_encode(const uint8_t *in, size_t len, char *out); /* out: 2*len+1, lowercase */
/* Decodes exactly len bytes from 2*len hex digits; returns 0 on success. */
int hex_decode(const char *in, uint8_t *out, size_t len);

/* Node name rule of the wire contract, section 2. Returns 1 when valid. */
int name_valid(const char *name);
extern const char *const NAME_RULE;

/* Host facts. boot_id may be empty when the host has none. */
const char *host_name(void);
const char *host_boot_id(void);

/* Reads a whole file (opened with O_NOFOLLOW) up to max bytes. Returns malloc'd buffer
 * (NUL-terminated, not counted in *len) or NULL with errno set. */
char *read_file_nofollow(const char *path, size_t max, size_t *len);

/* Writes all bytes to fd, retrying on EINTR and short writes. 0 on success, -1 with errno. */
int write_all(int fd, const void *buf, size_t len);

/* Formats into a freshly malloc'd string. Never returns NULL (aborts on OOM). */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void *xmalloc(size_t n);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);

#endif
