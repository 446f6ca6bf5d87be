"""One request from its bytes to its answer: key, body checks, redaction, de-duplication, the engine call and relay."""
