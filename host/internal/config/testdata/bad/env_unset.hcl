pipeline = "shop"

source "postgres" {
  dsn    = env("WALCAST_TEST_UNSET")
  tables = ["public.orders"]
}

# want: env_unset.hcl:4:12: error: Error in function call: Call to function "env" failed: environment variable WALCAST_TEST_UNSET is not set.
