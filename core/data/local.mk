# core/data — safetensors checkpoints, the IDX reader, the loader and the
# DistributedSampler (doc/formats.md, doc/training.md).
libphalanx_la_SOURCES += core/data/safetensors.c core/data/safetensors-impl.h core/data/safetensors-crc.c \
	core/data/checkpoint.c \
	core/data/idx.c core/data/idx-impl.h core/data/loader.c core/data/loader-device.c core/data/loader-device.h \
	core/data/sampler.c \
	core/data/dataset.c core/data/dataset-impl.h \
	core/data/zin.c core/data/zin.h

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

# Corrupted gzip IDX files are refused: bit flips in the trailer and
# throughout, trailing data with a bad CRC, a cut trailer.
check_PROGRAMS += t/data_gzip_corrupt
TESTS += t/data_gzip_corrupt
t_data_gzip_corrupt_LDADD = libphalanx.la $(ZLIB_LIBS)

# A gzip IDX bomb costs its tensor, not its tensor and the u8 data.
check_PROGRAMS += t/data_idx_peak
TESTS += t/data_idx_peak
t_data_idx_peak_LDADD = libphalanx.la $(ZLIB_LIBS)

# A callback status other than PHX_OK is an error naming the sample, with
# any number of workers.
check_PROGRAMS += t/data_callback_status
TESTS += t/data_callback_status
t_data_callback_status_LDADD = libphalanx.la

# Checkpoints carry a CRC-32 per tensor: 5,000 one-bit flips of a saved
# checkpoint load no corrupted state.
check_PROGRAMS += t/train_ckpt_bitflip
TESTS += t/train_ckpt_bitflip
t_train_ckpt_bitflip_SOURCES = t/train_ckpt_bitflip.c t/ckpt-snapshot.h
t_train_ckpt_bitflip_LDADD = libphalanx.la
