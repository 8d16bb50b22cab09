# t/fuzz/store.mk — the store server's frame parser as a fuzz target
# (t/fuzz/store-frame.c; input format in its header). `make check`
# replays its seed corpus (t/fuzz/corpus/store_frame, made by
# t/store_frame_seeds.py) as TAP; `make fuzz-store` builds it with clang's
# libFuzzer, ASan and UBSan and runs it for FUZZ_STORE_SECONDS (default
# 60) on a copy of the corpus, printing libFuzzer's final statistics;
# `make fuzz` includes it.
check_PROGRAMS += t/fuzz/store-frame
TESTS += t/fuzz/store-frame
t_fuzz_store_frame_SOURCES = t/fuzz/store-frame.c t/fuzz/store-replay.c $(px_store_sources) core/base/util.c
t_fuzz_store_frame_CPPFLAGS = $(AM_CPPFLAGS) $(CRYPTO_CFLAGS) -DFUZZ_CORPUS='"$(abs_top_srcdir)/t/fuzz/corpus/store_frame"'
t_fuzz_store_frame_LDADD = libphalanx.la $(CRYPTO_LIBS)
EXTRA_DIST += t/fuzz/corpus/store_frame t/store_frame_seeds.py

FUZZ_STORE_CC = clang
FUZZ_STORE_SECONDS = 60
FUZZ_STORE_FLAGS = -g -O1 -fsanitize=fuzzer,address,undefined,float-cast-overflow -fno-sanitize-recover=all
fuzz_store_sources = t/fuzz/store-frame.c $(filter %.c,$(px_store_sources)) core/base/util.c \
	core/base/error.c core/base/log.c
fuzz-store:
	@$(MKDIR_P) t/fuzz/bin
	@echo "  FUZZ     store-frame: building with $(FUZZ_STORE_CC) -fsanitize=fuzzer"
	$(AM_V_at)$(FUZZ_STORE_CC) $(FUZZ_STORE_FLAGS) $(DEFS) $(AM_CPPFLAGS) $(CPPFLAGS) $(CRYPTO_CFLAGS) -w \
	  -o t/fuzz/bin/store-frame `for f in $(fuzz_store_sources); do echo $(srcdir)/$$f; done` \
	  $(CRYPTO_LIBS) -pthread
	$(AM_V_at)rm -rf t/fuzz/bin/store-frame.corpus && cp -r $(srcdir)/t/fuzz/corpus/store_frame t/fuzz/bin/store-frame.corpus \
	  && chmod -R u+w t/fuzz/bin/store-frame.corpus
	@echo "  FUZZ     store-frame: $(FUZZ_STORE_SECONDS) s"
	cd t/fuzz/bin && ./store-frame -max_total_time=$(FUZZ_STORE_SECONDS) -max_len=65536 -rss_limit_mb=2048 \
	  -print_final_stats=1 store-frame.corpus
clean-local: fuzz-store-clean
fuzz-store-clean:
	rm -rf t/fuzz/bin/store-frame t/fuzz/bin/store-frame.corpus
# `make fuzz` runs this target too (beside any other fuzz targets' rule).
fuzz: fuzz-store
.PHONY: fuzz fuzz-store fuzz-store-clean
