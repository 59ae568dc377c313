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

# want: format.hcl:9:12: error: Invalid format: format must be "walcast" (walcast's envelope, the default), "debezium" (Debezium's PostgreSQL change event) or "sequin" (Sequin's message), got "avro".
# want: format.hcl:13:3: error: Debezium block without the debezium format: A debezium block sets up format = "debezium"; add that attribute to the sink or remove the block.
# want: format.hcl:21:29: error: Empty debezium name: name is the logical server name in every event's source.name and schema names; remove it to use the pipeline's name.
# want: format.hcl:22:29: error: Invalid decimal_handling_mode: decimal_handling_mode must be "precise" (Kafka Connect Decimal, the default), "double" or "string", got "exact".
# want: format.hcl:27:12: error: Format not supported by this sink: The s3 sink reads walcast's envelope (it applies rows, or lays files out by commit time), so it takes only format = "walcast"; put the debezium format on a sink that forwards events (webhook, kafka, stdout, sse, grpc, rabbitmq).
