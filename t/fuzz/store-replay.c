/* Replays the store-frame corpus (FUZZ_CORPUS, or the folder in argv[1])
 * through LLVMFuzzerTestOneInput, one TAP check per file in name order; a
 * broken invariant aborts, so it fails the test. `make fuzz-store` links
 * the same target with libFuzzer's main instead. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "t/tap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : FUZZ_CORPUS;
    DIR *d = opendir(dir);
    if (!d) { printf("1..1\nnot ok 1 - corpus folder '%s' cannot be opened\n", dir); return 1; }
    char *names[4096];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096)
        if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    plan((int)n);
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "rb");
        uint8_t *buf = NULL;
        long len = -1;
        if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
            (buf = malloc((size_t)len + 1)) && fread(buf, 1, (size_t)len, f) == (size_t)len) {
            LLVMFuzzerTestOneInput(buf, (size_t)len);
            ok(1, "%s (%ld bytes) replayed", names[i], len);
        } else {
            ok(0, "%s cannot be read", names[i]);
        }
        if (f) fclose(f);
        free(buf);
        free(names[i]);
    }
    return done_testing();
}
