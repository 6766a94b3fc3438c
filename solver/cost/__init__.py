"""The objective (DESIGN §3–§4): the predicted communication time of a layout per collective
and class (``timemodel``), and the traffic families the surrogate models weigh (``objective``)."""
