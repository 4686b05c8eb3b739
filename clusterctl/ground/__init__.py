"""The vocabularies several stages share, below every stage: the cause -> response table of a run that
heals itself (healing.py) and the local run records with their states (records.py)."""
