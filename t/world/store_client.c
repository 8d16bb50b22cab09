/* A store client for t/world/store_phxrun_token.sh.
 *   store_client job DIR       a rank of a phxrun job: every rank sets
 *                              rank/<r> and reads the others'; rank 0
 *                              writes DIR/port and DIR/token, then all
 *                              wait for DIR/done
 *   store_client outsider PORT a process outside the job: connects to
 *                              127.0.0.1:PORT with whatever
 *                              PHX_STORE_TOKEN it has and reads rank/1
 * Prints what happened; exits 0 on success, 1 otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "phalanx/phalanx.h"

static int job(const char *dir)
{
    phx_world w = PHX_WORLD_INIT;
    phx_store *s = NULL;
    if (phx_world_from_env(&w) || phx_store_new(w.master_addr, w.master_port, w.rank == 0, 30.0, &s)) {
        fprintf(stderr, "rank ?: %s\n", phx_last_error());
        return 1;
    }
    char key[64], val[64], path[4096];
    snprintf(key, sizeof key, "rank/%d", w.rank);
    snprintf(val, sizeof val, "hello from %d", w.rank);
    if (phx_store_set(s, key, val, strlen(val))) {
        fprintf(stderr, "set: %s\n", phx_last_error());
        return 1;
    }
    for (int r = 0; r < w.size; r++) {
        void *v = NULL;
        size_t n = 0;
        snprintf(key, sizeof key, "rank/%d", r);
        snprintf(val, sizeof val, "hello from %d", r);
        if (phx_store_get(s, key, &v, &n, 30.0) || n != strlen(val) || memcmp(v, val, n)) {
            fprintf(stderr, "rank %d: reading %s: %s\n", w.rank, key, phx_last_error());
            return 1;
        }
        free(v);
    }
    if (w.rank == 0) {
        const char *t = getenv("PHX_STORE_TOKEN");
        snprintf(path, sizeof path, "%s/token", dir);
        FILE *f = fopen(path, "w");
        fprintf(f, "%s\n", t ? t : "");
        fclose(f);
        snprintf(path, sizeof path, "%s/port.tmp", dir);
        f = fopen(path, "w");
        fprintf(f, "%d\n", w.master_port);
        fclose(f);
        char final[4096];
        snprintf(final, sizeof final, "%s/port", dir);
        rename(path, final);
    }
    snprintf(path, sizeof path, "%s/done", dir);
    for (int i = 0; i < 600 && access(path, F_OK) != 0; i++) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    phx_store_free(s);
    return 0;
}

static int outsider(int port)
{
    phx_store *s = NULL;
    if (phx_store_new("127.0.0.1", port, false, 3.0, &s)) {
        printf("refused: %s\n", phx_last_error());
        return 1;
    }
    void *v = NULL;
    size_t n = 0;
    if (phx_store_get(s, "rank/1", &v, &n, 3.0)) {
        printf("connected, get failed: %s\n", phx_last_error());
        phx_store_free(s);
        return 1;
    }
    printf("read rank/1: %.*s\n", (int)n, (char *)v);
    free(v);
    phx_store_free(s);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "job")) return job(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "outsider")) return outsider(atoi(argv[2]));
    fprintf(stderr, "usage: store_client job DIR | outsider PORT\n");
    return 2;
}
