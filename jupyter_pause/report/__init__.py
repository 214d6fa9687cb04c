"""GPU-time accounting: the ledger turned into a report.

``build`` replays the ledger into per-session timelines and aggregates them
(what was allocated, used and released, latencies, storage); ``html`` draws
a report as one self-contained page; ``svg`` holds the small chart helpers
that the simulator's page uses too.  Pure logic: nothing here imports the
server.
"""
