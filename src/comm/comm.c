/* The communicator front end: joins the world (environment or options),
 * loads the backend plugin, sets up the rendezvous store (none across
 * processes when the plugin makes its own world, as mpi does), checks
 * every collective's tensors and hands it to the plugin with a work
 * handle. */
#include "config.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include "src/comm/comm-impl.h"
#include "src/tensor/tensor-impl.h"
#include "src/base/util.h"
#include "src/plugin/plugin-abi.h"
#include "src/base/abi.h"
#include "src/world/store-impl.h"
#include "src/world/store-server.h"
#include "src/world/world-impl.h"
#include "phalanx/log.h"

static const char *const op_names[] = {"sum", "avg", "max", "min"};

phx_comm_opts phx_comm_opts_default(void)
{
    phx_comm_opts o = PHX_COMM_OPTS_INIT;
    return o;
}

/* Rank, size and rendezvous address from the options, else the env. */
static phx_status resolve_world(const phx_comm_opts *o, phx_world *w)
{
    phx_status st;
    w->struct_size = sizeof *w;
    if (o->size <= 0) {
        if ((st = phx_world_from_env(w))) return st;
    } else {
        if (o->size < 1 || o->rank < 0 || o->rank >= o->size)
            return phx_error(PHX_EINVAL, "phx_comm_init: opts rank %d, size %d: expected 0 <= rank < size", o->rank,
                             o->size);
        memset(w, 0, sizeof *w);
        w->struct_size = sizeof *w;
        w->rank = o->rank;
        w->size = o->size;
        w->local_rank = o->local_size >= 1 ? o->local_rank : o->rank;
        w->local_size = o->local_size >= 1 ? o->local_size : o->size;
        if (w->local_rank >= w->local_size)
            return phx_error(PHX_EINVAL, "phx_comm_init: opts local_rank %d is not below local_size %d", w->local_rank,
                             w->local_size);
        if (!o->store && !px_spawn_current()->active && w->size > 1 &&
            (st = px_env_master(w->master_addr, sizeof w->master_addr, &w->master_port)))
            return st;
    }
    if (o->master_addr) {
        if (strlen(o->master_addr) >= sizeof w->master_addr)
            return phx_error(PHX_EINVAL, "phx_comm_init: master_addr is longer than %zu bytes",
                             sizeof w->master_addr - 1);
        strcpy(w->master_addr, o->master_addr);
    }
    if (o->master_port > 65535)
        return phx_error(PHX_EINVAL, "phx_comm_init: master_port %d: expected 1..65535", o->master_port);
    if (o->master_port > 0) w->master_port = o->master_port;
    return PHX_OK;
}

/* A job whose ranks span hosts (a rank's MASTER_ADDR is not this host, or
 * WORLD_SIZE > LOCAL_WORLD_SIZE) needs a job token: a store without one
 * serves only this host's processes of this user (doc/reference/store.md), so such
 * a job refuses to start unless PHX_STORE_INSECURE=1. */
static phx_status check_secret(const phx_world *w)
{
    uint8_t token[PX_STORE_MAX_TOKEN];
    size_t tlen = 0;
    char why[320];
    phx_status st = px_store_token("phx_comm_init", token, &tlen, why, sizeof why);
    if (st || tlen || px_store_insecure()) return st;
    int remote = !px_store_addr_is_local(w->master_addr);
    if (!remote && w->size <= w->local_size) return PHX_OK;
    return phx_error(PHX_EINVAL,
                     "phx_comm_init: rank %d: this job spans hosts (%s) but has no job token: PHX_STORE_TOKEN is "
                     "not set and ~/.phalanx/job-token cannot be used (%s); export the same PHX_STORE_TOKEN to every "
                     "rank, or give the ranks a shared home folder; PHX_STORE_INSECURE=1 runs the store open to "
                     "anyone who reaches it",
                     w->rank, remote ? "MASTER_ADDR is not an address of this host" : "WORLD_SIZE > LOCAL_WORLD_SIZE",
                     why);
}

/* The store: given, phx_spawn's shared one, in-process for a world of one,
 * else TCP with rank 0 hosting the server. */
