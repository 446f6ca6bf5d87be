"""The fleet: deployments (desired state), instances (observed state) and their reconciliation."""
