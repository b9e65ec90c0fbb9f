"""Configuration: Java-style .properties files with Kafka's key names, validated at start."""

from kraftpy.config.loader import ConfigError, KraftConfig, load_config
from kraftpy.config.schema import Listener, Voter

__all__ = ["ConfigError", "KraftConfig", "Listener", "Voter", "load_config"]