static phx_status make_store(phx_comm *c, const phx_comm_opts *o, const phx_world *w)
{
    const px_spawn_tls *tls = px_spawn_current();
    if (o->store) {
        c->store = o->store;
        return PHX_OK;
    }
    if (tls->active) {
        c->store = tls->store;
        return PHX_OK;
    }
    c->owns_store = 1;
    if (w->size == 1) {
        c->store = phx_store_new_local();
        return c->store ? PHX_OK : PHX_ENOMEM;
    }
    phx_status st = check_secret(w);
    if (st) return st;
    st = phx_store_new(w->master_addr, w->master_port, w->rank == 0, c->timeout_s, &c->store);
    if (st) {
        char why[512];
        snprintf(why, sizeof why, "%s", phx_last_error());
        return phx_error(st, "phx_comm_init: rank %d: rendezvous at %s:%d (MASTER_ADDR:MASTER_PORT) failed: %s",
                         w->rank, w->master_addr, w->master_port, why);
    }
    px_store_set_host(c->store, "rank 0");
    return PHX_OK;
}

/* A rank belongs to one process: the first to claim it (host:pid) owns it
 * for the store's life, so a second process started with the same RANK
 * (a repeated --node-rank, nodes with different --nproc-per-node) is named
 * at once. */
static phx_status claim_rank(phx_comm *c)
{
    char key[64], me[320], host[256] = "?";
    gethostname(host, sizeof host - 1);
    snprintf(me, sizeof me, "%s:%ld", host, (long)getpid());
    snprintf(key, sizeof key, "phx/comm/rank%d/owner", c->rank);
    void *now = NULL;
    size_t nlen = 0;
    phx_status st = phx_store_compare_set(c->store, key, NULL, 0, me, strlen(me), &now, &nlen);
    if (st) return st;
    int same = nlen == strlen(me) && memcmp(now, me, nlen) == 0;
    char other[320];
    snprintf(other, sizeof other, "%.*s", (int)(nlen < sizeof other ? nlen : sizeof other - 1),
             now ? (const char *)now : "");
    free(now);
    if (!same)
        return phx_error(PHX_EINVAL,
                         "phx_comm_init: rank %d is already taken by process %s (this is %s): RANK "
                         "or --node-rank repeated, or nodes started with different --nproc-per-node",
                         c->rank, other, me);
    return PHX_OK;
}

/* Every rank announces itself under the communicator's prefix and waits
 * for the others, so a rank that never came is named (not a backend's key),
 * two processes claiming one rank are caught, and so is a WORLD_SIZE that
 * differs from rank 0's (nodes started with different --nproc-per-node). */
