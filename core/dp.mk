# dp — DataParallel (issue 6); see Makefile.am
libphalanx_la_SOURCES += core/dp.c core/dp-reduce.c core/dp-pool.c core/dp-pool.h core/dp-impl.h
