"""GPU-true cost: instance GPU-seconds × hourly price, shared by engine work, idle capacity apart."""
