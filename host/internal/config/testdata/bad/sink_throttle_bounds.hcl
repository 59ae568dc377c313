pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders"]
}

sink "webhook" "billing" {
  delivery {
    throttle_min = "20m"
  }
}

sink "webhook" "audit" {
  delivery {
    throttle_min = "0s"
    throttle_max = "-1s"
  }
}

sink "webhook" "crm" {
  delivery {
    throttle_min = "1m"
    throttle_max = "30s"
  }
}

# want: sink_throttle_bounds.hcl:10:20: error: Invalid throttle_min: throttle_min (20m0s) is longer than throttle_max (10m0s): the pause of a throttled sink cannot be both; lower throttle_min or raise throttle_max.
# want: sink_throttle_bounds.hcl:16:20: error: Invalid throttle_min: throttle_min must be positive, got 0s.
# want: sink_throttle_bounds.hcl:17:20: error: Invalid throttle_max: throttle_max must be positive, got -1s.
# want: sink_throttle_bounds.hcl:23:20: error: Invalid throttle_min: throttle_min (1m0s) is longer than throttle_max (30s): the pause of a throttled sink cannot be both; lower throttle_min or raise throttle_max.
