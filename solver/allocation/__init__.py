"""Allocations a scheduler grants or should grant (issue 26): launch files read back into an
assignment (:mod:`.readers`), a granted allocation checked against placement requirements and
rankmap's best for the same hosts (:mod:`.check`), and the scheduler request that keeps TP/EP
groups inside one NVLink domain (:mod:`.request`)."""
