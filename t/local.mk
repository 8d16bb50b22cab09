# t — owned by its area; see Makefile.am
EXTRA_DIST += t/tap.h
