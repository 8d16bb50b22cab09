/* Phalanx — umbrella header. */
#ifndef PHALANX_H
#define PHALANX_H

/* ABI of the public headers: major changes break callers, minor adds. */
#define PHX_ABI_VERSION_MAJOR 1
#define PHX_ABI_VERSION_MINOR 6

#include "phalanx/error.h"
#include "phalanx/log.h"
#include "phalanx/device.h"
#include "phalanx/tensor.h"
#include "phalanx/rng.h"
#include "phalanx/module.h"
#include "phalanx/loss.h"
#include "phalanx/optim.h"
#include "phalanx/precision.h"
#include "phalanx/store.h"
#include "phalanx/comm.h"
#include "phalanx/ddp.h"
#include "phalanx/dp.h"
#include "phalanx/sampler.h"
#include "phalanx/checkpoint.h"
#include "phalanx/data.h"
#include "phalanx/plugin.h"
#include "phalanx/metrics.h"
#include "phalanx/progress.h"
#include "phalanx/transformer.h"
#include "phalanx/cnn.h"
#include "phalanx/schedule.h"
#include "phalanx/ops.h"
#include "phalanx/autograd.h"
#include "phalanx/zero.h"
#include "phalanx/fsdp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version string ("0.1.0") and ABI; any pointer may be NULL. */
const char *phx_version(int *abi_major, int *abi_minor);

#ifdef __cplusplus
}
#endif
#endif
