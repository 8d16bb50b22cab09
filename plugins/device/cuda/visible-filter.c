/* CUDA_VISIBLE_DEVICES as CUDA reads it (no CUDA needed: the CPU tests
 * check it). See visible.h. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include "visible.h"

/* Devices left by CUDA_VISIBLE_DEVICES out of n: entries up to the first
 * invalid one (CUDA's rule); UUIDs ("GPU-...", "MIG-...") are taken as
 * valid. Unset: all n. */
int px_cuda_visible_filter(const char *v, int n)
{
    if (!v) return n;
    int count = 0;
    char seen[256] = {0};
    const char *p = v;
    while (*p) {
        while (*p == ' ') p++;
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len > 0 && p[len - 1] == ' ') len--;
        if (len == 0) break;
        if (isdigit((unsigned char)p[0]) || p[0] == '-' || p[0] == '+') {
            char buf[32];
            if (len >= sizeof buf) break;
            memcpy(buf, p, len);
            buf[len] = 0;
            char *e;
            long idx = strtol(buf, &e, 10);
            if (*e || idx < 0 || idx >= n || idx >= 256 || seen[idx]) break;
            seen[idx] = 1;
        } else if (!(len > 4 && (strncmp(p, "GPU-", 4) == 0 || strncmp(p, "MIG-", 4) == 0))) {
            break;
        }
        count++;
        if (!end) break;
        p = end + 1;
    }
    return count < n ? count : n;
}
