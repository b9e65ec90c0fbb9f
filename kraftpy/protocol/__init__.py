"""The Kafka wire protocol and the RecordBatch v2 format: bytes in, objects out, no I/O."""
