/* Whole files in and out for the tests that damage saved files
 * (t/data/st_entries.c, t/zero/ckpt_bad.c). */
#ifndef PHX_T_FILE_UTIL_H
#define PHX_T_FILE_UTIL_H

#include <stdio.h>
#include <stdlib.h>

/* path's bytes, NUL-terminated, in a malloc'd buffer; NULL if unreadable. */
static inline char *tf_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    rewind(f);
    char *b = malloc(*len + 1);
    if (b && fread(b, 1, *len, f) != *len) {
        free(b);
        b = NULL;
    }
    if (b) b[*len] = 0;
    fclose(f);
    return b;
}

/* writes len bytes to path; exits the test on failure */
static inline void tf_put(const char *path, const void *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}
#endif
