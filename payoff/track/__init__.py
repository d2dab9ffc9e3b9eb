"""Run directories, metrics, checkpoints, progress bars, plots, GIFs and HTML reports."""
