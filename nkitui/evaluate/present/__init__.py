"""Presentation of evaluation results with Rich, shared by the command line and the app.

  report     one run (header, phases, checks, metrics, numerics, timing, utilisation, findings),
             and the A/B comparison of two runs
  numerics   the numerics audit's panels (metrics, advice, trials, precision, mutants, goldens)

Domain code: Rich only, never Textual (the app puts these renderables in its own widgets).
"""
