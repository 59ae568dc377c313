package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/walcast/walcast/pluginkit"
)

// Topic names. Kafka accepts [a-zA-Z0-9._-], 1 to 249 characters. A
// table's topic is its entry in `topics` when there is one (used as
// written), else "<topic_prefix>.<schema>.<table>" with every other
// character (each Unicode character, not each byte) replaced by "_":
// public.café gives walcast.public.caf_, "order items" gives order_items.
// Configure checks every table the host names (pluginkit.TablesFrom), so
// `walcast validate` reports a table whose topic would still be illegal
// (too long) or would collide with another table's, at the table.

// topicFor is the topic of schema.table's events. A message event (an
// application's pg_logical_emit_message) names no table: it goes to
// "<topic_prefix>.message", Debezium's topic for them, keyed by its prefix.
func (st settings) topicFor(schema, table string) string {
	if schema == "" && table == "" {
		return st.topicPrefix + ".message"
	}
	if t, ok := st.topics[schema+"."+table]; ok {
		return t
	}
	return st.topicPrefix + "." + mapTopicChars(schema) + "." + mapTopicChars(table)
}

// mapTopicChars replaces each character Kafka does not allow in a topic
// name with "_".
func mapTopicChars(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, s)
}

// parseTopics checks the topics overrides (keys "schema.table", values
// legal topic names) and keeps the good ones, reporting every bad one.
func parseTopics(st *settings, m map[string]string) error {
	if len(m) == 0 {
		return nil
	}
	st.topics = make(map[string]string, len(m))
	var errs []error
	for _, table := range slices.Sorted(maps.Keys(m)) {
		topic := m[table]
		switch {
		case !strings.Contains(table, "."):
			errs = append(errs, &pluginkit.ConfigError{Field: "topics", Msg: fmt.Sprintf(`key %q: want "schema.table"`, table)})
		case !legalTopic.MatchString(topic):
			errs = append(errs, &pluginkit.ConfigError{Field: "topics", Table: table,
				Msg: fmt.Sprintf("%q for %s is not a legal Kafka topic name (letters, digits, '.', '_', '-'; at most 249 characters)", topic, table)})
		default:
			st.topics[table] = topic
		}
	}
	return errors.Join(errs...)
}

// checkTopics reports every table whose topic Kafka would refuse, or that
// would share a topic with another table (which would mix two tables'
// rows under one key space), as one ConfigError each.
func checkTopics(st settings, tables []string) error {
	var errs []error
	byTopic := map[string]string{}
	for _, table := range tables {
		schema, name, ok := strings.Cut(table, ".")
		if !ok {
			continue // the host only names schema.table
		}
		topic := st.topicFor(schema, name)
		// A derived name points at the table; an override at topics.
		field := ""
		if _, ok := st.topics[table]; ok {
			field = "topics"
		}
		switch {
		case !legalTopic.MatchString(topic):
			errs = append(errs, &pluginkit.ConfigError{Field: field, Table: table,
				Msg: fmt.Sprintf("its topic %q is longer than Kafka's 249 characters: name a shorter one in topics = { %q = \"...\" }", topic, table)})
		case byTopic[topic] != "":
			errs = append(errs, &pluginkit.ConfigError{Field: field, Table: table,
				Msg: fmt.Sprintf("its topic %q is also the topic of %s: name a different one in topics = { %q = \"...\" }", topic, byTopic[topic], table)})
		default:
			byTopic[topic] = table
		}
	}
	return errors.Join(errs...)
}
