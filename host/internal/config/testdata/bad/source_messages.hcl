pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders"]
  messages {
    prefixes = ["app.", "walcast.mine", "wal", "", "app."]
  }
  messages {
    prefixes = []
  }
}

sink "webhook" "billing" {
  ops = ["insert", "message"]
}

# want: source_messages.hcl:7:25: error: Invalid message prefix: The prefix "walcast.mine" overlaps "walcast.*", which walcast reserves for its own messages (backfill chunks, resync markers, DDL); choose a prefix that neither starts with "walcast." nor is the beginning of it.
# want: source_messages.hcl:7:41: error: Invalid message prefix: The prefix "wal" overlaps "walcast.*", which walcast reserves for its own messages (backfill chunks, resync markers, DDL); choose a prefix that neither starts with "walcast." nor is the beginning of it.
# want: source_messages.hcl:7:48: error: Invalid message prefix: An empty prefix matches every message, walcast's own included; name the application's prefix (e.g. "app.").
# want: source_messages.hcl:7:52: error: Duplicate message prefix: Prefix "app." is listed twice.
# want: source_messages.hcl:9:3: error: Duplicate messages block: A source has at most one messages block; the first is at line 6.
