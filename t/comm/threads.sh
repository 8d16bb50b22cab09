#!/bin/sh
# The collectives suite on the threads backend: phx_spawn thread worlds of
# 1, 2, 3 and 4 ranks, every collective, dtype, op and count.
PHX_COMM=threads exec "${top_builddir:-.}/t/comm/collectives"
