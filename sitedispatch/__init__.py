"""sitedispatch: site-scoped asynchronous dispatch for a fleet of WordPress sites."""

__version__ = "0.1.0"
