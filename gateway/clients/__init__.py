"""How the gateway talks to the world: the engines (HTTP/1.1), Redis (RESP) and the database (ORM threads)."""
