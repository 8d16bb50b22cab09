/* The kit's check of phx_spawn's abort key (phalanx/plugin/kit.h). */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include "phalanx/plugin/kit.h"

int phx_kit_aborted(phx_store *store, char *why, size_t why_len)
{
    void *v = NULL;
    size_t n = 0;
    if (!store || phx_store_get(store, PHX_KIT_ABORT_KEY, &v, &n, 1e-6) != PHX_OK) return 0;
    if (why && why_len) snprintf(why, why_len, "%.*s", (int)n, (const char *)v);
    free(v);
    return 1;
}