static phx_status join_world(phx_comm *c, const phx_world *w)
{
    char key[96], mine[24];
    phx_status st;
    snprintf(key, sizeof key, "%sjoin/%d", c->prefix, c->rank);
    if ((st = phx_store_add(c->store, key, 1, NULL))) return st;
    snprintf(key, sizeof key, "%sworld", c->prefix);
    snprintf(mine, sizeof mine, "%d", c->size);
    if (c->rank == 0 && (st = phx_store_set(c->store, key, mine, strlen(mine)))) return st;
    void *v = NULL;
    size_t len = 0;
    if ((st = phx_store_get(c->store, key, &v, &len, c->timeout_s)))
        return phx_error(st, "phx_comm_init: rank %d: rank 0 did not join within %.3g s (is it running, at %s:%d?)",
                         c->rank, c->timeout_s, w->master_addr, w->master_port);
    int same = len == strlen(mine) && memcmp(v, mine, len) == 0;
    char theirs[24];
    snprintf(theirs, sizeof theirs, "%.*s", (int)(len < 23 ? len : 23), (const char *)v);
    free(v);
    if (!same)
        return phx_error(PHX_EINVAL,
                         "phx_comm_init: rank %d: WORLD_SIZE is %d here but %s at rank 0: every rank "
                         "must agree (same --nnodes and --nproc-per-node on every node)",
                         c->rank, c->size, theirs);
    const char **keys = px_calloc((size_t)c->size, sizeof *keys);
    char *names = px_malloc((size_t)c->size * 96);
    if (!keys || !names) {
        px_free(keys);
        px_free(names);
        return PHX_ENOMEM;
    }
    for (int r = 0; r < c->size; r++) {
        snprintf(names + (size_t)r * 96, 96, "%sjoin/%d", c->prefix, r);
        keys[r] = names + (size_t)r * 96;
    }
    st = phx_store_wait(c->store, keys, (size_t)c->size, c->timeout_s);
    if (st == PHX_ETIMEOUT) {
        char missing[256] = "";
        int nmiss = 0;
        for (int r = 0; r < c->size; r++) {
            int64_t have = 0;
            if (phx_store_add(c->store, keys[r], 0, &have) != PHX_OK || have > 0) continue;
            size_t used = strlen(missing);
            if (nmiss < 16)
                snprintf(missing + used, sizeof missing - used, "%s%d", nmiss ? ", " : "", r);
            else if (nmiss == 16)
                snprintf(missing + used, sizeof missing - used, ", ...");
            nmiss++;
        }
        /* The store this rank hosts counts the clients it refused for a
         * proof of another job token: the likeliest reason then. */
        char token[256] = "";
        px_store_server *srv = px_store_server_of(c->store);
        if (srv) {
            px_store_stats ss;
            px_store_server_stats(srv, &ss);
            if (ss.refused)
                snprintf(token, sizeof token,
                         "; this rank's store refused %llu connection(s) whose job token differs from "
                         "this rank's: were they started with another PHX_STORE_TOKEN?",
                         (unsigned long long)ss.refused);
        }
        st = phx_error(PHX_ETIMEOUT,
                       "phx_comm_init: rank %d: %s %s of %d never joined within %.3g s (were they "
                       "started, with the same MASTER_ADDR:MASTER_PORT and WORLD_SIZE?)%s",
                       c->rank, nmiss == 1 ? "rank" : "ranks", missing, c->size, c->timeout_s, token);
    }
    px_free(keys);
    px_free(names);
    return st;
}

/* What the probe sees before any store exists: a world of threads of one
 * process (an in-process store given, phx_spawn's threads, a world of one). */
static int in_process_world(const phx_comm_opts *o, const phx_world *w)
{
    if (o->store) return phx_store_is_local(o->store);
    return px_spawn_current()->active || w->size == 1;
}

/* 1 when the plugin makes its own world (comm_v1.world) and the options
 * leave the world to the environment. */
static int own_world(const phx_comm *c, const phx_comm_opts *o)
{
    return c->desc->abi_minor >= PHX_COMM_V1_WORLD_MINOR && c->v.world && o->size <= 0 && !o->store &&
        !px_spawn_current()->active;
}

/* The plugin's own world replaces the environment's; an in-process store
 * keeps the core's per-process keys (the communicator count). */
static phx_status take_own_world(phx_comm *c)
{
    phx_comm_world_v1 w;
    memset(&w, 0, sizeof w);
    w.rank = w.size = w.local_rank = w.local_size = -1;
    phx_status st = c->v.world(&w);
    if (st) {
        char why[512];
        snprintf(why, sizeof why, "%s", phx_last_error());
        return phx_error(st, "phx_comm_init: backend '%s' could not make its world: %s", c->desc->name, why);
    }
    if (w.size < 1 || w.rank < 0 || w.rank >= w.size || w.local_size < 1 || w.local_size > w.size || w.local_rank < 0 ||
        w.local_rank >= w.local_size)
        return phx_error(PHX_EABI,
                         "phx_comm_init: backend '%s' reported rank %d of %d (local %d of %d): expected "
                         "0 <= rank < size and 0 <= local_rank < local_size <= size",
                         c->desc->name, w.rank, w.size, w.local_rank, w.local_size);
    if (c->rank != w.rank || c->size != w.size)
        phx_log(PHX_LOG_INFO, "backend %s makes its own world: rank %d of %d (the environment said %d of %d)",
                c->desc->name, w.rank, w.size, c->rank, c->size);
    c->rank = w.rank;
    c->size = w.size;
    c->local_rank = w.local_rank;
    c->local_size = w.local_size;
    c->owns_store = 1;
    if (!(c->store = phx_store_new_local())) return PHX_ENOMEM;
    if (c->debug_detail) {
        phx_log(PHX_LOG_WARN,
                "PHX_DEBUG=detail: backend %s makes its own world without the rendezvous store; "
                "collectives are not cross-checked",
                c->desc->name);
        c->debug_detail = 0;
    }
    return PHX_OK;
}

