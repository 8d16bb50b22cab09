# ddp — DistributedDataParallel and DistributedSampler (issue 5); see Makefile.am
libphalanx_la_SOURCES += core/sampler.c core/ddp.c core/ddp-buckets.c core/ddp-check.c core/ddp-impl.h

check_PROGRAMS += t/ddp_sampler
TESTS += t/ddp_sampler
t_ddp_sampler_LDADD = libphalanx.la

EXTRA_DIST += bench/torch/sampler.py t/data/sampler.txt
