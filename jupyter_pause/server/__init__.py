"""The Jupyter Server extension: REST API, lifecycle manager, idle policy."""
