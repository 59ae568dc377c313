pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders"]
  messages {
    prefixes = []
  }
}

sink "webhook" "billing" {
  ops = ["insert", "message"]
}

# want: sink_ops_message.hcl:7:16: error: No message prefixes: An empty list captures no message; list the prefixes your application passes to pg_logical_emit_message (e.g. prefixes = ["app."]), or remove the messages block.
# want: sink_ops_message.hcl:12:9: error: No messages to deliver: ops lists "message", but the source captures no messages: add messages { prefixes = ["app."] } to the source block, or remove "message" from ops.
