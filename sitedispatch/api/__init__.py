"""The HTTP API: routes, request and response models."""
