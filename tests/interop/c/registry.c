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

int registry_lock(const char *root)
{
    char *path = xasprintf("%s/speed_registry/.lock", root);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    free(path);
    if (fd < 0)
        return -1;
    struct flock fl = {0};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 0; /* whole file */
    while (fcntl(fd, F_SETLKW, &fl) != 0) {
        if (errno != EINTR) {
            int e = errno;
            close(fd);
            errno = e;
            return -1;
        }
    }
    return fd;
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
    jval *v = json_get(e, key);
    return (v && v->type == J_NUM) ? v->num : dflt;
}

int registry_is_stale(const jval *e)
{
    double lease = num_field(e, "leaseSeconds", 30.0);
    const char *boot = json_get_str(e, "bootId");
    jval *bt = json_get(e, "bootTimeHeartbeat");
    int same_boot = boot && host_boot_id()[0] && strcmp(boot, host_boot_id()) == 0;
    if (same_boot && bt && bt->type == J_NUM) {
        if (now_boottime() - bt->num > lease)
            return 1;
    } else if (now_wall() - num_field(e, "lastHeartbeat", 0) > lease) {
        return 1;
    }
    /* Same host and boot: a pid that no longer exists proves the node dead. */
    const char *host = json_get_str(e, "host");
    uint64_t pid = 0;
    if (same_boot && host && strcmp(host, host_name()) == 0 && json_get_u64(e, "pid", &pid) == 0 &&
        pid > 0 && pid < (uint64_t)1 << 30) {
        if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
            return 1;
    }
    return 0;
}

int registry_is_online(const jval *e)
{
    const char *status = json_get_str(e, "status");
    return !registry_is_stale(e) && status && strcmp(status, "online") == 0;
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
