pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders"]
}

sink "stdout" "syntax" {
  filter = "new.status == "
}

sink "stdout" "types" {
  filter = "op == \"update\" && op + 1 == 2"
  route  = "new.total > 1"
}

sink "stdout" "transform" {
  transform {
    drop = ["ssn"]
    keep = ["id"]
    mask = { email = "md5" }
    set  = { region = "new.country ==" }
  }
}

sink "stdout" "format" {
  format = "debezium"
  filter = "op != \"delete\""
}
# want: sink_rules.hcl:9:27: error: Invalid filter: filter, line 1 column 15 of the expression: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}.
# want: sink_rules.hcl:13:36: error: Invalid filter: filter, line 1 column 22 of the expression: found no matching overload for '_+_' applied to '(string, int)'.
# want: sink_rules.hcl:14:13: error: Invalid route: route, line 1 column 1 of the expression: the expression is of type bool; route needs string.
# want: sink_rules.hcl:18:3: error: Invalid transform: transform: drop and keep cannot both be set: keep already drops every column it does not list.
# want: sink_rules.hcl:21:14: error: Invalid transform: mask.email: mask "md5" is not one of "sha256", "redact".
# want: sink_rules.hcl:22:38: error: Invalid transform: set.region, line 1 column 15 of the expression: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}.
# want: sink_rules.hcl:26:1: error: Filter, route and transform need the walcast format: Sink "format" has format = "debezium": filter, route and transform work on walcast's envelope; remove them or the format.
