/* keyfile.c - see keyfile.h */
#define _GNU_SOURCE
#include "keyfile.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

int keyfile_parse(const char *text, size_t len, uint8_t key[32], char *err, size_t errlen)
{
    if (memchr(text, '\0', len)) {
        snprintf(err, errlen, "key file contains a NUL byte");
        return -1;
    }
    int seen = 0; /* 0: expect header, 1: expect key, 2: done */
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (n == 0) { /* blank line */
            p = nl ? nl + 1 : end;
            continue;
        }
        if (seen == 0) {
            if (n != 12 || memcmp(p, "SPEED-KEY-V1", 12) != 0) {
                snprintf(err, errlen, "key file: first line must be exactly SPEED-KEY-V1");
                return -1;
            }
            seen = 1;
        } else if (seen == 1) {
            size_t bin_len = 0;
            uint8_t tmp[33];
            const char *b64_end = NULL;
            if (sodium_base642bin(tmp, sizeof tmp, p, n, NULL, &bin_len, &b64_end,
                                  sodium_base64_VARIANT_ORIGINAL) != 0 ||
                b64_end != p + n || bin_len != 32) {
                sodium_memzero(tmp, sizeof tmp);
                snprintf(err, errlen,
                         "key file: second line must be standard base64 of exactly 32 bytes");
                return -1;
            }
            memcpy(key, tmp, 32);
            sodium_memzero(tmp, sizeof tmp);
            seen = 2;
        } else {
            snprintf(err, errlen, "key file: unexpected content after the key line");
            return -1;
        }
        p = nl ? nl + 1 : end;
    }
    if (seen != 2) {
        snprintf(err, errlen, "key file: missing %s line", seen == 0 ? "SPEED-KEY-V1" : "key");
        return -1;
    }
    return 0;
}

int keyfile_load(const char *path, uint8_t key[32], char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open key file %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(err, errlen, "key file %s is not a regular file", path);
        return -1;
    }
    if (st.st_mode & 077) {
        close(fd);
        snprintf(err, errlen,
                 "key file %s is accessible by group or others (mode %03o); run: chmod 600 %s",
                 path, (unsigned)(st.st_mode & 0777), path);
        return -1;
    }
    close(fd);
    size_t len = 0;
    char *text = read_file_nofollow(path, 4096, &len);
    if (!text) {
        snprintf(err, errlen, "cannot read key file %s: %s", path, strerror(errno));
        return -1;
    }
    int rc = keyfile_parse(text, len, key, err, errlen);
    sodium_memzero(text, len);
    free(text);
    return rc;
}
