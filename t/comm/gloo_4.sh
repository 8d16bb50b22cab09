#!/bin/sh
# The collectives suite on gloo: a phx_spawn world of 4 processes, with the
# >= 16M-element all-reduce.
PHX_COMM=gloo COMM_WORLDS=4 exec "${top_builddir:-.}/t/comm/collectives"
