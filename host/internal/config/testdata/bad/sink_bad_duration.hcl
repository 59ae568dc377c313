pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "public.customers"]
}

sink "webhook" "billing" {
  delivery {
    retry_base      = "3x"
    deliver_timeout = "-1s"
  }
}

# want: sink_bad_duration.hcl:10:23: error: Invalid duration: bad duration "3x": unknown unit "x" in duration "3x"; write a number and a unit, such as "30s", "2m" or "1h30m".
# want: sink_bad_duration.hcl:11:23: error: Invalid deliver_timeout: deliver_timeout must be positive, got -1s.
