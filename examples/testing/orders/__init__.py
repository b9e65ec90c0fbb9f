"""A small application: orders are published with aiokafka (`orders.events`), and a consumer-group
service (`orders.totals`, confluent-kafka) keeps each customer's running total in another topic."""
