"""The seeded fault-injection campaign (`make chaos`) and its invariant checker."""
