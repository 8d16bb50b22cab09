/* Scopes: per-thread owners of the tensors operations return. A scope is
 * a mark in one growing array of handles; ending it drops the handles
 * pushed since the mark. The array keeps its capacity, so a loop that
 * opens and ends one scope per step stops allocating once warm. */
#include "config.h"
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include "src/autograd/node-impl.h"
#include "src/base/util.h"

typedef struct px_scope_stack {
    phx_tensor **owned; /* every open scope's handles, oldest first */
    size_t n, cap;
    size_t *marks; /* marks[i]: owned count when scope i opened */
    uint64_t *serials; /* serials[i]: scope i's number (px_scope_id) */
    size_t depth, cap_marks;
} px_scope_stack;

static _Thread_local px_scope_stack stack;
static pthread_key_t stack_key;
static pthread_once_t stack_once = PTHREAD_ONCE_INIT;

/* At thread exit: the thread's arrays go (its scopes should all have
 * ended; any handle still held is released). */
static void stack_release(void *unused)
{
    (void)unused;
    while (stack.n) phx_tensor_free(stack.owned[--stack.n]);
    px_free(stack.owned);
    px_free(stack.marks);
    px_free(stack.serials);
    stack = (px_scope_stack){0};
}

/* The exiting thread's (main's) arrays at process exit. */
__attribute__((destructor)) static void stack_release_at_exit(void)
{
    stack_release(NULL);
}

static void stack_key_make(void)
{
    pthread_key_create(&stack_key, stack_release);
}

/* Arms stack_release for this thread (the key's value only needs to be
 * non-NULL for the destructor to run). */
static void stack_arm(void)
{
    pthread_once(&stack_once, stack_key_make);
    pthread_setspecific(stack_key, &stack);
}

/* A token is the scope's depth + 1, so it is never NULL. */
phx_scope *phx_scope_begin(void)
{
    static atomic_ullong next_serial = 1;
    if (stack.depth == stack.cap_marks) {
        size_t cap = stack.cap_marks ? 2 * stack.cap_marks : 16;
        size_t *m = px_realloc(stack.marks, cap * sizeof *m);
        if (m) stack.marks = m;
        uint64_t *sr = m ? px_realloc(stack.serials, cap * sizeof *sr) : NULL;
        if (!sr) {
            phx_error(PHX_ENOMEM, "phx_scope_begin: out of memory for %zu nested scopes", cap);
            return NULL;
        }
        if (!stack.serials) stack_arm();
        stack.serials = sr;
        stack.cap_marks = cap;
    }
    stack.serials[stack.depth] = atomic_fetch_add(&next_serial, 1);
    stack.marks[stack.depth++] = stack.n;
    return (phx_scope *)(uintptr_t)stack.depth;
}

void phx_scope_end(phx_scope *s)
{
    size_t depth = (size_t)(uintptr_t)s;
    if (!s || depth > stack.depth) return; /* already ended with an outer scope */
    size_t mark = stack.marks[depth - 1];
    /* Newest first: a result is released before what it was made from. */
    while (stack.n > mark) phx_tensor_free(stack.owned[--stack.n]);
    stack.depth = depth - 1;
}

bool px_scope_open(void)
{
    return stack.depth > 0;
}

px_scope_id px_scope_current(void)
{
    return stack.depth ? (px_scope_id){stack.depth, stack.serials[stack.depth - 1], &stack} : (px_scope_id){0};
}

bool px_scope_alive(px_scope_id id)
{
    return id.depth && id.thread == &stack && id.depth <= stack.depth && stack.serials[id.depth - 1] == id.serial;
}

bool px_scope_elsewhere(px_scope_id id)
{
    return id.depth && id.thread != &stack;
}

phx_tensor *px_scope_own_in(px_scope_id id, phx_tensor *t)
{
    if (!t || !px_scope_alive(id)) return t;
    if (id.depth == stack.depth) return px_scope_own(t);
    if (!px_scope_own(t)) return NULL; /* room for one more */
    /* move it from the end to the end of scope id's handles: after them
     * come the inner scopes', whose marks shift by one */
    size_t at = stack.marks[id.depth];
    memmove(stack.owned + at + 1, stack.owned + at, (stack.n - 1 - at) * sizeof *stack.owned);
    stack.owned[at] = t;
    for (size_t i = id.depth; i < stack.depth; i++) stack.marks[i]++;
    return t;
}

phx_tensor *px_scope_own(phx_tensor *t)
{
    if (!t || !stack.depth) return t;
    if (stack.n == stack.cap) {
        size_t cap = stack.cap ? 2 * stack.cap : 64;
        phx_tensor **o = px_realloc(stack.owned, cap * sizeof *o);
        if (!o) {
            phx_tensor_free(t);
            phx_error(PHX_ENOMEM, "scope: out of memory holding %zu tensors", cap);
            return NULL;
        }
        stack.owned = o;
        stack.cap = cap;
    }
    stack.owned[stack.n++] = t;
    return t;
}

phx_status px_scope_take(phx_scope *s, phx_tensor ***arr, size_t *n, size_t *cap)
{
    size_t depth = (size_t)(uintptr_t)s;
    if (!s || depth > stack.depth) return PHX_OK;
    size_t mark = stack.marks[depth - 1], k = stack.n - mark;
    if (*n + k > *cap) {
        size_t c = *cap ? *cap : 16;
        while (c < *n + k) c *= 2;
        phx_tensor **a = px_realloc(*arr, c * sizeof *a);
        if (!a) {
            phx_scope_end(s);
            return phx_error(PHX_ENOMEM, "scope: out of memory keeping %zu tensors", *n + k);
        }
        *arr = a;
        *cap = c;
    }
    for (size_t i = 0; i < k; i++) (*arr)[(*n)++] = stack.owned[mark + i];
    stack.n = mark;
    stack.depth = depth - 1;
    return PHX_OK;
}

phx_status px_scope_take_one(phx_tensor *t, phx_tensor ***arr, size_t *n, size_t *cap)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 4;
        phx_tensor **a = px_realloc(*arr, c * sizeof *a);
        if (!a) {
            phx_tensor_free(t);
            return phx_error(PHX_ENOMEM, "out of memory keeping a module's output");
        }
        *arr = a;
        *cap = c;
    }
    (*arr)[(*n)++] = t;
    return PHX_OK;
}
