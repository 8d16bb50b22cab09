# src/data — safetensors checkpoints, the IDX reader, the loader and the
# DistributedSampler (doc/formats.md, doc/training.md).
libphalanx_la_SOURCES += src/data/safetensors.c src/data/safetensors-impl.h src/data/checkpoint.c \
	src/data/idx.c src/data/idx-impl.h src/data/loader.c src/data/loader-device.c src/data/loader-device.h \
	src/data/sampler.c \
	src/data/dataset.c src/data/dataset-impl.h

# Datasets and the loader with workers (doc/data.md).
check_PROGRAMS += t/data_loader
TESTS += t/data_loader t/data_valgrind.sh
t_data_loader_LDADD = libphalanx.la $(ZLIB_LIBS) -lm
EXTRA_DIST += bench/torch/loader.py t/data/loader.txt t/data_valgrind.sh t/valgrind.supp

# The loader on an accelerator: pinned batches, copies queued on the
# loader's stream, against a device whose copies run late.
check_LTLIBRARIES += t/plugins/asyncdev/phx-device-cuda.la
t_plugins_asyncdev_phx_device_cuda_la_SOURCES = t/plugins/async-device.c
t_plugins_asyncdev_phx_device_cuda_la_LDFLAGS = $(fake_plugin_ldflags)
check_PROGRAMS += t/data_loader_device
TESTS += t/data_loader_device
t_data_loader_device_LDADD = libphalanx.la -ldl

# make bench: loading alone and the MLP step from a slow dataset, 0-2
# workers, beside PyTorch's DataLoader (bench/run.sh, doc/data.md).
noinst_PROGRAMS += bench/loader
bench_programs += bench/loader
bench_loader_LDADD = libphalanx.la
EXTRA_DIST += bench/torch/loader_speed.py

# Failed loads change nothing; killed saves leave no temporary files for
# long (doc/failures.md).
check_PROGRAMS += t/train_ckpt_fail
TESTS += t/train_ckpt_fail
t_train_ckpt_fail_SOURCES = t/train_ckpt_fail.c t/ckpt-snapshot.h
t_train_ckpt_fail_LDADD = libphalanx.la

# Saved files get the umask's mode (a replaced file keeps its own).
check_PROGRAMS += t/train_ckpt_mode
TESTS += t/train_ckpt_mode
t_train_ckpt_mode_LDADD = libphalanx.la
