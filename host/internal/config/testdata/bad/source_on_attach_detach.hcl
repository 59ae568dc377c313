pipeline = "shop"

source "postgres" {
  dsn       = "postgres://localhost/shop"
  tables    = ["public.orders"]
  on_attach = "read"
  on_detach = "drop"
}

# want: source_on_attach_detach.hcl:6:15: error: Invalid on_attach: on_attach must be "backfill" (read the rows a partition ATTACHed to a captured table brings to every sink; the default) or "ignore", got "read".
# want: source_on_attach_detach.hcl:7:15: error: Invalid on_detach: on_detach must be "delete" (the rows of a partition DETACHed, dropped or truncated leave every sink's copy; the default), "event" (a partition DETACHed gives one detach event instead of its rows' deletes) or "ignore", got "drop".