phx_status phx_comm_init(const phx_comm_opts *opts, phx_comm **out)
{
    if (!out) return phx_error(PHX_EINVAL, "phx_comm_init: out is NULL");
    phx_comm_opts o = PHX_COMM_OPTS_INIT;
    phx_status st = px_abi_in(&o, sizeof o, opts, "phx_comm_init", "phx_comm_opts", "PHX_COMM_OPTS_INIT");
    if (st) return st;
    phx_world w;
    if ((st = resolve_world(&o, &w))) return st;
    if (o.device.kind != PHX_DEVICE_CPU && o.device.kind != PHX_DEVICE_CUDA)
        return phx_error(PHX_EINVAL, "phx_comm_init: opts device kind %d is not a device", o.device.kind);

    phx_comm *c = px_calloc(1, sizeof *c);
    if (!c) return PHX_ENOMEM;
    pthread_mutex_init(&c->pool_mu, NULL);
    c->rank = w.rank;
    c->size = w.size;
    c->local_rank = w.local_rank;
    c->local_size = w.local_size;
    c->device = o.device;
    c->refs = 1;
    c->timeout_s = px_timeout(o.timeout_s);
    const char *dbg = getenv("PHX_DEBUG");
    c->debug_detail = dbg && strstr(dbg, "detail") != NULL;

    const char *sel = o.backend ? o.backend : getenv("PHX_COMM");
    char sel_buf[256];
    if ((st = px_world_comm_selection(sel, sel_buf, sizeof sel_buf, &sel))) goto fail;
    phx_probe_ctx ctx = {in_process_world(&o, &w), c->local_size, c->local_rank};
    if ((st = phx_plugin_load(PHX_PLUGIN_COMM, sel, &ctx, &c->desc))) {
        /* Lead with where the name came from: the user set it. */
        char why[1536];
        snprintf(why, sizeof why, "%s", phx_last_error());
        if (sel && *sel)
            st = phx_error(st, "phx_comm_init: %s='%s' names no usable communicator: %s",
                           o.backend ? "phx_comm_opts.backend" : "PHX_COMM", sel, why);
        else
            st = phx_error(st, "phx_comm_init: no usable communicator (PHX_COMM unset: the best usable): %s", why);
        goto fail;
    }
    if ((st = px_abi_adapt(&px_comm_abi, c->desc->vtable, c->desc->abi_minor, &c->v, "phx_comm_init", "comm",
                           c->desc->name)))
        goto fail;
    if (!c->v.barrier && !(c->barrier_buf = phx_tensor_zeros(PHX_F32, 1, (const int64_t[]){1}, c->device))) {
        st = phx_error(PHX_ENOMEM, "phx_comm_init: the default barrier's buffer: %s", phx_last_error());
        goto fail;
    }
    if (own_world(c, &o)) {
        c->own_world = 1;
        if ((st = take_own_world(c))) goto fail;
    } else if ((st = make_store(c, &o, &w))) {
        goto fail;
    }
    /* Processes sharing a TCP store claim their ranks and join below.
     * Threads of one process (an in-process store) cannot repeat or miss a
     * rank, and a blocked one is released by the spawn's abort key, which
     * the join wait would not watch; a plugin's own world has its own
     * launcher's checks. */
    int across = c->size > 1 && !phx_store_is_local(c->store);
    if (across && (st = claim_rank(c))) goto fail;
    /* Every rank's k-th communicator gets the same key prefix. */
    char key[64];
    int64_t k;
    snprintf(key, sizeof key, "phx/comm/rank%d/count", c->rank);
    if ((st = phx_store_add(c->store, key, 1, &k))) goto fail;
    snprintf(c->prefix, sizeof c->prefix, "c%" PRId64 "/", k - 1);
    if (across && (st = join_world(c, &w))) goto fail;

    phx_comm_init_args a = {c->rank,  c->size,   c->local_rank, c->local_size,
                            c->store, c->prefix, c->timeout_s,  c->device};
    if ((st = c->v.init(&a, &c->state))) {
        char why[512];
        snprintf(why, sizeof why, "%s", phx_last_error());
        st = phx_error(st, "phx_comm_init: rank %d: backend '%s' failed to start: %s", c->rank, c->desc->name, why);
        goto fail;
    }
    phx_log_set_rank(c->rank);
    phx_log(PHX_LOG_INFO, "communicator %s: rank %d of %d, backend %s", c->prefix, c->rank, c->size, c->desc->name);
    *out = c;
    return PHX_OK;
fail:
    phx_tensor_free(c->barrier_buf);
    if (c->owns_store) phx_store_free(c->store);
    pthread_mutex_destroy(&c->pool_mu);
    px_free(c);
    return st;
}

