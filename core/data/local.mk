# core/data — safetensors checkpoints, the IDX reader, the loader and the
# DistributedSampler (doc/formats.md, doc/training.md).
libphalanx_la_SOURCES += core/data/safetensors.c core/data/safetensors-impl.h core/data/checkpoint.c \
	core/data/idx.c core/data/idx-impl.h core/data/loader.c core/data/sampler.c \
	core/data/dataset.c

# Datasets and the loader with workers (doc/data.md).
check_PROGRAMS += t/data_loader
TESTS += t/data_loader t/data_valgrind.sh
t_data_loader_LDADD = libphalanx.la $(ZLIB_LIBS) -lm
EXTRA_DIST += bench/torch/loader.py t/data/loader.txt t/data_valgrind.sh t/valgrind.supp

# Failed loads change nothing; killed saves leave no temporary files for
# long (doc/failures.md).
check_PROGRAMS += t/train_ckpt_fail
TESTS += t/train_ckpt_fail
t_train_ckpt_fail_LDADD = libphalanx.la

# Saved files get the umask's mode (a replaced file keeps its own).
check_PROGRAMS += t/train_ckpt_mode
TESTS += t/train_ckpt_mode
t_train_ckpt_mode_LDADD = libphalanx.la
