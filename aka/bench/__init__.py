"""The benchmark: suites of operators, runs of implementations over them, scores and reports."""
