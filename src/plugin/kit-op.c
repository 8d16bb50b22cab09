/* The kit's queued-op record (phalanx/plugin/kit.h): its names and text. */
#include "config.h"
#include <stdio.h>
#include "phalanx/plugin/kit.h"

const char *phx_kit_kind_name(phx_kit_kind kind)
{
    static const char *const names[] = {"allreduce", "broadcast", "allgather", "reduce_scatter", "barrier"};
    return (unsigned)kind < sizeof names / sizeof names[0] ? names[kind] : "?";
}

char *phx_kit_op_text(const phx_kit_op *op, char *buf, size_t len)
{
    static const char *const ops[] = {"sum", "avg", "max", "min"};
    if (!len) return buf;
    int n = snprintf(buf, len, "%s(count=%lld, %s", phx_kit_kind_name(op->kind), (long long)op->count,
                     phx_dtype_name(op->dt));
    size_t used = n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
    if ((op->kind == PHX_KIT_ALLREDUCE || op->kind == PHX_KIT_REDUCE_SCATTER) && (unsigned)op->op < 4)
        snprintf(buf + used, len - used, ", %s)", ops[op->op]);
    else if (op->kind == PHX_KIT_BROADCAST)
        snprintf(buf + used, len - used, ", root %d)", op->root);
    else
        snprintf(buf + used, len - used, ")");
    return buf;
}
