"""The reference WordPress runtime: a WordPress-shaped content store (no PHP)."""
