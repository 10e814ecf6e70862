"""HTTP handlers: policy, body schema, one domain call, serialize."""
