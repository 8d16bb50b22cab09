# t/fuzz — fuzz targets (doc/failures.md): the checkpoint loader, the IDX
# reader and the store server's frame parser. Each target T is t/fuzz/T.c,
# defining LLVMFuzzerTestOneInput (and optionally LLVMFuzzerInitialize),
# with a seed corpus in t/fuzz/corpus/T/. `make check` replays the corpus
# through t/fuzz/replay-main.c (one TAP check per file, the folder given by
# -DFUZZ_CORPUS); `make fuzz` builds each target with clang's libFuzzer and
# the library's sources instrumented, and runs it for FUZZ_SECONDS seconds
# (default 60 each; FUZZ_TARGETS=T runs one) on a copy of its corpus,
# printing libFuzzer's final statistics. Another target adds itself with:
#   fuzz_targets += T
#   check_PROGRAMS += t/fuzz/T
#   TESTS += t/fuzz/T
#   t_fuzz_T_SOURCES = t/fuzz/T.c t/fuzz/replay-main.c
#   t_fuzz_T_CPPFLAGS = $(AM_CPPFLAGS) -DFUZZ_CORPUS='"$(abs_top_srcdir)/t/fuzz/corpus/T"'
#   t_fuzz_T_LDADD = libphalanx.la
#   EXTRA_DIST += t/fuzz/corpus/T
fuzz_targets = checkpoint idx store-frame
FUZZ_TARGETS = $(fuzz_targets)
EXTRA_DIST += t/fuzz/replay-main.c t/fuzz/corpus/checkpoint t/fuzz/corpus/idx \
	t/fuzz/corpus/store-frame t/fuzz/store_frame_seeds.py

check_PROGRAMS += t/fuzz/checkpoint t/fuzz/idx
TESTS += t/fuzz/checkpoint t/fuzz/idx
t_fuzz_checkpoint_SOURCES = t/fuzz/checkpoint.c t/fuzz/replay-main.c t/ckpt-snapshot.h
t_fuzz_checkpoint_CPPFLAGS = $(AM_CPPFLAGS) -DFUZZ_CORPUS='"$(abs_top_srcdir)/t/fuzz/corpus/checkpoint"'
t_fuzz_checkpoint_LDADD = libphalanx.la
t_fuzz_idx_SOURCES = t/fuzz/idx.c t/fuzz/replay-main.c
t_fuzz_idx_CPPFLAGS = $(AM_CPPFLAGS) -DFUZZ_CORPUS='"$(abs_top_srcdir)/t/fuzz/corpus/idx"'
t_fuzz_idx_LDADD = libphalanx.la
# The store's engine is internal (hidden in libphalanx): the target links
# the internals. Seeds: t/fuzz/store_frame_seeds.py.
check_PROGRAMS += t/fuzz/store-frame
TESTS += t/fuzz/store-frame
t_fuzz_store_frame_SOURCES = t/fuzz/store-frame.c t/fuzz/replay-main.c
t_fuzz_store_frame_CPPFLAGS = $(AM_CPPFLAGS) $(CRYPTO_CFLAGS) -DFUZZ_CORPUS='"$(abs_top_srcdir)/t/fuzz/corpus/store-frame"'
t_fuzz_store_frame_LDADD = libphalanx-internal.la

# make fuzz: libFuzzer needs clang. The library's C sources are compiled
# into each fuzzer directly (coverage of the code under test, with ASan and
# UBSan), the CPU kernels included; the plugins are not needed.
FUZZ_CC = clang
FUZZ_SECONDS = 60
FUZZ_FLAGS = -g -O1 -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all
fuzz_lib_sources = $(filter %.c,$(libphalanx_internal_la_SOURCES) $(kernels_libphx_kernels_cpu_la_SOURCES))
fuzz: all
	@$(MKDIR_P) t/fuzz/bin
	@for t in $(FUZZ_TARGETS); do \
	  echo "  FUZZ     $$t: building with $(FUZZ_CC) -fsanitize=fuzzer"; \
	  $(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer $(DEFS) $(AM_CPPFLAGS) $(CPPFLAGS) $(BLAS_CFLAGS) \
	    $(JANSSON_CFLAGS) $(ZLIB_CFLAGS) $(CRYPTO_CFLAGS) -w -o t/fuzz/bin/$$t $(srcdir)/t/fuzz/$$t.c \
	    `for f in $(fuzz_lib_sources); do echo $(srcdir)/$$f; done` \
	    $(BLAS_LIBS) $(DNNL_LIBS) $(JANSSON_LIBS) $(ZLIB_LIBS) $(CRYPTO_LIBS) -ldl -lm -pthread || exit 1; \
	  rm -rf t/fuzz/bin/$$t.corpus; cp -r $(srcdir)/t/fuzz/corpus/$$t t/fuzz/bin/$$t.corpus; \
	  chmod -R u+w t/fuzz/bin/$$t.corpus; \
	  echo "  FUZZ     $$t: $(FUZZ_SECONDS) s"; \
	  (cd t/fuzz/bin && PHX_PLUGIN_PATH=$(abs_top_builddir)/.libs/phalanx ./$$t -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -rss_limit_mb=2048 \
	    -print_final_stats=1 $$t.corpus) || exit 1; \
	done
clean-local: fuzz-clean
fuzz-clean:
	rm -rf t/fuzz/bin
.PHONY: fuzz fuzz-clean
