pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "public.customers"]
}

sink "webhook" "billing" {
  delivery {
    ordering = "global"
  }
}

# want: sink_ordering.hcl:10:16: error: Invalid ordering: ordering must be "row" (each row in commit order, rows in parallel) or "strict" (one batch at a time in commit order), got "global".
