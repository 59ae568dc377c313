pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders"]
  on_gap = "heal"
}

# want: source_on_gap.hcl:6:12: error: Invalid on_gap: on_gap must be "stop" (refuse to start when changes were lost; the default) or "resync" (record the gap, create a new slot and resync the tables), got "heal".
