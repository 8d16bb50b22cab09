#!/bin/sh
# Process groups (phx_comm_split) on the threads backend: phx_spawn worlds
# of 2, 3 and 4 thread ranks, then a rank that leaves inside a group.
PHX_COMM=threads exec "${top_builddir:-.}/t/comm/split"
