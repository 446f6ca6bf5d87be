"""What requests used: a usage event each (batched; spooled while the database is away), and metrics."""
