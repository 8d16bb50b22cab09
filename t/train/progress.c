/* The progress helper (include/phalanx/progress.h): step lines into a
 * stream (numbering, ETA, unit), the records it writes (read back with
 * jansson), a resumed run's steps continuing from first_step, extras
 * added to a step, and refused options. */
#include "config.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "phalanx/phalanx.h"
#include "t/tap.h"

static char path[256];

static int read_lines(json_t **out, int max)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[8192];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        json_error_t err;
        json_t *j = json_loads(line, 0, &err);
        if (!j) {
            fclose(f);
            return -1;
        }
        if (n < max)
            out[n] = j;
        else
            json_decref(j);
        n++;
    }
    fclose(f);
    return n;
}

static int64_t jint(json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

static void test_lines_and_records(void)
{
    unlink(path);
    FILE *out = tmpfile();
    phx_progress_opts po = PHX_PROGRESS_OPTS_INIT;
    po.total_steps = 10;
    po.first_step = 6; /* a resumed run: 4 steps to go */
    po.every = 2;
    po.metrics = path;
    po.unit = "tokens";
    po.out = out;
    phx_progress *p = phx_progress_new(&po);
    ok(p != NULL, "new");
    if (!p) return;
    is_int(phx_progress_steps(p), 6, "the step count starts at first_step");
    is_int(phx_progress_add(p, "grad_norm", 1.5), PHX_OK, "an extra for the next step");
    is_int(phx_progress_add(p, "grad_norm", 2.0), PHX_EINVAL, "the same extra twice is refused");
    is_int(phx_progress_add(p, "loss", 2.0), PHX_EINVAL, "a key of the step's own is refused");
    like(phx_last_error(), "'loss'", "the error names the key");
    is_int(phx_progress_add(p, "9x", 2.0), PHX_EINVAL, "a key the metrics file refuses is refused now");
    for (int s = 0; s < 4; s++) is_int(phx_progress_step(p, 3, 1.0 / (s + 1), 0.01, 1000), PHX_OK, "step %d", s + 7);
    is_int(phx_progress_record(p, 3, "accuracy", 0.75), PHX_OK, "record");
    is_int(phx_progress_steps(p), 10, "10 steps after 4 more");
    ok(phx_progress_metrics(p) != NULL, "the metrics handle is reachable");
    phx_progress_free(p);

    rewind(out);
    char buf[2048] = "";
    size_t n = fread(buf, 1, sizeof buf - 1, out);
    buf[n] = 0;
    fclose(out);
    ok(strstr(buf, "step 8/10 loss 0.5000 1000 tokens/s elapsed 0:00 ETA 0:00\n") != NULL,
       "a line at the second step of the run, numbered 8/10, with the unit and an ETA");
    ok(strstr(buf, "step 10/10 loss 0.2500 1000 tokens/s elapsed 0:00\n") != NULL, "the last line has no ETA");
    ok(!strstr(buf, "step 7/") && !strstr(buf, "step 9/"), "no line between (every 2 from the run's start)");
    diag("lines: %s", buf);

    json_t *l[8] = {0};
    int nl = read_lines(l, 8);
    is_int(nl, 5, "5 records");
    if (nl != 5) return;
    is_int(jint(l[0], "step"), 7, "the first record is step 7");
    is_int(jint(l[3], "step"), 10, "the fourth step 10");
    is_int(jint(l[4], "step"), 10, "the record is at the current step");
    ok(json_number_value(json_object_get(l[0], "tokens_per_s")) == 1000.0, "throughput key from the unit");
    ok(json_real_value(json_object_get(l[0], "grad_norm")) == 1.5 && !json_object_get(l[1], "grad_norm"),
       "the extra goes into the next step's record only");
    ok(json_real_value(json_object_get(l[4], "accuracy")) == 0.75 && jint(l[4], "epoch") == 3,
       "the record's value and epoch");
    for (int i = 0; i < nl; i++) json_decref(l[i]);
}

static void test_errors(void)
{
    phx_progress_opts po = PHX_PROGRESS_OPTS_INIT;
    po.total_steps = 5;
    po.first_step = 6;
    ok(phx_progress_new(&po) == NULL, "first_step past total_steps refused");
    like(phx_last_error(), "first_step", "the error names it");
    po = (phx_progress_opts)PHX_PROGRESS_OPTS_INIT;
    po.unit = "sam ples";
    ok(phx_progress_new(&po) == NULL, "a unit that is not letters refused");
    po = (phx_progress_opts)PHX_PROGRESS_OPTS_INIT;
    po.metrics = "/nonexistent-dir/m.jsonl";
    ok(phx_progress_new(&po) == NULL, "an unopenable metrics file refused");
    like(phx_last_error(), "/nonexistent-dir/m.jsonl", "the error names it");
    po = (phx_progress_opts)PHX_PROGRESS_OPTS_INIT;
    po.struct_size = 0;
    ok(phx_progress_new(&po) == NULL, "struct_size 0 refused");
    like(phx_last_error(), "PHX_PROGRESS_OPTS_INIT", "the error names the initialiser");
    phx_progress *d = phx_progress_new(NULL);
    ok(d != NULL, "NULL opts: the defaults");
    phx_progress_free(d);
    is_int(phx_progress_step(NULL, 0, 0, 0, 0), PHX_EINVAL, "step on NULL");
    phx_progress_free(NULL);
    char b[16];
    is_str(phx_progress_hms(3723, b, sizeof b), "1:02:03", "hms over an hour");
    is_str(phx_progress_hms(245, b, sizeof b), "4:05", "hms under an hour");
}

static void test_rank1(void)
{
    unlink(path);
    FILE *out = tmpfile();
    phx_progress_opts po = PHX_PROGRESS_OPTS_INIT;
    po.every = 1;
    po.rank = 1;
    po.metrics = path;
    po.out = out;
    phx_progress *p = phx_progress_new(&po);
    phx_progress_step(p, 1, 1.0, -1, 0);
    phx_progress_free(p);
    ok(ftell(out) == 0 && access(path, F_OK) != 0, "rank 1 prints and writes nothing");
    fclose(out);
}

int main(void)
{
    snprintf(path, sizeof path, "t/progress-%d.jsonl", (int)getpid());
    test_lines_and_records();
    test_errors();
    test_rank1();
    unlink(path);
    return done_testing();
}
