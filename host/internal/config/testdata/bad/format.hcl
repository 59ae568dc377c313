pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders"]
}

sink "kafka" "a" {
  format = "avro"
}

sink "kafka" "b" {
  debezium {
    schemas = true
  }
}

sink "kafka" "c" {
  format = "debezium"
  debezium {
    name                  = ""
    decimal_handling_mode = "exact"
  }
}

sink "s3" "d" {
  format = "debezium"
}

sink "webhook" "e" {
  config {
    url              = "https://example.com/hook"
    cloudevents_mode = "binary"
  }
}

# want: format.hcl:9:12: error: Invalid format: format must be "walcast" (walcast's envelope, the default), "debezium" (Debezium's PostgreSQL change event), "sequin" (Sequin's message) or "cloudevents" (CloudEvents 1.0), got "avro".
# want: format.hcl:13:3: error: Debezium block without the debezium format: A debezium block sets up format = "debezium"; add that attribute to the sink or remove the block.
# want: format.hcl:21:29: error: Empty debezium name: name is the logical server name in every event's source.name and schema names; remove it to use the pipeline's name.
# want: format.hcl:22:29: error: Invalid decimal_handling_mode: decimal_handling_mode must be "precise" (Kafka Connect Decimal, the default), "double" or "string", got "exact".
# want: format.hcl:27:12: error: Format not supported by this sink: The s3 sink reads walcast's envelope (it applies rows, or lays files out by commit time), so it takes only format = "walcast"; put the debezium format on a sink that forwards events (webhook, kafka, stdout, sse, grpc, rabbitmq).
# want: format.hcl:33:5: error: cloudevents_mode without the cloudevents format: cloudevents_mode says how CloudEvents travel (structured or binary); this sink's format is "walcast". Add format = "cloudevents" to the sink, or remove cloudevents_mode.
