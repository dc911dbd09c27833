package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/schemas"
)

// deployed is `dwr serve` as a user deploys it: its own OS process, on a
// fresh data directory and a free loopback port, which the benchmark's
// workers and clients reach over TCP.
type deployed struct {
	cmd  *exec.Cmd
	url  string
	log  string        // the file its output goes to
	done chan struct{} // closed once it has exited
	err  error         // Wait's result, set before done is closed
}

// deployedReadyTimeout bounds the wait for a deployed service to answer.
const deployedReadyTimeout = 60 * time.Second

// servicesStarted counts the services startDeployed started.
var servicesStarted atomic.Int32

// startDeployed starts `bin serve` on a fresh data directory under dir and
// a free loopback port, waits until it answers a query, and returns the
// service as the benchmark uses it (closed: the admin connected with the
// credential serve made, DATA/admin.creds, adding the participants as
// members; open: --insecure-open, everyone connecting as anyone) and the
// process, for its CPU time and peak RSS. Closing the service stops the
// process (SIGTERM, then SIGKILL after 30 s).
func startDeployed(ctx context.Context, dir, bin string, s setup) (_ *service, _ *deployed, err error) {
	open := s.open
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return nil, nil, fmt.Errorf("the dwr binary: %w", err)
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	data := filepath.Join(dir, "data")
	p := &deployed{url: "nats://" + addr, log: filepath.Join(dir, "serve.log"), done: make(chan struct{})}
	out, err := os.Create(p.log)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = out.Close() }() // the child has its own copy
	args := []string{"serve", "--data", data, "--listen", addr, "--log-level", "info", "--http", ""}
	if open {
		args = append(args, "--insecure-open")
	}
	if s.plain {
		args = append(args, "--encryption=false")
	}
	p.cmd = exec.Command(bin, args...) //nolint:gosec // G204: the dwr binary the operator named (--binary), or this one
	p.cmd.Env = serveEnv(int(servicesStarted.Add(1)))
	p.cmd.Stdout, p.cmd.Stderr = out, out
	// Its own process group (a ^C reaches the benchmark, which stops it),
	// and killed if the benchmark dies.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start %s serve: %w", bin, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	defer func() {
		if err != nil {
			p.stop()
		}
	}()
	anc, err := p.waitReady(ctx, filepath.Join(data, access.AdminCredsFile), open)
	if err != nil {
		return nil, nil, err
	}
	bs := &service{dir: dir, url: p.url, dial: func(opts ...nats.Option) (*nats.Conn, error) {
		return nats.Connect(p.url, opts...)
	}}
	if !open {
		// The admin's requests are tried again while unavailable: serve
		// may still be reloading its users, or taking the writer's lease,
		// when it first answers a query.
		bs.admin = client.New(anc, client.Timeout(requestTimeout))
	}
	bs.close = func() {
		anc.Close()
		p.stop()
	}
	return bs, p, nil
}

// serveEnv is the benchmark's environment without the DWR_ variables that
// would change what `dwr serve` runs (an external NATS, TLS, another data
// directory): the service runs on its defaults and the flags given. The
// profiling diagnostics (DWR_CPUPROFILE, DWR_MEMPROFILE) are kept for it,
// each file named with the service's number n in the order they started
// (FILE.1, FILE.2, ...): a benchmark starts a service for each run.
func serveEnv(n int) []string {
	env := benchEnv()
	for _, name := range []string{handlers.CPUProfileEnv, handlers.MemProfileEnv} {
		if v := os.Getenv(name); v != "" {
			env = append(env, fmt.Sprintf("%s=%s.%d", name, v, n))
		}
	}
	return env
}

// benchEnv is the benchmark's environment without its DWR_ variables.
func benchEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DWR_") {
			env = append(env, kv)
		}
	}
	return env
}

