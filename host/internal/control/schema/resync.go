package schema

// resyncDDL marks the backfills that are resyncs (walcast resync): such a
// backfill writes a resync_begin marker with its start and a resync_end
// marker with its last chunk (host/internal/source/backfill).
const resyncDDL = `
ALTER TABLE walcast.backfills ADD COLUMN IF NOT EXISTS resync boolean NOT NULL DEFAULT false;
`
