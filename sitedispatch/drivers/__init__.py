"""The site drivers: `reference` (content held in this system) and `wordpress` (a real WordPress over HTTP(S))."""
