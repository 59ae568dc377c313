package sinkclient

import "syscall"

// sysProcAttr makes the kernel kill the plugin when the host dies: go-plugin
// never does, and an orphaned sink would keep delivering nothing while
// holding connections open.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
