"""Megatron's side of a layout: the mixed-radix rank arithmetic (``ranks``), the parallel
configuration (``config``), the full ``initialize_model_parallel`` group catalogue (``catalogue``)
and the orders searched (``orders``)."""
