// Package servertest is what the built-in sinks' tests share to meet a
// real server: a server process on a free 127.0.0.1 port that a test can
// kill, restart and freeze (Server), and a fresh CA with a server and a
// client certificate for TLS tests (Certs).
//
// It is for tests only: nothing outside a _test.go file imports it.
package servertest
