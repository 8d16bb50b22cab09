# t/fuzz — fuzz targets (doc/guide/failures.md): the checkpoint loader, the
# safetensors parser, the IDX reader (plain and gzip) and the store server's
# frame parser. Each target T is t/fuzz/T.c, defining LLVMFuzzerTestOneInput
# (and optionally LLVMFuzzerInitialize), with a corpus in t/fuzz/corpus/T/.
# `make check` replays the corpus through t/fuzz/replay-main.c (one TAP
# check per file, the folder given by -DFUZZ_CORPUS), linked with the
# library as built. `make fuzz` compiles the library's C sources once with
# clang, -fsanitize=fuzzer-no-link,address,undefined (t/fuzz/bin/obj/), so
# libFuzzer's coverage sees the code under test, links each target against
# those objects with -fsanitize=fuzzer, runs it for FUZZ_SECONDS seconds
# (default 60 each; FUZZ_TARGETS=T runs one) on a copy of its corpus, and
# merges the inputs that add coverage (-merge=1, at most FUZZ_MAX_LEN
# bytes each) into t/fuzz/corpus/T/ while it holds fewer than
# FUZZ_CORPUS_MAX files. Logs: t/fuzz/bin/T.log. Another target adds
# itself with:
#   fuzz_targets += T
#   check_PROGRAMS += t/fuzz/T
#   TESTS += t/fuzz/T
#   t_fuzz_T_SOURCES = t/fuzz/T.c t/fuzz/replay-main.c
#   t_fuzz_T_CPPFLAGS = $(AM_CPPFLAGS) -DFUZZ_CORPUS='"$(abs_top_srcdir)/t/fuzz/corpus/T"'
#   t_fuzz_T_LDADD = libphalanx.la
#   EXTRA_DIST += t/fuzz/corpus/T
fuzz_targets = checkpoint safetensors idx idx-gz store-frame
FUZZ_TARGETS = $(fuzz_targets)
EXTRA_DIST += t/fuzz/replay-main.c t/fuzz/corpus/checkpoint t/fuzz/corpus/safetensors \
	t/fuzz/corpus/idx t/fuzz/corpus/idx-gz t/fuzz/corpus/store-frame t/fuzz/store_frame_seeds.py \
	t/fuzz/idx-gz-seeds.py

check_PROGRAMS += t/fuzz/checkpoint t/fuzz/idx
TESTS += t/fuzz/checkpoint t/fuzz/idx
t_fuzz_checkpoint_SOURCES = t/fuzz/checkpoint.c t/fuzz/replay-main.c t/ckpt-snapshot.h
t_fuzz_checkpoint_CPPFLAGS = $(AM_CPPFLAGS) -DFUZZ_CORPUS='"$(abs_top_srcdir)/t/fuzz/corpus/checkpoint"'
t_fuzz_checkpoint_LDADD = libphalanx.la
t_fuzz_idx_SOURCES = t/fuzz/idx.c t/fuzz/replay-main.c
t_fuzz_idx_CPPFLAGS = $(AM_CPPFLAGS) -DFUZZ_CORPUS='"$(abs_top_srcdir)/t/fuzz/corpus/idx"'
t_fuzz_idx_LDADD = libphalanx.la
# Seeds: t/fuzz/idx-gz-seeds.py.
check_PROGRAMS += t/fuzz/safetensors t/fuzz/idx-gz
TESTS += t/fuzz/safetensors t/fuzz/idx-gz
t_fuzz_safetensors_SOURCES = t/fuzz/safetensors.c t/fuzz/replay-main.c
t_fuzz_safetensors_CPPFLAGS = $(AM_CPPFLAGS) -DFUZZ_CORPUS='"$(abs_top_srcdir)/t/fuzz/corpus/safetensors"'
t_fuzz_safetensors_LDADD = libphalanx.la
t_fuzz_idx_gz_SOURCES = t/fuzz/idx-gz.c t/fuzz/replay-main.c
t_fuzz_idx_gz_CPPFLAGS = $(AM_CPPFLAGS) $(ZLIB_CFLAGS) -DFUZZ_CORPUS='"$(abs_top_srcdir)/t/fuzz/corpus/idx-gz"'
t_fuzz_idx_gz_LDADD = libphalanx.la $(ZLIB_LIBS)
# The store's engine is internal (hidden in libphalanx): the target links
# the internals. Seeds: t/fuzz/store_frame_seeds.py.
check_PROGRAMS += t/fuzz/store-frame
TESTS += t/fuzz/store-frame
t_fuzz_store_frame_SOURCES = t/fuzz/store-frame.c t/fuzz/replay-main.c
t_fuzz_store_frame_CPPFLAGS = $(AM_CPPFLAGS) $(CRYPTO_CFLAGS) -DFUZZ_CORPUS='"$(abs_top_srcdir)/t/fuzz/corpus/store-frame"'
t_fuzz_store_frame_LDADD = libphalanx-internal.la

