"""Offline tuning: measuring configs, the worker process, the Optuna study (study/), several GPUs."""
