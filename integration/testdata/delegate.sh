#!/usr/bin/env bash
# An agent that hands its work one level down until depth 3, whose task
# answers (after LEAF_SECONDS). Input {"depth": N}. Below depth 3 the first
# run delegates a child goal of one task at depth N+1 (exit 101 with
# {"delegate": ...} in DWR_WAIT_FILE); the resumed run prints its depth and
# the delegation's outcome (DWR_DELEGATIONS_FILE), which holds its child's
# accepted result.
set -euo pipefail
input="$(cat)"
depth="$(printf '%s' "$input" | sed -E 's/.*"depth": *([0-9]+).*/\1/')"
if [ "$depth" -ge 3 ]; then
	sleep "${LEAF_SECONDS:-0}"
	printf '{"leaf": "%s"}\n' "$DWR_TASK_ID"
	exit 0
fi
if [ -n "${DWR_DELEGATIONS_FILE:-}" ]; then
	printf '{"depth": %s, "delegations": %s}\n' "$depth" "$(cat "$DWR_DELEGATIONS_FILE")"
	exit 0
fi
next=$((depth + 1))
printf '{"delegate": {"key": "deeper", "goal": {"title": "level %s", "tasks": [{"key": "child", "queue": "agents", "input": {"depth": %s}}]}}}\n' \
	"$next" "$next" >"$DWR_WAIT_FILE"
exit 101
