/* Status names, the thread-local last error, and logging: PHX_LOG
 * levels, the rank prefix, whole lines from concurrent threads. */
#include "config.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "phalanx/phalanx.h"
#include "t/tap.h"

static void *set_error(void *arg)
{
    long id = (long)arg;
    int same = 1;
    for (int i = 0; i < 2000; i++) {
        phx_error(PHX_EIO, "thread %ld iteration %d", id, i);
        char want[64];
        snprintf(want, sizeof want, "thread %ld iteration %d", id, i);
        same &= strcmp(phx_last_error(), want) == 0;
    }
    return (void *)(long)same;
}

static void *log_lines(void *arg)
{
    long id = (long)arg;
    for (int i = 0; i < 300; i++)
        phx_log(PHX_LOG_WARN, "thread %ld line %d %s", id, i, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
    return NULL;
}

/* Runs fn with stderr redirected into a file; returns the text (static). */
static const char *capture(void (*fn)(void))
{
    static char text[1 << 20];
    char path[] = "/tmp/phx_core_error_XXXXXX";
    int fd = mkstemp(path);
    int saved = dup(2);
    fflush(stderr);
    dup2(fd, 2);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, text, sizeof text - 1);
    text[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    return text;
}

static void log_some(void)
{
    phx_log_set_rank(-1);
    phx_log(PHX_LOG_INFO, "not shown at warn");
    phx_log(PHX_LOG_WARN, "plain %d", 1);
    phx_log_set_rank(3);
    phx_log(PHX_LOG_ERROR, "with rank");
    phx_log_set_level(PHX_LOG_DEBUG);
    phx_log(PHX_LOG_DEBUG, "debug now");
    phx_error(PHX_EINVAL, "errors are logged at debug");
    phx_log_set_level(PHX_LOG_WARN);
    phx_log(PHX_LOG_DEBUG, "hidden again");
}

static void log_threads(void)
{
    pthread_t th[4];
    for (long i = 0; i < 4; i++) pthread_create(&th[i], NULL, log_lines, (void *)i);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--child") == 0) { /* prints PHX_LOG's warning, if any */
        phx_log(PHX_LOG_INFO, "child info");
        return phx_log_get_level() == PHX_LOG_WARN ? 0 : 1;
    }
    plan(24);
    setenv("PHX_LOG", "WARN", 1); /* read on first use, case-insensitive */

    /* 1-6: names */
    is_str(phx_status_name(PHX_OK), "PHX_OK", "PHX_OK");
    is_str(phx_status_name(PHX_EINVAL), "PHX_EINVAL", "PHX_EINVAL");
    is_str(phx_status_name(PHX_ETIMEOUT), "PHX_ETIMEOUT", "PHX_ETIMEOUT");
    is_str(phx_status_name(PHX_EINTERNAL), "PHX_EINTERNAL", "PHX_EINTERNAL");
    is_str(phx_status_name((phx_status)-99), "PHX_E?", "unknown status");
    is_str(phx_last_error(), "", "no error yet");

    /* 7-11: set, self-reference, clear */
    is_int(phx_error(PHX_ENOTFOUND, "file %s missing", "x.bin"), PHX_ENOTFOUND, "phx_error returns its status");
    is_str(phx_last_error(), "file x.bin missing", "the message");
    phx_error(PHX_EIO, "loading: %s", phx_last_error());
    is_str(phx_last_error(), "loading: file x.bin missing", "a message may quote the previous one");
    phx_error_clear();
    is_str(phx_last_error(), "", "cleared");
    char longmsg[6000];
    memset(longmsg, 'a', sizeof longmsg - 1);
    longmsg[sizeof longmsg - 1] = 0;
    phx_error(PHX_EINVAL, "%s", longmsg);
    ok(strlen(phx_last_error()) > 4000 && strlen(phx_last_error()) < 4096,
       "long messages are truncated, not overflowed");

    /* 12-13: thread-local */
    phx_error(PHX_EINVAL, "main thread's error");
    pthread_t th[2];
    for (long i = 0; i < 2; i++) pthread_create(&th[i], NULL, set_error, (void *)i);
    void *r0, *r1;
    pthread_join(th[0], &r0);
    pthread_join(th[1], &r1);
    ok(r0 && r1, "two threads failing at once each read their own message");
    is_str(phx_last_error(), "main thread's error", "the main thread's message is untouched");

    /* 14-19: levels and prefixes */
    is_int(phx_log_get_level(), PHX_LOG_WARN, "PHX_LOG=WARN");
    const char *out = capture(log_some);
    ok(strstr(out, "[phx] WARN: plain 1\n") != NULL, "a warn line without a rank");
    ok(strstr(out, "[phx rank 3] ERROR: with rank\n") != NULL, "an error line with the rank");
    ok(strstr(out, "[phx rank 3] DEBUG: debug now\n") != NULL, "debug shown after phx_log_set_level(DEBUG)");
    ok(strstr(out, "DEBUG: PHX_EINVAL: errors are logged at debug") != NULL, "phx_error is logged at debug level");
    ok(!strstr(out, "not shown") && !strstr(out, "hidden again"), "lines above the level are dropped");

    /* 20-21: concurrent lines stay whole */
    out = capture(log_threads);
    int lines = 0, whole = 1;
    for (const char *p = out; *p;) {
        const char *nl = strchr(p, '\n');
        if (!nl) {
            whole = 0;
            break;
        }
        long id;
        int i;
        char tail[64];
        if (sscanf(p, "[phx rank 3] WARN: thread %ld line %d %63s", &id, &i, tail) != 3 || strlen(tail) != 48 ||
            (size_t)(nl - p) != strlen("[phx rank 3] WARN: thread 0 line ") + (size_t)snprintf(NULL, 0, "%d", i) + 49)
            whole = 0;
        lines++;
        p = nl + 1;
    }
    is_int(lines, 1200, "4 threads x 300 lines: every line arrives");
    ok(whole, "no line is torn or interleaved");

    /* 22-24: an invalid PHX_LOG warns once and falls back to warn (child process) */
    fflush(stdout);
    FILE *p = popen("PHX_LOG=loud ./t/base/error --child 2>&1", "r");
    char line[256] = "";
    if (p) {
        if (!fgets(line, sizeof line, p)) line[0] = 0;
        pclose(p);
    }
    like(line, "PHX_LOG='loud' is not one of error, warn, info, debug; using warn", "bad PHX_LOG names the value");
    phx_log_set_rank(-1);
    phx_log_set_level((phx_log_level)9);
    is_int(phx_log_get_level(), PHX_LOG_DEBUG, "levels above debug clamp to debug");
    phx_log_set_level(PHX_LOG_ERROR);
    is_int(phx_log_get_level(), PHX_LOG_ERROR, "set to error");
    return done_testing();
}
