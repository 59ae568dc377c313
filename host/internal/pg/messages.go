package pg

import (
	"fmt"
	"strings"
)

// MessagePrefix starts the prefix of every logical decoding message
// walcast writes itself (package decode's BackfillPrefix, ResyncPrefix,
// VanishedPrefix, DDLPrefix). Those messages stay internal: they never
// become application message events, whatever the source's messages
// block says.
const MessagePrefix = "walcast."

// CheckMessagePrefix says what is wrong with a configured application
// message prefix, as a sentence without its final period, or "" when it
// is fine. A prefix is matched as a string
// prefix, so one that could match a name starting with MessagePrefix
// ("", "wal", "walcast.app") would take walcast's own messages for an
// application's: it is refused.
func CheckMessagePrefix(p string) string {
	switch {
	case p == "":
		return `An empty prefix matches every message, walcast's own included; name the application's prefix (e.g. "app.")`
	case strings.HasPrefix(p, MessagePrefix) || strings.HasPrefix(MessagePrefix, p):
		return fmt.Sprintf("The prefix %q overlaps %q, which walcast reserves for its own messages (backfill chunks, resync markers, DDL); choose a prefix that neither starts with %q nor is the beginning of it", p, MessagePrefix+"*", MessagePrefix)
	}
	return ""
}
