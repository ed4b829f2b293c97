/* registry.h - speed_registry/ entries and their liveness (wire contract section 4). */
#ifndef SPEED_REGISTRY_H
#define SPEED_REGISTRY_H

#include "json.h"

/* Takes the exclusive fcntl record lock on ROOT/speed_registry/.lock (F_SETLKW, whole file).
 * Returns the lock fd (close it with registry_unlock) or -1 with errno. */
int registry_lock(const char *root);
void registry_unlock(int fd);

/* Reads ROOT/speed_registry/NAME.node. Returns the parsed object, or NULL when missing
 * (*exists = 0) or unparseable / lacking name, id or lastHeartbeat (*exists = 1). */
jval *registry_read(const char *root, const char *name, int *exists);

/* Section 4.1: stale when now - lastHeartbeat > leaseSeconds, judged with
 * bootTimeHeartbeat against CLOCK_BOOTTIME when the entry has our bootId; also stale when
 * it is on this host and boot, and its pid no longer exists. */
int registry_is_stale(const jval *entry);
/* Not stale and status "online". */
int registry_is_online(const jval *entry);
/* 1 if name is in the entry's allow array. */
int registry_allows(const jval *entry, const char *name);

/* Writes entry to a dot temp file in speed_registry/ and renames it over NAME.node.
 * Caller holds the lock. 0 on success, -1 with errno. */
int registry_write(const char *root, const char *name, const jval *entry);

#endif
