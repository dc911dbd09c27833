#!/usr/bin/env bash
# Fails (retryably) on the attempts before $SUCCEED_ON, then succeeds.
set -euo pipefail
cat >/dev/null
if [ "$DWR_ATTEMPT" -lt "${SUCCEED_ON:-3}" ]; then
	echo "flaky: attempt $DWR_ATTEMPT failed" >&2
	exit 1
fi
echo "{\"attempt\": $DWR_ATTEMPT}"
