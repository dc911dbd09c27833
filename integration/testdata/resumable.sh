#!/usr/bin/env bash
# A step for the executor tests. It applies its side effect at the fake API under
# the task's operation key, saves a checkpoint, and on attempt 1 hangs when asked
# to (so the test can kill or stop its worker; it ends when its worker is
# killed). A later attempt prints what it
# resumed from.
set -euo pipefail
cat >/dev/null # the input
prev="$(cat "$DWR_CHECKPOINT_FILE" 2>/dev/null || true)"
if [ -n "${EFFECT_URL:-}" ]; then
	curl -fsS -X POST "$EFFECT_URL/effect?key=$DWR_OPERATION_KEY&attempt=$DWR_ATTEMPT" >/dev/null
fi
echo "{\"step\": 1, \"by_attempt\": $DWR_ATTEMPT}" >"$DWR_CHECKPOINT_FILE"
if [ "$DWR_ATTEMPT" = "1" ] && [ -n "${HANG_SECONDS:-}" ]; then
	# Hang, but not past the worker that ran it: a test that kills the worker
	# leaves no step behind (a stopped worker still counts as alive).
	worker=$PPID
	for ((i = 0; i < HANG_SECONDS * 10; i++)); do
		kill -0 "$worker" 2>/dev/null || exit 1
		sleep 0.1
	done
fi
echo "{\"attempt\": $DWR_ATTEMPT, \"resumed_from\": ${prev:-null}}"
