pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "public.outbox"]
}

sink "postgres" "reader" {
  outbox { table = "public.outbox" }
}

sink "stdout" "other" {
  outbox { table = "public.outbox" }
}

sink "kafka" "format" {
  format = "debezium"
  outbox { table = "public.outbox" }
}

sink "kafka" "not_received" {
  tables = ["public.orders"]
  outbox { table = "public.outbox" }
}

sink "webhook" "unqualified" {
  outbox { table = "outbox" }
}

sink "kafka" "columns" {
  ops = ["delete"]
  outbox {
    table      = "public.outbox"
    key_column = ""
  }
}

sink "webhook" "no_table" {
  outbox { payload = "body" }
}
# want: sink_outbox.hcl:9:3: error: Outbox not supported by this sink: The outbox needs a sink that carries a key, headers and a route per event: kafka or webhook. The postgres sink reads walcast's envelope of each change, and an outbox event has none. Move the outbox block to such a sink.
# want: sink_outbox.hcl:13:3: error: Outbox not supported by this sink: The outbox needs a sink that carries a key, headers and a route per event: kafka or webhook. Move the outbox block to such a sink.
# want: sink_outbox.hcl:18:3: error: Outbox needs the walcast format: Sink "format" has format = "debezium": an outbox event's body is the payload column as it is, never a change event; remove the format or the outbox block.
# want: sink_outbox.hcl:23:20: error: Outbox table not received: Table "public.outbox" is not among the tables sink "not_received" receives (public.orders): add it to the source's tables (and the sink's, if it has a tables list).
# want: sink_outbox.hcl:27:20: error: Invalid outbox table: The outbox table must be "schema.table", got "outbox".
# want: sink_outbox.hcl:32:3: error: Outbox without inserts: Sink "columns"'s ops leave out "insert", and only inserts into the outbox table publish events: add "insert" to ops.
# want: sink_outbox.hcl:34:18: error: Empty outbox column: key_column names no column; remove it for the default.
# want: sink_outbox.hcl:39:12: error: Missing required argument: The argument "table" is required, but no definition was found.
# want: sink_outbox.hcl:39:12: error: Unsupported argument: An argument named "payload" is not expected here.
