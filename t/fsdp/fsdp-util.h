/* Helpers of the FSDP tests. */
#ifndef PHX_T_FSDP_UTIL_H
#define PHX_T_FSDP_UTIL_H

#include <fnmatch.h>
#include <stdbool.h>
#include "phalanx/phalanx.h"

/* A wrap policy: the modules whose path matches one of the fnmatch
 * patterns of the NULL-terminated list arg. */
static inline bool fu_wrap_listed(const phx_module *m, const char *path, int64_t numel, void *arg)
{
    (void)m, (void)numel;
    const char *const *pats = arg;
    for (size_t i = 0; pats[i]; i++)
        if (fnmatch(pats[i], path, 0) == 0) return true;
    return false;
}

#endif
