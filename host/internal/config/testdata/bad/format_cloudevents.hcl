pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders"]
}

sink "webhook" "a" {
  cloudevents {
    type_prefix = "com.example"
  }
  config {
    url = "https://example.com/hook"
  }
}

sink "webhook" "b" {
  format = "cloudevents"
  cloudevents {
    type_prefix = "com.example."
  }
  config {
    url = "https://example.com/hook"
  }
}

# want: format_cloudevents.hcl:9:3: error: CloudEvents block without the cloudevents format: A cloudevents block sets up format = "cloudevents"; add that attribute to the sink or remove the block.
# want: format_cloudevents.hcl:20:19: error: Invalid type_prefix: type_prefix starts every CloudEvent's type, <type_prefix>.<schema>.<table>.<op>: write a reverse-DNS name without spaces or a trailing dot ("com.example.shop"), or remove it for "com.walcast"; got "com.example.".
