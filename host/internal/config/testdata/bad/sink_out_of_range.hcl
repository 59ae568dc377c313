pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "public.customers"]
}

sink "webhook" "billing" {
  delivery {
    batch_size    = 0
    rate_limit    = -1
    max_in_flight = 0
    max_attempts  = 0
  }
}

sink "webhook" "audit" {
  delivery {
    batch_size   = 10001
    max_attempts = 2.5
  }
}

# want: sink_out_of_range.hcl:10:21: error: Invalid batch_size: batch_size must be between 1 and 10000, got 0.
# want: sink_out_of_range.hcl:11:21: error: Invalid rate_limit: rate_limit is in events per second and must be 0 (unlimited) or more, got -1.
# want: sink_out_of_range.hcl:12:21: error: Invalid max_in_flight: max_in_flight must be at least 1, got 0.
# want: sink_out_of_range.hcl:13:21: error: Invalid max_attempts: max_attempts must be at least 1, got 0.
# want: sink_out_of_range.hcl:19:20: error: Invalid batch_size: batch_size must be between 1 and 10000, got 10001.
# want: sink_out_of_range.hcl:20:20: error: Invalid max_attempts: max_attempts must be a whole number, got 2.5.
