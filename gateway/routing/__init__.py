"""Which engine gets a request: the routing policies, the live per-engine state, and the fair queues of saturated pools."""
