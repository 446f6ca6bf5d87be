"""Rates, concurrency leases and monthly budgets, admitted and settled atomically in Redis."""
