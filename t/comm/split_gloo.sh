#!/bin/sh
# Process groups (phx_comm_split) on gloo: phx_spawn process worlds of 2,
# 3 and 4, then a rank killed (SIGKILL) inside a group's all-reduce.
PHX_COMM=gloo exec "${top_builddir:-.}/t/comm/split"
