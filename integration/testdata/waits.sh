#!/usr/bin/env bash
# Waits, then finishes. Input "signal": the first run waits for the signal
# "go" and the resumed run prints its payload (DWR_SIGNAL). Input "sleep":
# the first run saves a checkpoint and sleeps durably for a second; the
# resumed run finds the checkpoint and prints it.
set -euo pipefail
input="$(cat)"
case "$input" in
*signal*)
	if [ -z "${DWR_SIGNAL:-}" ]; then
		echo '{"signal": "go"}' >"$DWR_WAIT_FILE"
		exit 101
	fi
	printf '{"attempt": %s, "signal": %s}\n' "$DWR_ATTEMPT" "$DWR_SIGNAL"
	;;
*sleep*)
	prev="$(cat "$DWR_CHECKPOINT_FILE")"
	if [ -z "$prev" ]; then
		echo "{\"slept_in_attempt\": $DWR_ATTEMPT}" >"$DWR_CHECKPOINT_FILE"
		echo '{"after": "1s"}' >"$DWR_WAIT_FILE"
		exit 101
	fi
	printf '{"attempt": %s, "woke_from": %s}\n' "$DWR_ATTEMPT" "$prev"
	;;
*)
	echo "waits.sh: unknown input $input" >&2
	exit 100
	;;
esac
