/* registry.h - speed_registry/ entries and their liveness (wire contract section 4). */
#ifndef SPEED_REGISTRY_H
#define SPEED_REGISTRY_H

#include <stddef.h>

#include "json.h"

/* Readers clamp leaseSeconds to this (section 4.1). */
#define REGISTRY_MAX_LEASE_SECONDS 86400.0
#define REGISTRY_DEFAULT_LOCK_TIMEOUT_MS 10000

/* Takes the exclusive fcntl record lock on ROOT/speed_registry/.lock (whole file), waiting at
 * most timeout_ms. It polls F_SETLK instead of blocking in F_SETLKW, so SIGINT/SIGTERM are
 * answered while it waits: a signal that arrives during the wait ends it. Returns the lock fd
 * (release with registry_unlock) or -1 with one sentence in err: the holder's pid (F_GETLK) on
 * timeout, a configuration error when .lock is not a regular file, or the interruption. */
int registry_lock(const char *root, int timeout_ms, char *err, size_t errlen);
void registry_unlock(int fd);

/* Reads ROOT/speed_registry/NAME.node. Returns the parsed object, or NULL when missing
 * (*exists = 0) or unparseable / lacking name, id or lastHeartbeat (*exists = 1). */
jval *registry_read(const char *root, const char *name, int *exists);

/* Section 4.1, one judgement for every use (registration, senders, leave, peers):
 * - leaseSeconds is clamped to REGISTRY_MAX_LEASE_SECONDS;
 * - the heartbeat's age is measured with bootTimeHeartbeat against CLOCK_BOOTTIME when the
 *   entry has this host's bootId, else with lastHeartbeat against the wall clock;
 * - stale when that age is more than the lease, in either direction (a heartbeat more than a
 *   lease in the future is garbage, e.g. milliseconds);
 * - stale when the entry's host is this host and its pid does not exist (with or without
 *   bootId); a pid no process can have (zero, negative, above the kernel's limit) does not
 *   exist. A pid that exists never makes an entry live. */
int registry_is_stale(const jval *entry);

typedef enum { REG_ONLINE, REG_LEAVING, REG_UNAVAILABLE } reg_state;
/* REG_UNAVAILABLE when entry is NULL or stale or its status is neither absent, "online" nor
 * "leaving"; REG_LEAVING for status "leaving". */
reg_state registry_state(const jval *entry);
/* 1 if name is in the entry's allow array. */
int registry_allows(const jval *entry, const char *name);

/* Writes entry to a dot temp file in speed_registry/ and renames it over NAME.node.
 * Caller holds the lock. 0 on success, -1 with errno. */
int registry_write(const char *root, const char *name, const jval *entry);

#endif
