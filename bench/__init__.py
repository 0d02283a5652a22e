"""Benchmarks: `make bench` (quick) and `make bench-full`. Figures are printed and saved."""
