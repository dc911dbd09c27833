#!/usr/bin/env bash
# Asks a person to approve a refund before making it. The first run asks:
# it writes the request to DWR_WAIT_FILE and exits 101, and the task waits
# without holding a process. The run after the decision reads DWR_APPROVAL
# (the response, the approver and the exact action decided on) and acts on it.
set -euo pipefail
input="$(cat)" # the refund to make, JSON: it is the action approved
if [ -z "${DWR_APPROVAL:-}" ]; then
	printf '{"approval": {"action": %s, "summary": "refund an order", "basis": {"asked_by_attempt": %s}, "role": "ops", "responses": ["approve", "reject"], "expires_in": "1h"}}\n' \
		"$input" "$DWR_ATTEMPT" >"$DWR_WAIT_FILE"
	exit 101
fi
case "$DWR_APPROVAL" in
*'"response":"approve"'*) refunded=true ;;
*) refunded=false ;;
esac
printf '{"refunded": %s, "attempt": %s, "decision": %s}\n' "$refunded" "$DWR_ATTEMPT" "$DWR_APPROVAL"
