# src/data — safetensors checkpoints, the IDX reader, the loader and the
# DistributedSampler (doc/reference/formats.md, doc/guide/training.md). Tests: t/data/.
libphalanx_internal_la_SOURCES += src/data/safetensors.c src/data/safetensors-impl.h src/data/safetensors-crc.c \
	src/data/checkpoint.c \
	src/data/idx.c src/data/idx-impl.h src/data/loader.c src/data/loader-device.c src/data/loader-device.h \
	src/data/sampler.c \
	src/data/dataset.c src/data/dataset-impl.h \
	src/data/zin.c src/data/zin.h

# Datasets and the loader with workers (doc/guide/data.md).
check_PROGRAMS += t/data/loader
TESTS += t/data/loader t/data/valgrind.sh
t_data_loader_LDADD = libphalanx.la $(ZLIB_LIBS) -lm
EXTRA_DIST += bench/torch/loader.py t/ref/loader.txt t/data/valgrind.sh t/valgrind.supp

# The loader on an accelerator: pinned batches, copies queued on the
# loader's stream, against a device whose copies run late.
check_LTLIBRARIES += t/plugins/asyncdev/phx-device-cuda.la
t_plugins_asyncdev_phx_device_cuda_la_SOURCES = t/plugins/async-device.c
t_plugins_asyncdev_phx_device_cuda_la_LDFLAGS = $(fake_plugin_ldflags)
check_PROGRAMS += t/data/loader_device
TESTS += t/data/loader_device
t_data_loader_device_LDADD = libphalanx.la -ldl

# make bench: loading alone and the MLP step from a slow dataset, 0-2
# workers, beside PyTorch's DataLoader (bench/run.sh, doc/guide/data.md).
noinst_PROGRAMS += bench/loader
bench_programs += bench/loader
bench_loader_LDADD = libphalanx.la
EXTRA_DIST += bench/torch/loader_speed.py

# Failed loads change nothing; killed saves leave no temporary files for
# long (doc/guide/failures.md).
check_PROGRAMS += t/data/ckpt_fail
TESTS += t/data/ckpt_fail
t_data_ckpt_fail_SOURCES = t/data/ckpt_fail.c t/ckpt-snapshot.h
t_data_ckpt_fail_LDADD = libphalanx.la

# Saved files get the umask's mode (a replaced file keeps its own).
check_PROGRAMS += t/data/ckpt_mode
TESTS += t/data/ckpt_mode
t_data_ckpt_mode_LDADD = libphalanx.la

# A mismatched checkpoint: every missing, unexpected, mis-shaped and
# mis-typed key named in one refusal that changes nothing.
check_PROGRAMS += t/data/ckpt_mismatch
TESTS += t/data/ckpt_mismatch
t_data_ckpt_mismatch_LDADD = libphalanx.la

# Checkpoints: save and load, and across PyTorch (reference files in t/ref,
# listed in src/train/local.mk); the IDX reader and the mini-batch loader.
check_PROGRAMS += t/data/ckpt t/data/ckpt_interop t/data/idx
TESTS += t/data/ckpt t/data/ckpt_interop t/data/idx
t_data_ckpt_LDADD = libphalanx.la
t_data_ckpt_interop_LDADD = libphalanx.la -lm
t_data_idx_LDADD = libphalanx.la $(ZLIB_LIBS) -lm

# The DistributedSampler against torch's index lists (t/ref/sampler.txt from
# bench/torch/sampler.py).
check_PROGRAMS += t/data/sampler
TESTS += t/data/sampler
t_data_sampler_LDADD = libphalanx.la

# Corrupted gzip IDX files are refused: bit flips in the trailer and
# throughout, trailing data with a bad CRC, a cut trailer.
check_PROGRAMS += t/data/gzip_corrupt
TESTS += t/data/gzip_corrupt
t_data_gzip_corrupt_LDADD = libphalanx.la $(ZLIB_LIBS)

# A gzip IDX bomb costs its tensor, not its tensor and the u8 data.
check_PROGRAMS += t/data/idx_peak
TESTS += t/data/idx_peak
t_data_idx_peak_LDADD = libphalanx.la $(ZLIB_LIBS)

# A callback status other than PHX_OK is an error naming the sample, with
# any number of workers.
check_PROGRAMS += t/data/callback_status
TESTS += t/data/callback_status
t_data_callback_status_LDADD = libphalanx.la

# Checkpoints carry a CRC-32 per tensor: 5,000 one-bit flips of a saved
# checkpoint load no corrupted state.
check_PROGRAMS += t/data/ckpt_bitflip
TESTS += t/data/ckpt_bitflip
t_data_ckpt_bitflip_SOURCES = t/data/ckpt_bitflip.c t/ckpt-snapshot.h
t_data_ckpt_bitflip_LDADD = libphalanx.la

# The header's tensor entries are checksummed; long names round-trip; a
# FIFO or a directory is refused at once.
check_PROGRAMS += t/data/st_entries
TESTS += t/data/st_entries
t_data_st_entries_SOURCES = t/data/st_entries.c t/file-util.h
t_data_st_entries_LDADD = libphalanx.la
