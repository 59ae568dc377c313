# A pipeline that sets everything, next to a sink that sets nothing.
pipeline = "shop"

source "postgres" {
  dsn           = env("WALCAST_TEST_DSN")
  tables        = ["public.orders", "public.customers", "billing.invoices"]
  slot          = "shop_slot"
  publication   = "shop_pub"
  allow_keyless = true
  receive_timeout = "90s"
}
sink "webhook" "billing" {
  durable = false
  tables  = ["public.orders", "billing.invoices"]
  ops     = ["insert", "update"]
  delivery {
    batch_size      = 500
    rate_limit      = 2.5
    ordering        = "strict"
    max_in_flight   = 1
    retry_base      = "10s"
    max_attempts    = 3
    deliver_timeout = "45s"
    throttle_min    = "250ms"
    throttle_max    = "2m"
  }
  config {
    url = "http://127.0.0.1:9000/hooks"
  }
}

sink "stdout" "debug" {
}
