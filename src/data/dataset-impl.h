/* The dataset object's internals other areas use. */
#ifndef PX_DATA_DATASET_IMPL_H
#define PX_DATA_DATASET_IMPL_H

#include "phalanx/dataset.h"

/* phx_dataset_new for a vtable already in this library's layout. */
phx_dataset *px_dataset_new_adapted(const phx_dataset_vtable *vt, void *ctx, int64_t len, int n_fields,
                                    const phx_field *fields);

/* The status of a user callback (dataset get / get_batch, collate), called
 * with the thread's last error cleared: PHX_OK, or a phx_status error
 * whose message starts with what (a sentence naming the samples), then
 * the callback's own message, or says that it set none. A status that is
 * not an error code (positive values, unknown codes) becomes PHX_EINVAL. */
phx_status px_callback_status(phx_status st, const char *what);

#endif
