package bench

// Method is what Run measures and how, for people choosing its options:
// the help of `dwr bench`, whose flags set Options.
const Method = `bench measures, on this machine and in one run, each in a fresh directory with an
embedded NATS server that fsyncs before acknowledging (SyncAlways):

  baseline  one JetStream message per event: each client publishes a ~300-byte event on
            its own aggregate subject with the expected last sequence of that subject,
            waiting for the ack (the obvious design);
  group     the real dwr command path: the whole service in-process, each client sending
            goal.create requests with fresh command ids, answered after the commit record
            holding them is fsynced. The service runs closed, as dwr serve does: the
            service's and the clients' NATS accounts, the service on its own identity, and
            each client a client-role member of the workspace connected with its own
            credential (nkey and inbox prefix); --auth=false runs it open (no accounts,
            no credentials), and --compare-auth runs both, alternating, in --rounds
            rounds, and reports the cost of authentication as ratios;
  fsync     the reference: f.Sync() after a small append on a file in the same directory.

Each client runs one operation at a time (a closed loop) for --duration after a warm-up.
Progress goes to stderr; the table (or --json) to stdout.`

// ChainMethod is what RunChain runs and measures and how, for people
// choosing its options: the help of `dwr bench chain3`, whose flags set
// ChainOptions.
const ChainMethod = `chain3 starts the whole service in-process (embedded NATS with SyncAlways, Pebble views) and
SDK workers on one queue, then for each N in --chains submits N goals, each with a plan of three
sequential tasks (a → b → c), as fast as --submitters clients can, and waits until every goal is
achieved. It reports chains/s and tasks/s (from the first submission to the last achievement), the
latency of a chain (from its goal.create to its goal.achieved event) at p50 and p99, the CPU time of
the whole process per chain (server, service, workers and clients), and the process's peak RSS. First
it runs --single chains one after the other: the latency of a chain at low load.

The service runs closed, as dwr serve does: the service's and the clients' NATS accounts, the
service on its own identity, the submitters (and the feed's reader) client-role members of the
workspace and the workers executor-role members of their queue, each connected with its own
credential (nkey and inbox prefix). --auth=false runs it open (no accounts, no credentials), and
--compare-auth runs every run both ways, alternating, in --rounds rounds, and reports the cost of
authentication as ratios.

--deployed runs the service as a user deploys it: each run starts "dwr serve" (this very binary,
or --binary) as its own process on a fresh --data directory and a free loopback port, connects as
the admin with the credential serve writes (DATA/admin.creds) and adds the participants as members;
the workers and submitters run in this process and reach the service over TCP. The CPU per chain is
then both processes' over the measured window (this one's getrusage and the service's
/proc/PID/stat), with the service's share beside it, and each run reports the service process's peak
RSS (VmHWM); --auth=false runs it as "dwr serve --insecure-open". --warmup chains run first in each fresh service and are not measured, as the peers'
harnesses warm up (see scripts/compare-peers).`
