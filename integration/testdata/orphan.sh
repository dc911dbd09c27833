#!/usr/bin/env bash
# A command that writes its pid to PID_FILE and sleeps: it ends only when
# it is killed (by its worker, or with it).
set -euo pipefail
cat >/dev/null # the input
echo $$ >"$PID_FILE.tmp"
mv "$PID_FILE.tmp" "$PID_FILE"
exec sleep 600
