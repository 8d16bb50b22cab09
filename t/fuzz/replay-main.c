/* Replays a fuzz target's corpus as TAP checks: every file of the folder
 * FUZZ_CORPUS (a define, so each target reuses this file; a folder given
 * as argv[1] replaces it) goes through LLVMFuzzerTestOneInput once, in name
 * order, one check per file. A target reports a broken invariant by
 * aborting, so a crash, a sanitizer report or an abort fails the test.
 * `make fuzz` links the same target with libFuzzer's main instead. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "t/tap.h"

#ifndef FUZZ_CORPUS
#error "FUZZ_CORPUS must name the corpus folder"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    fclose(f);
    *n = len;
    return buf;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : FUZZ_CORPUS;
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    DIR *d = opendir(dir);
    if (!d) {
        printf("1..1\nnot ok 1 - corpus folder '%s' cannot be opened\n", dir);
        return 1;
    }
    size_t n = 0, cap = 64;
    char **names = malloc(cap * sizeof *names);
    struct dirent *e;
    while (names && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            char **nn = realloc(names, (cap *= 2) * sizeof *names);
            if (!nn) break;
            names = nn;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (!names || n == 0) {
        printf("1..1\nnot ok 1 - corpus folder '%s' is empty\n", dir);
        return 1;
    }
    qsort(names, n, sizeof *names, by_name);
    plan((int)n);
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        size_t len = 0;
        uint8_t *data = slurp(path, &len);
        if (!data) {
            ok(0, "%s: cannot be read", names[i]);
        } else {
            LLVMFuzzerTestOneInput(data, len);
            ok(1, "%s (%zu bytes) replayed", names[i], len);
        }
        free(data);
        free(names[i]);
    }
    free(names);
    return tap_failed_ ? 1 : 0;
}
