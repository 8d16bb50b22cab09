# bench — owned by its area; see Makefile.am
EXTRA_DIST += bench/run.sh bench/precision.sh

# gloo_pingpong: the exchange latency of gloo's transports and a plain
# socket (doc/guide/ddp.md, "Profile"); built with the gloo plugin, not run by
# make bench.
if HAVE_GLOO
noinst_PROGRAMS += bench/gloo_pingpong
bench_gloo_pingpong_SOURCES = bench/gloo_pingpong.cc
bench_gloo_pingpong_CPPFLAGS = $(AM_CPPFLAGS) $(GLOO_CPPFLAGS)
bench_gloo_pingpong_LDADD = $(GLOO_LIBS)
endif
