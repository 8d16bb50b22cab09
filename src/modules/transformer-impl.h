/* Helpers shared by the transformer modules (internal). */
#ifndef PHX_CORE_TRANSFORMER_IMPL_H
#define PHX_CORE_TRANSFORMER_IMPL_H

#include "src/modules/module-impl.h"

/* The end of a clone slot for a module whose children hold the
 * parameters: moves clone (same structure as self) to self's device and
 * copies every parameter of the tree. clone itself, or NULL (clone
 * freed) on failure. */
phx_module *px_tree_clone_values(phx_module *clone, const phx_module *self);

/* Parameters of a freshly built tree, drawn again in named_parameters()
 * order for GPT-2's initialisation: weights of Linear and Embedding
 * modules ~ N(0, std) (std / sqrt(2 n_layer) for those whose dotted name
 * ends in "c_proj.weight" or ".fn.1.2.weight"), biases 0; LayerNorm keeps
 * 1 and 0. */
phx_status px_gpt2_init(phx_module *m, phx_rng *rng, double std, int64_t n_layer);
#endif
