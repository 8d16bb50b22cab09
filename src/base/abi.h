/* The library ABI's struct rule (doc/maint/abi.md): every public options or
 * output struct starts with `size_t struct_size`, the size the caller was
 * built with; the library copies min(caller's, its own) bytes in and out,
 * so a program built against older headers runs on a newer library, and a
 * newer program's fields that this library does not know are refused
 * unless they are zero (the Linux extensible-struct rule). */
#ifndef PX_BASE_ABI_H
#define PX_BASE_ABI_H

#include <stddef.h>
#include "phalanx/error.h"

/* Reads the caller's options struct `in` into `own` (own_size bytes,
 * already holding the defaults): the bytes both know are copied, the
 * fields the caller is too old to have keep their defaults, and
 * own->struct_size becomes own_size. in NULL leaves the defaults.
 * PHX_EABI naming fn, type and init (the initialiser to use) when the
 * caller's struct_size is smaller than the size field itself (0: never
 * initialised), or larger with a non-zero byte past own_size. */
phx_status px_abi_in(void *own, size_t own_size, const void *in, const char *fn, const char *type, const char *init);

/* Writes `own` (own_size bytes) into the caller's output struct `out`,
 * min(out->struct_size, own_size) bytes, leaving out->struct_size and any
 * bytes past own_size as they were. PHX_EINVAL when out is NULL; PHX_EABI
 * as px_abi_in when out->struct_size is too small. */
phx_status px_abi_out(void *out, const void *own, size_t own_size, const char *fn, const char *type, const char *init);

/* The caller's struct_size, for arrays of output structs (the stride). */
size_t px_abi_size(const void *s);

#endif
