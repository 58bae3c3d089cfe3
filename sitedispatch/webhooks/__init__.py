"""Webhooks: where an endpoint may be (destination), how a delivery is signed and sent, and the deliverer."""
