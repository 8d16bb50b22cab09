/* What each rank issued (phalanx/plugin/kit.h): every rank publishes the
 * text of its collective #seq under <prefix><seq>/<rank>; PHX_DEBUG=detail
 * compares every rank's with rank 0's before each collective, and the
 * failure protocol compares this rank's with its peers' after a failed
 * one, so ranks out of step are told apart from a rank that hung. */
#include "config.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "phalanx/plugin/kit.h"

#define KIT_TEXT_MAX 160

static void key_of(char *key, size_t len, const char *prefix, uint64_t seq, int rank)
{
    snprintf(key, len, "%s%" PRIu64 "/%d", prefix, seq, rank);
}

phx_status phx_kit_issued_set(phx_store *store, const char *prefix, uint64_t seq, int rank, const char *text)
{
    char key[160];
    key_of(key, sizeof key, prefix, seq, rank);
    return phx_store_set(store, key, text, strlen(text));
}

/* Rank r's text for seq into text[0..len), waiting up to wait seconds. */
static phx_status issued_get(phx_store *store, const char *prefix, uint64_t seq, int r, double wait, char *text,
                             size_t len)
{
    char key[160];
    void *v = NULL;
    size_t n = 0;
    key_of(key, sizeof key, prefix, seq, r);
    phx_status st = phx_store_get(store, key, &v, &n, wait);
    if (st) return st;
    snprintf(text, len, "%.*s", (int)n, (const char *)v);
    free(v);
    return PHX_OK;
}

char *phx_kit_desync_text(char *msg, size_t len, int rank, const char *mine, uint64_t seq, int peer, const char *theirs)
{
    if (len)
        snprintf(msg, len,
                 "rank %d issued %s as collective #%" PRIu64 " but rank %d issued %s: the ranks went out of "
                 "step (a different number of steps, buckets or collectives; uneven inputs need DDP join). "
                 "PHX_DEBUG=detail checks every collective before it runs",
                 rank, mine, seq, peer, theirs);
    return msg;
}

int phx_kit_issued_differ(phx_store *store, const char *prefix, uint64_t seq, int rank, int size, const char *mine,
                          double wait, char *msg, size_t msg_len)
{
    if (!store) return 0;
    phx_kit_issued_set(store, prefix, seq, rank, mine);
    for (int r = 0; r < size; r++) {
        char theirs[KIT_TEXT_MAX];
        if (r == rank) continue;
        if (issued_get(store, prefix, seq, r, wait, theirs, sizeof theirs)) {
            if (wait > 0.2) wait = 0.2; /* one silent peer is enough waiting */
            continue;
        }
        if (strcmp(theirs, mine) == 0) continue;
        phx_kit_desync_text(msg, msg_len, rank, mine, seq, r, theirs);
        return 1;
    }
    return 0;
}

phx_status phx_kit_issued_check(phx_store *store, const char *prefix, uint64_t seq, int rank, int size,
                                const char *mine, double timeout_s, const char *who)
{
    phx_status st = phx_kit_issued_set(store, prefix, seq, rank, mine);
    if (st) return st;
    char first[KIT_TEXT_MAX] = "", other[KIT_TEXT_MAX] = "", got[KIT_TEXT_MAX];
    int bad = -1;
    for (int r = 0; r < size; r++) {
        if ((st = issued_get(store, prefix, seq, r, timeout_s, got, sizeof got)))
            return phx_error(st,
                             "%s: PHX_DEBUG=detail: rank %d did not issue collective #%" PRIu64
                             " within %.3g s (this rank issued %s)",
                             who, r, seq, timeout_s, mine);
        if (r == 0)
            snprintf(first, sizeof first, "%s", got);
        else if (bad < 0 && strcmp(first, got) != 0) {
            snprintf(other, sizeof other, "%s", got);
            bad = r;
        }
    }
    /* Every rank has published #seq (all were read), so every rank is done
     * reading #seq-1: drop ours. */
    if (seq > 0) {
        char key[160];
        key_of(key, sizeof key, prefix, seq - 1, rank);
        phx_store_delete(store, key, NULL);
    }
    if (bad >= 0)
        return phx_error(PHX_EDESYNC,
                         "%s: PHX_DEBUG=detail: collective #%" PRIu64 " differs across ranks: "
                         "rank 0 issued %s, rank %d issued %s",
                         who, seq, first, bad, other);
    return PHX_OK;
}

/* ---- records: the last collectives a rank issued, as text */

/* The text of collective q in record rec ("<q> <text>" lines after the
 * header), or NULL; *n gets its length. */
static const char *record_line(const char *rec, uint64_t q, size_t *n)
{
    const char *p = strchr(rec, '\n');
    while (p && *++p) {
        char *end;
        unsigned long long s = strtoull(p, &end, 10);
        const char *eol = strchr(p, '\n');
        if (end != p && *end == ' ' && s == q) {
            *n = eol ? (size_t)(eol - end - 1) : strlen(end + 1);
            return end + 1;
        }
        p = eol;
    }
    return NULL;
}

int phx_kit_record_compare(int rank, const char *mine, int peer, const char *theirs, char *msg, size_t len)
{
    if (!mine || !theirs || strncmp(mine, "phx-kit-record ", 15) || strncmp(theirs, "phx-kit-record ", 15)) return 0;
    for (const char *p = strchr(theirs, '\n'); p && *++p;) {
        char *end;
        unsigned long long q = strtoull(p, &end, 10);
        const char *eol = strchr(p, '\n');
        size_t tn = eol ? (size_t)(eol - end - 1) : strlen(end + 1), mn = 0;
        const char *m = end != p && *end == ' ' ? record_line(mine, q, &mn) : NULL;
        if (m && (mn != tn || strncmp(m, end + 1, tn) != 0)) {
            char a[KIT_TEXT_MAX], b[KIT_TEXT_MAX];
            snprintf(a, sizeof a, "%.*s", (int)mn, m);
            snprintf(b, sizeof b, "%.*s", (int)tn, end + 1);
            phx_kit_desync_text(msg, len, rank, a, (uint64_t)q, peer, b);
            return 1;
        }
        p = eol;
    }
    return 0;
}

int phx_kit_record_exchange(phx_store *store, const char *prefix, int rank, int size, const char *mine, int publish,
                            int64_t *gen, char *msg, size_t len)
{
    if (!store || size < 2) return 0;
    char key[192], gkey[192];
    int64_t g = 0;
    snprintf(gkey, sizeof gkey, "%sstall/gen", prefix);
    if (publish) {
        snprintf(key, sizeof key, "%sstall/%d", prefix, rank);
        if (phx_store_set(store, key, mine, strlen(mine)) == PHX_OK) phx_store_add(store, gkey, 1, &g);
    } else if (phx_store_add(store, gkey, 0, &g) != PHX_OK || (gen && g == *gen)) {
        return 0;
    }
    if (gen) *gen = g;
    int differ = 0;
    for (int q = 0; q < size && !differ; q++) {
        void *v = NULL;
        size_t n = 0;
        if (q == rank) continue;
        snprintf(key, sizeof key, "%sstall/%d", prefix, q);
        if (phx_store_get(store, key, &v, &n, 1e-6) != PHX_OK) continue;
        char *theirs = malloc(n + 1);
        if (theirs) {
            memcpy(theirs, v, n);
            theirs[n] = '\0';
            differ = phx_kit_record_compare(rank, mine, q, theirs, msg, len);
            free(theirs);
        }
        free(v);
    }
    return differ;
}
