/* Metrics as JSON Lines: every record parses (jansson, an independent
 * parser) with the values written, only rank 0 writes, bad keys and
 * over-long records are refused whole, concurrent appenders never split a
 * line, the file mode follows the umask, a full disk leaves no half
 * record, a string that is not UTF-8 is refused, and a file ending in a
 * cut-off line gets the next record on a line of its own. */
#include "config.h"

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "phalanx/phalanx.h"
#include "phalanx/metrics.h"
#include "t/tap.h"

static char path[256];

/* Reads the file's lines into parsed objects; returns the count (-1 when
 * a line does not parse or does not end with a newline). */
static int read_lines(json_t **out, int max)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[8192];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        json_error_t err;
        json_t *j = len && line[len - 1] == '\n' ? json_loads(line, 0, &err) : NULL;
        if (!j || !json_is_object(j)) {
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

static void test_records(void)
{
    unlink(path);
    phx_metrics *m = phx_metrics_open(path, 0);
    ok(m != NULL, "open rank 0");
    for (int s = 1; s <= 3; s++) {
        phx_metrics_begin(m);
        phx_metrics_add_i64(m, "step", s * 100);
        phx_metrics_add_f64(m, "loss", 1.0 / s);
        phx_metrics_add_f64(m, "lr", 3e-4);
        phx_metrics_add_str(m, "phase", s == 2 ? "say \"hi\"\n\\" : "train");
        is_int(phx_metrics_end(m), PHX_OK, "record %d written", s);
    }
    phx_metrics_begin(m);
    phx_metrics_add_f64(m, "loss", NAN);
    phx_metrics_add_f64(m, "scale", INFINITY);
    phx_metrics_add_i64(m, "big", INT64_MIN);
    phx_metrics_end(m);
    phx_metrics_close(m);

    json_t *l[8] = {0};
    int n = read_lines(l, 8);
    is_int(n, 4, "four lines, each a JSON object");
    if (n != 4) return;
    is_int(json_integer_value(json_object_get(l[1], "step")), 200, "step of record 2");
    is_close(json_real_value(json_object_get(l[2], "loss")), 1.0 / 3, 1e-9, "loss of record 3");
    is_close(json_number_value(json_object_get(l[0], "lr")), 3e-4, 1e-12, "lr");
    is_str(json_string_value(json_object_get(l[1], "phase")), "say \"hi\"\n\\", "string escaped and read back");
    ok(json_is_number(json_object_get(l[0], "time")) && json_number_value(json_object_get(l[0], "time")) >= 0,
       "every record has a time");
    ok(json_is_null(json_object_get(l[3], "loss")) && json_is_null(json_object_get(l[3], "scale")),
       "non-finite doubles are null");
    is_int(json_integer_value(json_object_get(l[3], "big")), INT64_MIN, "int64 min round-trips");
    for (int i = 0; i < 4; i++) json_decref(l[i]);
}

static void test_other_ranks(void)
{
    unlink(path);
    phx_metrics *m = phx_metrics_open(path, 1);
    ok(m != NULL, "open rank 1 gives a handle");
    phx_metrics_begin(m);
    phx_metrics_add_i64(m, "step", 1);
    is_int(phx_metrics_end(m), PHX_OK, "rank 1 record accepted");
    phx_metrics_close(m);
    ok(access(path, F_OK) != 0, "rank 1 creates no file");
    m = phx_metrics_open(NULL, 0);
    ok(m != NULL && phx_metrics_begin(m) == PHX_OK && phx_metrics_end(m) == PHX_OK, "NULL path: writes nothing");
    phx_metrics_close(m);
    phx_metrics_close(NULL);
}

static void test_errors(void)
{
    unlink(path);
    phx_metrics *m = phx_metrics_open(path, 0);
    is_int(phx_metrics_add_i64(m, "step", 1), PHX_EINVAL, "add before begin");
    like(phx_last_error(), "phx_metrics_begin first", "error says to begin");
    is_int(phx_metrics_end(m), PHX_EINVAL, "end before begin");
    const char *bad[] = {"", "9lives", "has space", "quote\"", "time"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        phx_metrics_begin(m);
        is_int(phx_metrics_add_f64(m, bad[i], 1.0), PHX_EINVAL, "key '%s' refused", bad[i]);
        is_int(phx_metrics_end(m), PHX_EINVAL, "record with key '%s' dropped", bad[i]);
    }
    phx_metrics_begin(m);
    phx_metrics_add_i64(m, "step", 1);
    is_int(phx_metrics_add_i64(m, "step", 2), PHX_EINVAL, "repeated key refused");
    like(phx_last_error(), "'step'", "error names the key");
    phx_metrics_begin(m);
    char big[5000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    is_int(phx_metrics_add_str(m, "blob", big), PHX_EINVAL, "record over 4096 bytes refused");
    like(phx_last_error(), "4096", "error names the limit");
    is_int(phx_metrics_end(m), PHX_EINVAL, "over-long record dropped whole");
    phx_metrics_close(m);
    json_t *l[1];
    is_int(read_lines(l, 0), 0, "nothing written by refused records");
    ok(phx_metrics_open("/nonexistent-dir/m.jsonl", 0) == NULL, "unopenable path: NULL");
    like(phx_last_error(), "/nonexistent-dir/m.jsonl", "error names the path");
}

/* One appender on a full disk (every write fails) beside one that
 * appends freely: the failing one's cleanup never cuts the other's
 * records (it cut back to an end it had read before the other wrote). */
static void test_failing_neighbour(void)
{
    unlink(path);
    enum { RECS = 20000 };
    pid_t kid[2];
    for (int k = 0; k < 2; k++) {
        if ((kid[k] = fork()) == 0) {
            if (k == 1) {
                signal(SIGXFSZ, SIG_IGN);
                struct rlimit one = {1, 1};
                setrlimit(RLIMIT_FSIZE, &one);
            }
            phx_metrics *m = phx_metrics_open(path, 0);
            int failed = 0;
            for (int i = 0; i < RECS; i++) {
                phx_metrics_begin(m);
                phx_metrics_add_i64(m, k ? "full" : "free", i);
                failed += phx_metrics_end(m) != PHX_OK;
            }
            phx_metrics_close(m);
            _exit(k ? failed != RECS : failed != 0);
        }
    }
    int st0 = 0, st1 = 0;
    waitpid(kid[0], &st0, 0);
    waitpid(kid[1], &st1, 0);
    json_t *l[1];
    int n = read_lines(l, 0);
    ok(WIFEXITED(st0) && !WEXITSTATUS(st0) && WIFEXITED(st1) && !WEXITSTATUS(st1) && n == RECS,
       "an appender whose every write fails beside one writing %d records: all %d whole in the file", RECS, n);
}

static void test_concurrent(void)
{
    unlink(path);
    enum { KIDS = 4, RECS = 300 };
    for (int k = 0; k < KIDS; k++) {
        if (fork() == 0) {
            phx_metrics *m = phx_metrics_open(path, 0);
            char pad[600];
            memset(pad, 'a' + k, sizeof pad - 1);
            pad[sizeof pad - 1] = 0;
            for (int i = 0; i < RECS; i++) {
                phx_metrics_begin(m);
                phx_metrics_add_i64(m, "kid", k);
                phx_metrics_add_i64(m, "i", i);
                phx_metrics_add_str(m, "pad", pad);
                phx_metrics_end(m);
            }
            phx_metrics_close(m);
            _exit(0);
        }
    }
    for (int k = 0; k < KIDS; k++) wait(NULL);
    json_t *l[1];
    is_int(read_lines(l, 0), KIDS * RECS, "%d appenders x %d records: every line whole", KIDS, RECS);
}

static void test_mode(void)
{
    unlink(path);
    mode_t old = umask(027);
    phx_metrics *m = phx_metrics_open(path, 0);
    umask(old);
    phx_metrics_close(m);
    struct stat sb;
    ok(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0640, "mode 0666 less umask 027 is 0640 (got %o)",
       (unsigned)(sb.st_mode & 0777));
}

/* A handle reopened on a file with records continues its time axis: the
 * first new record's time is at least the last old one's, even though
 * the new handle has run for less time than the old one had. */
static void test_resume_time(void)
{
    unlink(path);
    phx_metrics *m = phx_metrics_open(path, 0);
    usleep(300 * 1000);
    phx_metrics_begin(m);
    phx_metrics_add_i64(m, "step", 1);
    phx_metrics_end(m);
    phx_metrics_close(m);
    m = phx_metrics_open(path, 0);
    phx_metrics_begin(m);
    phx_metrics_add_i64(m, "step", 2);
    phx_metrics_end(m);
    phx_metrics_close(m);
    json_t *l[2] = {0};
    int n = read_lines(l, 2);
    is_int(n, 2, "two records across two handles");
    if (n != 2) return;
    double t1 = json_number_value(json_object_get(l[0], "time")), t2 = json_number_value(json_object_get(l[1], "time"));
    ok(t1 >= 0.3 && t2 >= t1 && t2 < t1 + 5, "time continues on reopen: %.3f then %.3f", t1, t2);
    json_decref(l[0]);
    json_decref(l[1]);
    /* A file whose last line is not a record starts again at 0. */
    FILE *f = fopen(path, "a");
    fputs("not json\n", f);
    fclose(f);
    m = phx_metrics_open(path, 0);
    phx_metrics_begin(m);
    phx_metrics_end(m);
    phx_metrics_close(m);
    f = fopen(path, "r");
    char line[256], last[256] = "";
    while (fgets(line, sizeof line, f)) snprintf(last, sizeof last, "%s", line);
    fclose(f);
    ok(strncmp(last, "{\"time\":0.0", 11) == 0, "after a foreign last line the time starts at 0 (%s)", last);
}

/* A record that does not fit the disk (RLIMIT_FSIZE as a full disk) is
 * refused whole, and the next one, once there is room, parses: a half
 * record would have glued the two into one broken line. */
static void test_full_disk(void)
{
    unlink(path);
    phx_metrics *m = phx_metrics_open(path, 0);
    phx_metrics_begin(m);
    phx_metrics_add_i64(m, "step", 1);
    is_int(phx_metrics_end(m), PHX_OK, "full disk: record 1 written");
    struct stat sb;
    stat(path, &sb);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = (rlim_t)sb.st_size + 10; /* room for 10 more bytes */
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    phx_metrics_begin(m);
    phx_metrics_add_i64(m, "step", 2);
    phx_metrics_add_str(m, "note", "a record longer than ten bytes");
    phx_status st = phx_metrics_end(m);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    is_int(st, PHX_EIO, "full disk: record 2 fails with PHX_EIO");
    like(phx_last_error(), "partial record was removed", "and says the partial record was removed");
    phx_metrics_begin(m);
    phx_metrics_add_i64(m, "step", 3);
    is_int(phx_metrics_end(m), PHX_OK, "full disk: record 3 written once there is room");
    phx_metrics_close(m);
    json_t *l[2] = {0};
    int n = read_lines(l, 2);
    ok(n == 2 && json_integer_value(json_object_get(l[0], "step")) == 1 &&
           json_integer_value(json_object_get(l[1], "step")) == 3,
       "full disk: the file holds records 1 and 3, each a whole JSON line (%d lines)", n);
    for (int i = 0; i < 2 && i < n; i++) json_decref(l[i]);
}

/* A Latin-1 string is refused (the file must stay UTF-8 JSON); a file
 * ending in a cut-off line gets the next record on a line of its own. */
static void test_utf8_and_cut_line(void)
{
    unlink(path);
    phx_metrics *m = phx_metrics_open(path, 0);
    phx_metrics_begin(m);
    is_int(phx_metrics_add_str(m, "name", "caf\xe9"), PHX_EINVAL, "a Latin-1 string is refused");
    like(phx_last_error(), "not valid UTF-8", "and the message says why");
    is_int(phx_metrics_end(m), PHX_EINVAL, "its record is dropped");
    phx_metrics_begin(m);
    phx_metrics_add_str(m, "name", "caf\xc3\xa9");
    is_int(phx_metrics_end(m), PHX_OK, "the same name in UTF-8 is written");
    phx_metrics_close(m);
    FILE *f = fopen(path, "a");
    fputs("{\"time\":1.5,\"st", f); /* a writer killed mid-record */
    fclose(f);
    m = phx_metrics_open(path, 0);
    phx_metrics_begin(m);
    phx_metrics_add_i64(m, "step", 7);
    is_int(phx_metrics_end(m), PHX_OK, "after a cut-off line: the next record written");
    phx_metrics_close(m);
    f = fopen(path, "r");
    char line[3][256] = {{0}};
    for (int i = 0; i < 3 && f && fgets(line[i], sizeof line[i], f); i++) {}
    if (f) fclose(f);
    json_error_t err;
    json_t *j = json_loads(line[2], 0, &err);
    ok(strncmp(line[1], "{\"time\":1.5,\"st\n", 16) == 0 && j && json_integer_value(json_object_get(j, "step")) == 7,
       "and it is a whole line of its own after the cut-off one (%s)", line[2]);
    json_decref(j);
}

int main(void)
{
    snprintf(path, sizeof path, "t/metrics-%d.jsonl", (int)getpid());
    test_records();
    test_other_ranks();
    test_errors();
    test_concurrent();
    test_mode();
    test_resume_time();
    test_full_disk();
    test_utf8_and_cut_line();
    test_failing_neighbour();
    unlink(path);
    return done_testing();
}
