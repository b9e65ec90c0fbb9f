"""The broker: lifecycle, replica management, request handlers, coordinators and producer state."""
