"""Frames and connections on trio: the Kafka-protocol server loop and the msgpack control plane."""
