// Package bench is walcast's throughput, latency and memory benchmark: what
// `make bench` runs (through cmd/walcast-bench) and what TestSmoke runs
// once at a tiny size so that it cannot rot.
//
// One run:
//
//  1. starts a private PostgreSQL cluster (host/pgtest), creates the bench
//     table and its publication, and creates one fresh pgoutput slot per
//     (path, repetition) — all before the workload, so that every slot has
//     the whole workload waiting in it;
//  2. generates the workload: inserts, then updates, then deletes, in
//     transactions of TxSize rows;
//  3. drains one slot per repetition with each path (pg_recvlogical, library
//     mode, the walcast daemon with the stdout, webhook and kafka sinks, and
//     with the nats and redis sinks into servers started for the run,
//     destinations.go), each as its own process, and measures changes/s,
//     peak RSS (VmHWM) and CPU seconds (utime+stime) of the host and of the
//     plugin, and of the destination server for nats and redis;
//  4. measures end-to-end latency at a steady rate through the webhook sink,
//     and the host's peak RSS while one large transaction streams through;
//  5. with path "backfill", backfills what the workload left of the table
//     next to a steady live load (backfill.go); with path "isolate", drains
//     a stdout sink alone and next to a slow and a stalled webhook sink,
//     and takes a webhook's receiver down during a steady load (isolate.go,
//     outage.go).
//
// Every figure is a measurement, never a check: docs/benchmarks.md says how
// to run each and what the last runs gave.
//
// Time: t0 is when the path's walsender becomes active on its slot
// (pg_replication_slots.active_pid, polled every 2ms), t1 is when the last
// change is drained: pg_recvlogical exiting at --endpos, the library
// consumer's last Ack, the webhook receiver counting the last event, or the
// slot's confirmed_flush_lsn reaching the workload's end (stdout, kafka,
// nats, redis; walcast confirms within ~100ms, which the figures include).
package bench
