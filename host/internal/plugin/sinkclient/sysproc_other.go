//go:build !linux

package sinkclient

import "syscall"

// sysProcAttr has nothing to add off Linux; pluginkit.Serve's parent
// watch ends an orphaned plugin there.
func sysProcAttr() *syscall.SysProcAttr { return nil }
