"""Clients for operating a kraftpy (or Kafka) cluster: the admin client the `kraftpy` commands use."""
