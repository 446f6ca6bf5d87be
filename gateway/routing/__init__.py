"""Which engine gets a request: the routing policies, live per-engine state, fair queues of busy pools."""
