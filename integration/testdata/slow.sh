#!/usr/bin/env bash
# Runs for a minute unless told to stop; records that it was told.
set -uo pipefail
input="$(cat)"
case "$input" in
*fast*) echo '{"fast": true}'; exit 0 ;;
esac
trap 'echo "$DWR_TASK_ID" >>"$STOPPED_FILE"; exit 143' TERM
sleep 60 &
wait
echo '{"slept": true}'
