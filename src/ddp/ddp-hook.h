/* The PowerSGD hook's entry points that registration checks (px_ prefix,
 * not exported): src/ddp/ddp-hook-powersgd.c. */
#ifndef PHX_CORE_DDP_HOOK_H
#define PHX_CORE_DDP_HOOK_H

#include "phalanx/ddp.h"

/* The PowerSGD hook's launch slot: registration recognises the hook by it. */
phx_status px_powersgd_launch(void *state, const phx_comm_hook_bucket *b, phx_work **work);
/* PHX_EINVAL (naming fn) unless state is a phx_powersgd_state. */
phx_status px_powersgd_check(void *state, const char *fn);
#endif
