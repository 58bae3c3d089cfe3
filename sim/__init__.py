"""The deterministic simulation of the whole dispatcher: sitedispatch's core over the in-memory ports, every worker a
greenlet, one seeded scheduler choosing who runs at each port call, in virtual time (README.md beside this file)."""
