"""``ojai bench``: paired drafted-vs-plain campaigns on the routes ojai wrote (or two servers)."""