void phx_comm_free(phx_comm *c)
{
    if (!c) return;
    if (c->freed) {
        phx_log(PHX_LOG_WARN, "phx_comm_free: communicator %s (rank %d) was already freed", c->prefix, c->rank);
        return;
    }
    c->v.finalize(c->state);
    c->state = NULL;
    c->freed = 1;
    px_comm_unref(c); /* the struct and store stay while groups of it live */
}

/* A NULL communicator is a world of one (rank 0 of 1), as a process that
 * never joined a world is: its collectives copy or keep their input. */
int phx_comm_rank(const phx_comm *c)
{
    return c ? c->rank : 0;
}
int phx_comm_size(const phx_comm *c)
{
    return c ? c->size : 1;
}
const char *phx_comm_backend(const phx_comm *c)
{
    return c ? c->desc->name : "none";
}
phx_device phx_comm_device(const phx_comm *c)
{
    return c ? c->device : phx_cpu();
}
double phx_comm_timeout(const phx_comm *c)
{
    return c ? c->timeout_s : 0.0;
}

/* ------------------------------------------------------------ checks */

static phx_status check_tensor(const phx_comm *c, const char *who, const char *name, const phx_tensor *t)
{
    if (!t) return phx_error(PHX_EINVAL, "%s: %s tensor is NULL", who, name);
    if (px_tensor_live(who, name, t) != PHX_OK) return PHX_ESTATE;
    if ((unsigned)t->dtype >= PHX_NUM_DTYPES)
        return phx_error(PHX_EINVAL, "%s: %s tensor has dtype %d, not a valid dtype", who, name, (int)t->dtype);
    if (c && !phx_device_equal(t->storage->device, c->device)) {
        char a[32], b[32];
        return phx_error(PHX_EINVAL, "%s: %s tensor is on %s, the communicator's buffers on %s", who, name,
                         phx_device_name(t->storage->device, a, sizeof a), phx_device_name(c->device, b, sizeof b));
    }
    return PHX_OK;
}

/* PHX_DEBUG=detail: every rank publishes what it is about to issue and
 * compares with every other rank (phx_kit_issued_check); the first that
 * differs from rank 0 is named. Keys: <prefix>dbg/<seq>/<rank>. */
static phx_status debug_check(phx_comm *c, const char *who, const char *desc)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%sdbg/", c->prefix);
    return phx_kit_issued_check(c->store, prefix, c->seq, c->rank, c->size, desc, c->timeout_s, who);
}

/* Gets a handle, runs the debug check, hands over to the plugin through
 * issue(), and either returns the handle or waits for it. */
typedef struct px_call {
    phx_comm *c;
    const char *who;
    phx_kit_op op;
} px_call;

