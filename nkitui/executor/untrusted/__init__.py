"""The untrusted children: the only processes that import task code (the kernel, the reference).

  kernel      the kernel server: imports the port, runs it on the input sets the evaluator writes,
              returns raw outputs (.npy), the instruction trace, provenance notes and timings
  reference   the reference server: imports the reference, runs it on input sets, returns outputs
  server      what both share: confinement before task code, requests on stdin, replies as data
  errors      an exception raised by task code, told in words with the task's file and line

They never see a reference output (the kernel) or a tolerance, never compute a metric, a check or
a status: everything they send is data the evaluator (nkitui.evaluate.pipeline) validates.
"""
