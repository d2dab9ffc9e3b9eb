"""Run storage: run directories, metrics, checkpoints as data, progress bars, interrupts and
GIF encoding. Low on purpose: every trainer writes here; drawing lives in payoff.report."""
