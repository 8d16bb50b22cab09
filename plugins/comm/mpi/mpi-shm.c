/* Intra-node all-reduce through one MPI shared window.
 *
 * The window holds one flag per rank (a cache line each) and two areas of
 * `size` slots. A buffer goes through in chunks of one slot; each chunk
 * is split into `size` slices (16-element units), slice q owned by rank q:
 *   1. rank r copies the slices it does not own into its slot;
 *   2. flag: everyone's slices are in;
 *   3. rank r reduces slice r over the ranks in rank order, reading its
 *      own part from its buffer and the others' from their slots, and
 *      writes the result into its buffer and into its slot's slice r;
 *   4. flag: every slice is reduced;
 *   5. rank r copies slice q (q != r) from slot q into its buffer.
 * Per rank that is one pass over the buffer for the copies in and out and
 * one for the reduction, with a chunk small enough to stay in the cache
 * the ranks share. The two areas alternate between chunks: a rank writes
 * an area again only after every rank has finished reading it (it has
 * seen their step-4 flags of the chunk in between). Flags are monotonic
 * step counters, so there is nothing to reset. Each rank's flag line also
 * holds what it issued (count, dtype, reduction): ranks out of step are
 * named after the first chunk's first wait, before any data is used. */
#include "config.h"
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "plugins/comm/mpi/mpi-shm.h"
#include "phalanx/plugin/kit.h"

#define PX_SHM_LINE 64 /* bytes per rank flag */
#define PX_SHM_SPINS 2000 /* polls before yielding */
#define PX_SHM_YIELDS 2000 /* yields before sleeping */

struct px_shm {
    MPI_Win win;
    int rank, size;
    uint64_t *flags; /* rank q's at flags[q * PX_SHM_LINE / 8] */
    uint8_t *data; /* 2 areas x size slots x slot bytes */
    size_t slot; /* bytes per slot (a chunk of a buffer) */
    uint64_t step; /* flags published */
    uint64_t chunks; /* chunks run: picks the area */
    const void **in; /* size input pointers, reused */
};

/* 4 MiB of slots per area, 64 KiB to 1 MiB each. */
static size_t slot_bytes(int size)
{
    size_t b = ((size_t)4 << 20) / (size_t)size;
    if (b > ((size_t)1 << 20)) b = (size_t)1 << 20;
    if (b < ((size_t)64 << 10)) b = (size_t)64 << 10;
    return b & ~(size_t)(PX_SHM_LINE - 1);
}

static void mpi_why(int rc, const char *what, char *why, size_t len)
{
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
    snprintf(why, len, "%s: %s", what, s);
}

px_shm *px_shm_new(MPI_Comm comm, char *why, size_t len)
{
    px_shm *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(why, len, "out of memory");
        return NULL;
    }
    MPI_Comm_rank(comm, &s->rank);
    MPI_Comm_size(comm, &s->size);
    s->slot = slot_bytes(s->size);
    s->in = malloc((size_t)s->size * sizeof *s->in);
    size_t head = ((size_t)s->size * PX_SHM_LINE + 4095) & ~(size_t)4095;
    size_t total = head + 2 * (size_t)s->size * s->slot;
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "false");
    void *base = NULL;
    int rc = MPI_Win_allocate_shared(s->rank == 0 ? (MPI_Aint)total : 0, 1, info, comm, &base, &s->win);
    MPI_Info_free(&info);
    if (rc != MPI_SUCCESS) {
        mpi_why(rc, "MPI_Win_allocate_shared", why, len);
        free(s->in);
        free(s);
        return NULL;
    }
    MPI_Aint got = 0;
    int unit = 0;
    if ((rc = MPI_Win_shared_query(s->win, 0, &got, &unit, &base)) != MPI_SUCCESS || (size_t)got < total || !s->in) {
        if (rc != MPI_SUCCESS)
            mpi_why(rc, "MPI_Win_shared_query", why, len);
        else
            snprintf(why, len, "shared window of %zu bytes, %zu needed (or out of memory)", (size_t)got, total);
        MPI_Win_free(&s->win);
        free(s->in);
        free(s);
        return NULL;
    }
    s->flags = base;
    s->data = (uint8_t *)base + head;
    /* one passive epoch for the window's life; loads and stores go through
     * the flags' atomics */
    MPI_Win_lock_all(MPI_MODE_NOCHECK, s->win);
    if (s->rank == 0) memset(s->flags, 0, head);
    MPI_Win_sync(s->win);
    MPI_Barrier(comm);
    MPI_Win_sync(s->win);
    return s;
}

