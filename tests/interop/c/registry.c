/* registry.c - see registry.h */
#define _GNU_SOURCE
#include "registry.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#define MAX_ENTRY_BYTES (1024 * 1024)

/* What a path that should be a regular file is instead, for the error sentence. */
static const char *file_kind(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return "not a regular file";
    if (S_ISLNK(st.st_mode))
        return "a symbolic link";
    if (S_ISDIR(st.st_mode))
        return "a directory";
    if (S_ISFIFO(st.st_mode))
        return "a FIFO";
    if (S_ISSOCK(st.st_mode))
        return "a socket";
    return S_ISREG(st.st_mode) ? "a regular file" : "a device";
}

/* Sleeps up to ms unless a signal comes; 1 when one came during the wait. */
static int nap(int ms, sig_atomic_t signals_before)
{
    wait_events(NULL, 0, ms);
    return g_signals != signals_before;
}

int registry_lock(const char *root, int timeout_ms, char *err, size_t errlen)
{
    char *path = xasprintf("%s/speed_registry/.lock", root);
    /* O_NONBLOCK: a FIFO planted as .lock must not block the open */
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    struct stat st;
    if (fd < 0 && errno != ELOOP && errno != EISDIR && errno != ENXIO) {
        snprintf(err, errlen, "cannot open the registry lock %s: %s", path, strerror(errno));
        free(path);
        return -1;
    }
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen,
                 "configuration error: the registry lock %s is %s, not a regular file; "
                 "remove it (it is created again as an empty file)",
                 path, file_kind(path));
        if (fd >= 0)
            close(fd);
        free(path);
        errno = EINVAL;
        return -1;
    }
    struct flock fl = {0};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET; /* l_start = l_len = 0: the whole file */
    sig_atomic_t signals_before = g_signals;
    int64_t start = now_mono_ms();
    long holder = 0;
    int announced = 0, pause = 2;
    for (;;) {
        if (fcntl(fd, F_SETLK, &fl) == 0) {
            if (announced)
                fprintf(stderr, "info: got the registry lock after %.1f s\n",
                        (double)(now_mono_ms() - start) / 1000);
            free(path);
            return fd;
        }
        if (errno != EACCES && errno != EAGAIN && errno != EINTR) {
            snprintf(err, errlen, "cannot lock %s: %s", path, strerror(errno));
            break;
        }
        struct flock q = fl;
        if (fcntl(fd, F_GETLK, &q) == 0 && q.l_type != F_UNLCK)
            holder = (long)q.l_pid;
        int64_t waited = now_mono_ms() - start;
        if (waited >= timeout_ms) {
            snprintf(err, errlen,
                     "registry lock %s held by pid %ld for %.1f s: gave up waiting "
                     "(is that process stopped or hung?)",
                     path, holder, (double)waited / 1000);
            errno = ETIMEDOUT;
            break;
        }
        if (!announced && waited >= 500) { /* a normal holder keeps it for microseconds */
            announced = 1;
            fprintf(stderr, "info: waiting for the registry lock held by pid %ld\n", holder);
        }
        int left = (int)(timeout_ms - waited);
        if (nap(pause < left ? pause : left, signals_before)) {
            snprintf(err, errlen,
                     "interrupted by a signal while waiting for the registry lock held by "
                     "pid %ld",
                     holder);
            errno = EINTR;
            break;
        }
        if (pause < 50)
            pause *= 2;
    }
    int e = errno;
    close(fd);
    free(path);
    errno = e;
    return -1;
}

void registry_unlock(int fd)
{
    if (fd < 0)
        return;
    struct flock fl = {0};
    fl.l_type = F_UNLCK;
    fl.l_whence = SEEK_SET;
    fcntl(fd, F_SETLK, &fl);
    close(fd);
}

