// Package shell is the built-in executor that makes an executor of any
// program: it runs a command once per attempt, hands it the job through
// stdin, environment variables and files, and turns how the command ends
// into the attempt's result, failure or durable wait. It is what `dwr
// worker -- COMMAND` runs, and a Go program can run it the same way:
//
//	x, err := shell.New([]string{"./resize.sh"}, shell.Options{Lease: lease, Logger: logger})
//	...
//	w, err := executors.NewWorker(executors.Config{Conn: nc, Queue: "images", Lease: lease}, x.Handle)
//	// or, to judge results: executors.NewVerifier(cfg, x.Verify)
//	err = w.Run(ctx)
//
// Contract is what a command can rely on and what it must do.
//
// Like the executors SDK it is built on, it is written against the wire
// contract only: it may import the standard library and executors, never
// domain, eventstore, projections or handlers. Its tests start a real
// service (handlers/servicetest).
package shell

// Contract is what a command run by Command gets and does: its input,
// environment, files, exit statuses and how it is stopped. `dwr worker
// --help` prints it.
const Contract = `The command gets the task's input (JSON) on stdin and, in its environment:
  DWR_TASK_ID, DWR_ATTEMPT, DWR_OPERATION_KEY (the same for every attempt: key
  your side effects by it), DWR_WORKSPACE, DWR_QUEUE, DWR_DEADLINE (RFC 3339,
  when the task has a timeout), DWR_SIGNAL (the signal that resumed the task,
  JSON {"name", "payload"}, when there is one), DWR_APPROVAL (the latest
  decision on the task's approvals — the one that resumed it — JSON
  {"approval_id", "action_digest", "action", "response", "comment",
  "approver", "role", "decided_at", "asked_role"}, when there is one:
  "role" is the approver's, "asked_role" the role the request asked),
  DWR_APPROVALS_FILE and DWR_APPROVALS (every decision and expiry on the
  task's approvals, oldest first, a JSON array of DWR_APPROVAL's objects:
  always in the file, inline too when at most 64 KiB; when there is one),
  DWR_VERIFICATIONS
  (the FAIL verdicts of earlier results with their evidence, JSON, when there
  are any), DWR_DEPENDENCIES_FILE and DWR_DEPENDENCIES (the accepted result
  and artifacts of each task this one depends on, JSON {"<key>": {"key",
  "task_id", "result", "artifacts"}}: always in the file, inline too when at
  most 64 KiB; when the task depends on others),
  DWR_PRIOR_ATTEMPTS (the earlier attempts, JSON;
  without their results if those would make it longer than 64 KiB),
  DWR_CHECKPOINT_FILE (holds the last checkpoint, empty for none: write JSON to
  it to save a new one; it is read every lease/3 and when the command exits),
  DWR_WAIT_FILE (an empty file: to wait, see below),
  DWR_ARTIFACTS_DIR (an empty directory: the regular files a command that
  exits 0 leaves in it, below it too, are stored as artifacts, named by
  their path in it, and attached to the report — a verifier's to its
  verdict's evidence_refs; at most 1,000; links are left out),
  DWR_MODEL_STEPS_FILE (an empty file: append one JSON object a line for each
  consequential model call, {"model", "prompt_version", "tool_schema_version",
  "input_ref", "response_ref", "parsed", "validation", "tokens", "cost"},
  "model" required, at most 1 MiB; recorded with the report, a failure's too).

What it prints on stdout (at most 256 KiB) is the result: as JSON when it
parses, else as a JSON string. Exit 0 succeeds; exit 100 fails the task at
once; exit 101 parks the task (below); any other exit status or a signal
fails the attempt, retried per the task's retry policy, with the end of
stderr as the error message. What a command that exits 0 prints on stderr
is kept: its end is logged, and its last 64 KiB are stored as the artifact
"dwr/stderr.txt" attached to the report.

To wait without holding a process, a command writes one JSON object to
DWR_WAIT_FILE (at most 256 KiB) and exits 101:
  {"until": "2026-12-01T09:00:00Z"} or {"after": "10m"}
      sleep durably until that time (after: a duration, or seconds);
  {"signal": "payment-settled"}
      wait for that signal (dwr signal TASK NAME --data JSON);
  {"approval": {"action": {...}, "summary": "...", "basis": {...},
   "role": "ops", "responses": ["approve", "reject", "revise"],
   "expires_in": "1h", "on_expiry": "reject", "branches": {...},
   "escalate_to": "..."}}
      ask a person to approve the exact action (only "action" is required;
      dwr approvals list, dwr approve APPROVAL).
The attempt ends parked and the worker is free; save in DWR_CHECKPOINT_FILE
what the next run needs. When the time comes, the signal arrives or the
approval is decided, a new attempt runs the command again: it reads
DWR_SIGNAL (the signal and its payload) or DWR_APPROVAL (the decision: its
"response", and "action" and "action_digest", the action decided on) and
acts on it. So a script checks DWR_APPROVAL before it asks: asking again
for an action that is already decided, of the same role ("asked_role"),
fails the task (it would loop); asking another role for it is a new
request, and DWR_APPROVALS holds each role's decision. An
empty or invalid wait file fails the task too, naming the problem. A
verifier (--verify) cannot wait.

The command runs in its own process group. When the task is cancelled, the
attempt loses its lease or passes its deadline, or the worker stops past its
drain timeout, the group gets SIGTERM, then SIGKILL 5s later. On Linux the
command is also killed when the worker dies, even by kill -9 (the parent-
death signal; what the command itself started in the background is not,
unless it dies with its parent too), so that it cannot go on beside the
next attempt that another worker starts.`