void px_shm_free(px_shm *s)
{
    if (!s) return;
    MPI_Win_unlock_all(s->win);
    MPI_Win_free(&s->win);
    free(s->in);
    free(s);
}

static void publish(px_shm *s)
{
    __atomic_store_n(&s->flags[(size_t)s->rank * (PX_SHM_LINE / 8)], ++s->step, __ATOMIC_RELEASE);
}

/* Until every rank has published s->step: spin, then yield, then sleep
 * in 20 us naps (a peer still computing should get the core). */
static void wait_all(const px_shm *s)
{
    for (int q = 0; q < s->size; q++) {
        const uint64_t *f = &s->flags[(size_t)q * (PX_SHM_LINE / 8)];
        for (unsigned i = 0; __atomic_load_n(f, __ATOMIC_ACQUIRE) < s->step; i++) {
            if (i < PX_SHM_SPINS) continue;
            if (i < PX_SHM_SPINS + PX_SHM_YIELDS) {
                sched_yield();
            } else {
                struct timespec ts = {0, 20000};
                nanosleep(&ts, NULL);
            }
        }
    }
}

/* Slice r of count elements split n ways, in 16-element units. */
static void slice(int64_t count, int n, int r, int64_t *lo, int64_t *hi)
{
    int64_t units = (count + 15) / 16, per = units / n, extra = units % n;
    int64_t a = r * per + (r < extra ? r : extra), b = a + per + (r < extra);
    *lo = a * 16 < count ? a * 16 : count;
    *hi = b * 16 < count ? b * 16 : count;
}

/* What rank q issued, in the words of the kit's messages. */
static char *sig_text(const px_shm *s, int q, char *buf, size_t len)
{
    const uint64_t *line = &s->flags[(size_t)q * (PX_SHM_LINE / 8)];
    phx_kit_op o = {.kind = PHX_KIT_ALLREDUCE,
                    .count = (int64_t)line[1],
                    .dt = (phx_dtype)(line[2] & 0xff),
                    .op = (phx_reduce_op)(line[2] >> 8)};
    return phx_kit_op_text(&o, buf, len);
}

int px_shm_allreduce(px_shm *s, void *buf, int64_t count, phx_dtype dt, phx_reduce_op op, uint64_t seq, char *why,
                     size_t len)
{
    const int n = s->size, r = s->rank;
    /* what this rank issued, in its flag's line: every rank compares the
     * others' after the first chunk's first wait (a rank rewrites its
     * line only in its next call, after every rank has passed here) */
    uint64_t *line = &s->flags[(size_t)r * (PX_SHM_LINE / 8)];
    line[1] = (uint64_t)count;
    line[2] = (uint64_t)dt | (uint64_t)op << 8;
    int checked = 0;
    const size_t es = phx_dtype_size(dt);
    const int64_t per = (int64_t)(s->slot / es);
    int64_t lo, hi;
    for (int64_t off = 0; off < count; off += per) {
        const int64_t m = count - off < per ? count - off : per;
        uint8_t *area = s->data + (size_t)(s->chunks++ & 1) * (size_t)n * s->slot;
        uint8_t *mine = (uint8_t *)buf + (size_t)off * es, *slot = area + (size_t)r * s->slot;
        for (int q = 0; q < n; q++) {
            if (q == r) continue;
            slice(m, n, q, &lo, &hi);
            memcpy(slot + (size_t)lo * es, mine + (size_t)lo * es, (size_t)(hi - lo) * es);
        }
        publish(s);
        wait_all(s);
        for (int q = 0; q < n && !checked; q++) {
            const uint64_t *l = &s->flags[(size_t)q * (PX_SHM_LINE / 8)];
            if (q == r || (l[1] == line[1] && l[2] == line[2])) continue;
            char mine_t[160], theirs[160];
            phx_kit_desync_text(why, len, r, sig_text(s, r, mine_t, sizeof mine_t), seq, q,
                                sig_text(s, q, theirs, sizeof theirs));
            return -1;
        }
        checked = 1;
        for (int q = 0; q < n; q++) s->in[q] = q == r ? (const void *)mine : area + (size_t)q * s->slot;
        slice(m, n, r, &lo, &hi);
        void *const outs[2] = {mine + (size_t)lo * es, slot + (size_t)lo * es};
        phx_kit_reduce(outs, 2, s->in, n, (size_t)lo, (size_t)(hi - lo), dt, op, n);
        publish(s);
        wait_all(s);
        for (int q = 0; q < n; q++) {
            if (q == r) continue;
            slice(m, n, q, &lo, &hi);
            memcpy(mine + (size_t)lo * es, area + (size_t)q * s->slot + (size_t)lo * es, (size_t)(hi - lo) * es);
        }
    }
    return 0;
}
