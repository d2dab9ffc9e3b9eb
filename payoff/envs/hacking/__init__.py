"""Hackable environments: each pays a proxy reward and reports the true objective in `info`.

The agent only ever sees the proxy (unless told to train on something else); the true
objective is there for monitors and for people, so a hack can be caught and measured.
"""
