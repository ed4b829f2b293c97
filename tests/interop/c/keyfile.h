/* keyfile.h - SPEED-KEY-V1 key files (wire contract section 3). */
#ifndef SPEED_KEYFILE_H
#define SPEED_KEYFILE_H

#include <stddef.h>
#include <stdint.h>

/* Parses key file text. 0 on success; on error a message (never key material) in err. */
int keyfile_parse(const char *text, size_t len, uint8_t key[32], char *err, size_t errlen);
/* Loads and checks a key file: regular file, not a symlink, mode without group/other bits. */
int keyfile_load(const char *path, uint8_t key[32], char *err, size_t errlen);

#endif
