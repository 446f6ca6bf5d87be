"""What the gateway knows: its own settings and the control plane's configuration as an in-memory snapshot."""
