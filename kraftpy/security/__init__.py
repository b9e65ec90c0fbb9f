"""Authentication and (later) authorization: SASL mechanisms as sans-IO state machines."""
