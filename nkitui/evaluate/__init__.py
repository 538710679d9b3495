"""One evaluation of a task, split by job:

  run/        the starter's side: request, start, the run result, the run store, headless exit codes
  pipeline/   the trusted evaluator in the worker: phases, input sets, the untrusted children's outputs
  numerics/   comparison, tolerance advice, trials, precision isolation, mutants, goldens (arrays only)
  present/    Rich rendering of results, shared by the command line and the app

`result`, `store` and `report` at this level are compatibility aliases of run.result, run.store and
present.report (kept for code written against the old flat layout).
"""
