"""Rate limits, concurrency leases and monthly budgets, admitted and settled atomically in Redis (docs/limits.md)."""
