"""``ojai bench``: paired MTP-vs-plain campaigns on the routes ojai wrote (or two servers)."""
