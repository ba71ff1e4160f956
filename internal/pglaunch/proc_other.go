//go:build unix && !linux

package pglaunch

import "syscall"

// sysProcAttr puts the child in its own process group, so that a terminal's
// Ctrl-C reaches only us and we stop postgres in order. Only Linux can have
// the kernel kill the child when we die (Pdeathsig); elsewhere a killed
// parent leaves the server running until someone stops it.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}

// isZombie reports false: without procfs a zombie cannot be told from a live
// process cheaply, and postgres then asks the operator to remove the file.
func isZombie(pid int) bool { return false }
