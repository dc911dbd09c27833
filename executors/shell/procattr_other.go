//go:build !linux

package shell

import "syscall"

// procAttr puts the command in a process group of its own, so that it and
// what it starts are stopped together. (Only Linux can also have the kernel
// kill it when the worker dies.)
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
