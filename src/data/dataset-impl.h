/* The dataset object's internals other areas use. */
#ifndef PX_DATA_DATASET_IMPL_H
#define PX_DATA_DATASET_IMPL_H

#include "phalanx/dataset.h"

/* phx_dataset_new for a vtable already in this library's layout. */
phx_dataset *px_dataset_new_adapted(const phx_dataset_vtable *vt, void *ctx, int64_t len, int n_fields,
                                    const phx_field *fields);

#endif
