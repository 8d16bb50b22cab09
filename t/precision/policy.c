/* Precision policies: the three plugins by name and through PHX_PRECISION,
 * fp32 as the default, unknown names listing what exists, modules taking
 * the policy's dtype, phx-info listing the three. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static void check_policy(const char *name, phx_dtype dt, bool scaling)
{
    phx_precision *p = NULL;
    phx_status st = phx_precision_new(name, &p);
    ok(st == PHX_OK && p, "%s loads", name);
    if (!p) {
        diag("%s", phx_last_error());
        skip(3, "policy missing");
        return;
    }
    is_str(phx_precision_name(p), name, "%s: name", name);
    is_str(phx_dtype_name(phx_precision_dtype(p)), phx_dtype_name(dt), "%s: compute dtype", name);
    ok(phx_precision_scaling(p) == scaling, "%s: loss scaling %s", name, scaling ? "on" : "off");
    phx_precision_free(p);
}

/* phx_precision_new(NULL) under PHX_PRECISION=env (NULL: unset). */
static const char *from_env(const char *env, phx_status *st)
{
    static char name[64];
    if (env)
        setenv("PHX_PRECISION", env, 1);
    else
        unsetenv("PHX_PRECISION");
    phx_precision *p = NULL;
    *st = phx_precision_new(NULL, &p);
    snprintf(name, sizeof name, "%s", p ? phx_precision_name(p) : "(none)");
    phx_precision_free(p);
    unsetenv("PHX_PRECISION");
    return name;
}

static void scan(void)
{
    phx_plugin_info infos[64] = {PHX_PLUGIN_INFO_INIT};
    phx_probe_ctx ctx = {0, 1, 0};
    size_t n = phx_plugin_scan(infos, 64, &ctx);
    int found[3] = {0, 0, 0}, prio[3] = {-1, -1, -1};
    const char *names[3] = {"fp32", "fp16", "bf16"};
    for (size_t i = 0; i < n && i < 64; i++)
        for (int k = 0; k < 3; k++)
            if (!strcmp(infos[i].kind, "precision") && !strcmp(infos[i].name, names[k]) && infos[i].ok) {
                found[k] = 1;
                prio[k] = infos[i].priority;
            }
    ok(found[0] && found[1] && found[2], "phx_plugin_scan finds fp32, fp16, bf16, each ok");
    ok(prio[0] > prio[1] && prio[0] > prio[2], "fp32 has the highest priority (%d vs %d, %d)", prio[0], prio[1],
       prio[2]);
}

/* phx-info (tools' program) lists the three with kind precision. */
static void phx_info(void)
{
    const char *b = getenv("top_builddir");
    char cmd[4400], path[4096];
    snprintf(path, sizeof path, "%s/tools/phx-info", b ? b : ".");
    if (access(path, X_OK) != 0) {
        skip(1, "tools/phx-info not built");
        return;
    }
    snprintf(cmd, sizeof cmd, "'%s' 2>&1", path);
    FILE *f = popen(cmd, "r");
    char line[8192];
    int seen = 0;
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, "precision"))
            seen |= (strstr(line, "fp32") ? 1 : 0) | (strstr(line, "fp16") ? 2 : 0) | (strstr(line, "bf16") ? 4 : 0);
    if (f) pclose(f);
    is_int(seen, 7, "phx-info lists precision fp32, fp16 and bf16");
}

int main(void)
{
    plan(30);
    check_policy("fp32", PHX_F32, false);
    check_policy("fp16", PHX_F16, true);
    check_policy("bf16", PHX_BF16, false);

    phx_status st;
    is_str(from_env(NULL, &st), "fp32", "PHX_PRECISION unset: fp32");
    is_str(from_env("", &st), "fp32", "PHX_PRECISION empty: fp32");
    is_str(from_env("bf16", &st), "bf16", "PHX_PRECISION=bf16");
    is_str(from_env("fp16", &st), "fp16", "PHX_PRECISION=fp16");

    /* A name in code wins over the environment. */
    setenv("PHX_PRECISION", "bf16", 1);
    phx_precision *p = NULL;
    ok(phx_precision_new("fp16", &p) == PHX_OK && !strcmp(phx_precision_name(p), "fp16"),
       "a name given in code wins over PHX_PRECISION");
    phx_precision_free(p);
    unsetenv("PHX_PRECISION");

    const char *got = from_env("nonsense", &st);
    is_int(st, PHX_ENOTFOUND, "PHX_PRECISION=nonsense is PHX_ENOTFOUND");
    is_str(got, "(none)", "and makes no policy");
    const char *msg = phx_last_error();
    like(msg, "nonsense", "the error names the request");
    like(msg, "PHX_PRECISION", "the error names the variable");
    ok(strstr(msg, "fp32") && strstr(msg, "fp16") && strstr(msg, "bf16"), "the error lists fp32, fp16, bf16");
    if (!(strstr(msg, "fp32") && strstr(msg, "fp16") && strstr(msg, "bf16"))) diag("got: %s", msg);
    p = (phx_precision *)&st;
    ok(phx_precision_new("fp64", &p) == PHX_ENOTFOUND && p == NULL, "an unknown name in code: PHX_ENOTFOUND, out NULL");
    is_int(phx_precision_new("fp16", NULL), PHX_EINVAL, "out NULL is PHX_EINVAL");

    /* NULL policy reads as fp32 (modules use this). */
    ok(phx_precision_dtype(NULL) == PHX_F32 && !phx_precision_scaling(NULL), "NULL policy: f32, no scaling");
    phx_precision_free(NULL);

    /* Modules take the policy's compute dtype. */
    phx_precision *bf = NULL;
    phx_precision_new("bf16", &bf);
    phx_module *m = phx_sequential_new();
    phx_sequential_add(m, phx_linear_new(3, 2, true, NULL));
    ok(phx_module_set_precision(m, bf) == PHX_OK && phx_module_compute_dtype(m) == PHX_BF16 &&
           phx_module_compute_dtype(phx_module_child(m, 0)) == PHX_BF16,
       "set_precision(bf16): modules compute in bf16");
    ok(phx_module_set_precision(m, NULL) == PHX_OK && phx_module_compute_dtype(phx_module_child(m, 0)) == PHX_F32,
       "set_precision(NULL): back to f32");
    phx_module_free(m);
    phx_precision_free(bf);

    scan();
    phx_info();
    return done_testing();
}
