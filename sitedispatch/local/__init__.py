"""The embedded local runtime: moto server as the cloud, event-source-mapping emulation in real OS processes."""
