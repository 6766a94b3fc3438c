"""The search (DESIGN §5): the orchestrator ``solve`` and one module per strategy: ``exhaustive``,
``cpsat`` (the assignment model), ``decompose``, ``partition``, ``tiling``, ``polish``,
``localsearch``, ``refine``, ``anytime``, ``hostchoice``; candidates are filtered by
``constraints`` and every phase stops at the solve's ``deadline``."""
