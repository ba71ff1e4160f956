package pglaunch

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// sysProcAttr puts the child in its own process group, so that a terminal's
// Ctrl-C reaches only us and we stop postgres in order, and has the kernel
// kill it when we die, so that no server outlives a killed parent.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
}

// isZombie reports whether pid names a process that has exited but was not
// reaped by its parent.
func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// "pid (comm) state …"; comm may itself contain ") ".
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}
