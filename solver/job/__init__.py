"""The job model shared by the command line, batch and the gRPC server: keys, defaults, job
files, the traffic rule (``model``), and a job dict resolved into ``solve()``'s arguments (``resolve``)."""
