#!/bin/sh
# The collectives suite on gloo: phx_spawn process worlds of 1, 2 and 3.
PHX_COMM=gloo COMM_WORLDS="1 2 3" COMM_BIG=0 exec "${top_builddir:-.}/t/comm/collectives"
