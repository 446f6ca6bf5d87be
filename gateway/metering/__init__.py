"""What requests used: one usage event each (buffered, spooled while the database is away) and the Prometheus series."""
