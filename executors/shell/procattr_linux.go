package shell

import "syscall"

// procAttr puts the command in a process group of its own (so that it and
// what it starts are stopped together) and has the kernel kill it when the
// worker dies, even by kill -9 (Pdeathsig: tied to the OS thread that
// started it, which run keeps locked until the command has exited).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
