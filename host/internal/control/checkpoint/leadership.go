package checkpoint

// leadershipDDL records, per pipeline, how its last leadership term ended.
// The leader writes it through its lock session (host/internal/control/leader): a
// row with released_at set says the last leader closed its term and gave
// the lock up on purpose, so that its successor may stream at once; a row
// without says the last leader may have vanished (killed, frozen, cut
// off) and its successor waits out that leader's lease before streaming.
const leadershipDDL = `
CREATE TABLE IF NOT EXISTS walcast.leaderships (
	pipeline    text PRIMARY KEY,
	holder      text NOT NULL,
	taken_at    timestamptz NOT NULL,
	released_at timestamptz
);
`
