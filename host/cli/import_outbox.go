package cli

import (
	"fmt"
	"slices"
	"strings"
)

// debeziumRouter is Debezium's Outbox Event Router SMT class.
const debeziumRouter = "io.debezium.transforms.outbox.EventRouter"

// debeziumOutbox maps a connector's Outbox Event Router, if it has one,
// to an outbox block (docs/migrating-from-debezium.md, "The Outbox Event
// Router"). It returns the block's lines, the outbox table, the settings
// it carried over and what it left out; table is "" without a router or
// when the table cannot be told.
func debeziumOutbox(p map[string]string, tables []string) (block, table string, carried, skipped []string) {
	var alias string
	for a := range strings.SplitSeq(p["transforms"], ",") {
		if a = strings.TrimSpace(a); a != "" && p["transforms."+a+".type"] == debeziumRouter {
			alias = a
			break
		}
	}
	if alias == "" {
		return "", "", nil, nil
	}
	// The router reads every event of the connector: its outbox table is
	// the one table captured, or the one named outbox.
	if len(tables) == 1 {
		table = tables[0]
	} else if i := slices.IndexFunc(tables, func(t string) bool { return strings.HasSuffix(t, ".outbox") }); i >= 0 {
		table = tables[i]
	} else {
		return "", "", nil, []string{fmt.Sprintf("transforms.%s: the outbox table is not one table nor one named outbox among %s; add an outbox block by hand", alias, strings.Join(tables, ", "))}
	}
	pre := "transforms." + alias + "."
	carried = []string{"transforms", pre + "type"}
	var b strings.Builder
	fmt.Fprintf(&b, "  outbox {\n    table          = %q\n", table)
	for _, m := range []struct{ key, attr string }{
		{"table.field.event.id", "id_column"}, {"table.field.event.key", "key_column"},
		{"route.by.field", "route_column"}, {"table.field.event.payload", "payload_column"},
	} {
		if v := p[pre+m.key]; v != "" {
			fmt.Fprintf(&b, "    %-14s = %q\n", m.attr, v)
			carried = append(carried, pre+m.key)
		}
	}
	if v, ok := p[pre+"route.topic.replacement"]; ok {
		if prefix, found := strings.CutSuffix(v, "${routedByValue}"); found && !strings.Contains(prefix, "$") {
			fmt.Fprintf(&b, "    route_prefix   = %q\n", prefix)
			carried = append(carried, pre+"route.topic.replacement")
		}
	}
	if v := p[pre+"table.fields.additional.placement"]; v != "" {
		for entry := range strings.SplitSeq(v, ",") {
			parts := strings.Split(strings.TrimSpace(entry), ":")
			if len(parts) >= 2 && parts[1] == "header" && !slices.Contains(carried, pre+"table.fields.additional.placement") {
				fmt.Fprintf(&b, "    %-14s = %q\n", "type_column", parts[0])
				carried = append(carried, pre+"table.fields.additional.placement")
				if len(parts) == 3 && parts[2] != "type" {
					skipped = append(skipped, fmt.Sprintf("%stable.fields.additional.placement entry %s: walcast sends the column as header type, not %s", pre, entry, parts[2]))
				}
				continue
			}
			skipped = append(skipped, fmt.Sprintf("%stable.fields.additional.placement entry %s: walcast sends one extra column, as header type", pre, entry))
		}
		if !slices.Contains(carried, pre+"table.fields.additional.placement") {
			carried = append(carried, pre+"table.fields.additional.placement") // each entry listed above
		}
	}
	b.WriteString("  }\n")
	return b.String(), table, carried, skipped
}
