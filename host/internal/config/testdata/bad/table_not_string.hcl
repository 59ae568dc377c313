pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = "public.orders"
}

# want: table_not_string.hcl:5:12: error: Incorrect attribute value type: Inappropriate value for attribute "tables": list of string required, but have string.
