/* phx-comm-solo.so: a communicator plugin built out of tree, against the
 * installed Phalanx headers (see Makefile, doc/guide/plugins.md).
 *
 * The world is one rank, so every collective is the identity: all-reduce
 * and broadcast leave the buffer as it is, all-gather and reduce-scatter
 * copy their one block. It is still built the way a backend for many
 * ranks is, on the plugin author's kit (phalanx/plugin/kit.h):
 *   - phx_kit_comm is the plugin's state; PHX_KIT_COMM_SLOTS fills the
 *     five collective slots, which queue each collective as a phx_kit_op;
 *   - solo_run runs one op on the kit's queue thread, in issue order, and
 *     the kit completes its work handle; a failure goes through the kit's
 *     failure protocol (the op, the rank, the peer in the message; the
 *     communicator broken after it);
 *   - the copies are the kit's reductions over the one rank's input
 *     (phx_kit_reduce), so every dtype and op is handled as the built-in
 *     backends handle it.
 * The core checks every argument before it calls a slot (comm_v1.h).
 *
 * Select it with PHX_PLUGIN_PATH=<this folder> PHX_COMM=solo. */
#include <stdio.h>
#include <phalanx/phalanx.h>
#include <phalanx/plugin/comm_v1.h>
#include <phalanx/plugin/kit.h>

/* Usable anywhere a world of one runs; priority 0 so it is never picked
 * when PHX_COMM names no backend and a real one is installed. */
static int solo_probe(const phx_probe_ctx *ctx, char *why, size_t why_len)
{
    if (ctx->local_size > 1) {
        snprintf(why, why_len, "solo is a world of one rank, this node runs %d", ctx->local_size);
        return -1;
    }
    return 0;
}

/* On the kit's queue thread: recv <- op over the world's one input. */
static phx_status solo_run(void *ctx, const phx_kit_op *op, char *msg, size_t msg_len)
{
    (void)ctx;
    (void)msg;
    (void)msg_len; /* phx_kit_reduce's phx_last_error() is the reason */
    if (op->kind == PHX_KIT_BARRIER) return PHX_OK;
    const void *in[1] = {op->send};
    void *out[1] = {op->recv};
    return phx_kit_reduce(out, 1, in, 1, 0, (size_t)op->count, op->dt, op->op, 1);
}

static phx_status solo_init(const phx_comm_init_args *a, void **state)
{
    if (a->size != 1)
        return phx_error(PHX_EINVAL, "solo: rank %d of a world of %d; solo is a world of one rank (rank 0 of 1)",
                         a->rank, a->size);
    if (a->device.kind != PHX_DEVICE_CPU)
        return phx_error(PHX_EUNSUPPORTED, "solo: buffers on device kind %d; solo handles CPU buffers only",
                         a->device.kind);
    phx_kit_comm *kc;
    phx_status st = phx_kit_comm_new(a, "solo", solo_run, NULL, &kc);
    if (st == PHX_OK) *state = kc;
    return st;
}

static void solo_finalize(void *state)
{
    phx_kit_comm_free(state); /* runs what is still queued */
}

static const phx_comm_v1 solo_vtable = {.init = solo_init, .finalize = solo_finalize, PHX_KIT_COMM_SLOTS};

/* The one exported symbol: data the loader checks before running any of
 * the code above. */
PHX_PLUGIN_EXPORT const phx_plugin_desc phx_plugin_v1 = PHX_PLUGIN_DESC_INIT(
    PHX_PLUGIN_COMM, "solo", "1.0", "a world of one rank; collectives are identities", solo_probe, &solo_vtable);
