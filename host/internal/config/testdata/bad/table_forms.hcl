pipeline = "shop"

source "postgres" {
  dsn = "postgres://localhost/shop"
  tables = [
    "public.orders.x",
    ".orders",
    "public.",
    "public.*",
    "public.\"Orders\"",
    "public. orders",
  ]
}

# want: table_forms.hcl:6:5: error: Invalid table name: Table "public.orders.x" is not of the form "schema.table".
# want: table_forms.hcl:7:5: error: Invalid table name: Table ".orders" is not of the form "schema.table".
# want: table_forms.hcl:8:5: error: Invalid table name: Table "public." is not of the form "schema.table".
# want: table_forms.hcl:9:5: error: Invalid table name: Table "public.*" contains a wildcard; list every table to capture by name.
# want: table_forms.hcl:10:5: error: Invalid table name: Table "public.\"Orders\"" contains quotes or control characters; write schema.table as spelled in the catalog, without quotes.
# want: table_forms.hcl:11:5: error: Invalid table name: Table "public. orders" has a space at the start or end of its schema or table name; write schema.table as spelled in the catalog.
