"""The API's routes, a module per resource, each with its own Powertools `Router` (the app includes them all)."""
