"""What mlra fetches from the network for the agent (clones, arXiv), and how it is confined.

The agent names what to fetch; mlra decides whether and how: `policy.py` holds the
rules a URL must pass (https only, an allow-list of hosts, public addresses checked
after DNS resolution and pinned), `box.py` runs every fetching or reading step in a
bubblewrap sandbox of its own, and `runner.py` is the program that runs inside it.
"""
