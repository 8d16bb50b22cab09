#!/bin/sh
# make demo: runs each example in turn (areas append their lines).
set -e
# phx-info: every plugin built in this tree, ok or why not (doc/plugins.md).
echo "== phx-info"
PHX_PLUGIN_PATH=$(find plugins -type d -name .libs | sort | tr '\n' ':') ./tools/phx-info
