// Command dwr is the durable work runtime: `dwr serve` runs the service
// (embedded NATS by default) and the other commands are its client. It
// parses flags and prints; the work is in the packages: handlers (serve,
// admin), executors and executors/shell (worker, keys, approve),
// integration/bench (bench).
package main

import (
	"os"
	// The IANA zones of schedules (domain reads them with time.LoadLocation)
	// resolve even where the system has no zoneinfo, as in a scratch image.
	_ "time/tzdata"
)

func main() {
	os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
