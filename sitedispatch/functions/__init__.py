"""Lambda entrypoints: thin. Parse the event, build dependencies once per container, call the core."""
