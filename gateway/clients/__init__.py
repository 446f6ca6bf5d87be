"""How the gateway talks to engines (HTTP/1.1), Redis (RESP) and its database (ORM threads)."""
