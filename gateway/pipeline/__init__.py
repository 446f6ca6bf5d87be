"""One request from its bytes to its answer: key, body, redaction, de-duplication, engine call, relay."""