// freePort returns a loopback TCP port that was free a moment ago, below
// Linux's ephemeral range (as handlers/servicetest/ports chooses them): one
// from that range may meanwhile become the local end of a connection.
func freePort() (int, error) {
	for range 1000 {
		port := 10000 + rand.IntN(22000) //nolint:gosec // G404: a port to try, not a secret
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		if err := l.Close(); err != nil {
			return 0, err
		}
		return port, nil
	}
	return 0, errors.New("no free loopback port found")
}

// waitReady waits until serve has logged that it is ready — it answers
// queries a moment before, then reloads the server's users, and requests
// sent meanwhile may find no responders — and until the service answers a
// query, connecting as the admin (with the credential serve writes at its
// first start) unless open, and returns that connection.
func (p *deployed) waitReady(ctx context.Context, creds string, open bool) (_ *nats.Conn, err error) {
	deadline := time.Now().Add(deployedReadyTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var nc *nats.Conn
	defer func() {
		if err != nil && nc != nil {
			nc.Close()
		}
	}()
	var last error
	for {
		select {
		case <-p.done:
			return nil, fmt.Errorf("dwr serve exited before it was ready (%v):\n%s", p.err, logTail(p.log))
		case <-ctx.Done():
			return nil, ctx.Err()
		default:
		}
		if b, _ := os.ReadFile(p.log); nc == nil && !strings.Contains(string(b), `msg="dwr ready"`) {
			last = errors.New(`no "dwr ready" in its output yet`)
		} else if nc == nil {
			var opts []nats.Option
			var err error
			if !open {
				opts, err = executors.Credentials(creds) // serve writes it at its first start
			}
			if err == nil {
				nc, err = nats.Connect(p.url, append(opts, nats.Name("dwr-bench-admin"), nats.Timeout(time.Second))...)
			}
			last = err
		}
		if nc != nil {
			resp, err := nc.Request("dwr.q.default.workspace.list", nil, time.Second)
			if err == nil {
				var r schemas.Reply
				if json.Unmarshal(resp.Data, &r) == nil && r.OK {
					return nc, nil
				}
				err = fmt.Errorf("reply %s", resp.Data)
			}
			last = err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("dwr serve not ready after %s: %v\n%s", deployedReadyTimeout, last, logTail(p.log))
		}
		<-tick.C
	}
}

// stop ends the process: SIGTERM to its group, and SIGKILL if it has not
// exited 30 s later.
func (p *deployed) stop() {
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	killAfter(pid, p.done, 30*time.Second)
}

// killAfter waits until done is closed, when process pid (already asked to
// stop) has exited; if it is not closed within grace, it sends SIGKILL to
// the process's group and waits on.
func killAfter(pid int, done <-chan struct{}, grace time.Duration) {
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-done
	}
}

// logTail returns the end of file, where a process's output goes.
func logTail(file string) string {
	b, _ := os.ReadFile(file)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// clockTick is USER_HZ, the unit of /proc's CPU times on Linux.
const clockTick = 100

// cpu returns the CPU time (user and system) the process has used so far.
func (p *deployed) cpu() (time.Duration, error) { return procCPU(p.cmd.Process.Pid) }

// peakRSS returns the process's peak resident set size (VmHWM) in MiB.
func (p *deployed) peakRSS() (float64, error) { return procPeakRSS(p.cmd.Process.Pid) }

// procCPU returns the CPU time (user and system) process pid has used so
// far, all its threads, from /proc/PID/stat (Linux).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command may hold spaces
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	var ticks int64
	for _, k := range []int{11, 12} { // utime, stime: fields 14 and 15 of stat(5)
		v, err := strconv.ParseInt(f[k], 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTick, nil
}

// procPeakRSS returns process pid's peak resident set size (VmHWM) in MiB,
// from /proc/PID/status (Linux).
func procPeakRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return 0, err
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}

// cpuOrZero is cpu, and 0 when there is no process (the service runs in
// the benchmark's).
func (p *deployed) cpuOrZero() (time.Duration, error) {
	if p == nil {
		return 0, nil
	}
	return p.cpu()
}
