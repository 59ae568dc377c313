package sinkclient

import "syscall"

// sysProcAttr makes the kernel kill the plugin when the host dies: go-plugin
// never does, and an orphaned sink would keep delivering nothing while
// holding connections open. The plugin gets its own process group, so a
// signal to walcast's group (Ctrl-C, timeout, kill -- -PGID) reaches only
// walcast, which then stops its plugins in order.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
