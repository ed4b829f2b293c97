/* kat.h - known-answer check of the shared envelope vector file. */
#ifndef SPEED_KAT_H
#define SPEED_KAT_H

/* Returns the process exit status: 0 only if every vector passes. */
int kat_run(const char *path);

/* kat_chunks.c: the vectors of tests/vectors/chunks_vectors.json (extensions chunks, reliable). */
int kat_chunks_run(const char *path);

#endif
