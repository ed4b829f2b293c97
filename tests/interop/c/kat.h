/* kat.h - known-answer check of the shared envelope vector file. */
#ifndef SPEED_KAT_H
#define SPEED_KAT_H

#include <stddef.h>
#include <stdint.h>

#include "json.h"

/* The hex string field `key` of `o`, decoded into a malloc'd buffer (its length in *len; one
 * spare byte), or NULL when missing, odd or not hex. Shared by every kat command. */
uint8_t *kat_hex_field(const jval *o, const char *key, size_t *len);

/* Returns the process exit status: 0 only if every vector passes. */
int kat_run(const char *path);

/* kat_chunks.c: the vectors of tests/vectors/chunks_vectors.json (extensions chunks, reliable). */
int kat_chunks_run(const char *path);

#endif