# make fuzz: libFuzzer needs clang. The library's C sources (the CPU
# kernels included; the plugins are not needed) are compiled once into
# t/fuzz/bin/obj/ with coverage instrumentation for libFuzzer, ASan and
# UBSan; they are rebuilt whenever libphalanx.la is (a changed source or
# header). Each target links them directly, the library's hidden symbols
# (the store's engine) included.
FUZZ_CC = clang
FUZZ_SECONDS = 60
FUZZ_MAX_LEN = 8192
FUZZ_CORPUS_MAX = 100
FUZZ_SAN = -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all
FUZZ_CFLAGS = -g -O1 $(FUZZ_SAN) $(DEFS) $(AM_CPPFLAGS) $(CPPFLAGS) $(BLAS_CFLAGS) $(JANSSON_CFLAGS) \
	$(ZLIB_CFLAGS) $(CRYPTO_CFLAGS) -w
FUZZ_LIBS = $(BLAS_LIBS) $(DNNL_LIBS) $(JANSSON_LIBS) $(ZLIB_LIBS) $(CRYPTO_LIBS) -ldl -lm -pthread
fuzz_lib_sources = $(filter %.c,$(libphalanx_internal_la_SOURCES) $(kernels_libphx_kernels_cpu_la_SOURCES))
fuzz_lib_objects = $(fuzz_lib_sources:%.c=t/fuzz/bin/obj/%.o)
fuzz_bins = $(FUZZ_TARGETS:%=t/fuzz/bin/%)
$(fuzz_lib_objects): t/fuzz/bin/obj/%.o: $(srcdir)/%.c libphalanx.la
	@$(MKDIR_P) $(@D)
	$(AM_V_CC)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<
$(fuzz_bins): t/fuzz/bin/%: $(srcdir)/t/fuzz/%.c $(fuzz_lib_objects)
	$(AM_V_CCLD)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(fuzz_lib_objects) $(FUZZ_LIBS)
fuzz: all $(fuzz_bins)
	@for t in $(FUZZ_TARGETS); do \
	  seeds=$(srcdir)/t/fuzz/corpus/$$t; \
	  rm -rf t/fuzz/bin/$$t.corpus t/fuzz/bin/$$t.merge; cp -r $$seeds t/fuzz/bin/$$t.corpus; \
	  chmod -R u+w t/fuzz/bin/$$t.corpus; \
	  echo "  FUZZ     $$t: $(FUZZ_SECONDS) s (log: t/fuzz/bin/$$t.log)"; \
	  (cd t/fuzz/bin && PHX_PLUGIN_PATH=$(abs_top_builddir)/.libs/phalanx ./$$t -max_total_time=$(FUZZ_SECONDS) \
	    -max_len=$(FUZZ_MAX_LEN) -rss_limit_mb=2048 -artifact_prefix=$$t- -print_final_stats=1 \
	    $$t.corpus) > t/fuzz/bin/$$t.log 2>&1 || { tail -n 60 t/fuzz/bin/$$t.log; exit 1; }; \
	  cp -r $$seeds t/fuzz/bin/$$t.merge; chmod -R u+w t/fuzz/bin/$$t.merge; \
	  (cd t/fuzz/bin && PHX_PLUGIN_PATH=$(abs_top_builddir)/.libs/phalanx ./$$t -merge=1 -max_len=$(FUZZ_MAX_LEN) $$t.merge $$t.corpus) \
	    > t/fuzz/bin/$$t.merge.log 2>&1 || { tail -n 30 t/fuzz/bin/$$t.merge.log; exit 1; }; \
	  have=`ls $$seeds | wc -l`; added=0; \
	  for f in `ls -S -r t/fuzz/bin/$$t.merge`; do \
	    test $$have -lt $(FUZZ_CORPUS_MAX) || break; \
	    test -e $$seeds/$$f && continue; \
	    test `wc -c < t/fuzz/bin/$$t.merge/$$f` -le $(FUZZ_MAX_LEN) || continue; \
	    cp t/fuzz/bin/$$t.merge/$$f $$seeds/$$f; have=`expr $$have + 1`; added=`expr $$added + 1`; \
	  done; \
	  done_line=`grep 'DONE ' t/fuzz/bin/$$t.log | tail -n 1 | sed 's/^.*DONE *//'`; \
	  execs=`sed -n 's/^stat::number_of_executed_units: *//p' t/fuzz/bin/$$t.log`; \
	  echo "  FUZZ     $$t: $$execs runs; $$done_line"; \
	  echo "  FUZZ     $$t: corpus t/fuzz/corpus/$$t: $$have files ($$added merged from this run)"; \
	done
clean-local: fuzz-clean
	rm -rf t/home
fuzz-clean:
	rm -rf t/fuzz/bin
.PHONY: fuzz fuzz-clean
