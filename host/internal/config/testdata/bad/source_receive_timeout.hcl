pipeline = "shop"

source "postgres" {
  dsn             = "postgres://walcast@localhost/shop"
  tables          = ["public.orders"]
  receive_timeout = "500ms"
}

# want: source_receive_timeout.hcl:6:21: error: Invalid receive_timeout: receive_timeout must be at least 1s, got 500ms: the stream asks the server for a keepalive at half of it and must leave time for the answer. Leave it out for the default, twice the server's wal_sender_timeout.
