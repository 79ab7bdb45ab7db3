"""Differential fuzzing: random PyTorch programs, optimized under many configurations, judged against eager.

    python -m eqiforge.fuzz --programs 200 --seed 0 --out /tmp/fuzz

``programs`` writes a random program as standalone Python source (the source is what runs, so a failing
program is its own reproducer); ``runner`` runs program x configuration jobs in killable worker processes,
judges each against eager PyTorch and a float64 reference on fresh inputs, and writes the summary and one
reproducer file per failing job. Nothing in the optimizer imports this package.
"""
