package pg

import "fmt"

// MaxIdentLen is PostgreSQL's NAMEDATALEN-1; longer names are truncated by
// the server, or refused for replication slots.
const MaxIdentLen = 63

// SlotProblem applies PostgreSQL's rule for replication slot names, which
// walcast also applies to publications and pipeline names so that every one
// of them can be written in SQL without quoting. It returns "" for a good
// name, else the end of a sentence that starts with the name
// (`slot "X" ` + problem).
func SlotProblem(name string) string {
	switch {
	case name == "":
		return "is empty"
	case len(name) > MaxIdentLen:
		return fmt.Sprintf("is %d characters long; PostgreSQL allows at most %d", len(name), MaxIdentLen)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return fmt.Sprintf("contains %q; use only lower-case letters, digits and underscores", r)
		}
	}
	return ""
}
