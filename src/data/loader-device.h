/* The loader's path to an accelerator: batches assembled in page-locked
 * host memory are copied to one of two device buffers on a stream of the
 * loader's own, so batch k+1 moves while the caller computes on batch k
 * (PyTorch's pin_memory=True with non_blocking copies). Internal to
 * src/data/loader.c. */
#ifndef PHX_CORE_DATA_LOADER_DEVICE_H
#define PHX_CORE_DATA_LOADER_DEVICE_H

#include "phalanx/dataset.h"
#include "phalanx/plugin/device_v1.h"

typedef struct px_ldev {
    phx_device dev;
    const phx_device_v1 *t;
    int nf;
    phx_tensor *full[2][PHX_DATASET_MAX_FIELDS]; /* (batch, field...) on dev */
    phx_tensor *part[2][PHX_DATASET_MAX_FIELDS]; /* (last, field...) views, or NULL */
    void *stream; /* the copies' stream */
    void *copied[2]; /* events: the last copy into buffer b is done */
    void *freed; /* event: the caller's work queued so far is done */
} px_ldev;

/* Device buffers for batches of `batch` rows (and views of `last` rows
 * when last > 0) of the nf fields, the stream and the events. On failure
 * returns the status (phx_last_error set) and leaves d for px_ldev_free. */
phx_status px_ldev_init(px_ldev *d, phx_device dev, const phx_field *fields, int nf, int64_t batch, int64_t last);
void px_ldev_free(px_ldev *d);

/* Queues the copy of the first `rows` rows of host[0..nf) into buffer b,
 * after everything the caller queued on its compute stream so far (the
 * step that last read buffer b). Returns at once. */
phx_status px_ldev_copy(px_ldev *d, int b, phx_tensor *const *host, int64_t rows);
/* Makes the caller's compute stream wait for buffer b's copy. */
phx_status px_ldev_use(px_ldev *d, int b);
/* Waits on the host until buffer b's copy is done (its host rows may then
 * be refilled). */
phx_status px_ldev_settle(px_ldev *d, int b);
#endif
