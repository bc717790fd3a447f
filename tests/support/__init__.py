"""What tests share that is neither a test nor part of anvil: the embedded cross-builds (cross.py)."""
