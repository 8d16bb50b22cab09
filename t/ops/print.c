/* phx_tensor_print against torch 1.13's repr of the same tensors
 * (t/ref/ops_shape.txt, "print" blocks from bench/torch/ops_shape_ref.py):
 * character for character, except that an elided tensor also shows its
 * size. Then grad_fn names and a NULL tensor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static phx_dtype dtype_of(const char *s)
{
    if (!strcmp(s, "float16")) return PHX_F16;
    if (!strcmp(s, "bfloat16")) return PHX_BF16;
    if (!strcmp(s, "int32")) return PHX_I32;
    if (!strcmp(s, "int64")) return PHX_I64;
    return PHX_F32;
}

/* What phx_tensor_print writes for t. */
static char *printed(const phx_tensor *t)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    phx_status st = phx_tensor_print(t, f);
    fclose(f);
    if (st != PHX_OK) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* The tensor of one "print" line: DTYPE REQ NDIM SHAPE... : VALUES. */
static phx_tensor *parse_tensor(char **save, phx_dtype *dt)
{
    *dt = dtype_of(strtok_r(NULL, " \n", save));
    int req = atoi(strtok_r(NULL, " \n", save)), ndim = atoi(strtok_r(NULL, " \n", save));
    int64_t shape[4], n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i] = atoll(strtok_r(NULL, " \n", save));
    strtok_r(NULL, " \n", save); /* ":" */
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = strtod(strtok_r(NULL, " \n", save), NULL);
    phx_tensor *t;
    if (*dt == PHX_I64 || *dt == PHX_I32) {
        int64_t *iv = malloc((size_t)(n ? n : 1) * sizeof *iv);
        for (int64_t i = 0; i < n; i++) iv[i] = (int64_t)v[i];
        phx_tensor *t64 = phx_tensor_from_data(PHX_I64, ndim, shape, iv);
        t = phx_tensor_new(*dt, ndim, shape, phx_cpu());
        phx_tensor_cast(t, t64);
        phx_tensor_free(t64);
        free(iv);
    } else {
        float *fv = malloc((size_t)(n ? n : 1) * sizeof *fv);
        for (int64_t i = 0; i < n; i++) fv[i] = (float)v[i];
        phx_tensor *t32 = phx_tensor_from_data(PHX_F32, ndim, shape, fv);
        t = phx_tensor_new(*dt, ndim, shape, phx_cpu());
        phx_tensor_cast(t, t32);
        phx_tensor_free(t32);
        free(fv);
    }
    free(v);
    if (req) phx_tensor_set_requires_grad(t, true);
    return t;
}

/* Removes ", size=(...)" (or its form on a new line) from s; 1 if found. */
static int strip_size(char *s)
{
    char *p = strstr(s, "size=(");
    if (!p) return 0;
    char *start = p;
    while (start > s && (start[-1] == ' ' || start[-1] == '\n')) start--;
    if (start > s && start[-1] == ',') start--;
    char *end = strchr(p, ')') + 1;
    memmove(start, end, strlen(end) + 1);
    return 1;
}

int main(void)
{
    const char *top = getenv("top_srcdir");
    char path[4096];
    snprintf(path, sizeof path, "%s/t/ref/ops_shape.txt", top ? top : ".");
    FILE *f = fopen(path, "r");
    if (!f) skip_all("t/ref/ops_shape.txt not found (set top_srcdir)");
    char *line = NULL, *save, name[64] = "", expect[1 << 16];
    size_t cap = 0;
    phx_tensor *t = NULL;
    int cases = 0;
    while (getline(&line, &cap, f) > 0) {
        if (!strncmp(line, "print ", 6)) {
            strtok_r(line, " \n", &save);
            snprintf(name, sizeof name, "%s", strtok_r(NULL, " \n", &save));
            phx_dtype dt;
            t = parse_tensor(&save, &dt);
            expect[0] = 0;
        } else if (!strncmp(line, "expect ", 7) && t) {
            strncat(expect, line + 7, sizeof expect - strlen(expect) - 1);
        } else if (!strncmp(line, "endprint", 8) && t) {
            char *got = printed(t);
            int elided = phx_tensor_numel(t) > 1000, had = got && elided ? strip_size(got) : 1;
            ok(got && had && !strcmp(got, expect), "%s prints as torch does%s", name, elided ? " (and its size)" : "");
            if (!got || strcmp(got, expect)) diag("got:\n%s\nexpected:\n%s", got ? got : phx_last_error(), expect);
            free(got);
            phx_tensor_free(t);
            t = NULL;
            cases++;
        }
    }
    free(line);
    fclose(f);
    ok(cases >= 15, "%d print cases", cases);

    /* An elided tensor shows its size; grad_fn names the operation. */
    phx_tensor *big = phx_tensor_zeros(PHX_F32, 2, (int64_t[]){40, 30}, phx_cpu());
    char *s = printed(big);
    ok(s && strstr(s, "size=(40, 30))"), "an elided tensor shows size=(40, 30): %s", s ? strrchr(s, ',') : "");
    free(s);
    phx_tensor_set_requires_grad(big, true);
    phx_scope *sc = phx_scope_begin();
    phx_tensor *r = phx_reshape(phx_narrow(big, 0, 0, 1), 1, (int64_t[]){-1});
    s = printed(r);
    ok(s && strstr(s, "grad_fn=<reshape>)\n"), "a reshape's output shows grad_fn=<reshape>: %s",
       s ? strrchr(s, '\n') - 20 > s ? strrchr(s, '\n') - 20 : s : "");
    free(s);
    phx_scope_end(sc);
    phx_tensor_free(big);
    ok(phx_tensor_print(NULL, stdout) == PHX_EINVAL && strstr(phx_last_error(), "NULL"), "a NULL tensor: %s",
       phx_last_error());
    return done_testing();
}
