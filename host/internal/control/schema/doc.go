// Package schema owns the walcast schema in the source database as a
// whole: the DDL of every table (tables.go), the one ordered list of
// migrations and Migrate, which applies them, what the current role may
// do with the schema (CheckAccess, for a start's preflight), and the
// deletes that span every table (Forget for a pipeline's rows, DropUnused
// for a schema a failed start created). The stores that read and write
// the tables live in the packages of their concerns (checkpoints,
// lineage, parked, pauses, reports, and outside control: backfill,
// isolate); they assume Migrate ran.
//
// In: a connection to the source database (control.Querier; Migrate and
// DropUnused also need control.Beginner). Out: the schema at Version, or
// an error saying why it cannot be (ErrTooNew; a *pg.Error naming the role
// that may migrate).
//
// Invariants:
//
//   - Migrations are append only: a released step is never edited, and
//     each runs once, recorded in walcast.schema_version. Their SQL is
//     also idempotent, so that a database made before versioning upgrades
//     in place.
//   - Migrate and DropUnused run under one advisory lock (migrateLock), in
//     one transaction each: two processes starting at once apply each step
//     once, and a schema is never dropped while another start migrates it.
//   - A schema newer than Version is refused: an older walcast could
//     misread tables it does not know.
//   - A schema already at Version is left alone, without DDL, so that a
//     role granted only the use of the tables can start.
package schema
