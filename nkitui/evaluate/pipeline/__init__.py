"""The trusted evaluator: the worker's entry point that judges a run without ever running task code.

  session   the phases of one evaluation and the result they build (`run_job`, the worker entry)

Task code (the kernel, the reference) runs only in the untrusted children (nkitui.executor.untrusted);
this package hands them inputs and reads back their raw outputs.
"""
