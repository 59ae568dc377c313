pipeline = "shop"

source "mysql" {
  dsn    = "mysql://localhost/shop"
  tables = ["shop.orders"]
}

# want: source_type.hcl:3:8: error: Unsupported source type: Source type "mysql" is not supported; walcast captures from PostgreSQL: write source "postgres".
