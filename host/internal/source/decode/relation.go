package decode

import (
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/walcast/walcast/host/internal/pg"
)

// Replica identity settings as pgoutput reports them (pg_class.relreplident).
const (
	replicaIdentityFull = 'f'
)

// relation is one entry of the relation cache: what the last Relation
// message said about a relation id, plus everything about it that can be
// computed once instead of per change.
type relation struct {
	schema, table string
	// skip marks a relation whose changes are dropped: one of the control
	// schema, or (unlisted) a table outside Options.Tables.
	skip, unlisted bool
	cols           []column
	// keyCols are the indexes of the columns that make up "key".
	keyCols []int
	// head is the pre-encoded `"schema":…,"table":…,` part of the envelope.
	head []byte
	// formats are the relation as each of Options.Formats writes it,
	// built on its first change.
	formats []*dbzTable
	// inTx counts the relation's events in the transaction at txLSN, for
	// the debezium format's transaction.data_collection_order.
	inTx  uint64
	txLSN uint64
}

type column struct {
	// name is the pre-encoded `"name":` prefix of the column in an object.
	name []byte
	// quoted is the column name as a JSON string, for "unchanged".
	quoted []byte
	typ    colType
	// oid and typmod are the column's type and type modifier, for the
	// formats that map types more finely than the envelope.
	oid    uint32
	typmod int32
	// identity is set for the columns of the replica identity (the Relation
	// message's key flag). In a 'K' old tuple, every other column is 'n'
	// meaning "not part of the key", not NULL.
	identity bool
}

// tableRelation is the relation of an event walcast writes itself about
// schema.table (a schema event, a resync marker, a detach): its name and
// envelope head, no columns.
func tableRelation(schema, table string) *relation {
	return &relation{schema: schema, table: table, head: appendTableHead(nil, schema, table)}
}

// appendTableHead appends the envelope's `"schema":…,"table":…,` members.
func appendTableHead(b []byte, schema, table string) []byte {
	b = append(b, `"schema":`...)
	b = appendJSONString(b, []byte(schema))
	b = append(b, `,"table":`...)
	b = appendJSONString(b, []byte(table))
	return append(b, ',')
}

// newRelation builds a cache entry from a Relation message. For REPLICA
// IDENTITY FULL, pgoutput flags every column as part of the key; the key a
// consumer routes on is then the primary key, looked up through
// primaryKey when it is set.
func newRelation(m *pglogrepl.RelationMessage, primaryKey func(schema, table string) ([]string, error)) (*relation, error) {
	rel := &relation{schema: m.Namespace, table: m.RelationName}
	if m.Namespace == pg.ControlSchema {
		rel.skip = true
		return rel, nil
	}
	rel.head = appendTableHead(rel.head, m.Namespace, m.RelationName)

	rel.cols = make([]column, len(m.Columns))
	for i, mc := range m.Columns {
		if mc == nil {
			return nil, fmt.Errorf("relation %s.%s (id %d): column %d missing", m.Namespace, m.RelationName, m.RelationID, i)
		}
		name := append(appendJSONString(nil, []byte(mc.Name)), ':')
		rel.cols[i] = column{
			name:     name,
			quoted:   name[: len(name)-1 : len(name)-1],
			typ:      lookupType(mc.DataType),
			oid:      mc.DataType,
			typmod:   mc.TypeModifier,
			identity: mc.Flags&1 != 0,
		}
		if rel.cols[i].identity {
			rel.keyCols = append(rel.keyCols, i)
		}
	}

	if m.ReplicaIdentity == replicaIdentityFull && primaryKey != nil {
		names, err := primaryKey(m.Namespace, m.RelationName)
		if err != nil {
			return nil, fmt.Errorf("look up primary key of %s.%s (replica identity full): %w", m.Namespace, m.RelationName, err)
		}
		if pk, ok := columnIndexes(m.Columns, names); ok {
			rel.keyCols = pk
		}
	}
	return rel, nil
}

// columnIndexes maps names to column indexes. It reports false when names
// is empty or a name is not among the columns (a publication column list
// can leave key columns out); the caller then keeps the flagged columns.
func columnIndexes(cols []*pglogrepl.RelationMessageColumn, names []string) ([]int, bool) {
	if len(names) == 0 {
		return nil, false
	}
	idx := make([]int, 0, len(names))
	for _, name := range names {
		found := -1
		for i, c := range cols {
			if c.Name == name {
				found = i
				break
			}
		}
		if found < 0 {
			return nil, false
		}
		idx = append(idx, found)
	}
	return idx, true
}
