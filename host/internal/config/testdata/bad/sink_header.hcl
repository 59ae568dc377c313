pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "public.customers"]
}

sink "stdout" "bill ing" {
}

sink "../evil" "ok" {
}

sink "stdout" {
}

# want: sink_header.hcl:8:15: error: Invalid sink id: Sink id "bill ing" contains ' '; use only letters, digits, '_' and '-'.
# want: sink_header.hcl:11:6: error: Invalid sink type: Sink type "../evil" is not a plugin type: plugin types use lower-case letters, digits, '_' and '-', start with a letter or digit, and are at most 64 characters long.
# want: sink_header.hcl:14:15: error: Missing id for sink: All sink blocks must have 2 labels (type, id).
