/* Fuzz target: phx_idx_read on arbitrary bytes (raw or gzip: the reader
 * goes through zlib either way). It must either give a tensor whose
 * element count matches the header's dims, or fail with a
 * "phx_idx_read: " message; anything else aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "phalanx/phalanx.h"

static char path[256];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!path[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/phx-fuzz-idx-%ld", tmp && *tmp ? tmp : "/tmp", (long)getpid());
    }
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    phx_tensor *t = NULL;
    phx_status st = phx_idx_read(path, &t);
    if (st == PHX_OK) {
        if (!t) abort();
        int64_t n = phx_tensor_numel(t);
        if (n < 0) abort();
        phx_tensor_free(t);
    } else {
        const char *e = phx_last_error();
        if (t || !e || !*e) {
            fprintf(stderr, "phx_idx_read failed (%s) without a message or left a tensor\n", phx_status_name(st));
            abort();
        }
    }
    unlink(path);
    return 0;
}
