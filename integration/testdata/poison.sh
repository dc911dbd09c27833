#!/usr/bin/env bash
# An input with "poison" in it kills the worker that runs it (the worker is this
# script's parent), as a crashing executor would; anything else succeeds.
set -euo pipefail
input="$(cat)"
case "$input" in
*poison*) kill -9 "$PPID"; sleep 10 ;;
esac
echo '{"ok": true}'
