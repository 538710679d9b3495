"""One evaluation of a task: inputs, runs, comparison, tolerance advice, trials, verdicts."""
