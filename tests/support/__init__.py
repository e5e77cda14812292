"""Shared test apparatus: waiting, worker subprocesses, history checkers."""
