/* Phalanx — DataParallel: one process, a replica per device. */
#ifndef PHALANX_DP_H
#define PHALANX_DP_H

#include <stddef.h>
#include "phalanx/module.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Wraps model (ownership stays with the caller) in a module that scatters
 * the batch over n_devices replicas (torch.chunk sizes), runs them on
 * threads, gathers the output on output_device and sums the replicas'
 * gradients into model's parameters. devices NULL: every device of the
 * model's kind (CPU: phx_num_threads() replicas). Parameter names are the
 * model's. NULL on error (unknown device, output device not in the list). */
phx_module *phx_dp_new(phx_module *model, const phx_device *devices, size_t n_devices, const phx_device *output_device);
/* The wrapped model (owned by the caller), or NULL with PHX_EINVAL when dp
 * is not a DataParallel wrapper. See doc/guide/dp.md. */
phx_module *phx_dp_model(phx_module *dp);
/* Replicas = devices of the wrapper (a batch smaller than that uses fewer);
 * 0 with PHX_EINVAL when dp is not a DataParallel wrapper. */
size_t phx_dp_num_replicas(phx_module *dp);

/* torch.chunk sizes: splits batch into at most n chunks of ceil(batch/n),
 * the last smaller; writes up to n sizes, returns the number of chunks. */
size_t phx_chunk_sizes(int64_t batch, size_t n, int64_t *sizes);

#ifdef __cplusplus
}
#endif
#endif
