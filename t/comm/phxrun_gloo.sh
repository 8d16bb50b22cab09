#!/bin/sh
# The same collectives program under phxrun: two gloo ranks from the
# environment (rank 0 prints the TAP for both).
b=${top_builddir:-.}
PHX_COMM=gloo COMM_BIG=0 exec "$b/tools/phxrun" --nproc-per-node 2 --standalone "$b/t/comm/collectives"
