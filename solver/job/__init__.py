"""The job model shared by the command line, batch and the gRPC server: keys, defaults, job
files, the traffic rule (``model``), a job's values checked (``values``), and a job dict
resolved into ``solve()``'s arguments (``resolve``)."""
