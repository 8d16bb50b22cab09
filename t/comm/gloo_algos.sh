#!/bin/sh
# gloo's all-reduce algorithms forced on every size (PHX_GLOO_ALGO):
# halving-doubling and recursive doubling, with the non-power-of-two fold
# (3 ranks) and without it (4 ranks); the ring runs in the other suites.
PHX_COMM=gloo COMM_WORLDS="3 4" COMM_ALGOS="hd rd" COMM_SUITE=allreduce COMM_BIG=0 \
  exec "${top_builddir:-.}/t/comm/collectives"
