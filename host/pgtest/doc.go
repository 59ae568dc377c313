// Package pgtest starts throwaway PostgreSQL clusters with wal_level=logical
// for tests, benchmarks and the demo, and breaks the network between a
// client and one of them on purpose.
//
// In: options for a cluster (binaries, settings, initdb arguments). Out: a
// running Cluster (pgtest.go) and, for tests, one shared per package (Main)
// or one of its own (New), a fresh database per test (Database), DSNs with
// server settings (WithOptions, testing.go), the rounds of a fault test
// scaled by WALCAST_CHAOS (chaos.go), and a Proxy (proxy.go) that silences,
// resets or delays chosen connections.
//
// Invariants: a cluster lives in its own temporary directory, listens on
// 127.0.0.1 on a free port and on a Unix socket in that directory, trusts
// every local connection and is removed by Close (by the test's cleanup
// for Main and New). initdb refuses to run as root, so when the process is
// root the cluster is created and run as the "postgres" user. A Proxy
// passes everything unchanged until a test asks for a fault: Silence and
// Reset hit only the connections open (and chosen) then, Delay every
// chunk relayed from then on. It is closed with the test.
package pgtest
