"""The collector: writes events to PostgreSQL in batches, acking after commit."""
