"""Console pages, one module per section; console/access.py decides who sees what."""
