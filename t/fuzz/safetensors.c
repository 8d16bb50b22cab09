/* Fuzz target: the safetensors parser (src/data/safetensors.c: length
 * prefix, JSON header, dtypes, shapes, offsets, metadata and its
 * checksums) through phx_safetensors_read and phx_checkpoint_meta on
 * arbitrary bytes. A read must either give n named tensors whose sizes
 * match their dtypes and shapes, or fail with a "phx_safetensors_read: "
 * message and nothing allocated; a metadata lookup must succeed with a
 * NUL-terminated value or fail with a message. Anything else aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "phalanx/phalanx.h"

static char path[256];

static void fail(const char *what)
{
    const char *e = phx_last_error();
    fprintf(stderr, "safetensors: %s (%s)\n", what, e ? e : "(no message)");
    abort();
}

static void read_all(void)
{
    char **names = NULL;
    phx_tensor **ts = NULL;
    size_t n = 0;
    phx_status st = phx_safetensors_read(path, &names, &ts, &n);
    if (st != PHX_OK) {
        const char *e = phx_last_error();
        if (names || ts || !e || strncmp(e, "phx_safetensors_read: ", 22) != 0)
            fail("a failed read left output or lacks its message");
        return;
    }
    if (n && (!names || !ts)) fail("a read of n > 0 tensors gave no arrays");
    for (size_t i = 0; i < n; i++) {
        if (!names[i] || !ts[i]) fail("a read gave a NULL name or tensor");
        int64_t numel = phx_tensor_numel(ts[i]);
        if (numel < 0 || phx_tensor_nbytes(ts[i]) != (size_t)numel * phx_dtype_size(phx_tensor_dtype(ts[i])))
            fail("a tensor's size does not match its dtype and shape");
    }
    phx_safetensors_free(names, ts, n);
}

static void meta(const char *key)
{
    char buf[32];
    memset(buf, 'x', sizeof buf);
    phx_status st = phx_checkpoint_meta(path, key, buf, sizeof buf);
    if (st == PHX_OK) {
        if (!memchr(buf, 0, sizeof buf)) fail("a metadata value is not NUL-terminated");
    } else {
        const char *e = phx_last_error();
        if (!e || !*e) fail("a failed metadata lookup set no message");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!path[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/phx-fuzz-st-%ld.safetensors", tmp && *tmp ? tmp : "/tmp", (long)getpid());
    }
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    read_all();
    meta("optim.type");
    meta("format");
    meta("phx.crc32.__metadata__");
    unlink(path);
    return 0;
}
