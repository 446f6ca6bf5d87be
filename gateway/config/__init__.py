"""The gateway's own settings, and the control plane's configuration as an in-memory snapshot."""
