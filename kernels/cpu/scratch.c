/* Thread-local scratch for kernels that need temporary f32 copies (GEMM
 * on f16/bf16 operands): grown on demand, never shrunk, freed when the
 * thread exits, so a steady-state step allocates nothing. */
#include "config.h"
#include <pthread.h>
#include <stdint.h>
#include "src/base/util.h"
#include "kernels/cpu/cpu.h"

#define PX_SCRATCH_SLOTS 13

typedef struct px_scratch {
    void *raw[PX_SCRATCH_SLOTS];
    size_t cap[PX_SCRATCH_SLOTS];
    void *at[PX_SCRATCH_SLOTS]; /* the aligned block in raw */
} px_scratch;

static pthread_key_t px_scratch_key;
static pthread_once_t px_scratch_once = PTHREAD_ONCE_INIT;

static void scratch_destroy(void *p)
{
    px_scratch *s = p;
    for (int i = 0; i < PX_SCRATCH_SLOTS; i++) px_free(s->raw[i]);
    px_free(s);
}

static void scratch_make_key(void)
{
    pthread_key_create(&px_scratch_key, scratch_destroy);
}

void *px_cpu_scratch(int slot, size_t bytes)
{
    if (slot < 0 || slot >= PX_SCRATCH_SLOTS) {
        phx_error(PHX_EINTERNAL, "px_cpu_scratch: slot %d, expected 0..%d", slot, PX_SCRATCH_SLOTS - 1);
        return NULL;
    }
    pthread_once(&px_scratch_once, scratch_make_key);
    px_scratch *s = pthread_getspecific(px_scratch_key);
    if (!s) {
        s = px_calloc(1, sizeof *s);
        if (!s) return NULL;
        pthread_setspecific(px_scratch_key, s);
    }
    if (s->cap[slot] < bytes) {
        size_t cap = s->cap[slot] * 2 > bytes ? s->cap[slot] * 2 : bytes;
        void *raw = px_malloc(cap + px_cpu_block_align(cap));
        if (!raw) return NULL;
        px_free(s->raw[slot]);
        s->raw[slot] = raw;
        s->cap[slot] = cap;
        s->at[slot] = px_cpu_block_start(raw, 0, cap);
    }
    return s->at[slot];
}

void *px_cpu_scratch_push(void)
{
    pthread_once(&px_scratch_once, scratch_make_key);
    void *s = pthread_getspecific(px_scratch_key);
    pthread_setspecific(px_scratch_key, NULL);
    return s;
}

void px_cpu_scratch_pop(void *saved)
{
    pthread_once(&px_scratch_once, scratch_make_key);
    px_scratch *s = pthread_getspecific(px_scratch_key);
    if (s) scratch_destroy(s);
    pthread_setspecific(px_scratch_key, saved);
}
