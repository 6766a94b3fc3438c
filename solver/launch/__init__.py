"""How to launch a layout (DESIGN §5–§6): the launcher's device order (the baseline), host
placements and Megatron arguments (``placement``), launch files (``files``)."""
