/* Phalanx — checkpoints in the safetensors format. See doc/reference/formats.md. */
#ifndef PHALANX_CHECKPOINT_H
#define PHALANX_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include "phalanx/module.h"
#include "phalanx/optim.h"
#include "phalanx/precision.h"

#ifdef __cplusplus
extern "C" {
#endif

/* User metadata: string pairs stored in the header's "__metadata__". */
typedef struct phx_meta {
    const char *key;
    const char *value;
} phx_meta;

/* Writes the model's parameters (keys = dotted names), optionally the
 * optimizer state ("optim.<name>.<state>" plus metadata "optim.steps"),
 * the scaler (metadata "scaler.scale", "scaler.growth_tracker"), and n_meta
 * user pairs. Atomic: a temporary file in the same folder, fsync, rename;
 * on error the previous file is intact. opt, scaler, meta may be NULL. */
phx_status phx_checkpoint_save(const char *path, phx_module *model, phx_optimizer *opt, phx_scaler *scaler,
                               const phx_meta *meta, size_t n_meta);

/* A model-only export: the parameters under their dotted names and nothing
 * else, the keys torch's model.load_state_dict(..., strict=True) expects of
 * a model built the same way. Same as phx_checkpoint_save(path, model,
 * NULL, NULL, NULL, 0). */
phx_status phx_checkpoint_save_model(const char *path, phx_module *model);

/* Loads into model (and opt, scaler if given). Keys may carry a "module."
 * prefix. Floating-point tensors convert as torch's load_state_dict copies
 * them: an F16, BF16 or F64 file loads into f32 parameters (and the other
 * ways round); integer dtypes must match. Validates the whole file first;
 * any error (missing file, truncated, header length beyond the file,
 * invalid JSON, unknown dtype, offsets out of range or overlapping)
 * changes nothing. A file that does not fit the model is PHX_EIO with one
 * message listing every missing, unexpected, mis-shaped, mis-typed and
 * doubly held key and bad metadata at once (as torch's load_state_dict;
 * doc/reference/formats.md), and changes nothing either. */
phx_status phx_checkpoint_load(const char *path, phx_module *model, phx_optimizer *opt, phx_scaler *scaler);

/* Reads one metadata value of a checkpoint into buf (NUL-terminated).
 * PHX_ENOTFOUND when the key is absent. */
phx_status phx_checkpoint_meta(const char *path, const char *key, char *buf, size_t len);

/* Generic safetensors I/O of named tensors (any device: data is copied
 * through the host; tensors read back are CPU tensors). */
phx_status phx_safetensors_write(const char *path, const char *const *names, phx_tensor *const *tensors, size_t n,
                                 const phx_meta *meta, size_t n_meta);
/* Reads every tensor: *names and *tensors are malloc'd arrays of *n
 * entries (free with phx_safetensors_free). F64 entries read as F32
 * tensors (Phalanx has no f64 dtype). */
phx_status phx_safetensors_read(const char *path, char ***names, phx_tensor ***tensors, size_t *n);
void phx_safetensors_free(char **names, phx_tensor **tensors, size_t n);

#ifdef __cplusplus
}
#endif
#endif