static phx_status issue(const px_call *call, phx_work **work)
{
    phx_comm *c = call->c;
    const phx_kit_op *k = &call->op;
    phx_status st;
    const char *what = phx_kit_kind_name(k->kind);
    if (c->debug_detail) {
        char d[160];
        switch (k->kind) {
        case PHX_KIT_BARRIER: snprintf(d, sizeof d, "barrier()"); break;
        case PHX_KIT_BROADCAST:
            snprintf(d, sizeof d, "broadcast(count=%" PRId64 ", %s, root=%d)", k->count, phx_dtype_name(k->dt),
                     k->root);
            break;
        case PHX_KIT_ALLGATHER:
            snprintf(d, sizeof d, "allgather(count=%" PRId64 ", %s)", k->count, phx_dtype_name(k->dt));
            break;
        default:
            snprintf(d, sizeof d, "%s(count=%" PRId64 ", %s, %s)", what, k->count, phx_dtype_name(k->dt),
                     op_names[k->op]);
        }
        if ((st = debug_check(c, call->who, d))) {
            c->seq++;
            return st;
        }
    }
    phx_work *w = px_work_get(c, what);
    if (!w) return PHX_ENOMEM;
    if (phx_log_get_level() >= PHX_LOG_DEBUG)
        phx_log(PHX_LOG_DEBUG, "comm %s rank %d: #%" PRIu64 " %s(count=%" PRId64 ", %s) issued to %s", c->prefix,
                c->rank, c->seq, what, k->count, phx_dtype_name(k->dt), c->desc->name);
    c->seq++;
    switch (k->kind) {
    case PHX_KIT_ALLREDUCE: st = c->v.allreduce(c->state, k->recv, k->count, k->dt, k->op, w); break;
    case PHX_KIT_BROADCAST: st = c->v.broadcast(c->state, k->recv, k->count, k->dt, k->root, w); break;
    case PHX_KIT_ALLGATHER: st = c->v.allgather(c->state, k->send, k->recv, k->count, k->dt, w); break;
    case PHX_KIT_REDUCE_SCATTER: st = c->v.reduce_scatter(c->state, k->send, k->recv, k->count, k->dt, k->op, w); break;
    default:
        /* The default barrier: a one-element all-reduce (its sum of zeros
         * stays zero, so barriers in flight may share the buffer). */
        if (c->v.barrier)
            st = c->v.barrier(c->state, w);
        else
            st = c->v.allreduce(c->state, px_tensor_ptr(c->barrier_buf), 1, PHX_F32, PHX_SUM, w);
    }
    if (st != PHX_OK) {
        px_work_put(w);
        return st;
    }
    if (work) {
        *work = w;
        return PHX_OK;
    }
    return px_work_finish(w);
}

static phx_status check_common(phx_comm *c, const char *who, phx_work **work)
{
    if (work) *work = NULL;
    if (c && c->freed)
        return phx_error(PHX_EINVAL, "%s: communicator %s (rank %d of %d) was freed by phx_comm_free", who, c->prefix,
                         c->rank, c->size);
    return PHX_OK;
}

/* allgather / reduce_scatter in a world of one (no communicator): the
 * output is the input. The work stays NULL, which phx_work_wait,
 * phx_work_test and phx_work_free take as complete. */
static phx_status solo_copy(const phx_tensor *in, phx_tensor *out)
{
    return px_tensor_ptr(in) == px_tensor_ptr(out) ? PHX_OK : phx_tensor_copy(out, in);
}

static phx_status check_op(const char *who, phx_reduce_op op)
{
    if ((unsigned)op > PHX_MIN)
        return phx_error(PHX_EINVAL, "%s: reduce op %d: expected sum, avg, max or min", who, (int)op);
    return PHX_OK;
}

phx_status phx_comm_allreduce(phx_comm *c, phx_tensor *t, phx_reduce_op op, phx_work **work)
{
    static const char who[] = "phx_comm_allreduce";
    phx_status st;
    if ((st = check_common(c, who, work)) || (st = check_tensor(c, who, "the", t)) || (st = check_op(who, op)))
        return st;
    if (!c) return PHX_OK;
    px_call k = {c, who, {PHX_KIT_ALLREDUCE, px_tensor_ptr(t), px_tensor_ptr(t), t->numel, t->dtype, op, 0}};
    return issue(&k, work);
}

