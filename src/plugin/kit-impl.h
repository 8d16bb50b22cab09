/* The kit's internals shared by its files (px_ prefix, not exported). */
#ifndef PHX_CORE_PLUGIN_KIT_IMPL_H
#define PHX_CORE_PLUGIN_KIT_IMPL_H

#include "phalanx/plugin/kit.h"

/* Queues op on kc's queue: all-reduces within kc's inline threshold run
 * on the calling thread when the queue is idle. */
phx_status px_kit_comm_push(phx_kit_comm *kc, const phx_kit_op *op, phx_work *work);

#endif
