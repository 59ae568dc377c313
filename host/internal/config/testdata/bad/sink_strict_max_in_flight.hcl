pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "public.customers"]
}

sink "webhook" "billing" {
  delivery {
    ordering      = "strict"
    max_in_flight = 4
  }
}

# want: sink_strict_max_in_flight.hcl:11:21: warning: max_in_flight has no effect: ordering = "strict" keeps one batch in flight, so max_in_flight = 4 is ignored.
