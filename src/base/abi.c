/* The library ABI's struct rule: min(caller, own) bytes in and out. */
#include <string.h>
#include "src/base/abi.h"
#include "phalanx/phalanx.h"

size_t px_abi_size(const void *s)
{
    size_t n;
    memcpy(&n, s, sizeof n);
    return n;
}

/* Larger than any struct that comes through here will be (the largest,
 * phx_world, has 288 bytes; phx_plugin_info, larger, is an array stride
 * and does not): a struct_size above it is an uninitialised struct, whose
 * bytes past the caller's struct must not be read. */
#define PX_ABI_MAX_STRUCT 4096

static phx_status too_large(size_t n, const char *fn, const char *type, const char *init)
{
    return phx_error(PHX_EABI,
                     "%s: %s.struct_size is %zu, expected at most %d: initialise it with %s (the struct was "
                     "left unset)",
                     fn, type, n, PX_ABI_MAX_STRUCT, init);
}

static phx_status too_small(size_t n, const char *fn, const char *type, const char *init)
{
    return phx_error(PHX_EABI,
                     "%s: %s.struct_size is %zu, expected at least %zu: initialise it with %s "
                     "(the program was not built against Phalanx's headers, or left the struct unset)",
                     fn, type, n, sizeof(size_t), init);
}

phx_status px_abi_in(void *own, size_t own_size, const void *in, const char *fn, const char *type, const char *init)
{
    if (!in) {
        memcpy(own, &own_size, sizeof own_size);
        return PHX_OK;
    }
    size_t n = px_abi_size(in);
    if (n < sizeof(size_t)) return too_small(n, fn, type, init);
    if (n > PX_ABI_MAX_STRUCT) return too_large(n, fn, type, init);
    const unsigned char *c = in;
    for (size_t i = own_size; i < n; i++)
        if (c[i])
            return phx_error(PHX_EABI,
                             "%s: %s of %zu bytes sets byte %zu, past the %zu bytes this library knows: the "
                             "program was built against newer Phalanx headers (ABI %d.%d here; link it with "
                             "the library it was built for), or did not initialise the struct with %s",
                             fn, type, n, i, own_size, PHX_ABI_VERSION_MAJOR, PHX_ABI_VERSION_MINOR, init);
    memcpy((unsigned char *)own + sizeof(size_t), c + sizeof(size_t), (n < own_size ? n : own_size) - sizeof(size_t));
    memcpy(own, &own_size, sizeof own_size);
    return PHX_OK;
}

phx_status px_abi_out(void *out, const void *own, size_t own_size, const char *fn, const char *type, const char *init)
{
    if (!out) return phx_error(PHX_EINVAL, "%s: out is NULL", fn);
    size_t n = px_abi_size(out);
    if (n < sizeof(size_t)) return too_small(n, fn, type, init);
    if (n > PX_ABI_MAX_STRUCT) return too_large(n, fn, type, init);
    memcpy((unsigned char *)out + sizeof(size_t), (const unsigned char *)own + sizeof(size_t),
           (n < own_size ? n : own_size) - sizeof(size_t));
    return PHX_OK;
}
