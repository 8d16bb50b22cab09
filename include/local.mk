phalanxinc_HEADERS += \
	include/phalanx/phalanx.h include/phalanx/error.h include/phalanx/log.h \
	include/phalanx/device.h include/phalanx/tensor.h include/phalanx/rng.h \
	include/phalanx/module.h include/phalanx/loss.h include/phalanx/optim.h \
	include/phalanx/precision.h include/phalanx/store.h include/phalanx/comm.h \
	include/phalanx/ddp.h include/phalanx/dp.h include/phalanx/sampler.h \
	include/phalanx/checkpoint.h include/phalanx/data.h include/phalanx/plugin.h \
	include/phalanx/metrics.h
phalanxinc_HEADERS += include/phalanx/transformer.h include/phalanx/cnn.h include/phalanx/schedule.h
phalanxplugin_HEADERS += \
	include/phalanx/plugin/comm_v1.h include/phalanx/plugin/precision_v1.h \
	include/phalanx/plugin/device_v1.h include/phalanx/plugin/kernels_v1.def \
	include/phalanx/plugin/kit.h
phalanxinc_HEADERS += include/phalanx/dataset.h include/phalanx/ops.h include/phalanx/autograd.h
phalanxinc_HEADERS += include/phalanx/progress.h
phalanxinc_HEADERS += include/phalanx/zero.h
phalanxinc_HEADERS += include/phalanx/fsdp.h