phx_status phx_comm_broadcast(phx_comm *c, phx_tensor *t, int root, phx_work **work)
{
    static const char who[] = "phx_comm_broadcast";
    phx_status st;
    if ((st = check_common(c, who, work)) || (st = check_tensor(c, who, "the", t))) return st;
    if (root < 0 || root >= phx_comm_size(c))
        return phx_error(PHX_EINVAL, "%s: root %d is not a rank of this world of %d", who, root, phx_comm_size(c));
    if (!c) return PHX_OK;
    px_call k = {c, who, {PHX_KIT_BROADCAST, px_tensor_ptr(t), px_tensor_ptr(t), t->numel, t->dtype, PHX_SUM, root}};
    return issue(&k, work);
}

/* Shapes for allgather / reduce_scatter: big = size * small, same dtype. */
static phx_status check_pair(phx_comm *c, const char *who, const phx_tensor *small, const char *sname,
                             const phx_tensor *big, const char *bname)
{
    phx_status st;
    if ((st = check_tensor(c, who, sname, small)) || (st = check_tensor(c, who, bname, big))) return st;
    if (small->dtype != big->dtype)
        return phx_error(PHX_EINVAL, "%s: %s tensor is %s, %s tensor is %s: expected the same dtype", who, sname,
                         phx_dtype_name(small->dtype), bname, phx_dtype_name(big->dtype));
    int size = phx_comm_size(c);
    if (big->numel != small->numel * size)
        return phx_error(PHX_EINVAL,
                         "%s: %s tensor has %" PRId64 " elements, expected %d x %" PRId64 " = %" PRId64
                         " (world size x %s elements)",
                         who, bname, big->numel, size, small->numel, small->numel * size, sname);
    return PHX_OK;
}

phx_status phx_comm_allgather(phx_comm *c, const phx_tensor *in, phx_tensor *out, phx_work **work)
{
    static const char who[] = "phx_comm_allgather";
    phx_status st;
    if ((st = check_common(c, who, work)) || (st = check_pair(c, who, in, "input", out, "output"))) return st;
    char *ip = px_tensor_ptr(in), *outp = px_tensor_ptr(out);
    size_t ib = phx_tensor_nbytes(in), ob = phx_tensor_nbytes(out);
    int rank = phx_comm_rank(c);
    if (ib && ip < outp + ob && outp < ip + ib && ip != outp + (size_t)rank * ib)
        return phx_error(PHX_EINVAL, "%s: input overlaps output other than as this rank's block %d of it", who, rank);
    if (!c) return solo_copy(in, out);
    px_call k = {c, who, {PHX_KIT_ALLGATHER, px_tensor_ptr(in), px_tensor_ptr(out), in->numel, in->dtype, PHX_SUM, 0}};
    return issue(&k, work);
}

phx_status phx_comm_reduce_scatter(phx_comm *c, const phx_tensor *in, phx_tensor *out, phx_reduce_op op,
                                   phx_work **work)
{
    static const char who[] = "phx_comm_reduce_scatter";
    phx_status st;
    if ((st = check_common(c, who, work)) || (st = check_pair(c, who, out, "output", in, "input")) ||
        (st = check_op(who, op)))
        return st;
    char *ip = px_tensor_ptr(in), *outp = px_tensor_ptr(out);
    size_t ib = phx_tensor_nbytes(in), ob = phx_tensor_nbytes(out);
    if (ob && ip < outp + ob && outp < ip + ib) return phx_error(PHX_EINVAL, "%s: input and output overlap", who);
    if (!c) return solo_copy(in, out);
    px_call k = {
        c, who, {PHX_KIT_REDUCE_SCATTER, px_tensor_ptr(in), px_tensor_ptr(out), out->numel, out->dtype, op, 0}};
    return issue(&k, work);
}

phx_status phx_comm_barrier(phx_comm *c, phx_work **work)
{
    static const char who[] = "phx_comm_barrier";
    phx_status st;
    if ((st = check_common(c, who, work))) return st;
    if (!c) return PHX_OK;
    px_call k = {c, who, {PHX_KIT_BARRIER, NULL, NULL, 0, PHX_F32, PHX_SUM, 0}};
    return issue(&k, work);
}
