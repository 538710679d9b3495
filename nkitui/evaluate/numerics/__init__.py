"""The numerics of an evaluation: pure functions on arrays, no processes and no task code.

  inputs       inputs from the manifest's policy, kernel layout transforms
  metrics      float64 comparison of one output (max abs/rel, ULPs, mismatches, heat map)
  tolerance    tolerance conventions (allclose, ulp, rel_l2, ...) and their checks
  advisor      expected error from dtypes and K, tolerance advice, "zeros would pass"
  adversarial  adversarial inputs for an op (built with the reference's answers)
  trials       seeds and adversarial inputs judged one by one
  precision    precise off vs on: dtype error vs algorithm error
  mutants      mutation testing of the task's tolerance
  goldens      recorded GPU outputs
  diagnose     failure diagnosis (tiles, NaN, transposes)
  findings     numerics finding rules and their builders
  audit        NumericsAudit and the one orchestration (plan the runs, judge the outputs)
  callables    the types of the kernel and reference callables the audit runs through
"""