jval *registry_read(const char *root, const char *name, int *exists)
{
    char *path = xasprintf("%s/speed_registry/%s.node", root, name);
    size_t len = 0;
    char *text = read_file_nofollow(path, MAX_ENTRY_BYTES, &len);
    free(path);
    if (!text) {
        *exists = errno != ENOENT;
        return NULL;
    }
    *exists = 1;
    jval *v = json_parse(text, len, NULL, 0);
    free(text);
    if (!v || v->type != J_OBJ || !json_get_str(v, "name") || !json_get_str(v, "id")) {
        json_free(v);
        return NULL;
    }
    jval *hb = json_get(v, "lastHeartbeat");
    if (!hb || hb->type != J_NUM) {
        json_free(v);
        return NULL;
    }
    return v;
}

static double num_field(const jval *e, const char *key, double dflt)
{
    double v;
    return json_entry_number(json_get(e, key), &v) == 0 ? v : dflt;
}

/* The largest pid_max Linux accepts (PID_MAX_LIMIT on 64-bit). */
#define PID_LIMIT 4194304.0

/* 1 when the entry's pid cannot be a running process of this host. A pid that is missing or not
 * an integer is one no process can have (docs/PROTOCOL.md reading 4: the entry is stale). */
static int pid_is_dead(const jval *e)
{
    double pid;
    if (json_entry_integer(json_get(e, "pid"), &pid) != 0 || pid <= 0 || pid > PID_LIMIT)
        return 1; /* no process can have it */
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

int registry_is_stale(const jval *e)
{
    double lease = num_field(e, "leaseSeconds", 30.0);
    if (lease > REGISTRY_MAX_LEASE_SECONDS)
        lease = REGISTRY_MAX_LEASE_SECONDS;
    const char *boot = json_get_str(e, "bootId");
    double bt;
    int same_boot = boot && host_boot_id()[0] && strcmp(boot, host_boot_id()) == 0;
    double age = (same_boot && json_entry_number(json_get(e, "bootTimeHeartbeat"), &bt) == 0)
                     ? now_boottime() - bt
                     : now_wall() - num_field(e, "lastHeartbeat", 0);
    if (age > lease || -age > lease)
        return 1;
    const char *host = json_get_str(e, "host");
    return host && strcmp(host, host_name()) == 0 && pid_is_dead(e);
}

reg_state registry_state(const jval *e)
{
    if (!e || registry_is_stale(e))
        return REG_UNAVAILABLE;
    jval *status = json_get(e, "status");
    if (!status)
        return REG_ONLINE; /* only name, id and lastHeartbeat are required (section 4) */
    const char *s = json_get_str(e, "status");
    if (s && strcmp(s, "online") == 0)
        return REG_ONLINE;
    if (s && strcmp(s, "leaving") == 0)
        return REG_LEAVING;
    return REG_UNAVAILABLE;
}

int registry_allows(const jval *e, const char *name)
{
    jval *allow = json_get(e, "allow");
    if (!allow || allow->type != J_ARR)
        return 0;
    for (size_t i = 0; i < allow->n; i++) {
        const jval *a = allow->items[i];
        if (a->type == J_STR && a->len == strlen(name) && strcmp(a->str, name) == 0)
            return 1;
    }
    return 0;
}

int registry_write(const char *root, const char *name, const jval *entry)
{
    char rnd[9];
    uint8_t r[4];
    randombytes_buf(r, sizeof r);
    hex_encode(r, sizeof r, rnd);
    char *tmp = xasprintf("%s/speed_registry/.%s.%ld.%s.tmp", root, name, (long)getpid(), rnd);
    char *dst = xasprintf("%s/speed_registry/%s.node", root, name);
    size_t len = 0;
    char *text = json_dump(entry, &len);
    int rc = -1, e = 0;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
        if (write_all(fd, text, len) == 0 && write_all(fd, "\n", 1) == 0 && fsync(fd) == 0) {
            if (close(fd) == 0) {
                fd = -1;
                if (rename(tmp, dst) == 0)
                    rc = 0;
            }
        }
        e = errno;
        if (fd >= 0)
            close(fd);
        if (rc != 0)
            unlink(tmp);
    } else {
        e = errno;
    }
    free(text);
    free(tmp);
    free(dst);
    errno = e;
    return rc;
}
