# examples — owned by its area; see Makefile.am
EXTRA_DIST += examples/demo.sh
EXTRA_DIST += examples/progress.h
# A character-level GPT on Debian's fortunes (doc/transformer.md).
noinst_PROGRAMS += examples/gpt
demo_programs += examples/gpt
examples_gpt_LDADD = libphalanx.la -lm
