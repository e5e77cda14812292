"""The jobs the benches run (installed by bench/bench_settings.py)."""
