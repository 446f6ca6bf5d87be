"""The model registry (models, immutable versions, serving profiles) arrives with the fleet issue."""
