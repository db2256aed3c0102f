/*
 * Shared by the two halves of devicemapper._lognative: _lognative.c (the module, the
 * header walk, the replay loop) and _lognative_plan.c (the pieces later entries leave).
 */

#ifndef POWERCUT_LOGNATIVE_H
#define POWERCUT_LOGNATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <endian.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

/* Bumped whenever a signature or the record layout changes: devicemapper/native.py
 * refuses a module built from other sources (a stale build falls back to Python). */
#define ABI_VERSION 3

enum { R_SECTOR, R_NR, R_FLAGS, R_DATALEN, R_HEADER, R_FIELDS };

enum {
    F_FLUSH = 1 << 0,
    F_FUA = 1 << 1,
    F_DISCARD = 1 << 2,
    F_MARK = 1 << 3,
    F_METADATA = 1 << 4,
    F_KNOWN = F_FLUSH | F_FUA | F_DISCARD | F_MARK | F_METADATA,
};

#define ENTRY_BYTES 32u

/* What stopped a loop; Python (native.py) turns each into its own error. */
enum {
    E_OK = 0,
    E_HEADER = 1, /* the header at (index, offset) is not valid: Python re-parses it */
    E_READ = 2,   /* reading the log failed: errno at offset */
    E_SHORT = 3,  /* the log ended inside a payload: got of total bytes */
    E_WRITE = 4,  /* writing the target failed: errno, total bytes at offset */
    E_BEYOND = 5, /* a write past any possible device: total bytes at offset */
};

typedef unsigned __int128 u128;

#define MAX_OFFSET ((u128)INT64_MAX) /* off_t is signed 64-bit */

/* A growable array of uint64. */
struct u64s {
    uint64_t *v;
    size_t len, cap;
};

int u64s_push(struct u64s *a, const uint64_t *items, size_t n);
PyObject *long_from_u128(u128 v);

extern const char lognative_plan_doc[];
PyObject *lognative_plan(PyObject *self, PyObject *args);

#endif
